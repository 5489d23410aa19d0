"""The interface between a pure search strategy and whatever answers its questions.

A configuration is the frozenset of candidate rules switched on; every other
candidate is off. A strategy asks questions in batches so that the engine can run
one batch as parallel trainings; the answers are deterministic functions of the
batch (never "whichever finished first"), which is what lets resume simply run the
strategy again from the start against the journal's cache (DESIGN.md 4.2).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Sequence
from typing import Generic, Protocol, TypeVar

T = TypeVar("T", bound=Hashable)
Config = frozenset


class Outcome(str, enum.Enum):
    """The verdict on one configuration.

    UNRESOLVED (crash, timeout, no metric) is treated like PASS by the strategies,
    as Zeller and Hildebrandt define ddmin.
    """

    PASS = "pass"
    FAIL = "fail"
    UNRESOLVED = "unresolved"


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


class BudgetExhausted(Exception, Generic[T]):
    """Raised by an oracle when the training budget does not allow another question.

    ``smallest_failing`` is the smallest failing configuration the oracle has seen,
    so that the caller can still report the best answer found so far.
    """

    def __init__(self, smallest_failing: frozenset[T] | None) -> None:
        super().__init__("training budget exhausted")
        self.smallest_failing = smallest_failing
