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
from fusion_dd.search.lanes import Lanes, width_of
from fusion_dd.search.oracle import Oracle, Outcome

T = TypeVar("T", bound=Hashable)


class _Contradiction(Exception):
    """An answer broke the monotonicity this strategy relies on."""


class _Ledger(Generic[T]):
    """Everything this search was told, to spot contradictions and reuse answers."""

    def __init__(self, failing: frozenset[T]) -> None:
        self.start = failing
        self.answers: dict[frozenset[T], bool] = {failing: True}
        self._fails: list[frozenset[T]] = [failing]
        self._passes: list[frozenset[T]] = []

    def preload(self, known: Mapping[frozenset[T], Outcome | bool]) -> None:
        """Answers the oracle gave before this search (e.g. to earlier searches)."""
        for config, answer in known.items():
            config = frozenset(config)
            if config not in self.answers:
                fails = answer is Outcome.FAIL or answer is True
                self.answers[config] = fails
                (self._fails if fails else self._passes).append(config)

    def known(self, config: frozenset[T]) -> bool | None:
        """True: fails; False: does not fail; None: no answer for exactly this configuration."""
        return self.answers.get(config)

    def record(self, config: frozenset[T], fails: bool) -> bool:
        """Store an answer; say whether it contradicts an earlier one."""
        if config in self.answers:
            return self.answers[config] != fails
        self.answers[config] = fails
        if fails:
            self._fails.append(config)
            return any(config <= passing for passing in self._passes)
        self._passes.append(config)
        return any(failing <= config for failing in self._fails)

    def smallest_failing(self) -> frozenset[T]:
        """Where the ddmin fallback starts: the least work left for it.

        Only subsets of the configuration this search was asked to minimize
        qualify: answers preloaded from earlier searches may lie outside it.
        """
        return min((f for f in self._fails if f <= self.start), key=len)


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


def _last_round(width: int, parallelism: int) -> bool:
    """Whether one round can both settle ``width`` candidates and ask each alone."""
    return 2 * width - 1 <= parallelism


def _rounds(width: int, parallelism: int) -> int:
    """Rounds a (P+1)-ary search needs for ``width`` candidates, last round included."""
    rounds = 1
    while not _last_round(width, parallelism):
        width = -(-width // (parallelism + 1))
        rounds += 1
    return rounds


def _probe_count(width: int, parallelism: int) -> int:
    """The fewest probes that still finish in the fewest rounds.

    Idle devices cost nothing in wall-clock, but a training is still a training:
    asking fewer prefixes when that does not add a round saves device-hours.
    """
    goal = _rounds(width, parallelism) - 1
    for count in range(1, parallelism + 1):
        if _rounds(-(-width // (count + 1)), parallelism) <= goal:
            return count
    return parallelism


def _narrow(found: frozenset[T], rest: list[T], lo: int, hi: int, ledger: _Ledger[T]) -> tuple[int, int]:
    """Tighten (lo, hi] with answers about other configurations, assuming monotonicity.

    A configuration that did not fail passes all its subsets; one that failed
    fails all its supersets. These are guesses that only steer the search: the
    final answer is still asked and proven.
    """
    position = {rule: i for i, rule in enumerate(rest)}
    for config, fails in ledger.answers.items():
        if fails:
            extra = config - found
            if all(rule in position for rule in extra):
                hi = min(hi, 1 + max((position[rule] for rule in extra), default=-1))
        elif found <= config:
            j = next((i for i, rule in enumerate(rest) if rule not in config), len(rest))
            lo = max(lo, j)
    if lo >= hi:
        raise _Contradiction
    return lo, hi


def _boundary(
    found: frozenset[T],
    rest: list[T],
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
    lo, hi = _narrow(found, rest, lo, len(rest), ledger)

    def config(j: int) -> frozenset[T]:
        return found | frozenset(rest[:j])

    while hi - lo > 1:
        parallelism = width_of(lanes)  # per round: a resumed search may have more devices
        if lo == -1:
            probes = [0] + _spread(0, hi, parallelism - 1)
            speculative: list[frozenset[T]] = []
        else:
            width = hi - lo
            probes = _spread(lo, hi, _probe_count(width, parallelism))
            speculative = []
            if _last_round(width, parallelism):
                # Few candidates left: also ask each one alone with the found rules,
                # which is the first question of the next step whichever one it is.
                speculative = [found | {rest[j - 1]} for j in range(lo + 1, hi + 1)]
        known = [(j, ledger.known(config(j))) for j in probes]
        if any(answer is not None for _, answer in known):
            for j, answer in known:
                if answer is True:
                    hi = min(hi, j)
                elif answer is False:
                    lo = max(lo, j)
            continue
        configs = [config(j) for j in probes]
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
    rest = start
    lo = 0  # with nothing found, j = 0 is the empty configuration: known to pass
    while rest:
        j = _boundary(frozenset(found), rest, lo, oracle, ledger, lanes)
        if j == 0:
            break
        found.append(rest[j - 1])
        rest = rest[: j - 1]
        lo = -1
    answer = frozenset(found)
    removals = [answer - {rule} for rule in found] if len(found) > 1 else []
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
    """
    width_of(parallelism)  # refuses a width below 1 before anything is asked
    order = ordered(universe)
    start = ordered(order, failing)
    if len(start) <= 1:
        return frozenset(start)
    ledger: _Ledger[T] = _Ledger(frozenset(start))
    ledger.preload(known or {})
    try:
        return _reduce(start, oracle, ledger, parallelism)
    except _Contradiction:
        return ddmin(order, oracle, ledger.smallest_failing())
