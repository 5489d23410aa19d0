"""Other fixes that switch off as few rules as the chosen one, and the fastest of them.

An interacting culprit set {C, D} is defeated by switching off either rule; the
search picks one (by the backend's chooser, else by name) because both cost the
same in trainings. In speed they need not: a fused attention off may cost 20%,
a fused cast 2%. This module lists the alternatives (every minimum hitting set
of the culprit sets, the chosen one first) and picks the fastest passing one.
Pure: the engine trains the alternatives and passes their measured speeds in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

#: Steps of the enumeration at most while listing alternatives: a fix of many rules among many
#: overlapping sets has too many to train anyway.
MAX_COMBINATIONS = 100_000


def minimum_hitting_sets(
    culprit_sets: Sequence[frozenset[T]],
    chosen: frozenset[T],
    limit: int,
    key: Callable[[T], str] = str,
) -> list[frozenset[T]]:
    """Up to ``limit`` hitting sets of ``culprit_sets`` as large as ``chosen``, other than it, in name order.

    A hitting set has a rule of every culprit set; switching it off defeats
    them all. Only rules of the culprit sets are candidates. "Name order" is
    the order of ``itertools.combinations`` over the rules sorted by ``key``.

    The combinations are walked depth first, a rule taken before it is left
    out (which is that order), and a branch is cut as soon as a culprit set can
    no longer be hit (its last rule in name order is behind), or the rules still
    to take are too few for the sets not yet hit. Trying every combination instead finds nothing in time for a fix
    of 80 rules among 100 (60 lone culprits and 20 pairs): the first hundred
    thousand combinations in name order all miss some set.
    """
    if limit < 1 or not culprit_sets:
        return []
    rules = sorted({rule for culprit in culprit_sets for rule in culprit}, key=key)
    size = len(chosen)
    index = {rule: position for position, rule in enumerate(rules)}
    sets_of: list[list[int]] = [[] for _ in rules]  # per rule: the culprit sets it hits
    deadline: list[list[int]] = [[] for _ in rules]  # per position: sets whose last rule is there
    for number, culprit in enumerate(culprit_sets):
        positions = [index[rule] for rule in culprit]
        for position in positions:
            sets_of[position].append(number)
        deadline[max(positions)].append(number)
    hits = [0] * len(culprit_sets)
    unhit = len(culprit_sets)
    most = max(len(numbers) for numbers in sets_of)  # a rule hits at most this many sets
    taken: list[int] = []
    found: list[frozenset[T]] = []

    def take(position: int, step: int) -> None:
        nonlocal unhit
        for number in sets_of[position]:
            hits[number] += step
            if hits[number] == (1 if step > 0 else 0):
                unhit -= step

    def enough(position: int) -> bool:
        """The rules still to take can hit every set not yet hit, and there are that many rules left."""
        free = size - len(taken)
        return len(rules) - position >= free and unhit <= free * most

    def alive(position: int) -> bool:
        """No culprit set whose last rule is at ``position`` is left unhit."""
        return all(hits[number] for number in deadline[position])

    # Depth first without recursion (a fix can have more rules than Python's recursion
    # limit): a frame is [position, 0: take it next, 1: leave it out next, 2: done].
    stack = [[0, 0]]
    steps = 0
    while stack:
        frame = stack[-1]
        position, phase = frame
        if phase == 0:
            steps += 1
            if steps > MAX_COMBINATIONS:
                break
            if len(taken) == size:
                stack.pop()
                candidate = frozenset(rules[i] for i in taken)
                if not unhit and candidate != chosen:
                    found.append(candidate)
                    if len(found) >= limit:
                        break
                continue
            if not enough(position):
                stack.pop()
                continue
            frame[1] = 1
            taken.append(position)
            take(position, 1)
            if alive(position):
                stack.append([position + 1, 0])
        elif phase == 1:
            frame[1] = 2
            taken.pop()
            take(position, -1)
            if alive(position):
                stack.append([position + 1, 0])
        else:
            stack.pop()
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
