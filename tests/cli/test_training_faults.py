"""Trainings that misbehave, through the CLI: noisy references, NaN, a device that fails, a given metric
that training contradicts. Real subprocesses against the fake training in tests/fakes."""

from __future__ import annotations

import json

from tests.support.cli import CULPRIT, GRAPH, UB, launches, wrap_fake_train, write_config
from tests.support.fake_training import run_fusion_dd


def test_a_given_all_on_metric_that_training_contradicts_ends_in_no_failure(tmp_path):
    # all_on_metric spares the all-on reference training; nothing really fails, so
    # after a short run of passing answers the search trains all-on itself and says so,
    # instead of reporting every candidate as one "verified" interacting set.
    write_config(tmp_path, score={"all_on_metric": 0.5})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "no_failure" and report["culprits"] == [] and report["fix_verified"] is False
    assert report["fix_config"] is None
    everything = tuple(sorted(GRAPH + UB))
    assert (everything, 0) in launches(tmp_path)
    assert report["trainings"] <= 20


def test_noisy_references_are_repeated_reported_and_refused_under_strict(tmp_path):
    write_config(
        tmp_path, "--culprits", CULPRIT, "--noise", "0.05", "--bad-accuracy", "0.8",
        score={"baseline_repeats": 3, "all_on_repeats": 2, "strict": True, "tolerance": 0.01},
    )
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "too_noisy", report["message"]
    assert len(report["baseline_runs"]) == 3 and len(report["all_on_runs"]) == 2
    assert "standard deviations" in report["message"]
    assert sorted(repeat for on, repeat in launches(tmp_path) if not on) == [0, 1, 2]


def test_a_training_that_goes_nan_is_stopped_early_as_a_failure(tmp_path):
    small = {"GraphFusion": [GRAPH[0], GRAPH[1], CULPRIT], "UBFusion": UB[:2]}
    write_config(
        tmp_path, "--culprits", f"{CULPRIT}:nan", "--steps", "6", "--step-sleep", "0.25", rules=small,
    )
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
    stopped = [trial for trial in report["trials"] if trial.get("early_stop")]
    assert stopped and all(trial["outcome"] == "fail" and trial["kind"] == "nonfinite" for trial in stopped)
    assert all(trial["early_stop"]["steps_saved"] > 0 for trial in stopped)
    assert report["early_stops"]["trainings"] == len(stopped)
    assert "early stops:" in result.stdout


def test_a_device_where_trainings_fail_to_start_is_set_aside(tmp_path):
    wrap_fake_train(
        tmp_path,
        "broken_device.py",
        "if os.environ['ASCEND_DEVICE_ID'] == '1':\n    sys.exit('device 1: runtime init failed')\n",
        "--culprits",
        CULPRIT,
    )
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "device 1 set aside" in result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found"
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
    assert any("device 1 set aside" in warning for warning in report["warnings"])
    on_device_1 = [trial for trial in report["trials"] if trial["device"] == "1"]
    assert len(on_device_1) <= 3
    retried = [trial for trial in report["trials"] if trial["attempt"] == 2]
    assert retried and all(trial["device"] == "0" and trial["outcome"] != "unresolved" for trial in retried)
