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


def _pair_config(tmp_path: Path, **sections) -> tuple[str, str]:
    from tests.support.cli import GRAPH

    slow, cheap = GRAPH[2], GRAPH[9]  # the search chooses the first by name: the slow one
    write_config(
        tmp_path, "--pair", f"{slow}+{cheap}", "--speed", "100",
        "--slow-when-off", f"{slow}:0.2", "--slow-when-off", f"{cheap}:0.02",
        metric={"speed_pattern": r"speed (\S+) samples/s"}, **sections,
    )  # fmt: skip
    return slow, cheap


def test_prefer_speed_hands_over_the_2_percent_rule_of_a_pair_costing_2_and_20(tmp_path: Path) -> None:
    slow, cheap = _pair_config(tmp_path, fix={"prefer": "speed"})
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert found["switched_off"] == [cheap] and found["fix_verified"]
    compared = {tuple(entry["switched_off"]): entry for entry in found["fix_alternatives"]}
    assert compared[(cheap,)]["picked"] and compared[(cheap,)]["passed"] and not compared[(slow,)]["picked"]
    assert compared[(slow,)]["per_second"] == 80 and compared[(cheap,)]["per_second"] == 98
    assert found["speed"]["fix_vs_all_on"] == 0.98
    fix_cfg = (tmp_path / ".fusion-dd" / "fusion_switch.cfg").read_text()
    assert f'"{cheap}": "off"' in fix_cfg and f'"{slow}": "off"' not in fix_cfg
    assert "<- handed over" in done.stdout


def test_by_default_the_cheapest_fix_is_kept_and_the_faster_one_is_named(tmp_path: Path) -> None:
    slow, cheap = _pair_config(tmp_path)
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert found["switched_off"] == [slow] and found["other_fixes"] == [[cheap]]
    assert "fix_alternatives" not in found
    assert f"a faster fix may exist: switching off {cheap} instead" in done.stdout


def test_a_bad_fix_prefer_is_one_line_and_exit_2(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, fix={"prefer": "fast"})
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 2 and "fix.prefer: 'fast' is not valid" in done.stderr and "Traceback" not in done.stderr
