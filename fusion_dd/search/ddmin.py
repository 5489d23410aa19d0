"""Zeller and Hildebrandt's ddmin (TSE 2002), over fusion-rule configurations.

ddmin is the reference strategy: slow (O(|c|^2) trainings in the worst case) but
it assumes nothing about how rules interact, which is why the faster strategies
fall back to it when an outcome contradicts their assumptions.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

from fusion_dd.search.lanes import Lanes
from fusion_dd.search.masks import Masks
from fusion_dd.search.oracle import Oracle, Outcome

T = TypeVar("T", bound=Hashable)


def ordered(universe: Iterable[T], subset: Iterable[T] | None = None) -> list[T]:
    """The rules of ``subset`` in the order of ``universe`` (all of it when None).

    Strategies keep the user's candidate order so that the same question is always
    the same configuration, which is what makes resume-by-replay hit the cache.
    """
    order = list(dict.fromkeys(universe))
    if subset is None:
        return order
    wanted = frozenset(subset)
    stray = wanted.difference(order)
    if stray:
        raise ValueError(f"{len(stray)} rule(s) of the failing configuration are not in the universe")
    return [rule for rule in order if rule in wanted]


def split(items: Sequence[T], n: int) -> list[list[T]]:
    """Cut ``items`` into ``n`` contiguous chunks whose sizes differ by at most one."""
    n = max(1, min(n, len(items)))
    bounds = [len(items) * i // n for i in range(n + 1)]
    return [list(items[bounds[i] : bounds[i + 1]]) for i in range(n)]


def ddmin(
    universe: Sequence[T],
    oracle: Oracle[T],
    failing: frozenset[T] | None = None,
    *,
    parallelism: Lanes = 1,
    known: Mapping[frozenset[T], Outcome | bool] | None = None,
    masks: Masks[T] | None = None,
) -> frozenset[T]:
    """A 1-minimal failing subset of ``failing`` (default: the whole universe).

    The ``Strategy`` signature (``fusion_dd.search.strategy``): ``parallelism``,
    ``known`` and ``masks`` are accepted and ignored. ddmin is the reference that
    assumes nothing, so it neither batches by devices beyond what ``first_failing``
    lets the oracle do nor narrows by earlier answers (they are monotone guesses).

    ``failing`` is taken as already known to fail and is not tested again; the
    empty configuration is taken as known to pass (the engine's preconditions).
    UNRESOLVED counts as not failing. Every kept configuration was answered FAIL,
    and the final granularity tests every single-rule removal, so the result is
    1-minimal by the oracle's own answers. ``BudgetExhausted`` propagates.
    """
    current = ordered(universe, failing)
    n = 2
    while len(current) >= 2:
        chunks = split(current, n)
        chunk_sets = [frozenset(chunk) for chunk in chunks]
        hit = oracle.first_failing(chunk_sets)
        if hit is not None:
            current, n = chunks[hit], 2
            continue
        if len(chunks) > 2:  # with two chunks the complements are the chunks themselves
            whole = frozenset(current)
            hit = oracle.first_failing([whole - chunk for chunk in chunk_sets])
            if hit is not None:
                current = [rule for rule in current if rule not in chunk_sets[hit]]
                n = max(n - 1, 2)
                continue
        if n < len(current):
            n = min(2 * n, len(current))
        else:
            break
    return frozenset(current)
