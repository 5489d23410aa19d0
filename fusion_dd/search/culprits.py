"""All culprit sets and a verified fix, around any minimizing strategy.

A minimizer finds *one* 1-minimal failing set. Real networks can have several
independent culprits and interacting sets, and the user wants a fusion_switch.cfg
that keeps every other fusion on. So: minimize, switch off one rule of what was
found, train the whole universe minus everything switched off (the fix
candidate); if it passes, that exact configuration is the verified fix; if it
fails, something else is still broken inside it, so minimize again there.

With an oracle that can repeat trainings, every question goes through a
``NoiseGuard`` (``fusion_dd.search.noise``): verdicts are majorities of repeats,
contradictions are re-trained, and when a verdict the search relied on changes,
the whole search is replayed from the start (free: every answer is remembered)
so that it follows the corrected branch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

from fusion_dd.search.ddmin import ordered
from fusion_dd.search.noise import Inconsistency, NoiseGuard, NoisePolicy, Revised
from fusion_dd.search.oracle import BudgetExhausted, Oracle, Outcome, RepeatOracle, supports_repeats

T = TypeVar("T", bound=Hashable)

Strategy = Callable[..., frozenset]
Chooser = Callable[[frozenset], "tuple[object, str]"]


@dataclass(frozen=True)
class CulpritSet(Generic[T]):
    """One 1-minimal failing set and the rule(s) switched off to defeat it.

    ``kind`` is "independent" (one rule that fails alone) or "interacting"
    (only the rules together fail); ``reason`` explains the switch-off choice in
    words a report can show.
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
    single-rule removal passes, the fix passes) rests on two agreeing trainings;
    ``replays`` counts the times a changed verdict made the search start over.
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


def _label(rule: object) -> str:
    return str(getattr(rule, "name", rule))


def _is_ub(rule: object) -> bool:
    section = getattr(rule, "section", None)
    return str(getattr(section, "value", section)) == "UBFusion"


def default_choose_off(culprit_set: frozenset[T]) -> tuple[T, str]:
    """Which rule of an interacting set to switch off, and why.

    Any one rule suffices: the set was proven 1-minimal, so without any of its
    rules it passes. Prefer a UBFusion rule: it only merges kernels in the unified
    buffer, so switching it off leaves the graph that every other pass sees
    unchanged, while switching off a GraphFusion rewrite can change which later
    fusions match. Ties are broken by name so the choice never depends on
    candidate order or hashing.
    """
    rules = sorted(culprit_set, key=lambda r: (not _is_ub(r), _label(r), repr(r)))
    chosen = rules[0]
    members = ", ".join(sorted(_label(r) for r in culprit_set))
    others = ", ".join(_label(r) for r in rules[1:])
    why = (
        "a UBFusion rule, whose switch-off leaves the graph seen by the other passes unchanged"
        if _is_ub(chosen) and not all(_is_ub(r) for r in rules)
        else "the first by name among equally good choices"
    )
    reason = (
        f"{{{members}}} fails only together and removing any one of them passes, so switching "
        f"off {_label(chosen)} alone defeats it and keeps {others} on; chose {_label(chosen)} as {why}"
    )
    return chosen, reason


def choose_off_by_effect(effects: Mapping[T, int]) -> Chooser:
    """A chooser that keeps the most fusion on: switch off the rule that fused the fewest ops.

    ``effects`` are the rules' ``effect_times`` in the all-on run's
    ``fusion_result.json``. A rule that rewrote fewer places costs less
    performance when it is switched off. Rules without a count, and ties, fall back
    to ``default_choose_off``.
    """

    def choose(culprit_set: frozenset[T]) -> tuple[T, str]:
        counted = {rule: effects[rule] for rule in culprit_set if rule in effects}
        if len(counted) != len(culprit_set) or len(set(counted.values())) == 1:
            return default_choose_off(culprit_set)
        fewest = min(counted.values())
        candidates = frozenset(rule for rule, count in counted.items() if count == fewest)
        chosen = candidates if len(candidates) == 1 else None
        if chosen is None:
            pick, _ = default_choose_off(candidates)
        else:
            (pick,) = chosen
        members = ", ".join(sorted(_label(r) for r in culprit_set))
        kept = ", ".join(f"{_label(r)} ({counted[r]})" for r in sorted(culprit_set, key=_label) if r != pick)
        reason = (
            f"{{{members}}} fails only together and removing any one of them passes, so switching off "
            f"{_label(pick)} alone defeats it; chose {_label(pick)} because it fused the fewest places in the "
            f"all-on run ({counted[pick]}), which keeps the bigger fusions on: {kept}"
        )
        return pick, reason

    return choose


def _accepts(strategy: Strategy, keyword: str) -> bool:
    try:
        params = inspect.signature(strategy).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in params)


class _Recorder(Generic[T]):
    """Passes questions through and remembers the answers (True: fails).

    Each search of the loop starts inside the previous fix candidate; what the
    earlier searches learnt tells a strategy that accepts ``known`` where not to
    look again.
    """

    def __init__(self, oracle: Oracle[T]) -> None:
        self._oracle = oracle
        self.answers: dict[frozenset[T], bool] = {}

    def outcomes(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        result = self._oracle.outcomes(configs)
        for config, outcome in zip(configs, result):
            self.answers[frozenset(config)] = outcome is Outcome.FAIL
        return result

    def first_failing(self, configs: Sequence[frozenset[T]]) -> int | None:
        hit = self._oracle.first_failing(configs)
        for config in configs[: len(configs) if hit is None else hit]:
            self.answers[frozenset(config)] = False
        if hit is not None:
            self.answers[frozenset(configs[hit])] = True
        return hit


@dataclass
class _Progress(Generic[T]):
    """What one pass of the loop has established so far (kept when the budget runs out)."""

    found: list[CulpritSet[T]] = field(default_factory=list)
    switched_off: frozenset[T] = frozenset()
    fix_outcome: Outcome | None = None


def _loop(
    order: list[T],
    oracle: Oracle[T],
    strategy: Strategy,
    choose: Chooser,
    parallelism: int,
    progress: _Progress[T],
    check: Callable[[frozenset[T], bool], None] | None = None,
) -> None:
    """Minimize, switch one rule off, verify the fix; again inside a failing fix.

    ``check`` sees each culprit set before a rule of it is switched off, so that a
    noise guard can confirm it while the next search has not yet built on it; it
    is also told whether the strategy returned its failing start unshrunk (then
    the set's failure rests on the fix candidate's training alone).
    """
    recorder: _Recorder[T] = _Recorder(oracle)
    wants_known = _accepts(strategy, "known")
    extra: dict[str, object] = {"parallelism": parallelism} if _accepts(strategy, "parallelism") else {}
    failing = frozenset(order)
    for _ in range(len(order)):
        if wants_known:
            extra["known"] = dict(recorder.answers)
        rules = frozenset(strategy(order, recorder, failing, **extra))
        if not rules or not rules <= failing:
            break  # a broken strategy: stop rather than loop
        if check is not None:
            check(rules, rules == failing)
        if len(rules) == 1:
            (rule,) = rules
            kind = "independent"
            reason = f"{_label(rule)} fails on its own, so it must be switched off"
        else:
            kind = "interacting"
            rule, reason = choose(rules)
            if rule not in rules:
                raise ValueError(f"choose_off returned {rule!r}, which is not in the culprit set")
        progress.switched_off = progress.switched_off | {rule}
        progress.found.append(CulpritSet(rules, kind, frozenset({rule}), reason))
        candidate = frozenset(r for r in order if r not in progress.switched_off)
        # The empty configuration is the engine's precondition: known to pass.
        progress.fix_outcome = recorder.outcomes([candidate])[0] if candidate else Outcome.PASS
        if progress.fix_outcome is not Outcome.FAIL:
            break
        failing = candidate


def _attempt(
    order: list[T],
    oracle: Oracle[T],
    guard: NoiseGuard[T] | None,
    policy: NoisePolicy,
    strategy: Strategy,
    choose: Chooser,
    parallelism: int,
    progress: _Progress[T],
) -> None:
    """One pass of the loop, then the guard's checks of the answer; may raise ``Revised``."""
    if guard is None:
        _loop(order, oracle, strategy, choose, parallelism, progress)
        return
    strict = policy.confirm == "strict"

    def check(rules: frozenset[T], unshrunk: bool) -> None:
        # Before the next search builds on a set: its interaction claims always; all
        # its claims once noise was seen, in strict mode, or when nothing but the fix
        # candidate's one training says it fails (a one-rule fix leaves no search that
        # could notice a flip).
        assert guard is not None
        guard.confirm([rules], None, everything=strict or guard.flaky or unshrunk)

    _loop(order, guard, strategy, choose, parallelism, progress, check)
    fix = frozenset(r for r in order if r not in progress.switched_off)
    lone = [c.rules for c in progress.found if len(c.rules) == 1]
    guard.confirm([r for r in lone if not guard.necessity_shown(next(iter(r)))], None)
    guard.confirm([c.rules for c in progress.found], fix, everything=strict or guard.flaky)


def find_culprits(
    universe: Sequence[T],
    oracle: Oracle[T],
    strategy: Strategy,
    *,
    parallelism: int = 1,
    choose_off: Chooser | None = None,
    noise: NoisePolicy | None = None,
) -> CulpritSearch[T]:
    """Find every culprit set and a verified fix configuration.

    The engine has already checked the preconditions (the empty configuration
    passes, ``universe`` fails); they are not asked again. ``strategy`` is any
    minimizer with ddmin's signature, given ``parallelism`` when it accepts it,
    and ``known`` (the answers this call has collected so far) when it accepts
    that. Everything passed is a function of the oracle's answers in this run, so
    running the layer again against a cache asks the same questions (resume).
    Each round switches off at least one more rule, so the loop ends after at most
    |universe| rounds even when answers are non-monotone. A fix candidate that is
    UNRESOLVED ends the search unverified (``fix_outcome`` says so).
    ``BudgetExhausted`` is caught and turned into a partial result.

    ``noise`` (default ``NoisePolicy()``, confirm "auto") applies when the oracle
    supports repeats (``supports_repeats``); see ``fusion_dd.search.noise``.
    """
    order = ordered(universe)
    choose = choose_off or default_choose_off
    policy = noise or NoisePolicy()
    guard: NoiseGuard[T] | None = None
    if policy.confirm != "off" and supports_repeats(oracle):
        guard = NoiseGuard(cast(RepeatOracle[T], oracle), order, policy)
    progress: _Progress[T] = _Progress()
    try:
        while True:
            progress = _Progress()
            try:
                _attempt(order, oracle, guard, policy, strategy, choose, parallelism, progress)
                break
            except Revised:
                assert guard is not None
                guard.replay()  # free: every answer is remembered; follows the corrected branch
    except BudgetExhausted as exhausted:
        return CulpritSearch(
            culprit_sets=progress.found,
            fix=frozenset(r for r in order if r not in progress.switched_off),
            fix_verified=False,
            exhausted=True,
            smallest_failing=exhausted.smallest_failing
            or min((c.rules for c in progress.found), key=len, default=None),
            fix_outcome=None,
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
        **_noise_fields(guard, progress, order, confirmed=progress.fix_outcome is Outcome.PASS),
    )


def _claim_holds(guard: NoiseGuard[T] | None, progress: _Progress[T], order: list[T]) -> bool:
    """Whether "the fix passes" may be claimed: once the run has shown noise (a reference
    included), only on two agreeing trainings of the fix itself (``NoiseGuard.verified``)."""
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
