"""Interaction claims: a configuration that seems to need two or more of its rules is trained again.

Noise and interactions look the same from one training each: every subset of a
falsely failing configuration passes, exactly as every proper subset of an
interacting set does. So when the answers claim that a smallest known failing
configuration needs two or more rules not already vouched for by a larger
checked one (removing either passes), or that it splits into two passing
halves of two or more rules each (ddmin's view), that configuration is
re-trained to two agreeing trainings. If its claim keeps growing afterwards, as
it does while a search walks through a configuration that does not really fail,
each growth buys one more training (up to twice the limit).

Independent culprits never show this pattern, so a clean search for them pays
nothing; a clean interacting set usually pays one training.

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from fusion_dd.search.monotonicity import Monotonicity
from fusion_dd.search.votes import Votes

T = TypeVar("T", bound=Hashable)


class InteractionClaims(Generic[T]):
    """Checks the interaction claims the verdicts make, once each (``check``, after every new verdict)."""

    def __init__(self, votes: Votes[T], monotone: Monotonicity[T]) -> None:
        self._votes = votes
        self._monotone = monotone
        self._checked: dict[frozenset[T], int] = {}  # checked leaf -> rules claimed necessary then

    def check(self, config: frozenset[T]) -> None:
        """A fresh interaction claim rests on one training of its failing configuration: re-train it.

        Rules already shown necessary inside a larger failing configuration that
        was checked are not fresh: the leaves that a search visits inside it carry
        them along, and checking each again would cost a training per step. A
        checked configuration whose claim keeps growing (yet another of its rules
        turns out necessary) is what a search looks like when it walks through a
        configuration that does not really fail: each growth buys one more training.
        """
        votes, monotone = self._votes, self._monotone
        for leaf in monotone.leaves(config):
            if leaf in votes.given:
                continue
            necessary = monotone.necessary(leaf)
            if leaf in self._checked:
                # A walk costs a binary search per step, so it may buy up to twice the
                # usual number of trainings: a wrong majority here is the costliest kind.
                walk_limit = 2 * votes.max_trainings
                if len(necessary) > self._checked[leaf] and votes.can_retrain(leaf, walk_limit):
                    self._checked[leaf] = len(necessary)
                    votes.retest([leaf])
                    votes.until([leaf], votes.decided)
                continue
            if leaf in votes.firm:
                continue
            # Fewer than two necessary rules leave fewer than two fresh ones: no need to look for vouchers.
            fresh_pair = len(necessary) >= 2 and len(necessary - self._vouched(leaf)) >= 2
            if not fresh_pair and not monotone.halves(leaf):
                continue
            self._checked[leaf] = len(necessary)
            votes.make_firm([leaf])

    def _vouched(self, leaf: frozenset[T]) -> set[T]:
        """Rules of ``leaf`` already shown necessary inside a larger failing configuration that was checked."""
        monotone = self._monotone
        vouched: set[T] = set()
        inside = monotone.mask(leaf)
        for checked in self._checked:
            outer = monotone.mask(checked)
            if inside & ~outer == 0 and inside != outer and self._votes.fails(checked):
                vouched.update(monotone.necessary(checked))
        return vouched
