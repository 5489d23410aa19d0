"""Group testing for independent culprits: Hwang's generalized binary splitting, adapted.

Once a search has found one culprit and the fix candidate still fails, more
culprits remain. Searching the whole rest of the order again for each one (a
prefix bisection per culprit, then a fix candidate per culprit) costs about
log2(n) + 2 trainings per culprit. Hwang's generalized binary splitting does
better when culprits are independent: test disjoint *groups alone* (every other
rule off), each sized so that it holds about one culprit, discard a passing
group whole, and halve a failing one by testing its first part alone until a
single rule is left; that rule's test alone is also its proof (a single rule
that fails is a 1-minimal failing set, since the empty configuration passes).
The rules of a failing group after the culprit go back to the pool. d culprits
among m rules then cost about d * (log2(m / d) + 1) trainings, and the fix
candidate is asked once, when the pool is empty or probably clean.

The number of culprits left is unknown, so it is estimated from the density
seen so far: ``found`` culprits among ``examined`` rules whose verdict is
known, scaled to the pool, and at least one while the last fix candidate is
known to fail. Groups are 2^a rules with a = floor(log2((m - d + 1) / d)) for
the estimate d (Hwang's choice for a known d).

Interactions: a group alone cannot show a set whose rules it splits, and a
failing group whose parts all pass alone is an interaction, not an independent
culprit. Neither is ever hidden: ``split`` reports the smallest failing
configuration it tested in the second case, and in the first the fix
candidate, asked at the end, still fails; both go back to the
interaction-aware strategy (``fusion_dd.search.culprits``).

With P devices a round tests P groups at once, and a failing group is cut at P
points (its P prefixes asked alone in one round, a (P+1)-ary search); when at
most P rules are left, each is asked alone, which both finds and proves every
culprit among them.

Pure and deterministic: what is asked depends only on the answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)

Ask = Callable[[Sequence[frozenset]], "list[bool]"]  # configurations -> fails?


@dataclass
class Split(Generic[T]):
    """What one splitting phase established.

    ``culprits``: rules proven to fail alone, in the order found. ``fix_passes``:
    the last fix candidate asked passed (the phase is done). ``failing``: when
    the phase could not finish alone, the configuration the interaction-aware
    search must minimize next (a failing group whose parts pass alone, or the
    failing fix candidate once the pool is exhausted).
    """

    culprits: list[T] = field(default_factory=list)
    fix_passes: bool = False
    failing: frozenset[T] | None = None


def expected_left(found: int, examined: int, pool: int, more_known: bool) -> float:
    """How many culprits the pool probably holds: the density seen so far, scaled.

    ``more_known``: the last fix candidate failed, so at least one is left
    (or an interaction, which the fallback handles).
    """
    if pool == 0:
        return 0.0
    guess = found * pool / examined if examined else 1.0
    return max(guess, 1.0) if more_known else min(guess, float(pool))


def group_size(pool: int, left: float) -> int:
    """Hwang's group size for ``left`` culprits among ``pool`` rules: 2^floor(log2((m - d + 1) / d))."""
    if left <= 0:
        return pool
    ratio = (pool - left + 1) / left
    if ratio < 2:
        return 1
    return min(pool, 2 ** int(math.floor(math.log2(ratio))))


def _cuts(size: int, count: int) -> list[int]:
    """Up to ``count`` cut points strictly inside (0, size), as even as possible."""
    count = min(count, size - 1)
    points = {(size * i + (count + 1) // 2) // (count + 1) for i in range(1, count + 1)}
    return sorted(p for p in points if 0 < p < size)


def split(
    pool: Sequence[T],
    ask: Ask,
    fix_fails: Callable[[], bool],
    on_culprit: Callable[[T], None],
    *,
    found: int,
    examined: int,
    width: Callable[[], int] = lambda: 1,
    threshold: float = 0.5,
) -> Split[T]:
    """Find the independent culprits of ``pool`` (in order) by testing groups alone.

    ``ask`` answers a batch of configurations (True: fails), one round on the
    devices. ``fix_fails`` asks the current fix candidate (the caller switches
    off every culprit it was told about through ``on_culprit``). ``found`` and
    ``examined`` are the culprits and the rules with a known verdict before this
    phase (the density estimate's start); the caller's fix candidate is known to
    fail. ``width`` is the number of devices, read each round. The fix
    candidate is asked when the pool is empty, or when fewer than
    ``threshold`` culprits are expected to be left in it.
    """
    rest = list(pool)
    result: Split[T] = Split()
    more_known = True
    while True:
        left = expected_left(found, examined, len(rest), more_known)
        if not rest or (not more_known and left < threshold):
            if not fix_fails():
                result.fix_passes = True
                return result
            if not rest:
                return result  # the caller's fix candidate fails with nothing left to test alone
            more_known = True
            continue
        devices = max(1, width())
        size = group_size(len(rest), left)
        groups = [rest[i * size : (i + 1) * size] for i in range(devices) if i * size < len(rest)]
        answers = ask([frozenset(g) for g in groups])
        failed = next((i for i, fails in enumerate(answers) if fails), None)
        if failed is None:
            cleared = sum(len(g) for g in groups)
            rest = rest[cleared:]
            examined += cleared
            continue
        # Groups before the first failing one are clean; later failing groups are searched next.
        before = sum(len(g) for g in groups[:failed])
        rest = rest[before:]
        examined += before
        group = groups[failed]
        culprits, cleared, failing = _halve(group, ask, width)
        if failing is not None:
            result.failing = failing
            return result
        for rule in culprits:
            result.culprits.append(rule)
            on_culprit(rule)
        done = {*culprits, *cleared}
        rest = [rule for rule in rest if rule not in done]
        examined += len(done)
        found += len(culprits)
        more_known = False


def _halve(group: list[T], ask: Ask, width: Callable[[], int]) -> tuple[list[T], list[T], frozenset[T] | None]:
    """Culprits in a group that fails alone: (culprits, rules shown clean, or the failing configuration to minimize).

    Cuts the segment known to hold the failure at P points and asks its
    prefixes alone; once at most P rules are left, asks each alone (the proof).
    If none of them fails alone, the failure needs several rules together: the
    smallest configuration tested failing is handed back.
    """
    segment = list(group)
    offset: list[T] = []  # rules before the segment, shown clean
    tested_failing = frozenset(group)
    while True:
        devices = max(1, width())
        if len(segment) <= devices or len(segment) == 1:
            answers = ask([frozenset({rule}) for rule in segment])
            culprits = [rule for rule, fails in zip(segment, answers) if fails]
            if not culprits:
                return [], offset, tested_failing
            cleared = offset + [r for r in segment if r not in culprits]
            return culprits, cleared, None
        cuts = _cuts(len(segment), devices)
        answers = ask([frozenset(segment[:c]) for c in cuts])
        hit = next((i for i, fails in enumerate(answers) if fails), None)
        if hit is None:
            offset += segment[: cuts[-1]]
            segment = segment[cuts[-1] :]
        else:
            low = cuts[hit - 1] if hit else 0
            tested_failing = frozenset(segment[: cuts[hit]])
            offset += segment[:low]
            segment = segment[low : cuts[hit]]
