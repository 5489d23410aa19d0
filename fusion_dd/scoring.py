"""From a training's measurement to a verdict, against the fusion-off baseline.

Pure functions: the engine hands in what the trainings measured and gets back the
threshold, the verdicts and whether the search may start at all.

Why the automatic tolerance is not a midpoint between baseline and all-on: with two
culprits, the smaller one alone may cost less than half the gap, and a midpoint
threshold would call it a pass. So ``auto`` takes 10% of the gap (or 1% of the
baseline when all-on is NaN), widened to 3 standard deviations of the baseline
runs when the baseline was repeated.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .config import Tolerance
from .search.oracle import Outcome

# Kinds of measurement, as classified from a finished trial.
METRIC = "metric"
NONFINITE = "nonfinite"
DIVERGED = "diverged"  # stopped early: loss above the baseline's curve
UNRESOLVED_KINDS = ("crash", "timeout", "no_metric")


@dataclass(frozen=True)
class Measurement:
    """What one training produced: a metric value, NaN/Inf, or why there is none."""

    kind: str  # "metric", "nonfinite", "diverged", "crash", "timeout", "no_metric"
    value: float | None = None
    reason: str = ""

    @property
    def has_value(self) -> bool:
        return self.kind == METRIC and self.value is not None and math.isfinite(self.value)


@dataclass(frozen=True)
class Threshold:
    """A configuration fails when its metric is worse than ``limit``."""

    baseline: float
    tolerance: float
    goal: str  # "max" or "min"
    all_on: float | None = None
    baseline_spread: float | None = None

    @property
    def limit(self) -> float:
        if self.goal == "max":
            return self.baseline - self.tolerance
        return self.baseline + self.tolerance

    def is_worse(self, value: float) -> bool:
        """True when ``value`` is worse than the baseline by more than the tolerance."""
        if not math.isfinite(value):
            return True
        if self.goal == "max":
            return value < self.limit
        return value > self.limit

    def verdict(self, measurement: Measurement, crash_is_failure: bool = False) -> Outcome:
        if measurement.kind in (NONFINITE, DIVERGED):
            return Outcome.FAIL
        if measurement.has_value:
            assert measurement.value is not None
            return Outcome.FAIL if self.is_worse(measurement.value) else Outcome.PASS
        return Outcome.FAIL if crash_is_failure else Outcome.UNRESOLVED

    def describe(self) -> str:
        comparison = "<" if self.goal == "max" else ">"
        return (
            f"fail when metric {comparison} {self.limit:.6g} "
            f"(baseline {self.baseline:.6g} {'-' if self.goal == 'max' else '+'} tolerance {self.tolerance:.6g})"
        )


@dataclass(frozen=True)
class Preconditions:
    """Whether the search can start; when not, ``status`` and ``message`` say why."""

    ok: bool
    status: str  # "ok", "baseline_fails", "no_failure", "too_noisy"
    message: str
    threshold: Threshold | None
    warnings: tuple[str, ...] = ()

# The all-on failure must stand this many baseline standard deviations away from
# the baseline, or partial configurations will land near the threshold and their
# verdicts will be coin flips.
NOISE_MARGIN_SIGMAS = 6.0


def combine_runs(runs: Sequence[Measurement]) -> Measurement:
    """One measurement from repeated trainings of one configuration.

    Any NaN/Inf run makes the whole configuration non-finite (a precision failure
    that happened once is real); otherwise the mean of the runs with a value; with
    no value at all, the first run's reason.
    """
    if not runs:
        raise ValueError("no runs to combine")
    for run in runs:
        if run.kind == NONFINITE:
            return run
    values = [run.value for run in runs if run.has_value and run.value is not None]
    if values:
        return Measurement(METRIC, statistics.fmean(values), f"mean of {len(values)} run(s)")
    return runs[0]


def noise_warning(baseline_values: Sequence[float], all_on: Measurement) -> str | None:
    """A warning when the all-on failure is small against the baseline's run-to-run spread."""
    if len(baseline_values) < 2 or not all_on.has_value or all_on.value is None:
        return None
    spread = statistics.stdev(baseline_values)
    gap = abs(statistics.fmean(baseline_values) - all_on.value)
    if spread == 0 or gap >= NOISE_MARGIN_SIGMAS * spread:
        return None
    return (
        f"the gap between baseline ({statistics.fmean(baseline_values):.6g}) and all-on ({all_on.value:.6g}) is "
        f"{gap:.3g}, only {gap / spread:.1f} standard deviations of the baseline runs ({spread:.3g}); verdicts near "
        f"the threshold will be unreliable: train more baseline repeats, reduce the noise, or set score.tolerance"
    )


def resolve_tolerance(
    tolerance: Tolerance,
    baseline_values: Sequence[float],
    all_on: Measurement,
) -> float:
    """The tolerance in metric units, as configured (see the module docstring for ``auto``)."""
    baseline = statistics.fmean(baseline_values)
    if tolerance.mode == "absolute":
        return tolerance.value
    if tolerance.mode == "relative":
        return tolerance.value * abs(baseline)
    spread = 3 * statistics.stdev(baseline_values) if len(baseline_values) >= 2 else 0.0
    if all_on.kind == NONFINITE or not all_on.has_value:
        gap_part = 0.01 * abs(baseline)
    else:
        assert all_on.value is not None
        gap_part = 0.1 * abs(baseline - all_on.value)
    return max(spread, gap_part)


def check_preconditions(
    baseline_runs: Sequence[Measurement],
    all_on_runs: Sequence[Measurement],
    *,
    tolerance: Tolerance,
    goal: str,
    reference: float | None = None,
    crash_is_failure: bool = False,
    strict: bool = False,
) -> Preconditions:
    """test(nothing on) must pass and test(everything on) must fail, or there is nothing to search."""
    all_on = combine_runs(all_on_runs)
    not_the_cause = "the culprit is not among the candidates, or fusion is not the cause"
    for index, run in enumerate(baseline_runs):
        if not run.has_value:
            what = "produced NaN/Inf" if run.kind == NONFINITE else f"gave no usable metric ({run.reason or run.kind})"
            label = "the baseline (all candidates off)"
            if len(baseline_runs) > 1:
                label += f", run {index + 1}"
            return Preconditions(False, "baseline_fails", f"{label} {what}: {not_the_cause}", None)
    values = [run.value for run in baseline_runs if run.value is not None]
    tolerance_value = resolve_tolerance(tolerance, values, all_on)
    spread = statistics.stdev(values) if len(values) >= 2 else None
    threshold = Threshold(
        baseline=statistics.fmean(values),
        tolerance=tolerance_value,
        goal=goal,
        all_on=all_on.value if all_on.has_value else None,
        baseline_spread=spread,
    )
    if reference is not None:
        reference_threshold = Threshold(reference, tolerance_value, goal)
        if reference_threshold.is_worse(threshold.baseline):
            return Preconditions(
                False,
                "baseline_fails",
                f"the baseline (all candidates off) reaches {threshold.baseline:.6g}, worse than the "
                f"reference {reference:.6g} by more than the tolerance {tolerance_value:.6g}: {not_the_cause}",
                threshold,
            )
    verdict = threshold.verdict(all_on, crash_is_failure)
    if verdict is not Outcome.FAIL:
        if all_on.has_value:
            detail = f"all candidates on reaches {all_on.value:.6g}, within the tolerance of the baseline {threshold.baseline:.6g}"
        else:
            detail = f"all candidates on gave no usable metric ({all_on.reason or all_on.kind})"
        return Preconditions(False, "no_failure", f"{detail}: nothing to debug", threshold)
    warning = noise_warning(values, all_on)
    if warning is not None and strict:
        return Preconditions(False, "too_noisy", f"refused (score.strict): {warning}", threshold, (warning,))
    return Preconditions(True, "ok", threshold.describe(), threshold, (warning,) if warning else ())
