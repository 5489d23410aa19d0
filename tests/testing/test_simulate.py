"""The simulated oracle must count trainings and rounds exactly as the engine pays them."""

from __future__ import annotations

import pytest

from fusion_dd.search.oracle import BudgetExhausted, Outcome
from fusion_dd.testing.simulate import (
    SimulatedOracle,
    and_model,
    any_of,
    masked_model,
    mixed_model,
    or_model,
    sets_model,
)

F = frozenset


def test_bool_and_outcome_answers_and_cache() -> None:
    oracle = SimulatedOracle(lambda c: 1 in c)
    assert oracle.outcomes([F({1}), F({2}), F({1})]) == [Outcome.FAIL, Outcome.PASS, Outcome.FAIL]
    assert oracle.trainings == 2
    assert oracle.outcomes([F({1}), F({2})]) == [Outcome.FAIL, Outcome.PASS]
    assert oracle.trainings == 2 and oracle.rounds == 2

    unresolved = SimulatedOracle(lambda c: Outcome.UNRESOLVED)
    assert unresolved.outcomes([F({3})]) == [Outcome.UNRESOLVED]


def test_outcomes_run_in_waves_of_p() -> None:
    oracle = SimulatedOracle(lambda c: False, parallelism=2)
    oracle.outcomes([F({i}) for i in range(5)])
    assert (oracle.trainings, oracle.rounds) == (5, 3)
    oracle.outcomes([F({i}) for i in range(5)])
    assert oracle.rounds == 3  # all cached: no round


def test_first_failing_returns_list_order_and_stops_after_the_failing_wave() -> None:
    oracle = SimulatedOracle(lambda c: bool(c & {2, 3}), parallelism=2)
    configs = [F({0}), F({1}), F({3}), F({2}), F({4}), F({5})]
    assert oracle.first_failing(configs) == 2
    # waves {0,1} then {3,2}: both of the second wave were launched, {4}, {5} never.
    assert oracle.calls == configs[:4]
    assert oracle.rounds == 2


def test_first_failing_uses_cached_failures_without_launching_later_configs() -> None:
    oracle = SimulatedOracle(lambda c: 7 in c, parallelism=4)
    oracle.outcomes([F({7})])
    assert oracle.first_failing([F({1}), F({7}), F({2})]) == 1
    assert oracle.calls == [F({7}), F({1})]
    assert oracle.first_failing([F({1}), F({2})]) is None
    assert oracle.first_failing([]) is None


def test_budget_keeps_what_ran_and_reports_the_smallest_failure() -> None:
    oracle = SimulatedOracle(lambda c: 1 in c, budget=3)
    oracle.outcomes([F({1, 2, 3}), F({1})])
    with pytest.raises(BudgetExhausted) as caught:
        oracle.outcomes([F({2}), F({3})])
    assert caught.value.smallest_failing == F({1})
    assert oracle.trainings == 3 and F({2}) in oracle.cache


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        SimulatedOracle(lambda c: True, parallelism=0)
    with pytest.raises(ValueError):
        sets_model([set()])
    with pytest.raises(ValueError):
        masked_model(1, 1, 2)


def test_models() -> None:
    assert or_model([1, 2])(F({2, 5})) and not or_model([1, 2])(F({5}))
    assert and_model([1, 2])(F({1, 2, 3})) and not and_model([1, 2])(F({1, 3}))
    mixed = mixed_model([9], [{1, 2}])
    assert mixed(F({9})) and mixed(F({1, 2})) and not mixed(F({1, 3}))
    masked = masked_model(1, 2, 3)
    assert masked(F({1})) and not masked(F({1, 2})) and masked(F({1, 2, 3}))
    combined = any_of(masked_model(1, 2, 3), or_model([8]))
    assert combined(F({8})) and not combined(F({1, 2}))
