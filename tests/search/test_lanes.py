"""Resume is exact replay: the parallelism of every question is an input that replays.

A journal-like oracle keeps a cache of finished trainings and the lane plan's
records across "sessions"; a session ends when its budget runs out (an
interruption at that point), and the next one runs the search again from the
start, as the engine's resume does.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from fusion_dd.search import STRATEGIES, find_culprits
from fusion_dd.search.lanes import LanePlan, speculates, width_of
from fusion_dd.search.oracle import BudgetExhausted, Outcome

Model = Callable[[frozenset[int]], bool]


class Journal:
    """What survives a session: finished trainings and the width of every question asked."""

    def __init__(self) -> None:
        self.cache: dict[frozenset[int], Outcome] = {}
        self.widths: list[int] = []


class SessionOracle:
    """One coordinator session over a shared ``Journal``; trains at most ``budget`` new configurations."""

    def __init__(self, model: Model, journal: Journal, devices: int, budget: int) -> None:
        self.model = model
        self.journal = journal
        self.budget = budget
        self.trained: list[frozenset[int]] = []
        self.questions: list[tuple[frozenset[int], ...]] = []
        self.lanes = LanePlan(lambda: devices, journal.widths, on_new=self._record)

    def _record(self, index: int, width: int) -> None:
        assert index == len(self.journal.widths)
        self.journal.widths.append(width)

    def _answer(self, config: frozenset[int]) -> Outcome:
        if config not in self.journal.cache:
            if len(self.trained) >= self.budget:
                raise BudgetExhausted(None)
            self.trained.append(config)
            self.journal.cache[config] = Outcome.FAIL if self.model(config) else Outcome.PASS
        return self.journal.cache[config]

    def outcomes(self, configs: Sequence[frozenset[int]]) -> list[Outcome]:
        self.lanes.advance()
        self.questions.append(tuple(configs))
        return [self._answer(frozenset(c)) for c in configs]

    def first_failing(self, configs: Sequence[frozenset[int]]) -> int | None:
        self.lanes.advance()
        self.questions.append(tuple(configs))
        for index, config in enumerate(configs):
            if self._answer(frozenset(config)) is Outcome.FAIL:
                return index
        return None


def sets_model(sets: list[frozenset[int]]) -> Model:
    return lambda config: any(s <= config for s in sets)


def run(model: Model, n: int, journal: Journal, devices: int, budget: int, strategy: str = "bisect"):
    oracle = SessionOracle(model, journal, devices, budget)
    result = find_culprits(list(range(n)), oracle, STRATEGIES[strategy], parallelism=oracle.lanes)
    return oracle, result


def answer(result) -> tuple:
    return (tuple(sorted(tuple(sorted(c.rules)) for c in result.culprit_sets)), tuple(sorted(result.fix)))


def test_plan_replays_recorded_widths_then_freezes_the_current_one() -> None:
    devices = [4]
    new: list[tuple[int, int]] = []
    plan = LanePlan(lambda: devices[0], [1, 2], on_new=lambda i, w: new.append((i, w)))
    assert plan.width() == 1 and plan.replaying
    assert plan.advance() == 1
    assert plan.advance() == 2
    assert not plan.replaying and plan.width() == 4
    devices[0] = 3  # a device retired before the question was asked: the promise holds
    assert plan.width() == 4 and plan.advance() == 4
    assert plan.width() == 3 and plan.advance() == 3
    assert new == [(2, 4), (3, 3)] and plan.asked == 4


def test_width_of_refuses_zero() -> None:
    with pytest.raises(ValueError):
        width_of(0)


CASES = [
    ("OR d=1", 64, [frozenset({37})]),
    ("OR d=3", 64, [frozenset({5}), frozenset({22}), frozenset({60})]),
    ("AND d=2", 48, [frozenset({7, 40})]),
    ("mixed", 48, [frozenset({3}), frozenset({11, 30})]),
]


@pytest.mark.parametrize("label,n,sets", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("strategy", ["bisect", "ddmin"])
def test_interrupted_and_resumed_asks_the_same_questions(label: str, n: int, sets, strategy: str) -> None:
    """Same devices on resume: the same questions in the same order, the same answer, nothing trained twice."""
    model = sets_model(sets)
    whole, expected = run(model, n, Journal(), devices=2, budget=10**6, strategy=strategy)
    total = len(whole.trained)
    points = sorted(random.Random(f"{label}/{strategy}").sample(range(total), min(total, 6)))
    for stop in points:
        journal = Journal()
        first, partial = run(model, n, journal, devices=2, budget=stop, strategy=strategy)
        assert partial.exhausted
        second, result = run(model, n, journal, devices=2, budget=10**6, strategy=strategy)
        assert second.questions == whole.questions
        assert answer(result) == answer(expected)
        assert len(first.trained) + len(second.trained) == total


@pytest.mark.parametrize("label,n,sets", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("before,after", [(1, 4), (4, 1), (3, 2)])
def test_resume_with_other_devices_wastes_nothing(label: str, n: int, sets, before: int, after: int) -> None:
    """Devices changed on resume: every finished training is asked again, and the answer is the same."""
    model = sets_model(sets)
    costs = [len(run(model, n, Journal(), devices=p, budget=10**6)[0].trained) for p in (before, after)]
    _, expected = run(model, n, Journal(), devices=before, budget=10**6)
    rng = random.Random(f"{label}/{before}/{after}")
    for stop in sorted(rng.sample(range(1, costs[0]), min(costs[0] - 1, 5))):
        journal = Journal()
        first, _ = run(model, n, journal, devices=before, budget=stop)
        second, result = run(model, n, journal, devices=after, budget=10**6)
        asked = {frozenset(c) for question in second.questions for c in question}
        assert set(first.trained) <= asked, "a finished training was not used by the resumed search"
        assert answer(result) == answer(expected)
        # The measure (1 device, resumed on 4): never above the costlier
        # uninterrupted run. In general the interrupted round is finished at its old
        # width, and the path in between may cost up to one round more.
        slack = 0 if {before, after} == {1, 4} else max(before, after)
        assert len(first.trained) + len(second.trained) <= max(costs) + slack
        # Replayed questions keep their widths; new ones take the devices of the resume.
        assert journal.widths[: len(first.questions)] == [before] * len(first.questions)
        assert set(journal.widths[len(first.questions) :]) <= {after}


def test_guesses_ride_along_from_three_devices_on() -> None:
    assert [speculates(p) for p in (1, 2, 3, 8)] == [False, False, True, True]
    assert speculates(LanePlan(lambda: 16)) and not speculates(LanePlan(lambda: 8, [2]))


@pytest.mark.parametrize("label,n,sets", CASES, ids=[c[0] for c in CASES])
def test_interrupted_and_resumed_on_eight_devices_asks_the_same_questions(label: str, n: int, sets) -> None:
    """Where the searches size their rounds for guesses (three devices or more), replay is still exact."""
    model = sets_model(sets)
    whole, expected = run(model, n, Journal(), devices=8, budget=10**6)
    total = len(whole.trained)
    for stop in sorted(random.Random(label).sample(range(total), min(total, 4))):
        journal = Journal()
        first, _ = run(model, n, journal, devices=8, budget=stop)
        second, result = run(model, n, journal, devices=8, budget=10**6)
        assert second.questions == whole.questions
        assert answer(result) == answer(expected)
        assert len(first.trained) + len(second.trained) == total
