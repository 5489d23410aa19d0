"""All culprit sets and a verified fix, around any minimizing strategy.

A minimizer finds *one* 1-minimal failing set. Real networks can have several
independent culprits and interacting sets, and the user wants a fusion_switch.cfg
that keeps every other fusion on. So: minimize, switch off one rule of what was
found, train the whole universe minus everything switched off (the fix
candidate); if it passes, that exact configuration is the verified fix; if it
fails, something else is still broken inside it, so minimize again there.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from fusion_dd.search.ddmin import ordered
from fusion_dd.search.oracle import BudgetExhausted, Oracle, Outcome

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
    """

    culprit_sets: list[CulpritSet[T]] = field(default_factory=list)
    fix: frozenset[T] = frozenset()
    fix_verified: bool = False
    exhausted: bool = False
    smallest_failing: frozenset[T] | None = None
    fix_outcome: Outcome | None = None


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


def find_culprits(
    universe: Sequence[T],
    oracle: Oracle[T],
    strategy: Strategy,
    *,
    parallelism: int = 1,
    choose_off: Chooser | None = None,
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
    """
    order = ordered(universe)
    choose = choose_off or default_choose_off
    recorder: _Recorder[T] = _Recorder(oracle)
    wants_known = _accepts(strategy, "known")
    extra = {"parallelism": parallelism} if _accepts(strategy, "parallelism") else {}
    found: list[CulpritSet[T]] = []
    switched_off: frozenset[T] = frozenset()
    failing = frozenset(order)
    fix_outcome: Outcome | None = None
    try:
        for _ in range(len(order)):
            if wants_known:
                extra["known"] = dict(recorder.answers)
            rules = frozenset(strategy(order, recorder, failing, **extra))
            if not rules or not rules <= failing:
                break  # a broken strategy: stop rather than loop
            if len(rules) == 1:
                (rule,) = rules
                kind = "independent"
                reason = f"{_label(rule)} fails on its own, so it must be switched off"
            else:
                kind = "interacting"
                rule, reason = choose(rules)
                if rule not in rules:
                    raise ValueError(f"choose_off returned {rule!r}, which is not in the culprit set")
            switched_off = switched_off | {rule}
            found.append(CulpritSet(rules, kind, frozenset({rule}), reason))
            candidate = frozenset(r for r in order if r not in switched_off)
            # The empty configuration is the engine's precondition: known to pass.
            fix_outcome = recorder.outcomes([candidate])[0] if candidate else Outcome.PASS
            if fix_outcome is not Outcome.FAIL:
                break
            failing = candidate
    except BudgetExhausted as exhausted:
        return CulpritSearch(
            culprit_sets=found,
            fix=frozenset(r for r in order if r not in switched_off),
            fix_verified=False,
            exhausted=True,
            smallest_failing=exhausted.smallest_failing
            or min((c.rules for c in found), key=len, default=None),
            fix_outcome=None,
        )
    smallest = min((c.rules for c in found), key=len, default=None)
    return CulpritSearch(
        culprit_sets=found,
        fix=frozenset(r for r in order if r not in switched_off),
        fix_verified=fix_outcome is Outcome.PASS,
        exhausted=False,
        smallest_failing=smallest,
        fix_outcome=fix_outcome,
    )
