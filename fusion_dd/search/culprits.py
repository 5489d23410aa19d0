"""All culprit sets and a verified fix, around any minimizing strategy.

A minimizer finds *one* 1-minimal failing set. Real networks can have several
independent culprits and interacting sets, and the user wants a fusion_switch.cfg
that keeps every other fusion on. So: minimize, switch off the fewest rules that
defeat every set found so far (a minimum hitting set, ``fusion_dd.search.hitting``:
for {a, b} and {b, c} that is b alone), train the whole universe minus those (the
fix candidate); if it passes, that exact configuration is the verified fix; if it
fails, something else is still broken inside it, so minimize again there.

A set that contains a switched-off rule cannot fail while that rule is off, so
the search cannot see it: the result names the switched-off rules that may hide
such sets (``may_hide``). The fix holds either way (it was trained), and, if
turning more rules on never hides a failure, it still switches off the fewest
rules: every hidden set contains a switched-off rule.

Two shortcuts keep degenerate cases cheap. When two searches in a row found
the first rule of their configuration alone, culprits are probably dense, so
the next first rules are asked alone before anything else (every rule failing
alone then costs about one training per rule). And the universe is only
*assumed* to fail (the engine checked it); when a search has seen nothing but
passing answers for a while, or ends having seen no failure at all, the
universe itself is asked, and a universe that does not fail ends the search
with ``no_failure`` instead of a bogus culprit.

With an oracle that can repeat trainings, every question goes through a
``NoiseGuard`` (``fusion_dd.search.noise``): verdicts are majorities of repeats,
contradictions are re-trained, and when a verdict the search relied on changes,
the whole search is replayed from the start (free: every answer is remembered)
so that it follows the corrected branch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

from fusion_dd.search.bisection import bisect
from fusion_dd.search.choose_off import Chooser, Preference, Reasons, default_choose_off
from fusion_dd.search.ddmin import ordered
from fusion_dd.search.hitting import HittingSet, minimum_hitting_set
from fusion_dd.search.lanes import Lanes, speculates, width_of
from fusion_dd.search.masks import Masks
from fusion_dd.search.noise import Inconsistency, NoiseGuard, NoisePolicy, Revised
from fusion_dd.search.splitting import Split, first_wave, split
from fusion_dd.search.recorder import NoFailure, Recorder, patience
from fusion_dd.search.oracle import BudgetExhausted, Oracle, Outcome, RepeatOracle, prefetch, supports_repeats
from fusion_dd.search.strategy import Strategy

T = TypeVar("T", bound=Hashable)

@dataclass(frozen=True)
class CulpritSet(Generic[T]):
    """One 1-minimal failing set and the rule(s) switched off to defeat it.

    ``kind`` is "independent" (one rule that fails alone) or "interacting"
    (only the rules together fail). ``switched_off`` is the part of the fix's
    switched-off rules that lies in this set (one rule unless the set shares
    rules with others); ``reason`` explains the choice in words a report can show.
    """

    rules: frozenset[T]
    kind: str
    switched_off: frozenset[T]
    reason: str


@dataclass(frozen=True)
class CulpritSearch(Generic[T]):
    """The outcome of the all-culprits search.

    ``fix`` is the set of candidate rules left on; ``fix_verified`` says it was
    trained and passed. ``fix_outcome`` is the answer for ``fix`` (None when it
    was never asked, e.g. the budget ran out first). When the budget ran out,
    ``exhausted`` is True and ``smallest_failing`` is the smallest failing
    configuration the oracle had seen, the best partial answer.

    Noise (only with an oracle that can repeat trainings): ``flaky`` says some
    configuration both passed and failed; ``inconsistencies`` holds the evidence
    of every disagreement (flaky configurations and failing configurations with
    a passing superset) with the trainings and the majority's verdicts;
    ``confirmed`` says every claim of the answer (each set fails, each
    single-rule removal passes, the fix passes) rests on two agreeing trainings
    (three once the run has shown noise);
    ``replays`` counts the times a changed verdict made the search start over.

    ``no_failure``: the universe itself was asked and does not fail (the
    precondition the engine normally checks), so there is nothing to search:
    no culprit sets, ``fix`` is the universe, ``fix_outcome`` its outcome.
    ``hitting_set`` says how the switched-off rules were chosen: "exact" (the
    fewest rules that defeat every set found, ties broken by ``choose_off``) or
    "greedy" (the exact search was too big, or the loop ran longer than the
    universe is large; fewest not guaranteed). ``may_hide``: switched-off rules
    that are not culprits on their own, so further culprit sets containing them
    may exist unseen (see the module docstring).
    """

    culprit_sets: list[CulpritSet[T]] = field(default_factory=list)
    fix: frozenset[T] = frozenset()
    fix_verified: bool = False
    exhausted: bool = False
    smallest_failing: frozenset[T] | None = None
    fix_outcome: Outcome | None = None
    flaky: bool = False
    inconsistencies: list[Inconsistency[T]] = field(default_factory=list)
    confirmed: bool = False
    replays: int = 0
    no_failure: bool = False
    hitting_set: str = "exact"
    may_hide: frozenset[T] = frozenset()


@dataclass
class _Progress(Generic[T]):
    """What one pass of the loop has established so far (kept when the budget runs out)."""

    described: list[CulpritSet[T]] = field(default_factory=list)
    switched_off: frozenset[T] = frozenset()
    fix_outcome: Outcome | None = None
    exact: bool = True
    may_hide: frozenset[T] = frozenset()
    searched: list[frozenset[T]] = field(default_factory=list)  # sets a strategy found (not dense singles)
    split: list[frozenset[T]] = field(default_factory=list)  # singles group testing narrowed down
    # Independent culprits described once (their description depends on nothing else).
    singles: dict[tuple[frozenset[T], bool], CulpritSet[T]] = field(default_factory=dict, repr=False)
    # For _settle's shortcut: how many sets the last full choice covered, and their rules.
    settled: int = field(default=0, repr=False)
    involved: frozenset[T] = field(default=frozenset(), repr=False)
    singles_only: bool = field(default=True, repr=False)
    # The sets of the last settle and how to describe them, until ``found`` is read: the
    # descriptions are words for the report, and making them at every set found made a
    # search of 200 interacting pairs build 40,000 of them for the 200 it reports.
    pending: tuple[list[frozenset[T]], Callable[[frozenset[T]], CulpritSet[T]]] | None = field(
        default=None, repr=False
    )

    @property
    def found(self) -> list[CulpritSet[T]]:
        """Every set found so far, described under the current choice of rules to switch off."""
        if self.pending is not None:
            sets, describe = self.pending
            self.described, self.pending = [describe(rules) for rules in sets], None
        return self.described


def _settle(
    progress: _Progress[T], sets: list[frozenset[T]], order: list[T], preference: Preference[T], grow: bool
) -> None:
    """Choose the rules to switch off for the sets found so far and describe every set.

    Normally the minimum hitting set of all sets, recomputed each time (it may
    drop a rule chosen earlier: {a, b} alone gives a; with {b, c} it becomes b).
    Past the loop's round limit (``grow``) the new set only adds the chooser's rule,
    so the switched-off set grows every round and the loop must end.
    """
    newest = sets[-1]
    if grow:
        rule, _ = preference.pick(newest)
        progress.switched_off = progress.switched_off | {rule}
        progress.exact = False
    elif progress.settled == len(sets) - 1 and newest.isdisjoint(progress.involved):
        # A set sharing no rule with the earlier ones is a component of its own: the minimum
        # hitting set chooses per component, so the earlier choice stands and only this one
        # is added (the same answer as recomputing all, without the cost per set found that
        # made a search of hundreds of culprits quadratic).
        if len(newest) == 1:  # _loop's sets are inside the universe (a strategy's answer is inside its start)
            alone = HittingSet(newest, True)  # what minimum_hitting_set gives a lone single, without ranking every rule
        else:
            alone = minimum_hitting_set([newest], order, preference)
        progress.switched_off = progress.switched_off | alone.rules
        progress.exact = progress.exact and alone.exact
        if len(newest) == 1 and progress.singles_only:
            # Every set an independent culprit, so each is switched off: the earlier
            # descriptions and may_hide (empty) stand; only the new one is described.
            key = (newest, True)
            if key not in progress.singles:
                progress.singles[key] = CulpritSet(
                    newest, "independent", newest, Reasons(sets, progress.switched_off, progress.exact, preference)(newest, newest)
                )
            progress.described = [*progress.found, progress.singles[key]]
            progress.settled, progress.involved = len(sets), progress.involved | newest
            return
    else:
        chosen = minimum_hitting_set(sets, order, preference)
        progress.switched_off = chosen.rules
        progress.exact = chosen.exact
    progress.settled = len(sets)
    progress.involved = frozenset().union(*sets)
    progress.singles_only = all(len(rules) == 1 for rules in sets)
    off = progress.switched_off
    reason = Reasons(sets, off, progress.exact, preference)

    def describe(rules: frozenset[T]) -> CulpritSet[T]:
        if len(rules) == 1:
            key = (rules, not rules.isdisjoint(off))
            if key not in progress.singles:
                progress.singles[key] = CulpritSet(
                    rules, "independent", rules & off, reason(rules, rules & off)
                )
            return progress.singles[key]
        return CulpritSet(
            rules,
            "interacting",
            rules & off,
            reason(rules, rules & off),
        )

    progress.pending = (list(sets), describe)
    alone = {next(iter(rules)) for rules in sets if len(rules) == 1}
    progress.may_hide = off - alone


def _next_candidate(
    progress: _Progress[T], sets: list[frozenset[T]], order: list[T], universe: frozenset[T], preference: Preference[T]
) -> frozenset[T]:
    """The fix candidate ``_loop`` asks once these sets are settled, leaving ``progress`` as it is."""
    ahead = copy.copy(progress)
    ahead.singles = dict(progress.singles)  # the one container _settle changes in place
    _settle(ahead, sets, order, preference, grow=len(sets) > len(order))
    return universe - ahead.switched_off


def _loop(
    order: list[T],
    oracle: Oracle[T],
    strategy: Strategy,
    choose: Chooser,
    parallelism: Lanes,
    progress: _Progress[T],
    check: Callable[[frozenset[T], bool, bool], None] | None = None,
    witness: RepeatOracle[T] | None = None,
    masks: Masks[T] | None = None,
    on_fix: Callable[[frozenset[T]], None] | None = None,
    grouping: bool = False,
) -> None:
    """Minimize, switch off the fewest rules for all sets found, verify the fix; again inside a failing fix.

    ``grouping``: when the first fix candidate fails and every set found so far
    is a single rule, the culprits left are looked for by group testing
    (``fusion_dd.search.splitting``) instead of a search per culprit; whatever
    that cannot settle (an interaction) goes back to the strategy.

    ``on_fix`` is told each fix candidate before it is asked or prefetched (the
    engine then trains it with tensor dumps, so that the fix's training also
    serves localization); it changes no question.

    Prefetch: the guard's check of a new set is usually one repeat, which leaves
    devices idle, and unless that repeat flips, the next question is the fix
    candidate for the sets including it. So that candidate is computed ahead
    (on a copy of ``progress``) and handed to the oracle's ``prefetch``: it
    trains beside the repeat and the round it would have taken alone is saved.
    The answers, and so the questions, are the same either way.

    ``check`` sees each culprit set before the fix is changed for it, so that a
    noise guard can confirm it while the next search has not yet built on it; it
    is also told whether the strategy returned its failing start unshrunk (then
    the set's failure rests on the fix candidate's training alone) and whether a
    search found it inside a failing fix candidate (a second or later set: one
    flip of that candidate starts a search that a second flip can end in a set
    that does not exist).

    Dense culprits: when two searches in a row found the first rule of their
    configuration alone, the first rule of the next fix candidate is asked alone at once,
    without training that candidate first (monotonicity: a failing single inside
    it makes it fail too). The chain goes on while singles fail, asking twice as
    many first rules each round up to one per device; a round where one passes
    sends the loop back to training the fix candidate. Every rule failing alone
    thus costs one training per rule instead of a search each.

    Termination: each round finds a set that no earlier set is inside; past
    |universe| rounds the switched-off set only grows, which ends the loop.
    """
    universe = frozenset(order)
    masks = masks if masks is not None else Masks(order)
    full = masks.of(universe)
    preference: Preference[T] = Preference(choose)
    sets: list[frozenset[T]] = []
    recorder: Recorder[T] = Recorder(
        oracle, universe, patience(len(order), width_of(parallelism)), witness, masks,
        upcoming=lambda rules: _next_candidate(progress, [*sets, rules], order, universe, preference),
        lanes=parallelism, on_fix=on_fix,
    )  # fmt: skip
    failing: frozenset[T] | None = universe  # known (at first: assumed) to fail; None: try singles
    width = 1  # how many first rules the next dense round asks alone
    leading = 0  # searches in a row whose answer was the first rule of its configuration alone
    grouped = False  # the splitting phase ran (fusion_dd.search.splitting)
    while True:
        new: list[frozenset[T]] = []
        if failing is None:
            candidate = universe - progress.switched_off
            firsts = [rule for rule in order if rule in candidate][: min(width, width_of(parallelism))]
            answers = recorder.outcomes([frozenset({rule}) for rule in firsts])
            new = [frozenset({rule}) for rule, outcome in zip(firsts, answers) if outcome is Outcome.FAIL]
            for rules in new:
                if check is not None:
                    check(rules, False, False)
            dense = len(new) == len(firsts)
            width *= 2  # a streak of dense culprits fills more devices each round
        else:
            known = recorder.answers.snapshot()  # a dict, with masks kept for speed
            rules = frozenset(strategy(order, recorder, failing, parallelism=parallelism, known=known))
            if recorder.unverified:
                recorder.verify_start()  # nothing failed in the first search: the universe's failure was all it had
            if not rules or not rules <= failing:
                break  # a broken strategy: stop rather than loop
            leading = leading + 1 if rules == {next(rule for rule in order if rule in failing)} else 0
            dense = leading >= 2  # once could be chance (a lone culprit that sorts first)
            if check is not None:
                if not dense:
                    # The guard may confirm the set with a repeat that leaves devices idle; the
                    # next fix candidate (asked right after, unless the repeat flips) trains along.
                    upcoming = _next_candidate(progress, [*sets, rules], order, universe, preference)
                    if upcoming:
                        if on_fix is not None:
                            on_fix(upcoming)
                        prefetch(recorder, [upcoming])
                check(rules, rules == failing, bool(sets))
            progress.searched.append(rules)
            new = [rules]
            width = 1
        for rules in new:
            sets.append(rules)
            _settle(progress, sets, order, preference, grow=len(sets) > len(order))
        candidate = universe - progress.switched_off
        masks.remember(candidate, full & ~masks.of(progress.switched_off))  # not rule by rule
        if not candidate:
            progress.fix_outcome = Outcome.PASS  # the empty configuration is the engine's precondition
            break
        if dense:
            failing = None
            continue
        if on_fix is not None:
            on_fix(candidate)
        riders = _fix_question_riders(
            order, recorder, candidate, sets, parallelism, masks, witness is not None, grouping and not grouped
        )
        if riders:
            prefetch(recorder, riders)
        progress.fix_outcome = recorder.outcomes([candidate])[0]
        if progress.fix_outcome is not Outcome.FAIL:
            break
        failing = candidate
        if grouping and not grouped and all(len(rules) == 1 for rules in sets):
            grouped = True  # once: after an interaction shows, the interaction-aware search goes on
            outcome = _group_phase(order, recorder, progress, sets, preference, parallelism, masks, check, on_fix)
            if outcome.fix_passes:
                break
            assert outcome.failing is not None
            failing = outcome.failing


def _clean_prefix(recorder: Recorder[T], masks: Masks[T], rules: list[T]) -> int:
    """The length of the longest prefix of ``rules`` inside a configuration known to pass."""
    clean = 0
    for high in recorder.answers.antichains.max_pass:
        j = 0
        while j < len(rules) and high >> masks.bit(rules[j]) & 1:
            j += 1
        clean = max(clean, j)
    return clean


def _fix_question_riders(
    order: list[T],
    recorder: Recorder[T],
    candidate: frozenset[T],
    sets: list[frozenset[T]],
    parallelism: Lanes,
    masks: Masks[T],
    guarded: bool,
    grouping: bool,
) -> list[frozenset[T]]:
    """What to train beside a fix candidate's question, where devices would idle.

    Whichever way its answer goes, the next question is known: a passing fix
    is trained again (behind a guard a fix is never claimed on one training),
    and a failing one, when group testing takes over next, starts the
    splitting phase, whose first round depends only on answers known already.
    One of the two is always unused: that costs its trainings, never a round.
    """
    if not speculates(parallelism):
        return []
    riders = [candidate, candidate] if guarded else []
    if grouping and all(len(rules) == 1 for rules in sets):
        rules = [rule for rule in order if rule in candidate]
        riders += first_wave(rules, _clean_prefix(recorder, masks, rules), found=len(sets), devices=width_of(parallelism))
    return riders


def _group_phase(
    order: list[T],
    recorder: Recorder[T],
    progress: _Progress[T],
    sets: list[frozenset[T]],
    preference: Preference[T],
    parallelism: Lanes,
    masks: Masks[T],
    check: Callable[[frozenset[T], bool, bool], None] | None,
    on_fix: Callable[[frozenset[T]], None] | None,
) -> Split[T]:
    """Group testing over the failing fix candidate's rules, from its longest prefix known to pass.

    The first search's passing boundary is such a prefix (the rules before the
    culprit it found); the density estimate starts from it.
    """
    universe = frozenset(order)
    candidate = universe - progress.switched_off
    rules = [rule for rule in order if rule in candidate]
    clean = _clean_prefix(recorder, masks, rules)

    def ask(configs: Sequence[frozenset[T]]) -> list[bool]:
        return [outcome is Outcome.FAIL for outcome in recorder.outcomes(list(configs))]

    def on_culprit(rule: T, dense: bool) -> None:
        rules = frozenset({rule})
        if check is not None:
            check(rules, False, False)  # its own training alone found and proves it
        if not dense:
            progress.split.append(rules)
        sets.append(rules)
        _settle(progress, sets, order, preference, grow=len(sets) > len(order))

    def announce(fix: frozenset[T]) -> None:
        if on_fix is not None:
            on_fix(fix)

    def ride(configs: Sequence[frozenset[T]]) -> None:
        prefetch(recorder, configs)

    outcome = split(
        rules, clean, ask, on_culprit, found=len(sets), width=lambda: width_of(parallelism), announce=announce,
        ride=ride, repeats=check is not None,  # behind a guard a passing fix is trained twice
    )  # fmt: skip
    if outcome.fix_passes:
        fix = universe - progress.switched_off
        progress.fix_outcome = recorder.outcomes([fix])[0] if fix else Outcome.PASS  # asked already: free
    return outcome


def _attempt(
    order: list[T],
    oracle: Oracle[T],
    guard: NoiseGuard[T] | None,
    policy: NoisePolicy,
    strategy: Strategy,
    choose: Chooser,
    parallelism: Lanes,
    progress: _Progress[T],
    masks: Masks[T] | None = None,
    on_fix: Callable[[frozenset[T]], None] | None = None,
    grouping: bool = False,
) -> None:
    """One pass of the loop, then the guard's checks of the answer; may raise ``Revised``."""
    if guard is None:
        _loop(order, oracle, strategy, choose, parallelism, progress, masks=masks, on_fix=on_fix, grouping=grouping)
        return
    strict = policy.confirm == "strict"

    def check(rules: frozenset[T], unshrunk: bool, later: bool) -> None:
        # Before the next search builds on a set: its interaction claims always; all its
        # claims once noise was seen, in strict mode, or when nothing but the fix
        # candidate's one training says it fails (a one-rule fix leaves no search that could
        # notice a flip). A run without noise pays nothing more here: the fix it hands over
        # is re-trained at the end whatever happened, and a flip anywhere makes the run
        # flaky, which brings every check back.
        assert guard is not None
        guard.confirm([rules], None, everything=strict or guard.flaky or unshrunk)

    _loop(
        order, guard, strategy, choose, parallelism, progress, check,
        witness=cast(RepeatOracle[T], oracle), masks=masks, on_fix=on_fix, grouping=grouping,
    )  # fmt: skip
    fix = frozenset(r for r in order if r not in progress.switched_off)
    # A lone culprit needs a second witness, except the singles of a dense chain on a
    # run without noise: there every rule alone is the question, and a witness for
    # each would double the cost of "every rule fails alone" (d = n).
    lone = [
        c.rules
        for c in progress.found
        if len(c.rules) == 1 and (guard.flaky or c.rules in progress.searched or c.rules in progress.split)
    ]
    guard.confirm([r for r in lone if not guard.necessity_shown(next(iter(r)))], None)
    if len(progress.searched) > 1 and guard.flaky:
        # Two searches, two sets: the first one's claims too were built on single
        # trainings that a later answer never re-examined.
        guard.confirm(progress.searched, None)
    passing = progress.fix_outcome is Outcome.PASS
    if passing:
        # The claim the user acts on: never on one training. Trained first, since its
        # trainings also back the "passes alone" claims of the pairs' rules it keeps on.
        guard.confirm_fix(fix)
    guard.confirm_single_removals([c.rules for c in progress.found if len(c.rules) > 1], fix if passing else None)
    guard.confirm([c.rules for c in progress.found], fix, everything=strict or guard.flaky)
    if passing:
        guard.confirm_fix(fix)  # again: a check above that showed noise asks one training more of it


def find_culprits(
    universe: Sequence[T],
    oracle: Oracle[T],
    strategy: Strategy,
    *,
    parallelism: Lanes = 1,
    choose_off: Chooser | None = None,
    noise: NoisePolicy | None = None,
    on_fix: Callable[[frozenset[T]], None] | None = None,
    group_testing: bool | None = None,
) -> CulpritSearch[T]:
    """Find every culprit set and a verified fix configuration.

    The engine has already checked the preconditions (the empty configuration
    passes, ``universe`` fails); they are not asked again, except that the
    universe is asked when the first search sees no failure for a while or at
    all: if it does not fail, the result says so (``no_failure``). ``strategy`` is any
    ``Strategy`` (``fusion_dd.search.strategy``), given ``parallelism`` and
    ``known`` (the answers this call has collected so far). Everything passed is a function of the oracle's answers in this run, so
    running the layer again against a cache asks the same questions (resume).
    Each round finds a set that contains no earlier one; past |universe| rounds
    the switched-off set only grows, so the loop ends even when answers are
    non-monotone. A fix candidate that is
    UNRESOLVED ends the search unverified (``fix_outcome`` says so).
    ``BudgetExhausted`` is caught and turned into a partial result.

    ``noise`` (default ``NoisePolicy()``, confirm "auto") applies when the oracle
    supports repeats (``supports_repeats``); see ``fusion_dd.search.noise``.
    ``on_fix`` is told each fix candidate just before it is asked (no effect on the questions).
    ``group_testing``: look for the independent culprits left after the first
    one by group testing (``fusion_dd.search.splitting``); None means on for
    ``bisect``, whose answers it keeps (other strategies keep their own way).
    """
    order = ordered(universe)
    choose = choose_off or default_choose_off
    policy = noise or NoisePolicy()
    masks: Masks[T] = Masks(order)  # shared by every search of this call (fusion_dd.search.masks)
    guard: NoiseGuard[T] | None = None
    if policy.confirm != "off" and supports_repeats(oracle):
        guard = NoiseGuard(cast(RepeatOracle[T], oracle), order, policy, masks)
    grouping = group_testing if group_testing is not None else strategy is bisect
    progress: _Progress[T] = _Progress()
    try:
        while True:
            progress = _Progress()
            try:
                _attempt(
                    order, oracle, guard, policy, strategy, choose, parallelism, progress, masks, on_fix, grouping
                )
                break
            except Revised:
                assert guard is not None
                guard.replay()  # free: every answer is remembered; follows the corrected branch
    except NoFailure as nothing:
        return CulpritSearch(
            fix=frozenset(order),
            fix_outcome=nothing.outcome,
            no_failure=True,
            **_noise_fields(guard, _Progress(), order, confirmed=False),
        )
    except BudgetExhausted as exhausted:
        return CulpritSearch(
            culprit_sets=progress.found,
            fix=frozenset(r for r in order if r not in progress.switched_off),
            fix_verified=False,
            exhausted=True,
            smallest_failing=exhausted.smallest_failing
            or min((c.rules for c in progress.found), key=len, default=None),
            fix_outcome=None,
            hitting_set="exact" if progress.exact else "greedy",
            may_hide=progress.may_hide,
            **_noise_fields(guard, progress, order, confirmed=False),
        )
    smallest = min((c.rules for c in progress.found), key=len, default=None)
    return CulpritSearch(
        culprit_sets=progress.found,
        fix=frozenset(r for r in order if r not in progress.switched_off),
        fix_verified=progress.fix_outcome is Outcome.PASS and _claim_holds(guard, progress, order),
        exhausted=False,
        smallest_failing=smallest,
        fix_outcome=progress.fix_outcome,
        hitting_set="exact" if progress.exact else "greedy",
        may_hide=progress.may_hide,
        **_noise_fields(guard, progress, order, confirmed=progress.fix_outcome is Outcome.PASS),
    )


def _claim_holds(guard: NoiseGuard[T] | None, progress: _Progress[T], order: list[T]) -> bool:
    """Whether "the fix passes" may be claimed: once the run has shown noise (a reference
    included), only on three agreeing trainings of the fix itself (``NoiseGuard.verified``)."""
    if guard is None:
        return True
    return guard.verified(frozenset(r for r in order if r not in progress.switched_off))


def _noise_fields(
    guard: NoiseGuard[T] | None, progress: _Progress[T], order: list[T], confirmed: bool
) -> dict[str, object]:
    if guard is None:
        return {}
    fix = frozenset(r for r in order if r not in progress.switched_off)
    sets = [c.rules for c in progress.found]
    return {
        "flaky": guard.flaky,
        "inconsistencies": guard.inconsistencies(),
        "confirmed": confirmed and bool(sets) and guard.verified(fix) and guard.confirmed(sets, fix),
        "replays": guard.replays,
    }
