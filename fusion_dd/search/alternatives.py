"""Other fixes that switch off as few rules as the chosen one, and the fastest of them.

An interacting culprit set {C, D} is defeated by switching off either rule; the
search picks one (by the backend's chooser, else by name) because both cost the
same in trainings. In speed they need not: a fused attention off may cost 20%,
a fused cast 2%. This module lists the alternatives (every minimum hitting set
of the culprit sets, the chosen one first) and picks the fastest passing one.
Pure: the engine trains the alternatives and passes their measured speeds in.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

#: Combinations examined at most while listing alternatives: a fix of many rules among many
#: overlapping sets has too many to train anyway.
MAX_COMBINATIONS = 100_000


def minimum_hitting_sets(
    culprit_sets: Sequence[frozenset[T]],
    chosen: frozenset[T],
    limit: int,
    key: Callable[[T], str] = str,
) -> list[frozenset[T]]:
    """Up to ``limit`` hitting sets of ``culprit_sets`` as small as ``chosen``, other than it, in name order.

    A hitting set has a rule of every culprit set; switching it off defeats
    them all. Only rules of the culprit sets are candidates.
    """
    if limit < 1 or not culprit_sets:
        return []
    rules = sorted({rule for culprit in culprit_sets for rule in culprit}, key=key)
    found: list[frozenset[T]] = []
    for examined, combination in enumerate(itertools.combinations(rules, len(chosen))):
        if examined >= MAX_COMBINATIONS:
            break
        candidate = frozenset(combination)
        if candidate != chosen and all(candidate & culprit for culprit in culprit_sets):
            found.append(candidate)
            if len(found) >= limit:
                break
    return found


def fastest(
    chosen: frozenset[T], chosen_speed: float | None, alternatives: Sequence[tuple[frozenset[T], bool, float | None]]
) -> frozenset[T]:
    """The fix to hand over: the fastest of the chosen one and the passing alternatives.

    ``alternatives`` are (switched-off rules, passed a full training, speed).
    The chosen fix wins ties and whenever speeds are unknown: without a
    measurement there is no reason to prefer another.
    """
    if chosen_speed is None:
        return chosen
    best, best_speed = chosen, chosen_speed
    for switched_off, passed, speed in alternatives:
        if passed and speed is not None and speed > best_speed:
            best, best_speed = switched_off, speed
    return best


__all__ = ["MAX_COMBINATIONS", "fastest", "minimum_hitting_sets"]
