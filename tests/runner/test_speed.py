"""A training's speed and the fix's price in throughput (fusion_dd/runner/speed.py)."""

from __future__ import annotations

import re
from pathlib import Path

from fusion_dd.core.hooks import TrialFiles
from fusion_dd.runner.speed import SpeedHook, compare_speeds, speed_from_lines, speed_line, steps_per_second

SAMPLES = re.compile(r"(\S+) samples/s")


def test_steps_per_second_needs_both_figures() -> None:
    assert steps_per_second(1000, 250.0) == 4.0
    assert steps_per_second(None, 250.0) is None and steps_per_second(1000, None) is None
    assert steps_per_second(0, 10.0) is None and steps_per_second(10, 0.0) is None


def test_the_median_of_the_printed_speeds_skipping_non_numbers() -> None:
    lines = ["step 1 900 samples/s", "warming up nan samples/s", "step 2 1000 samples/s", "x 1100 samples/s, 0 samples/s"]
    assert speed_from_lines(lines, SAMPLES) == 1000
    assert speed_from_lines(["no speed here"], SAMPLES) is None


def test_a_long_log_keeps_a_bounded_evenly_thinned_sample() -> None:
    lines = (f"{value} samples/s" for value in range(1, 100001))
    assert 45000 < speed_from_lines(lines, SAMPLES) < 55000  # type: ignore[operator]


def test_the_hook_reads_the_training_s_output(tmp_path: Path) -> None:
    (tmp_path / "output.log").write_text("step 1\n50 samples/s\n70 samples/s\n60 samples/s\n")
    assert SpeedHook(SAMPLES).collect(TrialFiles(tmp_path, frozenset())) == {"per_second": 60}
    assert SpeedHook(SAMPLES).collect(TrialFiles(tmp_path / "missing", frozenset())) == {}


def test_the_fix_and_the_baseline_against_all_on_with_the_trainings_behind_each() -> None:
    speed = compare_speeds([97.0, 95.0], [100.0], [71.0], "steps/s of wall time")
    assert speed["fix"] == {"per_second": 96.0, "trainings": 2} and speed["fix_vs_all_on"] == 0.96
    assert speed["baseline_vs_all_on"] == 0.71
    line = speed_line(speed)
    assert line is not None and "the fix trains at 0.96x the speed of all fusion on (2 trainings against 1 training)" in line
    assert "all off is 0.71x (1 training)" in line
    assert speed_line(compare_speeds([], [100.0], [71.0], "x")) is None
    assert compare_speeds([90.0], [], [], "x")["fix_vs_all_on"] is None
