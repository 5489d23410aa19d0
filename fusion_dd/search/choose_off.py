"""Which rule of each culprit set is switched off, and the words that say why.

An interacting set is defeated by switching off any one of its rules, and
several sets may share rules: the fix switches off a minimum hitting set
(``fusion_dd.search.hitting``), and among equally small ones the choice is the
compiler's knowledge. A *chooser* names the rule to switch off in one set and
why; the backends pass theirs (``fusion_dd.backends``). ``Preference`` asks it
once per set and breaks ties among hitting sets with it; ``Reasons`` words the
choice for the report.

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)

Chooser = Callable[[frozenset], "tuple[object, str]"]


def label(rule: object) -> str:
    """A rule as the reasons name it: its name (any other object as its text)."""
    return str(getattr(rule, "name", rule))


def preferring(prefer: Callable[[object], bool], why: str) -> Chooser:
    """A chooser that switches off a rule ``prefer`` favours (``why`` says why), else the first by name.

    Any one rule of an interacting set suffices: the set was proven 1-minimal,
    so without any of its rules it passes. Which one is the compiler's
    knowledge (a backend passes its preference, see ``fusion_dd.backends``);
    ties are broken by name so the choice never depends on candidate order or
    hashing.
    """

    def choose(culprit_set: frozenset[T]) -> tuple[T, str]:
        rules = sorted(culprit_set, key=lambda r: (not prefer(r), label(r), repr(r)))
        chosen = rules[0]
        members = ", ".join(sorted(label(r) for r in culprit_set))
        others = ", ".join(label(r) for r in rules[1:])
        reason_why = (
            why
            if prefer(chosen) and not all(prefer(r) for r in rules)
            else "the first by name among equally good choices"
        )
        reason = (
            f"{{{members}}} fails only together and removing any one of them passes, so switching "
            f"off {label(chosen)} alone defeats it and keeps {others} on; chose {label(chosen)} as {reason_why}"
        )
        return chosen, reason

    return choose


def default_choose_off(culprit_set: frozenset[T]) -> tuple[T, str]:
    """Which rule of an interacting set to switch off when nothing is known: the first by name."""
    return preferring(lambda rule: False, "")(culprit_set)


def choose_off_by_effect(effects: Mapping[T, int], fallback: Chooser = default_choose_off) -> Chooser:
    """A chooser that keeps the most fusion on: switch off the rule that fused the fewest ops.

    ``effects`` are how often each rule fused in the all-on run (CANN: the
    ``effect_times`` of its ``fusion_result.json``). A rule that rewrote fewer
    places costs less performance when it is switched off. Rules without a
    count, and ties, fall back to ``fallback``.
    """

    def choose(culprit_set: frozenset[T]) -> tuple[T, str]:
        counted = {rule: effects[rule] for rule in culprit_set if rule in effects}
        if len(counted) != len(culprit_set) or len(set(counted.values())) == 1:
            return fallback(culprit_set)
        fewest = min(counted.values())
        candidates = frozenset(rule for rule, count in counted.items() if count == fewest)
        chosen = candidates if len(candidates) == 1 else None
        if chosen is None:
            pick, _ = fallback(candidates)
        else:
            (pick,) = chosen
        members = ", ".join(sorted(label(r) for r in culprit_set))
        kept = ", ".join(f"{label(r)} ({counted[r]})" for r in sorted(culprit_set, key=label) if r != pick)
        reason = (
            f"{{{members}}} fails only together and removing any one of them passes, so switching off "
            f"{label(pick)} alone defeats it; chose {label(pick)} because it fused the fewest places in the "
            f"all-on run ({counted[pick]}), which keeps the bigger fusions on: {kept}"
        )
        return pick, reason

    # The hitting-set tie-break weighs several rules at once by their summed counts.
    choose.effects = dict(effects)  # type: ignore[attr-defined]
    return choose


class Preference(Generic[T]):
    """The caller's ``choose_off``, asked once per set, and the tie-break among hitting sets.

    Among equally small hitting sets (per component of overlapping sets): the
    fewest summed ``effect_times`` when the chooser carries counts for every rule
    involved (``choose_off_by_effect``), then, repeatedly, the rule the chooser
    prefers among all rules still in play. For a lone set that is exactly the
    chooser's own choice, as before hitting sets existed.
    """

    def __init__(self, choose: Chooser) -> None:
        self._choose = choose
        self._effects: Mapping[T, int] | None = getattr(choose, "effects", None)
        self._memo: dict[frozenset[T], tuple[T, str]] = {}

    def pick(self, rules: frozenset[T]) -> tuple[T, str]:
        if rules not in self._memo:
            rule, reason = self._choose(rules)
            if rule not in rules:
                raise ValueError(f"choose_off returned {rule!r}, which is not in the culprit set")
            self._memo[rules] = (rule, reason)  # type: ignore[assignment]
        return self._memo[rules]

    def __call__(self, candidates: Sequence[frozenset[T]]) -> frozenset[T]:
        pool = list(candidates)
        involved = frozenset().union(*pool)
        effects = self._effects
        if effects is not None and all(rule in effects for rule in involved):
            least = min(sum(effects[r] for r in c) for c in pool)
            pool = [c for c in pool if sum(effects[r] for r in c) == least]
        taken: frozenset[T] = frozenset()
        while len(pool) > 1:
            rest = frozenset().union(*pool) - taken
            if not rest:
                break
            rule, _ = self.pick(rest)
            taken |= {rule}
            pool = [c for c in pool if rule in c]
        return pool[0]


def listed_names(rules: frozenset[T] | Sequence[T]) -> str:
    """Rule names, sorted and joined, as the reasons name a set."""
    return ", ".join(sorted(label(r) for r in rules))


class Reasons(Generic[T]):
    """Why the rules of each culprit set are switched off, for the report, under one choice of rules.

    Every interacting set's text names the whole switched-off set and the other
    sets its rule also defeats: those parts are made once per choice, not once per
    set (a search of 200 pairs otherwise sorted the same 200 names 40,000 times).
    """

    def __init__(
        self, sets: Sequence[frozenset[T]], everything_off: frozenset[T], exact: bool, preference: Preference[T]
    ) -> None:
        self._sets = sets
        self._everything_off = everything_off
        self._exact = exact
        self._preference = preference
        self._fewest: str | None = None
        self._holding: dict[T, list[frozenset[T]]] | None = None

    def _fewest_text(self) -> str:
        if self._fewest is None:
            self._fewest = (
                f"switching off {{{listed_names(self._everything_off)}}} is the fewest rules that defeat every culprit set found"
                if self._exact
                else f"switching off {{{listed_names(self._everything_off)}}} defeats every culprit set found (chosen "
                "greedily: the exact search for the fewest rules was too big, so fewer may suffice)"
            )
        return self._fewest

    def _sets_holding(self, rule: T) -> list[frozenset[T]]:
        if self._holding is None:
            self._holding = {}
            for culprit in self._sets:
                for member in culprit:
                    self._holding.setdefault(member, []).append(culprit)
        return self._holding.get(rule, [])

    def __call__(self, rules: frozenset[T], off: frozenset[T]) -> str:
        """Why ``off`` (the switched-off rules of ``rules``) are switched off."""
        if len(rules) == 1:
            return f"{label(next(iter(rules)))} fails on its own, so it must be switched off"
        members = listed_names(rules)
        if len(off) == 1:
            (rule,) = off
            shared = [other for other in self._sets_holding(rule) if other != rules]
            if not shared and self._preference.pick(rules)[0] == rule:
                return self._preference.pick(rules)[1]  # the chooser's own choice, in its own words
            base = (
                f"{{{members}}} fails only together and removing any one of them passes, so switching off "
                f"{label(rule)} alone defeats it"
            )
            if shared:
                also = "; ".join(f"{{{listed_names(other)}}}" for other in shared)
                return f"{base}; chose {label(rule)} because it also defeats {also}: {self._fewest_text()}"
            return f"{base}; chose {label(rule)} with the other switched-off rules: {self._fewest_text()}"
        return (
            f"{{{members}}} fails only together, so switching off any one of its rules would defeat it; "
            f"{listed_names(off)} are all switched off because each is also needed for other culprit sets: "
            f"{self._fewest_text()}"
        )
