"""Early stopping of trainings that have already failed: the pure decision, the
incremental reader of a running trial's files, and real supervised trainings
(tests/fakes/fake_train.py) stopped through ``RunningTrial.wait(monitor=...)``.

Waiting bounds are generous; nothing here asserts how fast anything was beyond
"long before the training would have ended on its own".
"""

from __future__ import annotations

import json
import math
import random
import os
import re
import signal
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.core.errors import UsageError
from fusion_dd.runner.early_stop import (
    Baseline,
    EarlyStopRule,
    Judge,
    ReportReader,
    StopDecision,
    TrialFollower,
    decide,
    envelope,
    estimate_savings,
    make_monitor,
    printed_step_pattern,
    read_curve,
)
from fusion_dd.runner.metrics import MetricSpec, classify, read_metric
from fusion_dd.runner.supervisor import write_json_atomic
from fusion_dd.runner.trial import TrialRun, adopt_trial, start_trial
from tests.support.fake_training import fake_trial_spec
from tests.support.processes import eventually, group_gone, training_pgid

ACC = MetricSpec.from_text(r"accuracy: (\S+)")
STEP_LOSS = re.compile(r"step (\d+) loss (\S+)")
NAN = float("nan")


# --- the decision ---------------------------------------------------------------------


def test_the_first_nan_stops() -> None:
    reports = [(1, 0.9), (2, 0.7), (3, NAN), (4, NAN)]
    assert decide(EarlyStopRule(), [], reports) == StopDecision(
        "nonfinite", 3, "stopped early at step 3: loss nan"
    )
    assert decide(EarlyStopRule(), [], [(7, float("-inf"))]).kind == "nonfinite"  # type: ignore[union-attr]
    assert decide(EarlyStopRule(), [], [(None, NAN)]) == StopDecision(
        "nonfinite", None, "stopped early at a report without a step: loss nan"
    )
    assert decide(EarlyStopRule(nan=False), [], reports) is None
    assert decide(EarlyStopRule(), [], [(1, 0.9), (2, 0.7)]) is None


BASELINE = [(0, 2.0), (10, 1.0), (20, 0.5), (30, 0.4)]


def test_divergence_needs_patience_reports_in_a_row_above_the_band() -> None:
    rule = EarlyStopRule(divergence=0.5, patience=3)
    # Band: 1.0 + 0.5 at steps 10..19, 0.5 + 0.5 at 20..29.
    assert decide(rule, BASELINE, [(10, 1.6), (12, 1.7)]) is None
    decision = decide(rule, BASELINE, [(10, 1.6), (12, 1.7), (14, 1.51), (16, 9.0)])
    assert decision is not None and (decision.kind, decision.step) == ("diverged", 14)
    assert decision.reason == (
        "stopped early at step 14: loss 1.51 above the baseline's 1 (its step 10) + 0.5 "
        "for 3 reports in a row (since step 10)"
    )
    # A report back inside the band starts the count again (spikes are normal).
    spiky = [(10, 1.6), (11, 1.6), (12, 1.5), (13, 1.6), (14, 1.6)]
    assert decide(rule, BASELINE, spiky) is None
    assert decide(rule, BASELINE, spiky + [(15, 1.6)]).step == 15  # type: ignore[union-attr]
    assert decide(EarlyStopRule(divergence=0.5, patience=1), BASELINE, [(25, 1.01)]).step == 25  # type: ignore[union-attr]


def test_the_reference_is_the_baselines_nearest_earlier_step() -> None:
    baseline = Baseline(BASELINE)
    assert baseline.at(-1) is None
    assert baseline.at(0) == (0, 2.0)
    assert baseline.at(19) == (10, 1.0)
    assert baseline.at(20) == (20, 0.5)
    assert baseline.at(10_000) == (30, 0.4)  # past its end: its last loss
    rule = EarlyStopRule(divergence=0.1, patience=1)
    # Step 19 is judged against step 10's 1.0, not an interpolated ~0.55.
    assert decide(rule, BASELINE, [(19, 1.05)]) is None
    # Before the baseline's first step there is no reference.
    assert decide(rule, [(5, 1.0)], [(1, 99.0), (4, 99.0)]) is None
    # No baseline at all: only the NaN rule works.
    assert decide(rule, [], [(1, 99.0)]) is None
    # A NaN point of the baseline is no reference.
    assert Baseline([(0, 1.0), (5, NAN)]).at(7) == (0, 1.0)


def test_relative_band() -> None:
    rule = EarlyStopRule(divergence=0.5, relative=True, patience=1)
    assert decide(rule, BASELINE, [(20, 0.75)]) is None  # 0.5 * 1.5
    decision = decide(rule, BASELINE, [(20, 0.76)])
    assert decision is not None and decision.kind == "diverged"
    assert "+ 0.5 x |0.5|" in decision.reason
    assert decide(rule, BASELINE, [(0, 2.9)]) is None  # 2.0 * 1.5 = 3.0


def test_each_step_is_judged_once_and_start_step_skips_the_warmup() -> None:
    rule = EarlyStopRule(divergence=0.5, patience=2)
    # The same step from the metrics file and from the log is one report.
    assert decide(rule, BASELINE, [(10, 5.0), (10, 5.0), (10, 5.0)]) is None
    # A restart from a checkpoint (steps going back) is not judged again ...
    assert decide(rule, BASELINE, [(12, 5.0), (11, 5.0)]) is None
    # ... but a NaN always is.
    assert decide(rule, BASELINE, [(12, 5.0), (11, NAN)]).kind == "nonfinite"  # type: ignore[union-attr]
    warm = EarlyStopRule(divergence=0.5, patience=2, start_step=20)
    assert decide(warm, BASELINE, [(10, 5.0), (15, 5.0)]) is None
    assert decide(warm, BASELINE, [(10, 5.0), (20, 5.0), (21, 5.0)]).step == 21  # type: ignore[union-attr]
    assert decide(warm, BASELINE, [(3, NAN)]).step == 3  # type: ignore[union-attr]


def test_a_judge_keeps_its_decision() -> None:
    judge = Judge(EarlyStopRule(), BASELINE)
    first = judge.feed(3, NAN)
    assert first is not None
    assert judge.feed(4, 0.1) is first and judge.decision is first


_curves = st.lists(
    st.tuples(st.integers(0, 60), st.floats(0.01, 10.0)), min_size=1, max_size=15
)


@settings(deadline=None, max_examples=60)
@given(
    baseline=_curves,
    losses=st.lists(
        st.tuples(st.integers(0, 80) | st.none(), st.floats(0.0, 12.0) | st.just(NAN)),
        max_size=40,
    ),
    divergence=st.floats(0.0, 3.0),
    relative=st.booleans(),
    patience=st.integers(1, 4),
    cuts=st.lists(st.integers(0, 40), max_size=5),
)
def test_feeding_in_pieces_decides_like_all_at_once(
    baseline: list[tuple[int, float]],
    losses: list[tuple[int | None, float]],
    divergence: float,
    relative: bool,
    patience: int,
    cuts: list[int],
) -> None:
    rule = EarlyStopRule(divergence=divergence, relative=relative, patience=patience)
    whole = decide(rule, baseline, losses)
    judge = Judge(rule, baseline)
    bounds = [0, *sorted(cuts), len(losses)]
    for start, end in zip(bounds, bounds[1:]):
        judge.feed_all(losses[start:end])
    assert judge.decision == whole


@settings(deadline=None, max_examples=60)
@given(
    baseline=_curves,
    divergence=st.floats(0.01, 2.0),
    excess=st.floats(0.0, 1.0),
    patience=st.integers(1, 4),
)
def test_a_run_inside_the_band_never_stops_and_one_above_it_does(
    baseline: list[tuple[int, float]], divergence: float, excess: float, patience: int
) -> None:
    rule = EarlyStopRule(divergence=divergence, patience=patience)
    points = Baseline(baseline)
    steps = list(range(points.steps[0], points.steps[0] + 10))
    inside = [(s, points.at(s)[1] + divergence * excess) for s in steps]  # type: ignore[index]
    assert decide(rule, baseline, inside) is None
    above = [(s, points.at(s)[1] + divergence * (1.01 + excess) + 1e-9) for s in steps]  # type: ignore[index]
    decision = decide(rule, baseline, above)
    assert decision is not None and decision.kind == "diverged"
    assert decision.step == steps[patience - 1]


def test_envelope_of_repeated_baselines() -> None:
    first = [(0, 2.0), (10, 1.0), (20, 0.5)]
    second = [(5, 1.8), (10, 1.2)]
    assert envelope([first, second]) == [(0, 2.0), (5, 2.0), (10, 1.2), (20, 1.2)]
    assert envelope([first]) == first
    assert envelope([]) == []


def test_estimate_savings() -> None:
    stop = {"kind": "nonfinite", "step": 200, "elapsed": 600.0}
    assert estimate_savings(stop, 10_000, 14_400.0) == {"steps_saved": 9800, "seconds_saved": 13_800.0}
    assert estimate_savings(stop, None, None) == {"steps_saved": None, "seconds_saved": None}
    assert estimate_savings({"step": None}, 100, 50.0) == {"steps_saved": None, "seconds_saved": None}
    assert estimate_savings({"step": 500, "elapsed": 99.0}, 100, 50.0) == {
        "steps_saved": 0, "seconds_saved": 0.0,
    }


def test_a_run_inside_the_band_up_to_the_horizon_passes_early() -> None:
    rule = EarlyStopRule(pass_step=30)
    baseline = [(step, 1.0) for step in range(1, 101)]
    reports = [(step, 1.05) for step in range(1, 101)]  # inside the default 10% band
    decision = decide(rule, baseline, reports)
    assert decision is not None and decision.kind == "early_pass" and decision.step == 30
    assert "proven only by a full training" in decision.reason
    assert rule.active and not EarlyStopRule(nan=False).active and EarlyStopRule(nan=False, pass_step=5).active


def test_two_reports_above_the_band_or_one_nan_rule_out_an_early_pass_a_lone_spike_does_not() -> None:
    baseline = [(step, 1.0) for step in range(1, 101)]
    spike = [(step, 1.5 if step == 12 else 1.0) for step in range(1, 101)]
    # The pass band reads the median of the last three reports: one spike is a minibatch, not damage.
    assert decide(EarlyStopRule(pass_step=30), baseline, spike).kind == "early_pass"  # type: ignore[union-attr]
    twice = [(step, 1.5 if step in (12, 13) else 1.0) for step in range(1, 101)]
    assert decide(EarlyStopRule(pass_step=30), baseline, twice) is None  # runs to its end: a full verdict
    nan = [(step, NAN if step == 12 else 1.0) for step in range(1, 101)]
    assert decide(EarlyStopRule(nan=False, pass_step=30), baseline, nan) is None
    # With a divergence rule, its band decides for passes too, and divergence still stops failures.
    wide = EarlyStopRule(divergence=1.0, pass_step=30)
    assert decide(wide, baseline, twice).kind == "early_pass"  # type: ignore[union-attr]
    diverging = [(step, 1.0 if step < 10 else 5.0) for step in range(1, 101)]
    assert decide(wide, baseline, diverging).kind == "diverged"  # type: ignore[union-attr]


def _noisy(seed: int, damage_from: int | None = None, factor: float = 1.4, steps: int = 400) -> list[tuple[int, float]]:
    """A minibatch loss: a decaying trend with 15 % noise, and from ``damage_from`` on ``factor`` times as high."""
    rng = random.Random(seed)
    curve = []
    for step in range(1, steps + 1):
        trend = 2.0 / math.sqrt(step) * (factor if damage_from is not None and step >= damage_from else 1.0)
        curve.append((step, trend * (1.0 + rng.gauss(0.0, 0.15))))
    return curve


def test_the_pass_band_widens_by_the_baselines_own_scatter() -> None:
    """Healthy noisy runs pass early against a noisy baseline; damaged ones still leave the band."""
    baseline = _noisy(0)
    rule = EarlyStopRule(pass_step=200, fail_band=True)
    healthy = [decide(rule, baseline, _noisy(seed)) for seed in range(1, 41)]
    # Read raw against a 10 % band, nearly every one of them failed early; an early pass lost is only steps.
    passed = sum(1 for decision in healthy if decision is not None and decision.kind == "early_pass")
    assert passed >= 36 and not [decision for decision in healthy if decision is not None and decision.kind != "early_pass"]
    for seed in range(1, 21):
        # A loss 40 % higher is seen, before the horizon, as leaving the band.
        decision = decide(rule, baseline, _noisy(seed, damage_from=50))
        assert decision is not None and decision.kind == "early_fail" and 50 <= decision.departed < 200, decision
    # A smooth baseline has no scatter: the band is the 10 % one, as before.
    assert Baseline([(step, 1.0) for step in range(1, 101)]).top(50, None, False) == (50, 1.0, pytest.approx(1.1))


def test_without_a_horizon_nothing_passes_early_and_early_steps_are_not_judged() -> None:
    baseline = [(step, 1.0) for step in range(1, 101)]
    assert decide(EarlyStopRule(), baseline, [(step, 1.0) for step in range(1, 101)]) is None
    noisy_start = [(step, 9.0 if step < 5 else 1.0) for step in range(1, 101)]
    assert decide(EarlyStopRule(pass_step=30, start_step=5), baseline, noisy_start).kind == "early_pass"  # type: ignore[union-attr]


def test_an_early_pass_is_classified_as_a_pass_kind_not_a_failure() -> None:
    run = TrialRun(
        trial_id="t", trial_dir=Path("d"), exit_code=None, signal=15, timed_out=False, cancelled=True,
        duration=1.0, start=0.0, end=1.0, log_path=Path("l"), metrics_path=Path("m"),
        early_stop={"kind": "early_pass", "step": 30, "reason": "passed early at step 30"},
    )
    from fusion_dd.runner.metrics import MetricReading

    kind, reason = classify(run, MetricReading(None, False, "no metric"))
    assert (kind, reason) == ("early_pass", "passed early at step 30")
    assert classify(run, MetricReading(None, True, "non-finite value: loss nan"))[0] == "nonfinite"


def test_with_fail_band_a_run_that_leaves_the_band_fails_early_at_its_patience() -> None:
    baseline = [(step, 1.0) for step in range(1, 101)]
    leaving = [(step, 1.0 if step < 12 else 1.2) for step in range(1, 101)]  # above the 10% band from step 12
    decision = decide(EarlyStopRule(pass_step=30, fail_band=True), baseline, leaving)
    # The median of the last three reports is above from step 13 on; patience 3: 13, 14, 15.
    assert decision is not None and (decision.kind, decision.step) == ("early_fail", 15)
    assert "since step 13" in decision.reason and "proven only by a full training" in decision.reason
    # The departure, not the stop, tells whether early passes could have seen the damage.
    assert decision.departed == 13 and decision.to_json()["departed"] == 13
    # Two reports outside the band before the run that stops it count as the departure; one does not.
    early_pair = [(step, 1.5 if step in (5, 6) else leaving[step - 1][1]) for step in range(1, 101)]
    assert decide(EarlyStopRule(pass_step=30, fail_band=True), baseline, early_pair).departed == 6  # type: ignore[union-attr]
    early_spike = [(step, 1.5 if step == 5 else leaving[step - 1][1]) for step in range(1, 101)]
    assert decide(EarlyStopRule(pass_step=30, fail_band=True), baseline, early_spike).departed == 13  # type: ignore[union-attr]
    # One spike is no departure (it passes early); without fail_band the run trains on to its full verdict.
    spike = [(step, 1.5 if step == 12 else 1.0) for step in range(1, 101)]
    assert decide(EarlyStopRule(pass_step=30, fail_band=True), baseline, spike).kind == "early_pass"  # type: ignore[union-attr]
    assert decide(EarlyStopRule(pass_step=30), baseline, leaving) is None
    assert EarlyStopRule(nan=False, fail_band=True).active
    # A divergence the user set is the band: its stop is a real failure, never an early one.
    assert decide(EarlyStopRule(divergence=0.1, pass_step=30, fail_band=True), baseline, leaving).kind == "diverged"  # type: ignore[union-attr]


def test_an_early_failure_is_classified_as_its_own_kind_and_fails() -> None:
    from fusion_dd.runner.metrics import MetricReading
    from fusion_dd.core.scoring import Measurement, Threshold
    from fusion_dd.search.oracle import Outcome

    run = TrialRun(
        trial_id="t", trial_dir=Path("d"), exit_code=None, signal=15, timed_out=False, cancelled=True,
        duration=1.0, start=0.0, end=1.0, log_path=Path("l"), metrics_path=Path("m"),
        early_stop={"kind": "early_fail", "step": 14, "reason": "failed early at step 14"},
    )
    assert classify(run, MetricReading(None, False, "no metric")) == ("early_fail", "failed early at step 14")
    threshold = Threshold(baseline=0.9, tolerance=0.01, goal="max")
    assert threshold.verdict(Measurement("early_fail")) is Outcome.FAIL


# --- configuration --------------------------------------------------------------------


def test_rule_from_config() -> None:
    assert EarlyStopRule.from_config(None) == EarlyStopRule()
    assert EarlyStopRule.from_config(True) == EarlyStopRule()
    assert not EarlyStopRule.from_config(False).active
    rule = EarlyStopRule.from_config(
        {"nan": True, "divergence": 0.5, "relative": True, "patience": 5,
         "step_pattern": r"step (\d+) loss (\S+)", "start_step": 100}
    )
    assert (rule.divergence, rule.relative, rule.patience, rule.start_step) == (0.5, True, 5, 100)
    assert rule.step_pattern is not None and rule.step_pattern.pattern == r"step (\d+) loss (\S+)"
    assert EarlyStopRule.from_config({"divergence": 1}).divergence == 1.0
    # Without a step_pattern the output may name one; off (YAML's false too) reads no output.
    assert EarlyStopRule.from_config({}).read_output and rule.step_pattern is not None
    for off in ("off", False):
        assert not EarlyStopRule.from_config({"step_pattern": off}).read_output
    assert make_monitor(".", EarlyStopRule(nan=False)) is None
    assert make_monitor(".", None) is None
    assert isinstance(make_monitor(".", EarlyStopRule()), TrialFollower)


@pytest.mark.parametrize(
    "section, message",
    [
        ({"divergance": 0.5}, "early_stop.divergance: unknown key; did you mean 'early_stop.divergence'?"),
        ({"divergence": -1}, "early_stop.divergence: -1 is not valid"),
        ({"divergence": "50%"}, "early_stop.divergence: '50%' is not valid"),
        ({"patience": 0}, "early_stop.patience: 0 is not valid"),
        ({"nan": "yes"}, "early_stop.nan: 'yes' is not valid; use true or false"),
        ({"step_pattern": "step (\\d+"}, "is not a valid regular expression"),
        ({"step_pattern": r"loss (\S+)"}, "needs two groups, step then loss"),
        ({"step_pattern": 3}, "early_stop.step_pattern: must be a string such as"),
        ({"start_step": -3}, "early_stop.start_step: -3 is not valid"),
        ("on", "early_stop: must be a mapping"),
    ],
)
def test_bad_config_is_a_usage_error_naming_the_key(section: object, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        EarlyStopRule.from_config(section)


def test_invalid_rules_are_refused() -> None:
    with pytest.raises(ValueError):
        EarlyStopRule(patience=0)
    with pytest.raises(ValueError):
        EarlyStopRule(divergence=float("inf"))
    with pytest.raises(ValueError):
        EarlyStopRule(step_pattern=re.compile(r"loss (\S+)"))


# --- reading a running trial's files ---------------------------------------------------


def append(path: Path, data: str | bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)


def test_a_torn_metrics_line_waits_for_its_end(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    reader = ReportReader(tmp_path)
    assert reader.read_new() == []  # no file yet
    append(metrics, '{"step": 1, "loss": 0.9}\n{"step": 2, "lo')
    assert reader.read_new() == [(1, 0.9)]
    assert reader.read_new() == []
    append(metrics, 'ss": 0.8}\n{"step": 3, "loss": NaN')
    assert reader.read_new() == [(2, 0.8)]
    append(metrics, "}\n")
    step, loss = reader.read_new()[0]
    assert step == 3 and math.isnan(loss)


def test_the_reader_remembers_its_offsets(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    reader = ReportReader(tmp_path)
    append(metrics, '{"step": 1, "loss": 0.9}\n')
    assert reader.read_new() == [(1, 0.9)]
    # Rewrite the line already read, in place: a reader that re-read the file
    # from the start would see it again.
    with open(metrics, "r+b") as handle:
        handle.write(b'{"step": 1, "loss": 0.1}')
    append(metrics, '{"step": 2, "loss": 0.8}\n')
    assert reader.read_new() == [(2, 0.8)]


def test_unusable_records_are_skipped(tmp_path: Path) -> None:
    append(
        tmp_path / "metrics.jsonl",
        'garbage\n[1, 2]\n{"step": 1}\n{"step": 2, "loss": "n/a"}\n\n'
        '{"step": "4", "loss": "0.5"}\n{"loss": 0.4}\n{"step": 6, "loss": 0.3, "accuracy": 0.9}\n',
    )
    assert ReportReader(tmp_path).read_new() == [(4, 0.5), (None, 0.4), (6, 0.3)]


def test_a_restarted_trial_is_read_from_its_start(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    reader = ReportReader(tmp_path)
    append(metrics, '{"step": 1, "loss": 0.9}\n{"step": 2, "loss": 0.8}\n')
    assert len(reader.read_new()) == 2
    metrics.write_bytes(b'{"step": 1, "loss": 0.7}\n')  # start_trial truncates it
    assert reader.read_new() == [(1, 0.7)]
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(b'{"step": 1, "loss": 0.6}\n{"step": 2, "loss": 0.5}\n')
    os.replace(replacement, metrics)  # a new file, even if it were longer
    assert reader.read_new() == [(1, 0.6), (2, 0.5)]


def test_the_step_pattern_over_the_log(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    reader = ReportReader(tmp_path, STEP_LOSS)
    append(log, "INFO starting\nstep 1 loss 0.90\r\nstep 2 loss 0.8")
    assert reader.read_new() == [(1, 0.9)]
    append(log, "0 lr 0.1\rstep 3 loss 0.70\rstep 4 loss nan\n")  # a progress bar's \r
    reports = reader.read_new()
    assert reports[:2] == [(2, 0.8), (3, 0.7)] and reports[2][0] == 4 and math.isnan(reports[2][1])
    append(log, "step x loss 0.5\nstep 6 loss oops\n")  # no number: no step, no report
    assert reader.read_new() == []
    # Both sources: the metrics file's reports come first.
    append(tmp_path / "metrics.jsonl", '{"step": 7, "loss": 0.3}\n')
    append(log, "step 7 loss 0.30\n")
    assert reader.read_new() == [(7, 0.3), (7, 0.3)]
    assert ReportReader(tmp_path).read_new()[-1] == (7, 0.3)  # no pattern: no log


def test_a_small_read_limit_only_delays_reports(tmp_path: Path) -> None:
    lines = "".join(f'{{"step": {s}, "loss": {1.0 / s}}}\n' for s in range(1, 40))
    append(tmp_path / "metrics.jsonl", lines)
    append(tmp_path / "output.log", lines.replace("{", "step ").replace('"', ""))
    expected = ReportReader(tmp_path).read_new()
    reader = ReportReader(tmp_path)
    collected: list = []
    for _ in range(200):
        collected += reader.read_new(limit=17)
    assert collected == expected and len(expected) == 39


def test_a_follower_decides_from_new_reports(tmp_path: Path) -> None:
    follower = TrialFollower(tmp_path, EarlyStopRule(divergence=0.5, patience=2), BASELINE)
    metrics = tmp_path / "metrics.jsonl"
    append(metrics, '{"step": 10, "loss": 1.2}\n{"step": 11, "loss": 1.9}\n')
    assert follower() is None
    append(metrics, '{"step": 12, "loss": 1.8')
    assert follower() is None  # torn: not yet a report
    append(metrics, "}\n")
    decision = follower()
    assert decision is not None and (decision.kind, decision.step) == ("diverged", 12)
    assert follower() is decision


def test_read_curve_of_a_finished_run(tmp_path: Path) -> None:
    append(
        tmp_path / "metrics.jsonl",
        '{"step": 2, "loss": 0.8}\n{"step": 1, "loss": 0.9}\n{"step": 2, "loss": 0.7}\n'
        '{"loss": 0.1}\n{"step": 3, "loss": NaN}\n{"step": 4, "loss": 0.5}',  # no final newline
    )
    assert read_curve(tmp_path) == [(1, 0.9), (2, 0.8), (4, 0.5)]
    append(tmp_path / "output.log", "step 5 loss 0.4\nstep 4 loss 0.45\nstep 6 loss 0.3")
    assert read_curve(tmp_path, STEP_LOSS) == [(1, 0.9), (2, 0.8), (4, 0.5), (5, 0.4), (6, 0.3)]
    assert read_curve(tmp_path / "missing") == []


# --- real trainings --------------------------------------------------------------------------


def wait_for_step(trial_dir: Path, step: int) -> None:
    assert eventually(lambda: f"step {step} loss" in (trial_dir / "output.log").read_text())


#: About a minute of training unless something stops it.
LONG = ("--steps", "600", "--step-sleep", "0.1")


def test_a_nan_training_is_stopped_long_before_it_would_end(tmp_path: Path) -> None:
    started = time.monotonic()
    handle = start_trial(fake_trial_spec(tmp_path, "nan", *LONG, "--nan-at-step", "3", "--spawn-child"))
    run = handle.wait(poll=0.05, monitor=make_monitor(handle.trial_dir, EarlyStopRule()))
    assert time.monotonic() - started < 30.0
    assert run.early_stop is not None and not run.cancelled and not run.succeeded
    assert run.signal == signal.SIGTERM
    assert (run.early_stop["kind"], run.early_stop["step"]) == ("nonfinite", 3)
    assert 0.0 <= run.early_stop["elapsed"] < 30.0 and run.early_stop["time"] > 0
    assert classify(run, read_metric(run, ACC)) == ("nonfinite", "stopped early at step 3: loss nan")
    assert json.loads((run.trial_dir / "early_stop.json").read_text()) == dict(run.early_stop)
    assert eventually(lambda: group_gone(training_pgid(run.trial_dir)))
    assert TrialRun.from_json(json.loads(json.dumps(run.to_json()))) == run


def test_divergence_from_a_real_baseline_stops_and_a_run_in_the_band_does_not(tmp_path: Path) -> None:
    baseline_run = start_trial(fake_trial_spec(tmp_path, "base", "--steps", "30")).wait(poll=0.05)
    assert baseline_run.succeeded
    curve = read_curve(baseline_run.trial_dir)
    assert [step for step, _ in curve] == list(range(1, 31))
    rule = EarlyStopRule(divergence=0.5, patience=3)

    started = time.monotonic()
    handle = start_trial(fake_trial_spec(tmp_path, "bad", *LONG, "--loss-curve", "diverge:5"))
    run = handle.wait(poll=0.05, monitor=make_monitor(handle.trial_dir, rule, curve))
    assert time.monotonic() - started < 30.0
    # Loss is 1.0 above the baseline at step 6, 2.0 at 7, 3.0 at 8: the third in a row.
    assert run.early_stop is not None and run.early_stop["step"] == 8
    kind, reason = classify(run, read_metric(run, ACC))
    assert kind == "diverged" and reason.startswith("stopped early at step 8: loss ")
    assert eventually(lambda: group_gone(training_pgid(run.trial_dir)))

    handle = start_trial(fake_trial_spec(tmp_path, "ok", "--steps", "40", "--loss-curve", "offset:0.3"))
    run = handle.wait(poll=0.05, monitor=make_monitor(handle.trial_dir, rule, curve))
    assert run.early_stop is None and run.succeeded
    assert classify(run, read_metric(run, ACC))[0] == "metric"
    assert not (run.trial_dir / "early_stop.json").exists()


def test_the_step_pattern_stops_a_training_without_a_metrics_file(tmp_path: Path) -> None:
    rule = EarlyStopRule(step_pattern=STEP_LOSS, divergence=0.5, patience=2)
    handle = start_trial(fake_trial_spec(
        tmp_path, "log", *LONG, "--no-metrics-file", "--loss-curve", "diverge:2",
    ))
    run = handle.wait(poll=0.05, monitor=make_monitor(handle.trial_dir, rule, [(0, 1.0)]))
    assert run.early_stop is not None and run.early_stop["kind"] == "diverged"
    # Step 3 is the first above 1.0 + 0.5 (2 * 0.7**3 + 0.1 + 1 = 1.786), step 4 the second.
    assert run.early_stop["step"] == 4


def test_a_stopped_run_collected_after_a_coordinator_crash_is_still_classified(tmp_path: Path) -> None:
    original = start_trial(fake_trial_spec(tmp_path, "crash", *LONG))
    wait_for_step(original.trial_dir, 2)
    # The coordinator decided, wrote early_stop.json, sent SIGTERM ... and died.
    assert original.stop_early(StopDecision("diverged", 2, "stopped early at step 2: loss 9"))
    adopted = adopt_trial(original.trial_dir)
    assert adopted is not None
    run = adopted.wait(poll=0.05)
    assert run.early_stop is not None and run.early_stop["step"] == 2 and not run.cancelled
    assert classify(run, read_metric(run, ACC)) == ("diverged", "stopped early at step 2: loss 9")
    assert original.wait(poll=0.05) == run  # reaps our child too
    again = adopt_trial(original.trial_dir)  # collected once more, from the files alone
    assert again is not None and again.poll() == run


def test_a_resumed_coordinator_finishes_a_stop_that_was_decided_but_not_sent(tmp_path: Path) -> None:
    original = start_trial(fake_trial_spec(tmp_path, "half", *LONG))
    wait_for_step(original.trial_dir, 2)
    # Died between writing early_stop.json and the SIGTERM.
    write_json_atomic(
        original.trial_dir / "early_stop.json",
        {"kind": "nonfinite", "step": 2, "reason": "stopped early at step 2: loss nan",
         "time": time.time(), "elapsed": 0.3},
    )
    adopted = adopt_trial(original.trial_dir)
    assert adopted is not None
    started = time.monotonic()
    run = adopted.wait(poll=0.05)  # no monitor needed
    assert time.monotonic() - started < 30.0
    assert classify(run, read_metric(run, ACC)) == ("nonfinite", "stopped early at step 2: loss nan")
    original.wait(poll=0.05)


def test_a_run_that_ended_on_its_own_keeps_its_result(tmp_path: Path) -> None:
    run = start_trial(fake_trial_spec(tmp_path, "done", "--steps", "3")).wait(poll=0.05)
    # A stop decided just as the training finished: the SIGTERM never landed.
    write_json_atomic(run.trial_dir / "early_stop.json", {"kind": "diverged", "step": 3, "reason": "late"})
    adopted = adopt_trial(run.trial_dir)
    assert adopted is not None
    again = adopted.wait(poll=0.05)
    assert again.early_stop is None and again.succeeded
    assert classify(again, read_metric(again, ACC))[0] == "metric"


def test_a_failing_monitor_is_switched_off_and_the_training_runs_on(tmp_path: Path) -> None:
    def broken() -> None:
        raise RuntimeError("bug in a log reader")

    handle = start_trial(fake_trial_spec(tmp_path, "broken", "--steps", "5"))
    with pytest.warns(RuntimeWarning, match="bug in a log reader"):
        run = handle.wait(poll=0.05, monitor=broken)
    assert run.succeeded and run.early_stop is None
    assert handle.monitor_error == "RuntimeError: bug in a log reader"


def test_the_baseline_curve_is_journaled_by_a_hook_and_capped(tmp_path: Path) -> None:
    from fusion_dd.core.hooks import TrialFiles
    from fusion_dd.runner.early_stop import MAX_CURVE_POINTS, LossCurveHook

    lines = "".join(json.dumps({"step": step, "loss": 1.0 / (step + 1)}) + "\n" for step in range(12000))
    (tmp_path / "metrics.jsonl").write_text(lines)
    hook = LossCurveHook()
    # A search training journals only its length (the search's cost in steps); the references their curves.
    assert hook.collect(TrialFiles(tmp_path, frozenset(), "search")) == {"last_step": 11999}
    assert hook.collect(TrialFiles(tmp_path, frozenset(), "all_on"))["last_step"] == 11999
    curve = hook.collect(TrialFiles(tmp_path, frozenset(), "baseline"))["curve"]
    assert len(curve) <= MAX_CURVE_POINTS + 1
    assert curve[0] == [0, 1.0] and curve[-1] == [11999, 1.0 / 12000]
    assert [step for step, _ in curve] == sorted({step for step, _ in curve})
    json.dumps(curve)


def test_early_stop_on_resume_uses_the_journaled_curve_not_the_files(tmp_path: Path) -> None:
    """The baseline's files may be gone on resume (another host, cleaned up): its curve is in the journal."""
    from tests.support.cli import CULPRIT, write_config
    from tests.support.fake_training import run_fusion_dd

    write_config(tmp_path, "--culprits", CULPRIT, budget=3, early_stop={"divergence": 3.0, "patience": 2})
    first = run_fusion_dd("search", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    state = tmp_path / ".fusion-dd"
    journal = [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines()]
    started = {r["trial_id"]: r for r in journal if r["type"] == "trial_started"}
    baseline = [r for r in journal if r["type"] == "trial_finished" and started[r["trial_id"]]["role"] == "baseline"]
    assert baseline and all(r["artifacts"]["loss_curve"]["curve"] for r in baseline)
    for record in baseline:  # gone from the coordinator's disk
        (state / "trials" / record["trial_id"] / "metrics.jsonl").unlink()
        (state / "trials" / record["trial_id"] / "output.log").write_text("")
    second = run_fusion_dd("resume", "--budget", "40", cwd=tmp_path)
    assert second.returncode == 0, second.stderr


def test_log_reports_in_a_line_without_end_are_found_once_across_reads(tmp_path, monkeypatch):
    """Output with no newline nor carriage return, read a few bytes at a time: pieces, not one growing line."""
    from fusion_dd.runner import early_stop as module
    from fusion_dd.runner import metrics as metrics_module

    monkeypatch.setattr(module, "MAX_LINE_BYTES", 20)
    monkeypatch.setattr(metrics_module, "OVERLAP", 24)
    text = "".join(f"step {step} loss {1.0 / (step + 1):.3f} ~ " for step in range(40))
    (tmp_path / "output.log").write_text(text)
    reader = ReportReader(tmp_path, re.compile(r"step (\d+) loss (\S+)"))
    reports = []
    while chunk := reader._log.read_new(7):
        reports += module._records_from_log(chunk, reader._log, reader.step_pattern)
        assert len(reader._log.pending) <= 20 + 7
    reports += module._records_from_log(b"\n", reader._log, reader.step_pattern)
    assert reports == [(step, pytest.approx(round(1.0 / (step + 1), 3))) for step in range(40)]


def _printed_curve(directory: Path, lines: list[str]) -> tuple[tuple[str, str] | None, list[tuple[int, float]]]:
    """The step pattern an output.log of ``lines`` names (with its line), and the curve it reads from that log."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "output.log").write_text("".join(line + "\n" for line in lines))
    found = printed_step_pattern(directory / "output.log")
    if found is None:
        return None, []
    return found, read_curve(directory, re.compile(found[0]))


@pytest.mark.parametrize(
    "line, step, loss",
    [
        ("step 40 loss 0.21", 40, 0.21),
        ("Step: 40, Loss: 0.21, lr 1e-3", 40, 0.21),
        ("[iter 12/100] loss=1.5e-2", 12, 0.015),
        ("epoch 1 iteration 300 train_loss 0.5", 300, 0.5),
        ("global_step=7 | loss: 2", 7, 2.0),
    ],
)
def test_a_printed_curve_names_a_step_pattern_that_reads_it(tmp_path: Path, line: str, step: int, loss: float) -> None:
    found, curve = _printed_curve(tmp_path, ["starting", line, "accuracy: 0.9"])
    assert found is not None and found[1] == line
    assert curve == [(step, loss)]


@pytest.mark.parametrize("line", ["accuracy: 0.9", "steps: 3 accuracy 0.9", "loss 0.2 at step 4", "restep 3 lossy 0.1"])
def test_no_step_pattern_for_lines_that_report_no_step_then_loss(tmp_path: Path, line: str) -> None:
    assert _printed_curve(tmp_path, [line]) == (None, [])


def test_no_step_pattern_without_an_output_log(tmp_path: Path) -> None:
    assert printed_step_pattern(tmp_path / "output.log") is None


def test_the_named_pattern_reads_the_training_loss_not_a_validation_loss_on_other_lines(tmp_path: Path) -> None:
    lines = ["step 1 loss 0.5", "step 1 val_loss 0.9", "step 2 loss 0.4", "step 2 eval.loss 0.8", "step 3 loss 0.3"]
    found, curve = _printed_curve(tmp_path, lines)
    assert found is not None and curve == [(1, 0.5), (2, 0.4), (3, 0.3)]


def test_the_most_frequent_spelling_is_the_curve_not_the_last_line(tmp_path: Path) -> None:
    lines = []
    for step in range(1, 21):
        lines.append(f"Epoch 0 | step {step}/20 | train_loss={1.0 / step:.3f} | lr 1e-4")
        if step % 10 == 0:
            lines.append(f"step {step} val_loss 0.9")
    found, curve = _printed_curve(tmp_path, lines)
    assert found is not None and "train_loss" in found[0] and found[1].startswith("Epoch 0 | step 20/20")
    assert [step for step, _ in curve] == list(range(1, 21)) and curve[0] == (1, 1.0)


def test_the_hook_reads_a_printed_curve_and_journals_the_pattern_it_used(tmp_path: Path) -> None:
    from fusion_dd.core.hooks import TrialFiles
    from fusion_dd.runner.early_stop import LossCurveHook

    (tmp_path / "output.log").write_text("".join(f"Step {step}: loss={1.0 / step:.3f}\n" for step in range(1, 6)))
    facts = LossCurveHook().collect(TrialFiles(tmp_path, frozenset(), "baseline"))
    assert facts["curve"] == [[1, 1.0], [2, 0.5], [3, 0.333], [4, 0.25], [5, 0.2]]
    assert facts["printed"] == "Step 5: loss=0.200" and re.compile(facts["step_pattern"]).search("Step 9: loss=1")
    assert LossCurveHook().collect(TrialFiles(tmp_path, frozenset(), "search")) == {"last_step": 5}
    # step_pattern: off reads no output; a metrics file, when there is one, wins over the output.
    assert LossCurveHook(read_output=False).collect(TrialFiles(tmp_path, frozenset(), "baseline"))["curve"] == []
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 9, "loss": 0.1}) + "\n")
    facts = LossCurveHook().collect(TrialFiles(tmp_path, frozenset(), "baseline"))
    assert facts["curve"] == [[9, 0.1]] and "step_pattern" not in facts


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.integers(0, 10**6), min_size=1, max_size=5, unique=True),
    word=st.sampled_from(["step", "Step", "iter", "global_step"]),
    loss_word=st.sampled_from(["loss", "Loss", "train_loss"]),
    separator=st.sampled_from([" ", ": ", "=", " = "]),
    between=st.sampled_from([" ", ", ", " | ", " lr 0.001 "]),
    value=st.floats(0.0, 1e6, allow_nan=False),
)
def test_the_named_pattern_reads_every_printed_step(tmp_path_factory, steps, word, loss_word, separator, between, value):
    lines = [f"{word}{separator}{step}{between}{loss_word}{separator}{value!r}" for step in steps]
    found, curve = _printed_curve(tmp_path_factory.mktemp("log"), lines)
    assert found is not None
    assert curve == sorted((step, value) for step in steps)


def test_a_printed_curve_is_found_behind_pages_printed_after_the_last_step(tmp_path: Path) -> None:
    # An evaluation report, or the compiler's log on stdout, after the last step: the end of the
    # log read first holds no step line, so the read goes further back until it finds them.
    from fusion_dd.runner import early_stop as module

    report = [f"class {index:05d}: precision 0.{index % 10} recall 0.5 support 12" for index in range(6000)]
    assert sum(len(line) + 1 for line in report) > 4 * module.PRINTED_TAIL_BYTES
    found, curve = _printed_curve(tmp_path, [f"step {step} loss {1.0 / step:.3f}" for step in range(1, 6)] + report)
    assert found is not None and found[1] == "step 5 loss 0.200"
    assert [step for step, _ in curve] == [1, 2, 3, 4, 5]
