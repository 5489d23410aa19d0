"""An in-memory oracle and synthetic failure models, for tests and benchmarks.

A real training costs hours, so strategies are judged by how many trainings and
how many rounds of parallel trainings they launch. ``SimulatedOracle`` answers
from a plain function and counts both exactly the way the engine pays for them:
a configuration is trained at most once (the cache), P configurations share a
round, and a "first failing" question stops launching after the first wave that
contains a failure. The model helpers build the failure patterns of DESIGN.md
section 3: independent culprits (OR), interacting sets (AND), both (mixed), and a
non-monotone masking pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from fusion_dd.search.oracle import BudgetExhausted, Outcome

T = TypeVar("T", bound=Hashable)

TestFunction = Callable[[frozenset[T]], "Outcome | bool"]


def as_outcome(answer: Outcome | bool) -> Outcome:
    """Plain predicates say True for "the failure shows", as picire's tests do."""
    if isinstance(answer, Outcome):
        return answer
    return Outcome.FAIL if answer else Outcome.PASS


class SimulatedOracle(Generic[T]):
    """An ``Oracle`` backed by a function, with a cache, P devices and a budget.

    ``calls`` logs every configuration handed to the function, in order, so tests
    can assert that nothing was trained twice; ``trainings`` is its length and
    ``rounds`` the number of waves of at most ``parallelism`` trainings.
    """

    def __init__(
        self,
        test: Callable[[frozenset[T]], Outcome | bool],
        parallelism: int = 1,
        budget: int | None = None,
    ) -> None:
        if parallelism < 1:
            raise ValueError(f"parallelism must be at least 1, got {parallelism}")
        if budget is not None and budget < 0:
            raise ValueError(f"budget must not be negative, got {budget}")
        self._test = test
        self.parallelism = parallelism
        self.budget = budget
        self.cache: dict[frozenset[T], Outcome] = {}
        self.calls: list[frozenset[T]] = []
        self.rounds = 0
        self.smallest_failing: frozenset[T] | None = None

    @property
    def trainings(self) -> int:
        """Trainings launched so far (cache hits are free)."""
        return len(self.calls)

    def outcomes(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        """Answer every configuration; the uncached ones run in waves of P."""
        configs = [frozenset(c) for c in configs]
        needed = _distinct(c for c in configs if c not in self.cache)
        for start in range(0, len(needed), self.parallelism):
            self._run_wave(needed[start : start + self.parallelism])
        return [self.cache[c] for c in configs]

    def first_failing(self, configs: Sequence[frozenset[T]]) -> int | None:
        """The first failing index in list order, launching waves of P in list order.

        A cached failure ends the question without launching anything after it;
        every configuration of a launched wave counts as a training, because a
        real device was busy with it even if its answer turned out not to matter.
        """
        configs = [frozenset(c) for c in configs]
        index = 0
        while index < len(configs):
            known = self.cache.get(configs[index])
            if known is Outcome.FAIL:
                return index
            if known is not None:
                index += 1
                continue
            wave: list[frozenset[T]] = []
            for config in configs[index:]:
                if len(wave) == self.parallelism:
                    break
                cached = self.cache.get(config)
                if cached is Outcome.FAIL:
                    break
                if cached is None and config not in wave:
                    wave.append(config)
            self._run_wave(wave)
        return None

    def _run_wave(self, wave: Sequence[frozenset[T]]) -> None:
        """Launch one round; stop at the budget, keeping what already ran."""
        launched = False
        for config in wave:
            if self.budget is not None and self.trainings >= self.budget:
                if launched:
                    self.rounds += 1
                raise BudgetExhausted(self.smallest_failing)
            launched = True
            self.calls.append(config)
            outcome = as_outcome(self._test(config))
            self.cache[config] = outcome
            if outcome is Outcome.FAIL and (
                self.smallest_failing is None or len(config) < len(self.smallest_failing)
            ):
                self.smallest_failing = config
        if launched:
            self.rounds += 1


def _distinct(configs: Iterable[frozenset[T]]) -> list[frozenset[T]]:
    """Order-preserving de-duplication, so one batch never trains a config twice."""
    return list(dict.fromkeys(configs))


# --- failure models -------------------------------------------------------------


def sets_model(culprit_sets: Iterable[Collection[T]]) -> Callable[[frozenset[T]], bool]:
    """Fails when every rule of at least one culprit set is on (monotone).

    A set of one rule is an independent culprit; a larger set is an interaction
    that shows only when all its rules fuse together.
    """
    sets = [frozenset(s) for s in culprit_sets]
    if any(not s for s in sets):
        raise ValueError("a culprit set must not be empty: the empty configuration must pass")

    def fails(config: frozenset[T]) -> bool:
        return any(s <= config for s in sets)

    return fails


def or_model(culprits: Iterable[T]) -> Callable[[frozenset[T]], bool]:
    """Independent culprits: any one of them alone breaks accuracy."""
    return sets_model([{c} for c in culprits])


def and_model(culprits: Iterable[T]) -> Callable[[frozenset[T]], bool]:
    """One interaction: only all of the rules together break accuracy."""
    return sets_model([frozenset(culprits)])


def mixed_model(
    independent: Iterable[T], interacting: Iterable[Collection[T]]
) -> Callable[[frozenset[T]], bool]:
    """Independent culprits plus interacting sets, as real cases mix both."""
    return sets_model([*({c} for c in independent), *interacting])


def masked_model(culprit: T, masker: T, unmasker: T) -> Callable[[frozenset[T]], bool]:
    """Non-monotone, in the style of Zeller's DD.py sample: a rewrite hides a bug.

    ``culprit`` breaks accuracy, but while ``masker`` is on it rewrites the
    pattern away, unless ``unmasker`` is also on. All-on therefore fails, {culprit}
    fails, yet {culprit, masker} passes although it is a superset of a failing set.
    """
    if len({culprit, masker, unmasker}) != 3:
        raise ValueError("culprit, masker and unmasker must be three different rules")

    def fails(config: frozenset[T]) -> bool:
        return culprit in config and (masker not in config or unmasker in config)

    return fails


def any_of(*models: Callable[[frozenset[T]], bool]) -> Callable[[frozenset[T]], bool]:
    """Fails when any model fails: combines independent failure mechanisms."""

    def fails(config: frozenset[T]) -> bool:
        return any(model(config) for model in models)

    return fails
