"""The fix's speed in the summary and report.json, from a fake training that prints its throughput."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import CULPRIT, write_config
from tests.support.fake_training import run_fusion_dd


def test_the_summary_gives_the_fix_s_speed_against_all_on_and_the_baseline(tmp_path: Path) -> None:
    write_config(
        tmp_path, "--culprits", CULPRIT, "--speed", "100", "--slow-when-off", f"{CULPRIT}:0.03",
        metric={"speed_pattern": r"speed (\S+) samples/s"},
    )  # fmt: skip
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    speed = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())["speed"]
    assert speed["fix_vs_all_on"] == 0.97 and speed["baseline_vs_all_on"] == 0.97
    assert speed["all_on"]["trainings"] >= 1 and speed["fix"]["trainings"] >= 1
    assert "the fix trains at 0.97x the speed of all fusion on" in done.stdout


def test_without_a_speed_pattern_speed_is_steps_per_second_of_wall_time(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, "--steps", "10")
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    speed = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())["speed"]
    assert speed["unit"] == "steps/s of wall time" and speed["fix"]["per_second"] > 0


def test_a_bad_speed_pattern_is_one_line_and_exit_2(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, metric={"speed_pattern": "speed [ samples"})
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 2 and "metric.speed_pattern" in done.stderr and "Traceback" not in done.stderr
