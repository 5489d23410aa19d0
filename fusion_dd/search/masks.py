"""Configurations as bit masks, and answers kept so that a question costs the same late as early.

A search over thousands of rules asks thousands of questions, and the strategies
and the noise guard compare every new answer with the earlier ones ("is this
failing configuration inside a passing one?"). Done on frozensets, each
comparison costs the size of the configuration, and a search costs
questions² x rules. Here a configuration is also an int with bit i set for the
i-th rule of the universe, so a subset test is a few machine words, and only the
answers that can matter are compared at all:

- a configuration that fails contradicts a passing one only if it lies inside
  it, and then it lies inside a *maximal* passing configuration (one inside no
  other passing one);
- likewise a passing configuration contradicts a failing one only if a
  *minimal* failing configuration lies inside it.

So :class:`Answers` keeps, next to the answers themselves, the minimal failing
and the maximal passing configurations (two antichains, small in practice: about
one per culprit and one per search). Every question then compares with those
few instead of with every earlier answer, and the result is the same.

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

from fusion_dd.search.oracle import Outcome

T = TypeVar("T", bound=Hashable)


class Masks(Generic[T]):
    """The bit of every rule (its position in the universe) and the mask of every configuration seen.

    A rule outside the universe gets the next free bit, so that a mask is
    always exact (a configuration with a stray rule is inside no configuration
    of the universe). Masks are memoized per configuration: the same frozenset
    objects travel between a strategy, the guard and the oracle.
    """

    def __init__(self, order: Iterable[T]) -> None:
        self._rules: list[T] = []
        self._bit: dict[T, int] = {}
        for rule in order:
            self._add(rule)
        self._memo: dict[frozenset[T], int] = {}

    def _add(self, rule: T) -> int:
        if rule not in self._bit:
            self._bit[rule] = len(self._rules)
            self._rules.append(rule)
        return self._bit[rule]

    def bit(self, rule: T) -> int:
        """The position of ``rule`` (a new one for a rule outside the universe)."""
        index = self._bit.get(rule)
        return index if index is not None else self._add(rule)

    def starts_with(self, order: list[T]) -> bool:
        """Whether the first bits are exactly ``order``, in order (bit order must follow rule order)."""
        return self._rules[: len(order)] == order

    def rule(self, position: int) -> T:
        return self._rules[position]

    def remember(self, config: frozenset[T], mask: int) -> None:
        """Store a mask the caller built cheaply (a prefix, a removal) instead of rule by rule."""
        self._memo[config] = mask

    def of(self, config: frozenset[T]) -> int:
        """The mask of ``config``."""
        mask = self._memo.get(config)
        if mask is None:
            mask = 0
            for rule in config:
                mask |= 1 << self.bit(rule)
            self._memo[config] = mask
        return mask


def is_subset(inner: int, outer: int) -> bool:
    return inner & ~outer == 0


class Antichains:
    """The minimal failing and the maximal passing masks among some answers.

    Minimal failing configurations of one rule (independent culprits, often
    hundreds of them) are kept as one int, ``single_fail``, so that asking
    whether one of them lies inside a configuration is one operation;
    ``multi_fail`` holds the others.
    """

    def __init__(self) -> None:
        self.single_fail = 0
        self.multi_fail: list[int] = []
        self.max_pass: list[int] = []

    @property
    def min_fail(self) -> list[int]:
        """Every minimal failing mask (singletons first)."""
        singles = []
        bits = self.single_fail
        while bits:
            low = bits & -bits
            singles.append(low)
            bits ^= low
        return singles + self.multi_fail

    def copy(self) -> "Antichains":
        other = Antichains()
        other.single_fail = self.single_fail
        other.multi_fail = list(self.multi_fail)
        other.max_pass = list(self.max_pass)
        return other

    def fails_inside(self, mask: int) -> bool:
        """Whether a minimal failing mask lies inside ``mask`` (equal included)."""
        if mask & self.single_fail:
            return True
        # A plain loop with the complement made once: this runs for every answer of a long
        # search, over every minimal failing mask (a generator and a complement per mask
        # took twice as long).
        outside = ~mask
        for low in self.multi_fail:
            if not low & outside:
                return True
        return False

    def is_min_fail(self, mask: int) -> bool:
        if mask and mask & (mask - 1) == 0:
            return bool(mask & self.single_fail)
        return mask in self.multi_fail

    def add(self, mask: int, fails: bool) -> None:
        if fails:
            if self.fails_inside(mask):
                return
            # Only a larger one can lie around the new one: a singleton only around the empty one.
            self.multi_fail = [low for low in self.multi_fail if low & mask != mask]
            if not mask:
                self.single_fail = 0
            if mask & (mask - 1) == 0 and mask:
                self.single_fail |= mask
            else:
                self.multi_fail.append(mask)
        else:
            if any(high & mask == mask for high in self.max_pass):
                return
            outside = ~mask
            self.max_pass = [high for high in self.max_pass if high & outside]
            self.max_pass.append(mask)

    def remove(self, mask: int, fails: bool, rest: Iterable[int]) -> None:
        """Take back an answer for ``mask``; ``rest`` holds every other mask with the same answer.

        Only the answers that ``mask`` hid can join the antichain: those around a
        failing one, inside a passing one. So a changed answer costs a scan of
        ``rest`` (in C) and a few ``add``, not a rebuild from every answer, which
        made each flip of a search with thousands of answers cost them all again.
        The result is the same set as a rebuild (an antichain of extremes is unique).
        """
        if fails:
            if not self.is_min_fail(mask):
                return  # another minimal failing mask lies inside it and stays
            if mask and mask & (mask - 1) == 0:
                self.single_fail &= ~mask
            else:
                self.multi_fail.remove(mask)
            freed = [other for other in rest if other & mask == mask]
        else:
            if mask not in self.max_pass:
                return  # a larger passing mask lies around it and stays
            self.max_pass.remove(mask)
            outside = ~mask
            freed = [other for other in rest if not other & outside]
        for other in freed:
            self.add(other, fails)

    def contradicts(self, mask: int, fails: bool) -> bool:
        """Whether an answer for ``mask`` breaks monotonicity with the answers so far."""
        if fails:
            for high in self.max_pass:  # a plain loop, as in fails_inside
                if high & mask == mask:
                    return True
            return False
        return self.fails_inside(mask)


class Answers(dict, Generic[T]):  # type: ignore[type-arg]
    """configuration -> True (fails) / False (does not fail), with masks and antichains kept up to date.

    A plain dict to every reader (strategies that take ``known`` as a mapping
    see no difference); :func:`fusion_dd.search.bisection.bisect` also uses
    ``masks`` and ``antichains`` to answer its questions without scanning.
    """

    def __init__(self, masks: Masks[T]) -> None:
        super().__init__()
        self.masks = masks
        self._chains: Antichains | None = Antichains()

    def note(self, config: frozenset[T], fails: bool) -> None:
        """Record an answer (a changed answer rebuilds the antichains on next use)."""
        previous = self.get(config)
        self[config] = fails
        if previous is None:
            if self._chains is not None:
                self._chains.add(self.masks.of(config), fails)
        elif previous != fails:
            self._chains = None

    @property
    def antichains(self) -> Antichains:
        if self._chains is None:
            chains = Antichains()
            for config, fails in self.items():
                chains.add(self.masks.of(config), fails)
            self._chains = chains
        return self._chains

    def snapshot(self) -> "Answers[T]":
        """A copy that later answers leave unchanged (what one strategy call may use)."""
        other: Answers[T] = Answers(self.masks)
        dict.update(other, self)
        other._chains = self.antichains.copy()
        return other


def answers_from(known: Mapping[frozenset[T], object], masks: Masks[T]) -> Answers[T]:
    """An :class:`Answers` holding ``known`` (True or ``Outcome.FAIL``: fails)."""
    answers: Answers[T] = Answers(masks)
    for config, answer in known.items():
        answers.note(frozenset(config), answer is Outcome.FAIL or answer is True)
    return answers
