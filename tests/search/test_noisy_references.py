"""Flaky references never refuse alone, and claims after noise rest on two trainings.

The references (all off, all on) go through the engine's own check,
``check_preconditions``, on a simulated oracle whose trainings flip on a spelt-out
schedule; a PASS reads metric 1.0 and a FAIL 0.0, as benchmarks/bench_noise.py does.
"""

from __future__ import annotations

import pytest

from fusion_dd.config.settings import Tolerance
from fusion_dd.core.scoring import ACCEPT, REFUSE, RETRAIN, Measurement, check_preconditions, reference_decision
from fusion_dd.search import STRATEGIES, NoisePolicy, find_culprits
from fusion_dd.search.oracle import Outcome
from fusion_dd.testing.simulate import SimulatedOracle, or_model

F = frozenset
N = 16
CULPRIT = 11
REFS = [F(), F(range(N))]


def flipped(keys):
    chosen = {(F(c), r) for c, r in keys}

    def noise(config, repeat, outcome):
        if (config, repeat) not in chosen:
            return outcome
        return Outcome.PASS if outcome is Outcome.FAIL else Outcome.FAIL

    return noise


def reading(outcome: Outcome) -> Measurement:
    return Measurement("metric", 1.0 if outcome is Outcome.PASS else 0.0)


def nan_when_failing(outcome: Outcome) -> Measurement:
    return Measurement("metric", 1.0) if outcome is Outcome.PASS else Measurement("nonfinite", float("nan"))


def settle(oracle: SimulatedOracle, limit: int, baseline_reads=reading) -> str:
    """The engine's reference phase: train, check, re-train what the check asks for."""
    oracle.outcomes(REFS)
    while True:
        baseline = [baseline_reads(o.outcome) for o in oracle.trials(REFS[0])]
        all_on = [reading(o.outcome) for o in oracle.trials(REFS[1])]
        pre = check_preconditions(
            baseline, all_on, tolerance=Tolerance("auto"), goal="max", baseline_limit=limit, all_on_limit=limit
        )
        if not pre.retrain:
            return pre.status
        oracle.retest([REFS[0] if role == "baseline" else REFS[1] for role in pre.retrain])


def nan() -> Measurement:
    return Measurement("nonfinite", float("nan"))


def metric(value: float) -> Measurement:
    return Measurement("metric", value)


# -- the decision rule ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("votes", "decision"),
    [
        ([True], ACCEPT),
        ([False], RETRAIN),
        ([False, False], RETRAIN),
        ([False, False, False], REFUSE),
        ([False, True], RETRAIN),
        ([False, True, True], RETRAIN),
        ([False, True, True, True], ACCEPT),
        ([False, True, False, True, False], REFUSE),  # the limit: majority
        ([False, False, True, True, True], ACCEPT),
    ],
)
def test_reference_decision(votes, decision):
    assert reference_decision(votes, limit=5) == decision


def test_with_a_limit_of_one_the_single_training_decides_as_before():
    assert reference_decision([False], limit=1) == REFUSE
    assert reference_decision([True], limit=1) == ACCEPT


# -- check_preconditions on measurements -----------------------------------------------


def test_a_nan_first_baseline_asks_for_another_training_instead_of_refusing():
    undecided = check_preconditions([nan()], [metric(0.5)], tolerance=Tolerance("auto"), goal="max", baseline_limit=5)
    assert undecided.status == "undecided" and undecided.retrain == ("baseline",)
    decided = check_preconditions(
        [nan(), metric(0.9), metric(0.9), metric(0.9)], [metric(0.5)],
        tolerance=Tolerance("auto"), goal="max", baseline_limit=5,
    )
    assert decided.ok and decided.threshold.baseline == pytest.approx(0.9)


def test_a_baseline_that_is_nan_three_times_is_refused_with_the_count():
    refused = check_preconditions(
        [nan(), nan(), nan()], [metric(0.5)], tolerance=Tolerance("auto"), goal="max", baseline_limit=5
    )
    assert refused.status == "baseline_fails" and "3 of 3 baseline trainings" in refused.message


def test_an_all_on_that_passes_once_retrains_it_and_the_baseline_along():
    undecided = check_preconditions(
        [metric(0.9)], [metric(0.9)], tolerance=Tolerance("auto"), goal="max", baseline_limit=5, all_on_limit=5
    )
    assert undecided.status == "undecided" and set(undecided.retrain) == {"baseline", "all_on"}


def test_a_low_baseline_run_is_outvoted_once_the_levels_stand_apart():
    pre = check_preconditions(
        [metric(0.5), metric(0.9), metric(0.9), metric(0.9)], [metric(0.5), metric(0.5), metric(0.5), metric(0.5)],
        tolerance=Tolerance("auto"), goal="max", baseline_limit=5, all_on_limit=5,
    )
    assert pre.ok and pre.threshold.baseline == pytest.approx(0.9) and pre.threshold.baseline_spread == 0


def test_ordinary_spread_of_the_baseline_is_not_a_flip():
    pre = check_preconditions(
        [metric(0.90), metric(0.86), metric(0.88)], [metric(0.40)], tolerance=Tolerance("auto"), goal="max",
        baseline_limit=5, all_on_limit=5,
    )
    assert pre.ok and pre.threshold.baseline == pytest.approx(0.88)


# -- the reference phase on a simulated oracle -------------------------------------------


def test_a_first_baseline_training_that_flips_to_fail_no_longer_refuses():
    schedule = [(F(), 0)]
    single = SimulatedOracle(or_model([CULPRIT]), noise=flipped(schedule))
    assert settle(single, limit=1) == "no_failure"  # one training decided: the old behaviour
    oracle = SimulatedOracle(or_model([CULPRIT]), noise=flipped(schedule))
    assert settle(oracle, limit=5) == "ok"
    assert [o.outcome for o in oracle.trials(F())][0] is Outcome.FAIL
    result = find_culprits(range(N), oracle, STRATEGIES["bisect"], noise=NoisePolicy())
    assert [sorted(c.rules) for c in result.culprit_sets] == [[CULPRIT]] and result.fix_verified


def test_a_first_baseline_training_that_goes_nan_no_longer_refuses():
    schedule = [(F(), 0)]
    single = SimulatedOracle(or_model([CULPRIT]), noise=flipped(schedule))
    assert settle(single, limit=1, baseline_reads=nan_when_failing) == "baseline_fails"  # the old behaviour
    oracle = SimulatedOracle(or_model([CULPRIT]), noise=flipped(schedule))
    assert settle(oracle, limit=5, baseline_reads=nan_when_failing) == "ok"
    assert len(oracle.trials(F())) == 4  # [NaN, 1, 1, 1]: going on leads by two
    result = find_culprits(range(N), oracle, STRATEGIES["bisect"], noise=NoisePolicy())
    assert [sorted(c.rules) for c in result.culprit_sets] == [[CULPRIT]] and result.fix_verified


def test_a_first_all_on_training_that_flips_to_pass_no_longer_refuses():
    schedule = [(F(range(N)), 0)]
    assert settle(SimulatedOracle(or_model([CULPRIT]), noise=flipped(schedule)), limit=1) == "no_failure"
    oracle = SimulatedOracle(or_model([CULPRIT]), noise=flipped(schedule))
    assert settle(oracle, limit=5) == "ok"
    result = find_culprits(range(N), oracle, STRATEGIES["bisect"], noise=NoisePolicy())
    assert [sorted(c.rules) for c in result.culprit_sets] == [[CULPRIT]] and result.fix_verified


def test_a_baseline_that_fails_every_time_is_still_refused():
    schedule = [(F(), repeat) for repeat in range(5)]
    oracle = SimulatedOracle(or_model([CULPRIT]), noise=flipped(schedule))
    assert settle(oracle, limit=5) == "no_failure"
    assert len(oracle.trials(F())) == 3 and len(oracle.trials(F(range(N)))) == 3


# -- claims after noise ------------------------------------------------------------------


def test_after_a_reference_dissent_every_claim_rests_on_two_agreeing_trainings():
    oracle = SimulatedOracle(or_model([CULPRIT]), noise=flipped([(F(), 0)]))
    assert settle(oracle, limit=5) == "ok"
    result = find_culprits(range(N), oracle, STRATEGIES["bisect"], noise=NoisePolicy())
    assert result.flaky and any(item.configs == (F(),) for item in result.inconsistencies)
    assert result.fix_verified and result.confirmed
    fix = F(range(N)) - {CULPRIT}
    assert [o.outcome for o in oracle.trials(fix)].count(Outcome.PASS) >= 2
    assert [o.outcome for o in oracle.trials(F({CULPRIT}))].count(Outcome.FAIL) >= 2


def test_after_noise_a_fix_that_passed_once_is_not_claimed_verified():
    # max_trainings=1: nothing may be re-trained, so the fix rests on its one passing
    # training; after the references disagreed that is not enough to claim it.
    oracle = SimulatedOracle(or_model([CULPRIT]), noise=flipped([(F(), 0)]))
    assert settle(oracle, limit=5) == "ok"
    result = find_culprits(range(N), oracle, STRATEGIES["bisect"], noise=NoisePolicy(max_trainings=1))
    assert result.flaky
    assert [sorted(c.rules) for c in result.culprit_sets] == [[CULPRIT]]
    assert result.fix_outcome is Outcome.PASS
    assert not result.fix_verified and not result.confirmed


def test_without_noise_a_clean_search_re_trains_only_the_fix():
    oracle = SimulatedOracle(or_model([CULPRIT]), repeats=True)
    assert settle(oracle, limit=5) == "ok"
    result = find_culprits(range(N), oracle, STRATEGIES["bisect"], noise=NoisePolicy())
    assert not result.flaky and result.fix_verified
    repeats = [key for key in oracle.launched if key[1]]
    assert repeats == [(result.fix, 1)]  # "verified" rests on two passing trainings of the fix
