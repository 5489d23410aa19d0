"""The interface between a pure search strategy and whatever answers its questions.

A configuration is the frozenset of candidate rules switched on; every other
candidate is off. A strategy asks questions in batches so that the engine can run
one batch as parallel trainings; the answers are deterministic functions of the
batch (never "whichever finished first"), which is what lets resume simply run the
strategy again from the start against the journal's cache (docs/architecture.md 4.2).

Trainings are not bit-reproducible, so an oracle may also offer *repeats*
(``RepeatOracle``): another independent training of a configuration it has
already answered. Only the noise layer (``fusion_dd.search.noise``) asks for
them; the strategies keep asking plain questions and never see a repeat.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

from fusion_dd.core.outcome import Outcome as Outcome  # the strategies name it from here

T = TypeVar("T", bound=Hashable)
Config = frozenset


class Oracle(Protocol[T]):
    """Answers questions about configurations; implemented by the engine and by tests."""

    def outcomes(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        """The outcome of every configuration (run in parallel where possible)."""
        ...

    def first_failing(self, configs: Sequence[frozenset[T]]) -> int | None:
        """Index of the first configuration, in list order, that fails; None if none do.

        Configurations after the first failing one need not be tested: the
        implementation may skip or cancel them.
        """
        ...


@dataclass(frozen=True)
class Observation:
    """One training of a configuration, as the noise layer weighs it.

    ``repeat`` is 0 for the first training of the configuration in this run, 1
    for the next, and so on. ``near_threshold`` says the metric landed within
    the configured margin of the pass/fail limit: such a verdict is a coin
    toss more often than others, so it counts half as much and is re-trained.
    """

    repeat: int
    outcome: Outcome
    near_threshold: bool = False


@runtime_checkable
class RepeatOracle(Oracle[T], Protocol[T]):
    """An oracle that can train a configuration again, for noisy trainings.

    Repeat indices are counted *per run* (per coordinator session that replays
    the search from the start), never read from the cache: ``outcomes`` and
    ``first_failing`` ask repeat 0; ``retest`` asks the next repeat. A replay
    against the (configuration, repeat) cache therefore asks exactly the pairs
    the first run asked, and only the pairs it never finished are trained.

    The bookkeeping every implementation must follow, per configuration ``c``:

    - ``asked[c]`` starts at 0 in every run;
    - ``outcomes(configs)`` answers repeat 0 of each and sets ``asked[c]`` to at
      least 1 for every configuration of the list;
    - ``first_failing(configs)`` answers repeat 0 and sets ``asked[c]`` to at
      least 1 for the configurations up to and including the returned index
      (all of them when it returns None): exactly the answers the caller
      consumed, so a candidate cancelled in one run and finished in another
      cannot shift later repeat indices;
    - ``retest(configs)`` answers repeat ``asked[c]`` of each (from the cache
      when that pair finished before, else by training it with
      ``FUSION_DD_REPEAT`` = that index), then increments ``asked[c]``; a
      configuration listed twice gets two successive repeats;
    - ``trials(c)`` returns the observations of repeats ``0 .. asked[c] - 1``.

    Reference trainings made before the search (the engine's baseline and
    all-on repeats) count as asked in the run that made or replayed them.
    Repeats count toward the budget like any training; ``BudgetExhausted`` is
    raised as for the other questions.
    """

    def retest(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        """The next repeat of every configuration (run in parallel where possible)."""
        ...

    def trials(self, config: frozenset[T]) -> list[Observation]:
        """Every training of ``config`` asked in this run, in repeat order."""
        ...


def supports_repeats(oracle: object) -> bool:
    """Whether the noise layer may ask ``oracle`` for repeats.

    An implementation can have the methods yet opt out with a false
    ``supports_repeats`` attribute (the simulated oracle does so by default, so
    that tests written for single answers keep counting single answers).
    """
    return isinstance(oracle, RepeatOracle) and bool(getattr(oracle, "supports_repeats", True))


def prefetch(oracle: object, configs: Sequence[frozenset[T]]) -> None:
    """Tell ``oracle`` what will most likely be asked right after its next question.

    Optional in the protocol: an oracle without a ``prefetch`` method ignores it.
    One that has it may train these configurations on the devices its next
    question leaves idle, in list order, so that when they are asked the answer
    is there and the round they would have taken alone is saved. A right guess
    costs nothing; a wrong one costs one training. Only the next question uses
    them, and the answers a caller gets never change, only when their trainings ran.

    A configuration stands for its repeat 0; listed twice, for its repeats 0
    and 1 (an oracle that cannot repeat trainings ignores the second), which
    is what ``retest`` asks once the first was answered. So a fix candidate
    asked next, listed twice, gets the second training its claim needs in the
    same round; a replay, which asks the same questions, trains the same
    (configuration, repeat) pairs. Pairs already trained are never trained again.
    """
    method = getattr(oracle, "prefetch", None)
    if callable(method):
        method(configs)


def follow_ups(oracle: object) -> int:
    """How many trainings ``oracle`` would prefetch per answer announced with ``anticipate``.

    0 for an oracle without the method. A strategy sizes its last round with
    it: room for those trainings beside its own questions can save the round
    its caller would spend on them after the answer.
    """
    method = getattr(oracle, "follow_ups", None)
    return int(method()) if callable(method) else 0


def anticipate(oracle: object, answers: Sequence[frozenset[T]]) -> None:
    """Tell ``oracle`` that the strategy will probably return one of ``answers``, likeliest first.

    Optional in the protocol, like ``prefetch`` (which it calls): a caller that
    knows what it asks once a strategy has answered (the all-culprits layer:
    the fix candidate for that answer, and behind a noise guard its repeat)
    prefetches those questions for each answer, in order, beside the
    strategy's next question. The answers, and so every question, stay the same.
    """
    method = getattr(oracle, "anticipate", None)
    if callable(method):
        method(answers)


class BudgetExhausted(Exception, Generic[T]):
    """Raised by an oracle when the training budget does not allow another question.

    ``smallest_failing`` is the smallest failing configuration the oracle has seen,
    so that the caller can still report the best answer found so far.
    """

    def __init__(self, smallest_failing: frozenset[T] | None) -> None:
        super().__init__("training budget exhausted")
        self.smallest_failing = smallest_failing
