"""The fewest rules that defeat every culprit set found: a minimum hitting set.

Every rule switched off costs the user performance, so when culprit sets
overlap ({a, b} and {b, c}) the fix should switch off b alone rather than one
rule of each set. Choosing the fewest rules that meet every set is the minimum
hitting set problem, NP-hard in general. The families a search finds are few
and small, though, so:

- the sets are split into connected components (sets that share rules); the
  minimum of the whole is the union of the components' minima, and a component
  of one set is just "any one of its rules";
- each component is solved exactly by branch and bound, which enumerates every
  minimum hitting set so that the caller's preference (``prefer``) breaks ties;
- a component whose search would visit more than ``node_limit`` nodes (a fixed
  count, never a clock, so the answer is the same on every replay) falls back to
  greedy: repeatedly take the rule that meets the most sets not yet met, then
  drop rules that became redundant. That answer is minimal but maybe not
  minimum, and ``HittingSet.exact`` says so.

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)

# Branch-and-bound nodes per component before greedy takes over. Families a
# search finds (a few sets of a few rules) need tens of nodes.
NODE_LIMIT = 20_000

Prefer = Callable[[Sequence[frozenset]], frozenset]


@dataclass(frozen=True)
class HittingSet(Generic[T]):
    """Rules that meet every set; ``exact`` says they are provably the fewest."""

    rules: frozenset[T]
    exact: bool


class _TooBig(Exception):
    """The exact search passed its node limit."""


def components(sets: Sequence[frozenset[T]]) -> list[list[frozenset[T]]]:
    """The sets grouped by shared rules (transitively), in order of first appearance."""
    parent = list(range(len(sets)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[T, int] = {}
    for i, rules in enumerate(sets):
        for rule in rules:
            if rule in owner:
                a, b = root(owner[rule]), root(i)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            else:
                owner[rule] = i
    groups: dict[int, list[frozenset[T]]] = {}
    for i, rules in enumerate(sets):
        groups.setdefault(root(i), []).append(rules)
    return [groups[key] for key in sorted(groups)]


def _disjoint_packing(unmet: list[frozenset[T]]) -> int:
    """A lower bound: pairwise disjoint sets each need a rule of their own."""
    used: set[T] = set()
    count = 0
    for rules in sorted(unmet, key=len):
        if used.isdisjoint(rules):
            used |= rules
            count += 1
    return count


def all_minimum(
    sets: Sequence[frozenset[T]], rank: dict[T, int], node_limit: int = NODE_LIMIT
) -> list[frozenset[T]] | None:
    """Every minimum hitting set of ``sets``, in a deterministic order; None past ``node_limit``.

    Branch on the rules of the smallest set not yet met; in the i-th branch the
    rules of the earlier branches are forbidden, so each hitting set is reached
    once. Prune when the chosen rules plus a disjoint-packing lower bound exceed
    the best size found (exceed, not reach: ties are kept for the caller).
    """
    family = list(dict.fromkeys(sets))
    if not family:
        return [frozenset()]
    best = len(_greedy(family, rank))
    found: list[frozenset[T]] = []
    nodes = 0

    def search(chosen: frozenset[T], forbidden: frozenset[T], unmet: list[frozenset[T]]) -> None:
        nonlocal best, nodes
        nodes += 1
        if nodes > node_limit:
            raise _TooBig
        if not unmet:
            if len(chosen) < best:
                best = len(chosen)
                found.clear()
            found.append(chosen)
            return
        if any(rules <= forbidden for rules in unmet):
            return
        if len(chosen) + _disjoint_packing(unmet) > best:
            return
        pivot = min(unmet, key=lambda s: (len(s - forbidden), sorted(rank[r] for r in s)))
        blocked = forbidden
        for rule in sorted(pivot - forbidden, key=rank.__getitem__):
            search(chosen | {rule}, blocked, [s for s in unmet if rule not in s])
            blocked = blocked | {rule}

    try:
        search(frozenset(), frozenset(), family)
    except _TooBig:
        return None
    return sorted(found, key=lambda h: sorted(rank[r] for r in h))


def _greedy(sets: Sequence[frozenset[T]], rank: dict[T, int], prefer: Prefer | None = None) -> frozenset[T]:
    """Most sets met first (ties: ``prefer`` among the tied rules, else order), then drop redundant rules."""
    unmet = list(sets)
    chosen: list[T] = []
    while unmet:
        counts: dict[T, int] = {}
        for rules in unmet:
            for rule in rules:
                counts[rule] = counts.get(rule, 0) + 1
        most = max(counts.values())
        tied = sorted((r for r, c in counts.items() if c == most), key=rank.__getitem__)
        pick = tied[0]
        if prefer is not None and len(tied) > 1:
            (pick,) = prefer([frozenset({r}) for r in tied])
        chosen.append(pick)
        unmet = [rules for rules in unmet if pick not in rules]
    kept = set(chosen)
    for rule in reversed(chosen):  # the later picks met fewer sets: try dropping them first
        if all(rules & (kept - {rule}) for rules in sets):
            kept.discard(rule)
    return frozenset(kept)


def minimum_hitting_set(
    sets: Sequence[frozenset[T]],
    order: Sequence[T],
    prefer: Prefer,
    node_limit: int = NODE_LIMIT,
) -> HittingSet[T]:
    """The fewest rules of ``order`` that meet every set of ``sets`` (all non-empty).

    ``prefer`` picks one of several equally small candidates (each a frozenset);
    it decides per component, which for a component of one set means choosing
    one rule of it, exactly as choosing a rule per set did before.
    """
    rank = {rule: i for i, rule in enumerate(order)}
    if any(not rules for rules in sets):
        raise ValueError("an empty culprit set cannot be met by switching rules off")
    stray = {rule for rules in sets for rule in rules if rule not in rank}
    if stray:
        raise ValueError(f"{len(stray)} rule(s) of the culprit sets are not in the universe")
    chosen: set[T] = set()
    exact = True
    for group in components(sets):
        if len(group) == 1 and len(group[0]) == 1:
            chosen |= group[0]  # an independent culprit: nothing to choose (the common, cheap case)
            continue
        if len(set(group)) == 1:
            candidates: list[frozenset[T]] | None = [frozenset({r}) for r in sorted(group[0], key=rank.__getitem__)]
        else:
            candidates = all_minimum(group, rank, node_limit)
        if candidates is None:
            exact = False
            chosen |= _greedy(group, rank, prefer)
        else:
            chosen |= candidates[0] if len(candidates) == 1 else prefer(candidates)
    return HittingSet(frozenset(chosen), exact)

