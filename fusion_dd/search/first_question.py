"""The search's first question, known before any answer: what trains beside the references.

The references (every candidate off, every candidate on) take the first round of
a search, and on P devices they leave P - 2 of them idle for a whole training.
The search's first question does not depend on any answer: it is asked of a
configuration assumed to fail (every candidate on) with nothing known yet. So it
can be computed before the references are trained, by running the search against
an oracle that knows only what the references are expected to say and stops the
search at its first question. Trained beside the references, its answers are in
the cache when the search asks, and the round the question would have taken is
saved.

What it costs: when the references refuse the search (every candidate on passes,
or the baseline fails), those trainings answered a question nobody asks; and
beside the references no training can pass early (there is no horizon yet), so
the engine does it only where early passes are off
(``fusion_dd.coordinator.beside_references``). It is done only where idle
devices train guesses anyway (``speculates``: three devices or more), and the
first question is sized to the idle devices (``opening_width``), so that all of
it fits beside the references.

Pure: the search is run against a probe that trains nothing; the caller trains
what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from fusion_dd.search.lanes import SPECULATION_WIDTH
from fusion_dd.search.oracle import Observation, Outcome

T = TypeVar("T")


def opening_width(devices: int, references: int) -> int | None:
    """The first question's width when it trains beside ``references`` trainings on ``devices``; None if it does not.

    None below ``SPECULATION_WIDTH`` devices (there, a search trains only what it
    knows it needs) and when the references leave no device idle.
    """
    if devices < SPECULATION_WIDTH:
        return None
    idle = devices - references
    return idle if idle >= 1 else None


class _Asked(Exception, Generic[T]):
    """The probe's way out: the search asked its first question (these configurations)."""

    def __init__(self, configs: Sequence[frozenset[T]]) -> None:
        super().__init__("the first question")
        self.configs = list(configs)


class _Probe(Generic[T]):
    """An oracle that answers only what the references are expected to say, and stops at the first question.

    ``known``: the references' expected outcomes (the empty configuration passes,
    every candidate on fails). Each counts as asked once, as the engine's
    references do for the noise layer.
    """

    def __init__(self, known: Mapping[frozenset[T], Outcome], repeats: bool) -> None:
        self._known = dict(known)
        self.supports_repeats = repeats
        self.smallest_failing: frozenset[T] | None = None

    def _answer(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        unknown = [frozenset(config) for config in configs if frozenset(config) not in self._known]
        if unknown:
            raise _Asked(unknown)
        return [self._known[frozenset(config)] for config in configs]

    def outcomes(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        return self._answer(configs)

    def first_failing(self, configs: Sequence[frozenset[T]]) -> int | None:
        answers = self._answer(configs)
        return next((index for index, outcome in enumerate(answers) if outcome is Outcome.FAIL), None)

    def retest(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        raise _Asked(configs)  # a repeat before any question: nothing to train ahead

    def trials(self, config: frozenset[T]) -> list[Observation]:
        known = self._known.get(frozenset(config))
        return [Observation(0, known)] if known is not None else []


def first_question(
    run: Callable[[Any], object], known: Mapping[frozenset[T], Outcome], *, repeats: bool
) -> list[frozenset[T]]:
    """The configurations the search ``run`` asks first, in its order; [] if it asks none.

    ``run(oracle)`` runs the search as it will really run (same candidates,
    strategy, lanes, noise policy) against ``oracle``. ``known``: what the
    references are expected to answer. ``repeats``: whether the real oracle
    can repeat trainings (the noise guard is then on, as it will be).
    """
    try:
        run(_Probe(known, repeats))
    except _Asked as asked:
        return list(asked.configs)
    return []
