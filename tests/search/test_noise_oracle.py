"""The repeat protocol as the simulated oracle implements it, and the seeded noise models.

The engine's TrainingOracle must follow the same bookkeeping; these tests state it
in the small.
"""

from __future__ import annotations

import math

import pytest

from fusion_dd.search.oracle import BudgetExhausted, Observation, Outcome, RepeatOracle, supports_repeats
from fusion_dd.testing.simulate import SimulatedOracle, flip_noise, flip_probability, gaussian_noise

F = frozenset


def counter_noise(log: list):
    """Reports every training as PASS, FAIL, PASS, ... by repeat index, and logs it."""

    def noise(config, repeat, outcome):
        log.append((config, repeat))
        return Outcome.PASS if repeat % 2 == 0 else Outcome.FAIL

    return noise


def test_repeat_support_is_opt_in() -> None:
    assert not supports_repeats(SimulatedOracle(lambda c: False))
    assert supports_repeats(SimulatedOracle(lambda c: False, repeats=True))
    assert supports_repeats(SimulatedOracle(lambda c: False, noise=flip_noise(0.1)))
    assert isinstance(SimulatedOracle(lambda c: False), RepeatOracle)
    assert not supports_repeats(object())


def test_retest_asks_the_next_repeat_and_trials_list_what_was_asked() -> None:
    log: list = []
    oracle = SimulatedOracle(lambda c: False, noise=counter_noise(log))
    a, b = F({1}), F({2})
    assert oracle.outcomes([a]) == [Outcome.PASS]
    assert oracle.retest([a, b, a]) == [Outcome.FAIL, Outcome.PASS, Outcome.PASS]
    assert log == [(a, 0), (a, 1), (b, 0), (a, 2)]
    assert [o.repeat for o in oracle.trials(a)] == [0, 1, 2]
    assert [o.outcome for o in oracle.trials(a)] == [Outcome.PASS, Outcome.FAIL, Outcome.PASS]
    assert oracle.outcomes([a, b]) == [Outcome.PASS, Outcome.PASS]  # repeat 0, cached
    assert oracle.trainings == 4 and oracle.trials(F({3})) == []


def test_first_failing_counts_as_asked_only_what_the_caller_consumed() -> None:
    oracle = SimulatedOracle(lambda c: 2 in c, parallelism=3, repeats=True)
    configs = [F({1}), F({2}), F({3})]
    assert oracle.first_failing(configs) == 1
    assert F({3}) in oracle.cache  # trained in the same wave...
    assert oracle.trials(F({3})) == []  # ...but not consumed: its next repeat is still 0
    trained = oracle.trainings
    assert oracle.retest([F({3})]) == [Outcome.PASS] and oracle.trainings == trained  # repeat 0, cached
    assert oracle.asked[-1] == (F({3}), 0)
    assert [o.repeat for o in oracle.trials(F({2}))] == [0]


def test_preloaded_journal_answers_repeats_without_training() -> None:
    first = SimulatedOracle(lambda c: 1 in c, noise=flip_noise(0.5, seed=3))
    first.outcomes([F({1}), F({2})])
    first.retest([F({1}), F({1}), F({2})])
    second = SimulatedOracle(lambda c: 1 in c, noise=flip_noise(0.5, seed=3))
    second.preload(first.journal())
    second.outcomes([F({1}), F({2})])
    second.retest([F({1}), F({1}), F({2})])
    assert second.trainings == 0 and second.asked == first.asked
    assert second.trials(F({1})) == first.trials(F({1}))


def test_repeats_count_toward_the_budget() -> None:
    oracle = SimulatedOracle(lambda c: True, budget=2, repeats=True)
    oracle.outcomes([F({1})])
    oracle.retest([F({1})])
    with pytest.raises(BudgetExhausted) as caught:
        oracle.retest([F({1})])
    assert caught.value.smallest_failing == F({1})
    assert [o.repeat for o in oracle.trials(F({1}))] == [0, 1]


def test_flip_noise_is_seeded_and_has_its_rate() -> None:
    noise = flip_noise(0.1, seed=7, exempt=[F()])
    configs = [F({i, i + 1}) for i in range(3000)]
    flips = [noise(c, 0, Outcome.PASS) is Outcome.FAIL for c in configs]
    assert flips == [noise(c, 0, Outcome.PASS) is Outcome.FAIL for c in configs]
    assert 0.08 < sum(flips) / len(flips) < 0.12
    assert noise(F(), 0, Outcome.PASS) is Outcome.PASS  # exempt
    assert noise(F({1}), 0, Outcome.UNRESOLVED) is Outcome.UNRESOLVED
    with pytest.raises(ValueError):
        flip_noise(1.5)


def test_gaussian_noise_flips_as_often_as_its_sigma_says_and_marks_near_readings() -> None:
    noise = gaussian_noise(0.6, margin=0.3, seed=1)
    readings = [noise(F({i}), 0, Outcome.FAIL) for i in range(4000)]
    assert all(isinstance(r, Observation) for r in readings)
    flipped = sum(r.outcome is Outcome.PASS for r in readings) / len(readings)
    assert abs(flipped - flip_probability(0.6)) < 0.015
    assert 0.02 < sum(r.near_threshold for r in readings) / len(readings) < 0.2
    assert flip_probability(0) == 0 and math.isclose(flip_probability(1.0), 0.158655, rel_tol=1e-4)


def test_near_readings_are_kept_per_training() -> None:
    noise = gaussian_noise(0.8, margin=5.0, seed=2)  # every reading is near the threshold
    oracle = SimulatedOracle(lambda c: False, noise=noise)
    oracle.outcomes([F({1})])
    oracle.retest([F({1})])
    assert all(o.near_threshold for o in oracle.trials(F({1})))
    assert all(o.near_threshold for o in oracle.journal().values())
