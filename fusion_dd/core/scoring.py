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

from .errors import UsageError
from .outcome import Outcome


@dataclass(frozen=True)
class Tolerance:
    """How far from the baseline a metric may be and still pass: ``auto``, an absolute
    amount, or a fraction of the baseline (``"2%"``).

    It lives with the verdicts rather than with the config, so that the journal's
    replay, which scores outcomes, needs nothing of the config and its launchers.
    """

    mode: str  # "auto" | "absolute" | "relative"
    value: float = 0.0

    def describe(self) -> str:
        if self.mode == "auto":
            return "auto"
        if self.mode == "relative":
            return f"{self.value * 100:g}%"
        return f"{self.value:g}"


# Kinds of measurement, as classified from a finished trial.
METRIC = "metric"
NONFINITE = "nonfinite"
DIVERGED = "diverged"  # stopped early: loss above the baseline's curve
EARLY_PASS = "early_pass"  # stopped at the horizon, loss inside the baseline's band all along
EARLY_FAIL = "early_fail"  # stopped before the horizon, loss outside the baseline's band (no divergence set)
UNEVALUABLE = "unevaluable"  # the training exited 125: it cannot evaluate this configuration
UNRESOLVED_KINDS = ("crash", "timeout", "no_metric", UNEVALUABLE)


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
    # ``score.tolerance: 0``: any difference from the baseline fails, better or worse
    # (users comparing against an unoptimized reference want bit-exactness).
    bitwise: bool = False

    @property
    def limit(self) -> float:
        if self.goal == "max":
            return self.baseline - self.tolerance
        return self.baseline + self.tolerance

    def is_worse(self, value: float) -> bool:
        """True when ``value`` is worse than the baseline by more than the tolerance."""
        if not math.isfinite(value):
            return True
        if self.bitwise:
            return value != self.baseline
        if self.goal == "max":
            return value < self.limit
        return value > self.limit

    def verdict(self, measurement: Measurement, crash_is_failure: bool = False) -> Outcome:
        if measurement.kind in (NONFINITE, DIVERGED):
            return Outcome.FAIL
        if measurement.kind == EARLY_PASS:
            return Outcome.PASS  # speculative: the engine proves the fix by a full training
        if measurement.kind == EARLY_FAIL:
            return Outcome.FAIL  # speculative: the engine proves each culprit set by a full training
        if measurement.has_value:
            assert measurement.value is not None
            return Outcome.FAIL if self.is_worse(measurement.value) else Outcome.PASS
        if measurement.kind == UNEVALUABLE:
            return Outcome.UNRESOLVED  # the training says so: no failure, whatever score.crash_is_failure says
        return Outcome.FAIL if crash_is_failure else Outcome.UNRESOLVED

    def describe(self) -> str:
        if self.bitwise:
            return f"fail when metric != {self.baseline:.9g} (bitwise: any difference from the baseline, score.tolerance: 0)"
        comparison = "<" if self.goal == "max" else ">"
        return (
            f"fail when metric {comparison} {self.limit:.6g} "
            f"(baseline {self.baseline:.6g} {'-' if self.goal == 'max' else '+'} tolerance {self.tolerance:.6g})"
        )


@dataclass(frozen=True)
class Preconditions:
    """Whether the search can start; when not, ``status`` and ``message`` say why.

    ``status`` "undecided": the references' trainings disagree and ``retrain``
    names the references ("baseline", "all_on") that need one more training
    before anything may be refused (see ``reference_decision``).
    """

    ok: bool
    status: str  # "ok", "baseline_fails", "no_failure", "too_noisy", "undecided"
    message: str
    threshold: Threshold | None
    warnings: tuple[str, ...] = ()
    retrain: tuple[str, ...] = ()


# How one reference (the baseline, or all candidates on) is settled from its
# trainings' votes; see ``reference_decision``.
ACCEPT, REFUSE, RETRAIN = "accept", "refuse", "retrain"
ACCEPT_LEAD = 2
REFUSE_LEAD = 3


def reference_decision(votes: Sequence[bool], limit: int) -> str:
    """Accept, refuse or re-train one reference, from its trainings' votes (True: it behaved as it must).

    A refusal (``baseline_fails``, ``no_failure``) ends the search without an
    answer, so one training of a reference must never decide it: with 5% of
    trainings flipped that alone made about one search in ten refuse wrongly.
    The rule, shared by the engine and benchmarks/bench_noise.py:

    - no dissenting vote: accept (a clean run pays nothing);
    - otherwise re-train until going on leads by ``ACCEPT_LEAD`` votes or
      refusing leads by ``REFUSE_LEAD``: a refusal throws the user's setup away,
      so it needs more evidence than going on (with 5% flips a wrong refusal
      is then about 1 in 1,400 per reference, with a lead of two 1 in 350);
    - at ``limit`` trainings the majority decides, a tie refuses (a reference
      that misbehaves half the time is no reference).
    """
    good = sum(1 for vote in votes if vote)
    bad = len(votes) - good
    if bad == 0:
        return ACCEPT
    if len(votes) >= limit:
        return ACCEPT if good > bad else REFUSE
    if good - bad >= ACCEPT_LEAD:
        return ACCEPT
    if bad - good >= REFUSE_LEAD:
        return REFUSE
    return RETRAIN

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


def is_bitwise(tolerance: Tolerance) -> bool:
    """``score.tolerance: 0``: any difference from the baseline fails."""
    return tolerance.mode == "absolute" and tolerance.value == 0


def _worse(value: float, than: float, goal: str) -> bool:
    return value < than if goal == "max" else value > than


def _baseline_votes(
    baseline_runs: Sequence[Measurement],
    all_on_runs: Sequence[Measurement],
    tolerance: Tolerance,
    goal: str,
    reference: float | None,
) -> list[bool]:
    """Whether each baseline training behaved as a baseline: a finite metric on the baseline's side.

    A baseline training that went bad once looks exactly like a passing all-on
    training. So when the all-on level (the median of its runs) is worse than
    the best baseline run, a baseline run on the all-on side of their midpoint
    is a dissenting vote, provided the two levels stand clearly apart (more than
    ``NOISE_MARGIN_SIGMAS`` standard deviations of the runs around each level):
    ordinary run-to-run spread is not a flip. With ``reference``, a run worse
    than it by more than the tolerance dissents too.
    """
    values = [run.value for run in baseline_runs if run.has_value and run.value is not None]
    all_on_values = [run.value for run in all_on_runs if run.has_value and run.value is not None]
    midpoint = None
    if len(values) >= 2 and all_on_values:
        best = max(values) if goal == "max" else min(values)
        all_on_level = statistics.median(all_on_values)
        if _worse(all_on_level, best, goal):
            middle = (best + all_on_level) / 2
            high = [value for value in values if not _worse(value, middle, goal)]
            low = [value for value in all_on_values if _worse(value, middle, goal)]
            groups = [group for group in (high, low) if len(group) >= 2]
            spread = max((statistics.stdev(group) for group in groups), default=0.0)
            if abs(best - all_on_level) > NOISE_MARGIN_SIGMAS * spread:
                midpoint = middle
    votes = [
        run.has_value and (midpoint is None or not _worse(run.value, midpoint, goal))  # type: ignore[arg-type]
        for run in baseline_runs
    ]
    good = [run.value for run, vote in zip(baseline_runs, votes) if vote and run.value is not None]
    if reference is not None and good:
        limit = Threshold(reference, resolve_tolerance(tolerance, good, combine_runs(all_on_runs)), goal)
        votes = [
            vote and not limit.is_worse(run.value)  # type: ignore[arg-type]
            for run, vote in zip(baseline_runs, votes)
        ]
    return votes


def _baseline_refusal(baseline_runs: Sequence[Measurement], votes: Sequence[bool], reference: float | None) -> str:
    """Why the baseline is refused, in words, from its first dissenting training."""
    index = votes.index(False)
    run = baseline_runs[index]
    label = "the baseline (all candidates off)"
    if len(baseline_runs) > 1:
        label += f", run {index + 1}"
    if run.kind == UNEVALUABLE:
        what = f"cannot be evaluated ({run.reason})"
    elif not run.has_value:
        what = "produced NaN/Inf" if run.kind == NONFINITE else f"gave no usable metric ({run.reason or run.kind})"
    elif reference is not None:
        what = f"reaches {run.value:.6g}, worse than the reference {reference:.6g} by more than the tolerance"
    else:
        what = f"reaches {run.value:.6g}, as bad as all candidates on"
    if len(votes) > 1:
        what += f" ({votes.count(False)} of {len(votes)} baseline trainings misbehaved)"
    return f"{label} {what}"


def _values_text(runs: Sequence[Measurement]) -> str:
    return ", ".join(f"{run.value:.6g}" if run.has_value and run.value is not None else (run.kind or "?") for run in runs)


def _retrain_message(
    baseline_runs: Sequence[Measurement],
    baseline_votes: Sequence[bool],
    all_on_runs: Sequence[Measurement],
    all_on_votes: Sequence[bool],
    retrain: Sequence[str],
    goal: str,
) -> str:
    """Why a reference is trained again, with the values: "disagree" only when a reference's own runs do.

    A reference's runs disagree when their votes differ (they stand on both sides of
    the midpoint or threshold, beyond the noise). A single all-on run that does not
    fail is no disagreement: it is a surprise checked once more before refusing.
    """
    parts: list[str] = []
    for label, runs, votes in (("baseline", baseline_runs, baseline_votes), ("all candidates on", all_on_runs, all_on_votes)):
        if not runs or all(votes):
            continue
        if any(votes):
            parts.append(f"the {label} trainings disagree ({_values_text(runs)})")
        elif label == "baseline":
            parts.append(f"the baseline does not behave as a baseline ({_values_text(runs)})")
        else:
            better = "higher" if goal == "max" else "lower"
            parts.append(
                f"all candidates on does not fail ({_values_text(runs)} against the baseline "
                f"{_values_text([run for run, vote in zip(baseline_runs, baseline_votes) if vote])}; "
                f"metric.goal: {goal}, {better} is better)"
            )
    what = "; ".join(parts) or "the reference trainings are undecided"
    return f"{what}; training again: {', '.join(retrain)}"


def goal_looks_inverted(threshold: "Threshold", all_on: Measurement) -> str | None:
    """A warning naming ``metric.goal`` when all-on beats the baseline by more than the tolerance.

    Fusion rarely makes a model better by more than its noise; a metric that
    improves that much with every rule on is usually read the wrong way round
    (an accuracy with ``goal: min``, a loss with ``goal: max``).
    """
    if not all_on.has_value or all_on.value is None or threshold.bitwise:
        return None
    gain = all_on.value - threshold.baseline if threshold.goal == "max" else threshold.baseline - all_on.value
    if gain <= threshold.tolerance:
        return None
    other = "min" if threshold.goal == "max" else "max"
    better = "higher" if threshold.goal == "max" else "lower"
    return (
        f"metric.goal: {threshold.goal} ({better} is better), and all candidates on ({all_on.value:.6g}) is better "
        f"than the baseline ({threshold.baseline:.6g}) by more than the tolerance ({threshold.tolerance:.6g}): "
        f"if {other}imising is what the metric wants, set metric.goal: {other}"
    )


def check_preconditions(
    baseline_runs: Sequence[Measurement],
    all_on_runs: Sequence[Measurement],
    *,
    tolerance: Tolerance,
    goal: str,
    reference: float | None = None,
    crash_is_failure: bool = False,
    strict: bool = False,
    baseline_limit: int = 1,
    all_on_limit: int = 1,
) -> Preconditions:
    """test(nothing on) must pass and test(everything on) must fail, or there is nothing to search.

    Each training of a reference votes, and ``reference_decision`` settles each
    reference by majority; while one is undecided the result is "undecided"
    with ``retrain`` naming what to train again (the engine trains the next
    repeat and asks again). ``*_limit``: trainings of that reference at most
    (1: decide on the given runs, for references that cannot be re-trained).
    When all-on does not fail, the baseline is re-trained along with it: a
    baseline that trained badly once is what makes a failing all-on look fine.
    Only the trainings on the majority's side set the threshold.
    """
    not_the_cause = "the culprit is not among the candidates, or fusion is not the cause"
    baseline_votes = _baseline_votes(baseline_runs, all_on_runs, tolerance, goal, reference)
    baseline_decision = reference_decision(baseline_votes, baseline_limit)
    values = [run.value for run, vote in zip(baseline_runs, baseline_votes) if vote and run.value is not None]
    if baseline_decision == REFUSE or (not values and baseline_decision != RETRAIN):
        why = (
            _baseline_refusal(baseline_runs, baseline_votes, reference)
            if baseline_runs
            else "the baseline has no training"
        )
        if any(run.kind == UNEVALUABLE for run in baseline_runs):
            # Not an answer about fusion either way: with every candidate off the training cannot run.
            why += ": some candidate must stay on for the training to run (a required pass); take it out of the candidates"
            return Preconditions(False, "baseline_fails", why, None)
        return Preconditions(False, "baseline_fails", f"{why}: {not_the_cause}", None)
    all_on_votes = [True] * len(all_on_runs)
    if values and tolerance.mode == "relative" and statistics.fmean(values) == 0:
        raise UsageError(
            f"score.tolerance: {tolerance.describe()} of the baseline is nothing, because the baseline measured 0; "
            "give an absolute tolerance instead (score.tolerance: 1e-6, in the metric's units, or 0 for bitwise)"
        )
    if values:
        judge_tolerance = resolve_tolerance(tolerance, values, combine_runs(all_on_runs))
        judge = Threshold(statistics.fmean(values), judge_tolerance, goal, bitwise=is_bitwise(tolerance))
        all_on_votes = [judge.verdict(run, crash_is_failure) is Outcome.FAIL for run in all_on_runs]
    all_on_decision = reference_decision(all_on_votes, all_on_limit)
    retrain: list[str] = []
    if baseline_decision == RETRAIN:
        retrain.append("baseline")
    if all_on_decision == RETRAIN:
        passed = any(run.has_value and not vote for run, vote in zip(all_on_runs, all_on_votes))
        if passed and "baseline" not in retrain and len(baseline_runs) <= len(all_on_runs) < baseline_limit:
            retrain.append("baseline")
        retrain.append("all_on")
    if retrain:
        return Preconditions(
            False,
            "undecided",
            _retrain_message(baseline_runs, baseline_votes, all_on_runs, all_on_votes, retrain, goal),
            None,
            retrain=tuple(retrain),
        )
    agreeing = [run for run, vote in zip(all_on_runs, all_on_votes) if vote] if all_on_decision == ACCEPT else []
    all_on = combine_runs(agreeing or list(all_on_runs))
    tolerance_value = resolve_tolerance(tolerance, values, all_on)
    spread = statistics.stdev(values) if len(values) >= 2 else None
    threshold = Threshold(
        baseline=statistics.fmean(values),
        tolerance=tolerance_value,
        goal=goal,
        all_on=all_on.value if all_on.has_value else None,
        baseline_spread=spread,
        bitwise=is_bitwise(tolerance),
    )
    verdict = threshold.verdict(all_on, crash_is_failure)
    if all_on_decision == REFUSE or verdict is not Outcome.FAIL:
        if all_on.has_value:
            detail = f"all candidates on reaches {all_on.value:.6g}, within the tolerance of the baseline {threshold.baseline:.6g}"
        else:
            detail = f"all candidates on gave no usable metric ({all_on.reason or all_on.kind})"
        if len(all_on_votes) > 1 and all_on.has_value:
            detail += f" ({all_on_votes.count(False)} of {len(all_on_votes)} all-on trainings did not fail)"
        elif len(all_on_votes) > 1:
            without = sum(not run.has_value for run in all_on_runs)
            detail += f" ({without} of {len(all_on_runs)} all-on trainings ended without a metric)"
        inverted = goal_looks_inverted(threshold, all_on)
        if inverted is not None:
            detail = detail.replace(", within the tolerance of the baseline", ", better than the baseline")
            return Preconditions(
                False, "no_failure", f"{detail}: nothing to debug, or metric.goal is the wrong way round (warning below)",
                threshold, (inverted,),
            )
        if not all_on.has_value and not crash_is_failure:
            # The baseline ran and everything fused did not: a fused kernel that crashes the training
            # is the likeliest cause, and one the search can find once a crash counts as a failure.
            return Preconditions(
                False, "no_failure",
                f"{detail} while the baseline ran: a fused kernel may break the training; with "
                "score.crash_is_failure: true a training without a metric counts as a failure and the search "
                "finds the rules that cause it",
                threshold,
            )
        return Preconditions(False, "no_failure", f"{detail}: nothing to debug", threshold)
    warning = noise_warning(values, all_on)
    if warning is not None and strict:
        return Preconditions(False, "too_noisy", f"refused (score.strict): {warning}", threshold, (warning,))
    return Preconditions(True, "ok", threshold.describe(), threshold, (warning,) if warning else ())
