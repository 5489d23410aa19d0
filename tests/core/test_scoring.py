"""Verdicts against the baseline and the preconditions of a search."""

import math

import pytest

from fusion_dd.config.settings import Tolerance
from fusion_dd.core.scoring import Measurement, Threshold, check_preconditions, combine_runs, resolve_tolerance
from fusion_dd.search.oracle import Outcome


def metric(value):
    return Measurement("metric", value)


def test_auto_tolerance_is_ten_percent_of_the_gap_not_a_midpoint():
    assert resolve_tolerance(Tolerance("auto"), [0.90], metric(0.50)) == pytest.approx(0.04)


def test_auto_tolerance_widens_to_three_sigma_of_repeated_baselines():
    tolerance = resolve_tolerance(Tolerance("auto"), [0.90, 0.80, 0.85], metric(0.84))
    assert tolerance == pytest.approx(3 * 0.05)


def test_auto_tolerance_with_nan_all_on_is_one_percent_of_baseline():
    assert resolve_tolerance(Tolerance("auto"), [0.80], Measurement("nonfinite", math.nan)) == pytest.approx(0.008)


def test_relative_and_absolute_tolerance():
    assert resolve_tolerance(Tolerance("relative", 0.02), [0.5], metric(0.1)) == pytest.approx(0.01)
    assert resolve_tolerance(Tolerance("absolute", 0.3), [0.5], metric(0.1)) == 0.3


def test_verdicts_for_max_and_min_goals():
    accuracy = Threshold(baseline=0.9, tolerance=0.05, goal="max")
    assert accuracy.verdict(metric(0.86)) is Outcome.PASS
    assert accuracy.verdict(metric(0.84)) is Outcome.FAIL
    loss = Threshold(baseline=1.0, tolerance=0.1, goal="min")
    assert loss.verdict(metric(1.05)) is Outcome.PASS
    assert loss.verdict(metric(1.2)) is Outcome.FAIL


def test_nan_fails_and_crash_is_unresolved_unless_configured():
    threshold = Threshold(baseline=0.9, tolerance=0.05, goal="max")
    assert threshold.verdict(Measurement("nonfinite", math.nan)) is Outcome.FAIL
    assert threshold.verdict(Measurement("crash", None, "exit code 1")) is Outcome.UNRESOLVED
    assert threshold.verdict(Measurement("timeout"), crash_is_failure=True) is Outcome.FAIL


def test_preconditions_ok():
    result = check_preconditions([metric(0.9)], [metric(0.5)], tolerance=Tolerance("auto"), goal="max")
    assert result.ok and result.threshold.limit == pytest.approx(0.86)


def test_baseline_nan_refuses():
    result = check_preconditions(
        [Measurement("nonfinite", math.nan)], [metric(0.5)], tolerance=Tolerance("auto"), goal="max"
    )
    assert result.status == "baseline_fails" and "not among the candidates" in result.message


def test_baseline_worse_than_reference_refuses():
    result = check_preconditions(
        [metric(0.70)], [metric(0.5)], tolerance=Tolerance("auto"), goal="max", reference=0.9
    )
    assert result.status == "baseline_fails"


def test_all_on_within_tolerance_is_nothing_to_debug():
    result = check_preconditions([metric(0.9)], [metric(0.9)], tolerance=Tolerance("absolute", 0.01), goal="max")
    assert result.status == "no_failure" and "nothing to debug" in result.message


def test_repeated_all_on_runs_are_combined():
    assert combine_runs([metric(0.5), metric(0.7)]).value == pytest.approx(0.6)
    assert combine_runs([metric(0.5), Measurement("nonfinite", math.nan)]).kind == "nonfinite"
    assert combine_runs([Measurement("crash", None, "exit 1"), metric(0.4)]).value == 0.4


def test_small_gap_against_baseline_spread_warns_and_strict_refuses():
    baseline = [metric(0.90), metric(0.86), metric(0.88)]  # stdev 0.02
    loose = check_preconditions(baseline, [metric(0.80)], tolerance=Tolerance("absolute", 0.03), goal="max")
    assert loose.ok and loose.warnings and "standard deviations" in loose.warnings[0]
    strict = check_preconditions(
        baseline, [metric(0.80)], tolerance=Tolerance("absolute", 0.03), goal="max", strict=True
    )
    assert not strict.ok and strict.status == "too_noisy"
    clear = check_preconditions(baseline, [metric(0.40)], tolerance=Tolerance("auto"), goal="max", strict=True)
    assert clear.ok and not clear.warnings


def test_tolerance_zero_is_bitwise_both_ways():
    # A max-abs-diff metric against an unoptimized reference: any difference fails, even a "better" one.
    pre = check_preconditions([Measurement("metric", 0.5)], [Measurement("metric", 0.75)], tolerance=Tolerance("absolute", 0.0), goal="max")
    assert pre.ok and pre.threshold.bitwise
    assert pre.threshold.verdict(Measurement("metric", 0.5)) is Outcome.PASS
    assert pre.threshold.verdict(Measurement("metric", 0.5000001)) is Outcome.FAIL
    assert pre.threshold.verdict(Measurement("metric", 0.4999999)) is Outcome.FAIL
    assert "bitwise" in pre.threshold.describe()
    # A small absolute tolerance stays one-sided.
    pre = check_preconditions([Measurement("metric", 0.5)], [Measurement("metric", 0.25)], tolerance=Tolerance("absolute", 1e-9), goal="max")
    assert not pre.threshold.bitwise and pre.threshold.verdict(Measurement("metric", 0.75)) is Outcome.PASS


def test_a_percentage_of_a_zero_baseline_is_a_usage_error():
    from fusion_dd.core.errors import UsageError

    with pytest.raises(UsageError, match=r"score.tolerance: 2% of the baseline is nothing.*absolute tolerance"):
        check_preconditions([Measurement("metric", 0.0)], [Measurement("metric", 1e-6)], tolerance=Tolerance("relative", 0.02), goal="min")


def test_an_all_on_that_beats_the_baseline_in_the_goals_direction_warns_about_metric_goal():
    """An accuracy searched with goal: min: all-on at 0.275 is 'better' than the baseline 0.922."""
    result = check_preconditions([metric(0.922)], [metric(0.275)], tolerance=Tolerance("auto"), goal="min")
    assert result.status == "no_failure"
    assert "within the tolerance" not in result.message and "metric.goal" in result.message
    assert len(result.warnings) == 1 and "metric.goal: min" in result.warnings[0]
    assert "set metric.goal: max" in result.warnings[0]
    # Not worse and not better by more than the tolerance: no failure, and nothing about the goal.
    plain = check_preconditions([metric(0.9)], [metric(0.9)], tolerance=Tolerance("absolute", 0.01), goal="max")
    assert plain.warnings == () and "metric.goal" not in plain.message


def test_a_reference_is_said_to_disagree_only_when_its_own_trainings_do_with_the_values():
    # Both baseline runs agree (0.922); the one all-on run does not fail: a surprise checked
    # again, not a disagreement.
    surprise = check_preconditions(
        [metric(0.922)], [metric(0.275)], tolerance=Tolerance("auto"), goal="min", baseline_limit=3, all_on_limit=3
    )
    assert surprise.status == "undecided", surprise.message
    assert "disagree" not in surprise.message
    assert "0.275" in surprise.message and "0.922" in surprise.message and "metric.goal: min" in surprise.message
    # Two baseline runs on both sides of the midpoint: they disagree, and both values are shown.
    split = check_preconditions(
        [metric(0.9), metric(0.5)], [metric(0.5), metric(0.52)], tolerance=Tolerance("auto"), goal="max",
        baseline_limit=5, all_on_limit=5,
    )
    assert split.status == "undecided", split.message
    assert "the baseline trainings disagree (0.9, 0.5)" in split.message


def test_an_all_on_training_that_never_gives_a_metric_points_at_crash_is_failure() -> None:
    crashed = Measurement("crash", None, "exit code 1")
    result = check_preconditions([metric(0.9)], [crashed], tolerance=Tolerance("auto"), goal="max")
    assert result.status == "no_failure"
    assert "no usable metric (exit code 1) while the baseline ran" in result.message
    assert "score.crash_is_failure: true" in result.message
    counted = check_preconditions(
        [metric(0.9)], [crashed], tolerance=Tolerance("auto"), goal="max", crash_is_failure=True
    )
    assert counted.ok
