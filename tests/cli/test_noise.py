"""Noise honesty through the CLI: a flaky reference training never refuses alone, and the
report says how many trainings stand behind each claim."""

from __future__ import annotations

import json

from tests.support.cli import GRAPH, launches, write_config
from tests.support.fake_training import run_fusion_dd

RULES = GRAPH[:8]
CULPRIT = RULES[5]


def test_a_flaky_first_baseline_is_retrained_instead_of_refusing(tmp_path):
    # The baseline's first training (FUSION_DD_REPEAT=0, nothing on) trains badly once:
    # it lands at the all-on level, which used to end in "no_failure" after 2 trainings.
    write_config(
        tmp_path, "--culprits", CULPRIT, "--flip-config", "none@0",
        rules={"GraphFusion": RULES, "UBFusion": []}, budget=60,
    )
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found", report["message"]
    assert [[rule["name"] for rule in c["rules"]] for c in report["culprits"]] == [[CULPRIT]]
    baseline_repeats = sorted(repeat for on, repeat in launches(tmp_path) if not on)
    assert baseline_repeats[:3] == [0, 1, 2] and len(baseline_repeats) <= 5
    assert report["baseline"] == 0.9  # the bad run was outvoted and does not set the threshold
    # The dissent is noise seen in this search: the answer's claims rest on two trainings each.
    assert report["flaky"] is True
    assert any(item["kind"] == "flaky" and item["configurations"][0]["on"] == [] for item in report["inconsistencies"])
    assert report["fix_verified"] is True
    assert report["fix_verified_by"] >= 2 and report["fix_trainings"] >= report["fix_verified_by"]
    assert report["culprits"][0]["support"] >= 2
    assert report["culprits"][0]["trainings"] >= report["culprits"][0]["support"]
    assert f"{report['fix_verified_by']} of {report['fix_trainings']} training(s) passed" in result.stdout


def test_a_clean_search_reports_two_trainings_behind_its_fix(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, rules={"GraphFusion": RULES, "UBFusion": []})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found" and report["flaky"] is False
    # One training is one flip away from a false "verified": the fix is always trained twice.
    assert report["fix_verified"] is True and report["fix_verified_by"] == 2 == report["fix_trainings"]
    assert sorted(repeat for on, repeat in launches(tmp_path) if not on) == [0]


def test_fix_trainings_three_trains_the_fix_three_times_and_a_search_without_it_is_refused(tmp_path):
    config = write_config(
        tmp_path, "--culprits", CULPRIT, rules={"GraphFusion": RULES, "UBFusion": []}, search={"fix_trainings": 3}
    )
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found" and report["flaky"] is False
    assert report["fix_verified"] is True and report["fix_verified_by"] == 3 == report["fix_trainings"]
    assert "3 of 3 training(s) passed" in result.stdout
    # The count of the fix's trainings decides what the search asks: another count is another search.
    config.write_text(config.read_text().replace("fix_trainings: 3", "fix_trainings: 2"))
    again = run_fusion_dd("search", cwd=tmp_path)
    assert again.returncode == 2
    assert "(changed: search.fix_trainings)" in again.stderr and len(again.stderr.strip().splitlines()) == 1


def test_a_baseline_that_fails_every_time_is_still_refused(tmp_path):
    # Every training with nothing on lands at the failing level: a real refusal, after
    # the reference was re-trained and the all-on along with it (3 trainings each).
    write_config(
        tmp_path, "--culprits", CULPRIT, "--flip-config", "none@0,1,2,3,4",
        rules={"GraphFusion": RULES, "UBFusion": []},
    )
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "no_failure", report["message"]
    assert "3 of 3 all-on trainings did not fail" in report["message"]
    assert len(report["baseline_runs"]) == 3 and len(report["all_on_runs"]) == 3


def test_resume_in_the_middle_of_re_training_a_reference_trains_nothing_twice(tmp_path):
    write_config(
        tmp_path, "--culprits", CULPRIT, "--flip-config", "none@0",
        rules={"GraphFusion": RULES, "UBFusion": []}, budget=3,
    )
    stopped = run_fusion_dd("search", cwd=tmp_path)
    assert stopped.returncode == 3, stopped.stderr  # the budget ran out while the references disagreed
    resumed = run_fusion_dd("resume", "--budget", "60", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found", report["message"]
    assert [[rule["name"] for rule in c["rules"]] for c in report["culprits"]] == [[CULPRIT]]
    launched = launches(tmp_path)
    assert len(set(launched)) == len(launched), "a (configuration, repeat) was trained twice"
