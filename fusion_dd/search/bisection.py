"""Prefix bisection: a faster minimizer than ddmin that still proves 1-minimality.

Keep the candidates in a fixed order and ask which *prefix* of the failing
configuration is the shortest one that still fails. If failures are monotone
(turning more rules on never hides a failure), the last rule of that prefix is
necessary: without it the prefix passes, with it the prefix fails. Keep that rule
on ("found"), cut the candidates to the rules before it, and ask again which
shortest prefix fails *together with the found rules*; stop when the found rules
fail on their own. This is Go's bisect-reduce idea (narrow one part while the
rest stays enabled) arranged so that:

- one culprit among n costs ceil(log2 n) trainings plus the one training that
  shows it fails alone, which is also the proof of the answer;
- an interacting set of d rules costs about d binary searches over shrinking
  prefixes, so interactions never defeat it the way they defeat plain group
  testing;
- with P devices every round asks P prefixes at once (a (P+1)-ary search) and,
  when few candidates remain, also asks each candidate alone in the same round,
  which saves the round that would otherwise confirm a single culprit.

Trust, but verify: the answer is returned only after the oracle has answered FAIL
for it and not-FAIL for every single-rule removal (asked together). Any answer
that contradicts monotonicity (a superset of a failing configuration passes)
makes the strategy fall back to ``ddmin`` from the smallest failing configuration
known, so an unverified answer is never returned.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Generic, TypeVar

from fusion_dd.search.ddmin import ddmin, ordered
from fusion_dd.search.lanes import Lanes, eager, width_of
from fusion_dd.search.masks import Answers, Antichains, Masks
from fusion_dd.search.oracle import Oracle, Outcome, anticipate, follow_ups

T = TypeVar("T", bound=Hashable)


class _Contradiction(Exception):
    """An answer broke the monotonicity this strategy relies on."""


class _Ledger(Generic[T]):
    """Everything this search was told, to spot contradictions and reuse answers.

    Contradictions and narrowing only ever need the minimal failing and the
    maximal passing answers (``fusion_dd.search.masks``), so those are kept as
    bit masks and nothing else is scanned: a question costs the same late in a
    search of thousands of trainings as early.
    """

    def __init__(self, failing: frozenset[T], masks: Masks[T]) -> None:
        self.start = failing
        self.masks = masks
        self.answers: dict[frozenset[T], bool] = {failing: True}
        self.chains = Antichains()
        self.chains.add(masks.of(failing), True)

    def preload(self, known: Mapping[frozenset[T], Outcome | bool]) -> None:
        """Answers the oracle gave before this search (e.g. to earlier searches)."""
        if isinstance(known, Answers) and known.masks is self.masks and known.get(self.start) is not False:
            # The caller kept the antichains of its answers: take them instead of rebuilding.
            chains = known.antichains.copy()
            chains.add(self.masks.of(self.start), True)
            # The start stays first and True (known holds it as True or not at all).
            self.answers = {self.start: True, **known}
            self.chains = chains
            return
        for config, answer in known.items():
            config = frozenset(config)
            if config not in self.answers:
                fails = answer is Outcome.FAIL or answer is True
                self.answers[config] = fails
                self.chains.add(self.masks.of(config), fails)

    def known(self, config: frozenset[T]) -> bool | None:
        """True: fails; False: does not fail; None: no answer for exactly this configuration."""
        return self.answers.get(config)

    def record(self, config: frozenset[T], fails: bool) -> bool:
        """Store an answer; say whether it contradicts an earlier one."""
        if config in self.answers:
            return self.answers[config] != fails
        self.answers[config] = fails
        mask = self.masks.of(config)
        contradicted = self.chains.contradicts(mask, fails)
        self.chains.add(mask, fails)
        return contradicted

    def smallest_failing(self) -> frozenset[T]:
        """Where the ddmin fallback starts: the least work left for it.

        Only subsets of the configuration this search was asked to minimize
        qualify: answers preloaded from earlier searches may lie outside it.
        """
        return min((f for f, fails in self.answers.items() if fails and f <= self.start), key=len)


def _ask(oracle: Oracle[T], ledger: _Ledger[T], configs: Sequence[frozenset[T]]) -> list[bool]:
    """One batch (one round on P devices); raises ``_Contradiction`` after recording all."""
    answers = [outcome is Outcome.FAIL for outcome in oracle.outcomes(configs)]
    contradicted = False
    for config, fails in zip(configs, answers):
        contradicted |= ledger.record(config, fails)
    if contradicted:
        raise _Contradiction
    return answers


def _spread(lo: int, hi: int, count: int) -> list[int]:
    """``count`` cut points strictly inside (lo, hi) that split it as evenly as possible."""
    width = hi - lo
    count = min(count, width - 1)
    points = {lo + (width * i + (count + 1) // 2) // (count + 1) for i in range(1, count + 1)}
    return sorted(p for p in points if lo < p < hi)


def _last_round(width: int, parallelism: int, follow: int = 0) -> bool:
    """Whether one round can settle ``width`` candidates, ask each alone, and hold ``follow``
    trainings per candidate for what the caller asks after each possible answer (``anticipate``)."""
    return (2 + follow) * width - 1 <= parallelism


def _rounds(width: int, parallelism: int, follow: int = 0) -> int:
    """Rounds a (P+1)-ary search needs for ``width`` candidates, last round included."""
    rounds = 1
    while not _last_round(width, parallelism, follow):
        width = -(-width // (parallelism + 1))
        rounds += 1
    return rounds


def _room(width: int, parallelism: int, follow: int) -> int:
    """The follow-up trainings per candidate the last round makes room for: ``follow`` or none.

    Room for the caller's next questions (a fix candidate and its repeat per
    possible answer) needs a smaller last interval, so sometimes a round more
    of prefixes; it is planned only when the search, the caller's questions
    included, then ends a round earlier than a search that leaves them to the
    round after its answer.
    """
    if follow and _rounds(width, parallelism, follow) < _rounds(width, parallelism) + 1:
        if _last_width(width, parallelism, follow) > 1:  # a lone candidate is a boundary, not a last round
            return follow
    return 0


def _last_width(width: int, parallelism: int, follow: int) -> int:
    """The candidates left for the last round when every round asks ``_probe_count`` prefixes.

    Prefixes alone that narrow the candidates to one leave its proof (it alone
    with the found rules) to the next step's round, with nothing planned beside it.
    """
    while width > 1 and not _last_round(width, parallelism, follow):
        count = _probe_count(width, parallelism, follow)
        width = -(-width // (count + 1))
    return width


def _gambles(width: int, parallelism: int, follow: int, room: int) -> bool:
    """Whether the last round asks only the rules alone, leaving the prefixes' devices to the caller.

    A search's first rule is the answer when it fails alone, and then the
    prefixes of the last round tell nothing more. Where the caller's follow-up
    trainings fit only without them, but then for half the candidates and at
    least two (eight devices, four candidates: two fix candidates and their
    repeats), the round after the answer is saved as often as not; a set that
    fails only together (no rule fails alone) pays a round for the prefixes.
    The rounds before then use every device, which leaves fewer candidates.
    With room for one answer's follow-ups only (four devices) the bet does not
    pay: the prefixes it drops are what the searches there live on.
    """
    last = min(width, (parallelism + 1) // 2)  # the candidates of the last round, at most
    half = max(2, -(-last // 2))  # answers whose follow-ups must fit: half of them, two at least
    return bool(follow) and not room and (2 + follow) * last - 1 > parallelism >= last + follow * half


def _probe_count(width: int, parallelism: int, follow: int = 0) -> int:
    """The fewest probes that still finish in the fewest rounds.

    Idle devices cost nothing in wall-clock, but a training is still a training:
    asking fewer prefixes when that does not add a round saves device-hours.
    """
    goal = _rounds(width, parallelism, follow) - 1
    for count in range(1, parallelism + 1):
        if _rounds(-(-width // (count + 1)), parallelism, follow) <= goal:
            return count
    return parallelism


class _Rest(Generic[T]):
    """The rules still searched: a prefix of the start, with its mask and the found rules' mask.

    Masks of the questions are built from these in a few operations (a prefix
    is the start's mask cut below one bit) and handed to ``Masks.remember``, so
    no question is ever turned into a mask rule by rule.
    """

    def __init__(self, start: list[T], masks: Masks[T], start_set: frozenset[T]) -> None:
        self.masks = masks
        self.rules = start
        self.start_mask = masks.of(start_set)
        self.mask = self.start_mask
        self.found_mask = 0

    def position(self, bit: int) -> int:
        """The index in the rest (a prefix of the start, in universe order) of the rule at ``bit``."""
        return (self.start_mask & ((1 << bit) - 1)).bit_count()

    def prefix_mask(self, j: int) -> int:
        """The mask of the first ``j`` rules of the rest."""
        if j == 0:
            return 0
        return self.mask & ((1 << (self.masks.bit(self.rules[j - 1]) + 1)) - 1)

    def config(self, found: frozenset[T], j: int) -> frozenset[T]:
        config = found | frozenset(self.rules[:j])
        self.masks.remember(config, self.found_mask | self.prefix_mask(j))
        return config

    def with_one(self, found: frozenset[T], rule: T) -> frozenset[T]:
        config = found | {rule}
        self.masks.remember(config, self.found_mask | (1 << self.masks.bit(rule)))
        return config

    def take(self, j: int) -> None:
        """Rule j - 1 is necessary: keep it on, search the rules before it."""
        rule = self.rules[j - 1]
        bit = 1 << self.masks.bit(rule)
        self.found_mask |= bit
        self.mask &= bit - 1
        self.rules = self.rules[: j - 1]


def _narrow(rest: _Rest[T], lo: int, hi: int, ledger: _Ledger[T]) -> tuple[int, int]:
    """Tighten (lo, hi] with answers about other configurations, assuming monotonicity.

    A configuration that did not fail passes all its subsets; one that failed
    fails all its supersets. These are guesses that only steer the search: the
    final answer is still asked and proven. Only minimal failing and maximal
    passing answers can tighten the bounds most, so only those are looked at.
    """
    found, inside, position = rest.found_mask, rest.mask, rest.position
    chains = ledger.chains
    # A failing single rule: found already (hi = 0), or the first one inside the rest.
    if found & chains.single_fail:
        hi = 0
    else:
        singles = chains.single_fail & inside
        if singles:
            hi = min(hi, 1 + position((singles & -singles).bit_length() - 1))
    for low in chains.multi_fail:
        extra = low & ~found
        if extra & ~inside == 0:
            hi = min(hi, 1 + position(extra.bit_length() - 1) if extra else 0)
    for high in chains.max_pass:
        if found & ~high == 0:
            missing = inside & ~high
            lo = max(lo, position((missing & -missing).bit_length() - 1) if missing else len(rest.rules))
    if lo >= hi:
        raise _Contradiction
    return lo, hi


def _boundary(
    found: frozenset[T],
    rest: _Rest[T],
    lo: int,
    oracle: Oracle[T],
    ledger: _Ledger[T],
    lanes: Lanes,
) -> int:
    """The smallest j such that ``found`` plus the first j rules of ``rest`` fails.

    Known: all of ``rest`` with ``found`` fails (j = len(rest)); j = ``lo`` does not
    fail, or ``lo`` is -1 when even j = 0 (``found`` alone) is unknown. Asking j = 0
    first is the cheap bet that the search is already done, and it is the training
    that proves the final answer fails.
    """
    lo, hi = _narrow(rest, lo, len(rest.rules), ledger)

    def config(j: int) -> frozenset[T]:
        return rest.config(found, j)

    while hi - lo > 1:
        parallelism = width_of(lanes)  # per round: a resumed search may have more devices
        if lo == -1:
            probes = [0] + _spread(0, hi, parallelism - 1)
            speculative: list[frozenset[T]] = []
        else:
            width = hi - lo
            follow = follow_ups(oracle)
            room = _room(width, parallelism, follow)
            gamble = not found and _gambles(width, parallelism, follow, room)
            # The opening question (beside the references) fills its devices: they are idle otherwise.
            count = parallelism if (gamble and not _last_round(width, parallelism)) or eager(lanes) else None
            probes = _spread(lo, hi, count or _probe_count(width, parallelism, room))
            speculative = []
            if _last_round(width, parallelism):
                # Few candidates left: also ask each one alone with the found rules,
                # which is the first question of the next step whichever one it is.
                speculative = [rest.with_one(found, rest.rules[j - 1]) for j in range(lo + 1, hi + 1)]
                if gamble and all(ledger.known(c) is None for c in speculative):
                    probes = []  # the rules alone, and beside them the caller's next questions
                # Any of them may be the answer: the caller's questions after it can train
                # on the devices left (all of them, when ``room`` was planned for).
                anticipate(oracle, speculative)
            if not probes:
                answers = _ask(oracle, ledger, speculative)
                alone = next((j for j, fails in zip(range(lo + 1, hi + 1), answers) if fails), None)
                if alone is not None:
                    return alone  # it fails alone: the answer, whatever the prefixes before it do
                continue  # none fails alone: the prefixes decide, next round
        configs = [config(j) for j in probes]  # built once: a prefix costs its length
        known = [(j, ledger.known(c)) for j, c in zip(probes, configs)]
        if any(answer is not None for _, answer in known):
            for j, answer in known:
                if answer is True:
                    hi = min(hi, j)
                elif answer is False:
                    lo = max(lo, j)
            continue
        extra = [c for c in dict.fromkeys(speculative) if ledger.known(c) is None and c not in configs]
        answers = _ask(oracle, ledger, configs + extra)
        for j, fails in zip(probes, answers):
            if fails:
                hi = min(hi, j)
            else:
                lo = max(lo, j)
        if lo >= hi:
            raise _Contradiction
    return hi


def _reduce(start: list[T], oracle: Oracle[T], ledger: _Ledger[T], lanes: Lanes) -> frozenset[T]:
    """Grow the set of necessary rules until it fails alone, then prove it 1-minimal."""
    found: list[T] = []
    rest = _Rest(start, ledger.masks, ledger.start)
    lo = 0  # with nothing found, j = 0 is the empty configuration: known to pass
    while rest.rules:
        j = _boundary(frozenset(found), rest, lo, oracle, ledger, lanes)
        if j == 0:
            break
        found.append(rest.rules[j - 1])
        rest.take(j)
        lo = -1
    answer = frozenset(found)
    masks = ledger.masks
    removals = []
    if len(found) > 1:
        for rule in found:
            removal = answer - {rule}
            masks.remember(removal, rest.found_mask & ~(1 << masks.bit(rule)))
            removals.append(removal)
    # The proof, in one batch: the answer fails (usually already asked, then free)
    # and no single-rule removal does. The empty removal is the known-passing baseline.
    check = [] if ledger.known(answer) is True else [answer]
    answers = _ask(oracle, ledger, check + removals)
    if (check and not answers[0]) or any(answers[len(check) :]):
        raise _Contradiction
    return answer


def bisect(
    universe: Sequence[T],
    oracle: Oracle[T],
    failing: frozenset[T] | None = None,
    *,
    parallelism: Lanes = 1,
    known: Mapping[frozenset[T], Outcome | bool] | None = None,
    masks: Masks[T] | None = None,
) -> frozenset[T]:
    """A verified 1-minimal failing subset of ``failing`` (default: the universe).

    Same contract as ``ddmin``: ``failing`` is known to fail and the empty
    configuration to pass, neither is asked again; UNRESOLVED counts as not
    failing; ``BudgetExhausted`` propagates. ``parallelism`` is the number of
    devices: each round asks up to that many configurations at once (or a
    ``LanePlan``, read again each round, see ``fusion_dd.search.lanes``). ``known``
    holds answers the oracle already gave (Outcome, or True for "fails"), e.g. to
    the earlier searches of ``find_culprits``: they narrow where to look, and
    what they imply is checked like any other guess. Pass only answers that a
    replay of the same run would also have (never "whatever the journal holds"),
    or a resumed search would ask different questions than the first run.
    ``masks``: the bit masks of the caller's configurations (taken from ``known``
    when it is an ``Answers``), only for speed.
    """
    width_of(parallelism)  # refuses a width below 1 before anything is asked
    order = ordered(universe)
    start = ordered(order, failing)
    if len(start) <= 1:
        return frozenset(start)
    if masks is None and isinstance(known, Answers):
        masks = known.masks
    if masks is None or not masks.starts_with(order):  # a bit's position must be its rule's
        masks = Masks(order)
    ledger: _Ledger[T] = _Ledger(frozenset(start), masks)
    ledger.preload(known or {})
    try:
        return _reduce(start, oracle, ledger, parallelism)
    except _Contradiction:
        return ddmin(order, oracle, ledger.smallest_failing())
