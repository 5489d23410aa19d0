"""The all-culprits layer's window on the oracle: every answer remembered, the universe's failure watched.

Each search of the layer (``fusion_dd.search.culprits``) starts inside the
previous fix candidate, and what the earlier searches learnt tells the strategy
where not to look again; so every question passes through a ``Recorder``, which
keeps the answers (as bit masks, ``fusion_dd.search.masks``) and asks the
universe itself once a first search has seen only passes for a while. It also
trains what the layer will ask after a strategy's answer beside the strategy's
last round (``anticipate``).

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from fusion_dd.search.lanes import Lanes, speculates
from fusion_dd.search.masks import Answers, Masks
from fusion_dd.search.noise import majority
from fusion_dd.search.oracle import Oracle, Outcome, RepeatOracle, prefetch

T = TypeVar("T", bound=Hashable)


class NoFailure(Exception):
    """The universe, asked because nothing failed for a while, does not fail."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__("the universe does not fail")
        self.outcome = outcome


def patience(size: int, parallelism: int) -> int:
    """Passing answers a first search may see, with no failure at all, before the universe is asked.

    About one binary search's worth (plus one round of P devices on each side):
    a search for one culprit that sits last in the order sees that many passes
    before its first failure, so a failing universe is rarely asked for nothing,
    and when it is, the engine answers from the reference training it already has.
    """
    return math.ceil(math.log2(size + 1)) + 2 * parallelism


class Recorder(Generic[T]):
    """Passes questions through and remembers the answers (True: fails).

    Each search of the loop starts inside the previous fix candidate; what the
    earlier searches learnt tells the strategy (as ``known``) where not to look
    again.

    It also watches the one assumption of the first search: that ``start`` (the
    universe) fails. Until some answer fails, passing answers are counted; past
    ``patience`` of them ``start`` itself is asked before the next question
    (``verify_start``), and ``NoFailure`` ends the search if it does not fail.
    Whether and when that happens is a function of the answers, so a replay asks
    the same questions.
    """

    def __init__(
        self,
        oracle: Oracle[T],
        start: frozenset[T],
        patience: int,
        witness: RepeatOracle[T] | None = None,
        masks: Masks[T] | None = None,
        upcoming: Callable[[frozenset[T]], frozenset[T]] | None = None,
        lanes: Lanes = 1,
        on_fix: Callable[[frozenset[T]], None] | None = None,
    ) -> None:
        """``upcoming``: what the loop asks once the strategy answers (an answer's fix
        candidate), trained beside the strategy's last round where ``lanes`` leave room."""
        self._oracle = oracle
        self._witness = witness
        self._upcoming = upcoming
        self._lanes = lanes
        self._on_fix = on_fix
        self.answers: Answers[T] = Answers(masks if masks is not None else Masks(start))
        self._start = start
        self._patience = patience
        self._passes = 0
        self.unverified = True  # the start's failure is still only assumed

    def verify_start(self) -> None:
        """Ask the start itself; raise ``NoFailure`` if it does not fail.

        Behind a noise guard (``witness``: the guard's own oracle, since the guard
        takes the universe's failure as given) the verdict is the majority of the
        universe's trainings, the references included, re-trained up to three
        trainings before a refusal, so that one flipped training never ends a search.
        """
        self.unverified = False
        if self._witness is None:
            outcome = self._oracle.outcomes([self._start])[0]
        else:
            self._witness.outcomes([self._start])
            outcome = majority(self._witness.trials(self._start))
            while outcome is not Outcome.FAIL and len(self._witness.trials(self._start)) < 3:
                self._witness.retest([self._start])
                outcome = majority(self._witness.trials(self._start))
        self.answers.note(self._start, outcome is Outcome.FAIL)
        if outcome is not Outcome.FAIL:
            raise NoFailure(outcome)

    def _watch(self) -> None:
        if self.unverified and self._passes >= self._patience:
            self.verify_start()

    def _note(self, config: frozenset[T], fails: bool) -> None:
        self.answers.note(config, fails)
        if fails:
            self.unverified = False
        else:
            self._passes += 1

    def outcomes(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        self._watch()
        result = self._oracle.outcomes(configs)
        for config, outcome in zip(configs, result):
            self._note(frozenset(config), outcome is Outcome.FAIL)
        return result

    def prefetch(self, configs: Sequence[frozenset[T]]) -> None:
        prefetch(self._oracle, configs)

    def follow_ups(self) -> int:
        """Trainings per answer ``anticipate`` makes room for: the fix candidate and its repeat.

        Two with or without a noise guard (without one the repeat is not asked, and its
        device idles), so that a run without noise asks the same questions either way.
        """
        if self._upcoming is None or not speculates(self._lanes):
            return 0
        return 2

    def anticipate(self, answers: Sequence[frozenset[T]]) -> None:
        """Prefetch the fix candidate (and its repeat) of each answer the strategy may give, in its order.

        The engine is told each candidate first (``on_fix``), as for any fix candidate it trains.
        """
        if not self.follow_ups():
            return
        count = 2 if self._witness is not None else 1  # behind a guard a passing fix is trained twice
        upcoming = self._upcoming
        assert upcoming is not None  # follow_ups is 0 without it
        configs: list[frozenset[T]] = []
        for answer in answers:
            fix = upcoming(frozenset(answer))
            if fix and fix not in configs:
                if self._on_fix is not None:
                    self._on_fix(fix)
                configs += [fix] * count
        prefetch(self._oracle, configs)

    def first_failing(self, configs: Sequence[frozenset[T]]) -> int | None:
        self._watch()
        hit = self._oracle.first_failing(configs)
        for config in configs[: len(configs) if hit is None else hit]:
            self._note(frozenset(config), False)
        if hit is not None:
            self._note(frozenset(configs[hit]), True)
        return hit
