"""Prefix bisection: fast on monotone models, always verified, ddmin when contradicted."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusion_dd.search.bisection as bisect_module
from fusion_dd.search import DEFAULT_STRATEGY, STRATEGIES
from fusion_dd.search.bisection import bisect
from fusion_dd.search.oracle import BudgetExhausted, Outcome
from fusion_dd.testing.simulate import SimulatedOracle, and_model, masked_model, or_model, sets_model
from tests.search.search_helpers import is_one_minimal_failing, no_repeats, random_predicate

F = frozenset


def assert_verified(oracle: SimulatedOracle, result: frozenset, start: frozenset) -> None:
    """The oracle itself said the answer fails and every single-rule removal does not."""
    assert result == start or oracle.cache.get(result) is Outcome.FAIL
    if len(result) > 1:
        for rule in result:
            assert oracle.cache.get(result - {rule}) in (Outcome.PASS, Outcome.UNRESOLVED)


def test_registered() -> None:
    assert STRATEGIES["bisect"] is bisect
    assert DEFAULT_STRATEGY in STRATEGIES


@pytest.mark.parametrize("n", [1, 2, 3, 16, 255, 256, 1024])
def test_one_culprit_costs_a_binary_search_plus_its_proof(n: int) -> None:
    for culprit in {0, n // 3, n - 1}:
        oracle = SimulatedOracle(or_model([culprit]))
        assert bisect(range(n), oracle) == F({culprit})
        assert oracle.trainings <= math.ceil(math.log2(n)) + 1
        assert no_repeats(oracle) and F(range(n)) not in oracle.calls and F() not in oracle.calls


def test_one_culprit_on_eight_devices_takes_three_rounds() -> None:
    for culprit in range(0, 256, 17):
        oracle = SimulatedOracle(or_model([culprit]), parallelism=8)
        assert bisect(range(256), oracle, parallelism=8) == F({culprit})
        assert oracle.rounds <= 3


@pytest.mark.parametrize("parallelism", [1, 3, 8])
@settings(deadline=None, max_examples=40)
@given(data=st.data(), n=st.integers(1, 200))
def test_monotone_models_give_verified_one_minimal_sets(data, n: int, parallelism: int) -> None:
    universe = data.draw(st.permutations(list(range(n))))
    sets = data.draw(
        st.lists(st.sets(st.sampled_from(universe), min_size=1, max_size=4), min_size=1, max_size=3)
    )
    model = sets_model(sets)
    oracle = SimulatedOracle(model, parallelism=parallelism)
    result = bisect(universe, oracle, parallelism=parallelism)
    assert result in {F(s) for s in sets} or is_one_minimal_failing(model, result)
    assert is_one_minimal_failing(model, result)
    assert_verified(oracle, result, F(universe))
    assert no_repeats(oracle)


@settings(deadline=None, max_examples=40)
@given(data=st.data(), n=st.integers(1, 300), size=st.integers(1, 4))
def test_and_model_finds_exactly_the_planted_set(data, n: int, size: int) -> None:
    culprits = data.draw(st.sets(st.integers(0, n - 1), min_size=min(size, n), max_size=min(size, n)))
    assert bisect(range(n), SimulatedOracle(and_model(culprits))) == F(culprits)


@pytest.mark.parametrize("parallelism", [1, 4])
@settings(deadline=None, max_examples=50)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 24))
def test_any_predicate_gives_a_verified_answer(seed: int, n: int, parallelism: int) -> None:
    model = random_predicate(seed, F(range(n)))
    oracle = SimulatedOracle(model, parallelism=parallelism)
    result = bisect(range(n), oracle, parallelism=parallelism)
    assert is_one_minimal_failing(model, result)
    assert no_repeats(oracle)


def test_contradiction_falls_back_to_ddmin_from_the_smallest_failure(monkeypatch) -> None:
    # Rule 9 breaks accuracy unless rule 5 hides it, and rule 30 undoes the hiding:
    # prefixes fail only from rule 30 on, so the search first believes {9, 30} is
    # needed; the proof finds {9} failing although the prefix [0..29] passed.
    model = masked_model(9, 5, 30)
    oracle = SimulatedOracle(model)
    starts: list[tuple[frozenset, frozenset]] = []
    real_ddmin = bisect_module.ddmin

    def spy(universe, oracle_, failing=None):
        starts.append((failing, oracle.smallest_failing))
        return real_ddmin(universe, oracle_, failing)

    monkeypatch.setattr(bisect_module, "ddmin", spy)
    assert bisect(range(40), oracle) == F({9})
    assert starts == [(F({9}), F({9}))]
    assert no_repeats(oracle)


@settings(deadline=None, max_examples=40)
@given(data=st.data(), n=st.integers(3, 60))
def test_masked_non_monotone_models(data, n: int) -> None:
    culprit, masker, unmasker = data.draw(st.permutations(list(range(n))))[:3]
    model = masked_model(culprit, masker, unmasker)
    result = bisect(range(n), SimulatedOracle(model))
    assert is_one_minimal_failing(model, result)


def test_starts_from_a_given_failing_set() -> None:
    oracle = SimulatedOracle(or_model([5, 40]))
    start = F(range(30, 50))
    assert bisect(range(64), oracle, start) == F({40})
    assert start not in oracle.calls
    assert bisect(range(64), oracle, F({40})) == F({40})


def test_budget_exhaustion_propagates() -> None:
    oracle = SimulatedOracle(and_model([3, 100, 200]), budget=5)
    with pytest.raises(BudgetExhausted) as caught:
        bisect(range(256), oracle)
    smallest = caught.value.smallest_failing
    assert smallest is not None and {3, 100, 200} <= smallest and len(smallest) < 256, "a failing set, smaller than all"


def test_rejects_bad_parallelism() -> None:
    with pytest.raises(ValueError):
        bisect(range(4), SimulatedOracle(or_model([1])), parallelism=0)


def test_deterministic() -> None:
    rng = random.Random(4)
    culprits = rng.sample(range(500), 3)
    runs = []
    for _ in range(2):
        oracle = SimulatedOracle(and_model(culprits), parallelism=4)
        bisect(range(500), oracle, parallelism=4)
        runs.append(oracle.calls)
    assert runs[0] == runs[1]


def test_known_answers_narrow_the_search() -> None:
    cold = SimulatedOracle(or_model([40]))
    bisect(range(64), cold)
    warm = SimulatedOracle(or_model([40]))
    known = {F(range(30)): Outcome.PASS, F(range(50)): True}
    assert bisect(range(64), warm, known=known) == F({40})
    assert warm.trainings < cold.trainings
    assert not set(known) & set(warm.calls)


def test_wrong_known_answers_cannot_corrupt_the_answer() -> None:
    # Known answers are the oracle's own, but what they imply for *other*
    # configurations is a monotonicity guess. Here "range(50) passes" while rule 10
    # fails alone (a non-monotone oracle): the guess misleads, the proof catches it.
    oracle = SimulatedOracle(or_model([10]))
    assert bisect(range(64), oracle, known={F(range(50)): Outcome.PASS}) == F({10})


class Foreseeing(SimulatedOracle):
    """A caller that asks ``follow`` trainings after each answer, and logs what it was told."""

    def __init__(self, *args, follow: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.follow = follow
        self.told: list[list[frozenset]] = []
        self.batches: list[int] = []

    def follow_ups(self) -> int:
        return self.follow

    def anticipate(self, answers) -> None:
        self.told.append([F(a) for a in answers])

    def outcomes(self, configs):
        self.batches.append(len(configs))
        return super().outcomes(configs)


@pytest.mark.parametrize("culprit", [0, 37, 128, 220, 255])
def test_sixteen_devices_leave_the_last_round_room_for_the_callers_next_questions(culprit: int) -> None:
    """A fix candidate and its repeat per possible answer fit beside the last round: no round after it."""
    oracle = Foreseeing(or_model([culprit]), parallelism=16, follow=2)
    assert bisect(range(256), oracle, parallelism=16) == F({culprit})
    assert oracle.rounds <= 3
    answers = oracle.told[-1]
    assert F({culprit}) in answers
    assert oracle.batches[-1] + 2 * len(answers) <= 16


def test_room_is_planned_only_where_it_saves_a_round() -> None:
    assert bisect_module._room(256, 16, 2) == 2 and bisect_module._room(256, 8, 2) == 0
    assert bisect_module._room(256, 16, 0) == 0


@pytest.mark.parametrize("culprit", [0, 37, 128, 220, 255])
def test_on_eight_devices_the_last_round_asks_the_rules_alone_beside_the_callers_questions(culprit: int) -> None:
    """No room for every answer's follow-ups beside the prefixes: the rules alone, and half the answers'."""
    oracle = Foreseeing(or_model([culprit]), parallelism=8, follow=2)
    assert bisect(range(256), oracle, parallelism=8) == F({culprit})
    assert oracle.rounds <= 3
    last = oracle.calls[-[b for b in oracle.batches if b][-1] :]
    assert all(len(config) == 1 for config in last) and 2 <= len(last) <= 4
    assert F({culprit}) in oracle.told[-1]
    plain = SimulatedOracle(or_model([culprit]), parallelism=8)
    assert bisect(range(256), plain, parallelism=8) == F({culprit}) and plain.rounds <= 3


@pytest.mark.parametrize("parallelism", [4, 8])
@settings(deadline=None, max_examples=30)
@given(data=st.data(), n=st.integers(2, 120), size=st.integers(2, 4))
def test_when_no_rule_fails_alone_the_prefixes_decide_a_round_later(data, n: int, size: int, parallelism: int) -> None:
    size = min(size, n)
    planted = F(data.draw(st.permutations(list(range(n))))[:size])
    oracle = Foreseeing(and_model(planted), parallelism=parallelism, follow=2)
    result = bisect(range(n), oracle, parallelism=parallelism)
    assert result == planted and no_repeats(oracle)
