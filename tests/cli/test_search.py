"""The CLI end to end, through real subprocesses, against the fake training in tests/fakes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusion_dd.backends.cann.switch import load_switch_file
from fusion_dd.rules import Section
from tests.support.cli import CULPRIT, GRAPH, UB, launches, start_search, wrap_fake_train, write_config
from tests.support.fake_training import (
    run_fusion_dd,
    sigkill_search_when,
)


def test_search_finds_planted_culprit_with_two_devices(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "culprits found" in result.stdout
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found"
    assert report["culprits"] == [
        {
            "rules": [{"name": CULPRIT, "section": "GraphFusion"}],
            "kind": "independent",
            "switched_off": [CULPRIT],
            "reason": f"{CULPRIT} fails on its own, so it must be switched off",
            "trainings": 1,
            "support": 1,
        }
    ]
    assert report["fix_verified"] is True
    assert report["trainings"] == len(report["trials"]) == len(launches(tmp_path))
    assert {trial["device"] for trial in report["trials"]} == {"0", "1"}
    fix = load_switch_file(tmp_path / ".fusion-dd" / "fusion_switch.cfg")
    for name in GRAPH + UB:
        section = "GraphFusion" if name in GRAPH else "UBFusion"
        assert fix.entries[section][name] is (name != CULPRIT)
    assert len(set(launches(tmp_path))) == len(launches(tmp_path)), "a configuration was trained twice"

    again = run_fusion_dd("search", cwd=tmp_path)
    assert again.returncode == 0
    assert "already finished" in again.stderr
    assert CULPRIT in again.stdout
    assert len(launches(tmp_path)) == report["trainings"], "a finished search must not train again"

    status = run_fusion_dd("status", cwd=tmp_path)
    assert status.returncode == 0
    assert "state: finished" in status.stdout


def test_interacting_pair_is_found_and_one_rule_switched_off(tmp_path):
    pair = f"{GRAPH[3]}+{UB[2]}"
    write_config(tmp_path, "--pair", pair, rules={"GraphFusion": GRAPH[:12], "UBFusion": UB[:4]})
    result = run_fusion_dd("search", "--jobs", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    (culprit,) = report["culprits"]
    assert culprit["kind"] == "interacting"
    assert {rule["name"] for rule in culprit["rules"]} == {GRAPH[3], UB[2]}
    assert len(culprit["switched_off"]) == 1 and culprit["reason"]
    assert report["fix_verified"] is True


@pytest.mark.parametrize("strategy", ["bisect", "ddmin"])
def test_overlapping_pairs_switch_off_only_the_shared_rule(tmp_path, strategy):
    # {a, b} and {b, c}: switching off b alone defeats both. The order puts {a, b}
    # first and a before b by name, so the default choice for {a, b} alone is a and
    # the search goes on to find {b, c}; then b replaces a.
    a, b, c = sorted(GRAPH[:3])
    others = GRAPH[3:12]
    order = others[:2] + [a] + others[2:5] + [b] + others[5:8] + [c] + others[8:]
    write_config(
        tmp_path, "--pair", f"{a}+{b}", "--pair", f"{b}+{c}",
        rules={"GraphFusion": order, "UBFusion": UB[:2]}, search={"strategy": strategy},
    )
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert sorted(sorted(rule["name"] for rule in culprit["rules"]) for culprit in report["culprits"]) == [
        sorted([a, b]), sorted([b, c])
    ]
    assert [culprit["switched_off"] for culprit in report["culprits"]] == [[b], [b]]
    assert report["switched_off"] == [b] and report["fix_verified"] is True
    assert report["hitting_set"] == "exact" and report["may_hide"] == [b]
    fix = load_switch_file(tmp_path / ".fusion-dd" / "fusion_switch.cfg")
    assert [name for name in order if fix.state(name, Section.GRAPH) is False] == [b]
    assert f"may hide more culprit sets: {b}" in result.stdout


def test_budget_exhausted_then_resume_with_higher_budget(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, budget=5)
    first = run_fusion_dd("search", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "budget_exhausted"
    assert report["trainings"] == 5
    assert "fusion-dd resume" in report["continue_with"]
    second = run_fusion_dd("resume", "--state-dir", ".fusion-dd", "--budget", "60", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found"
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
    assert len(set(launches(tmp_path))) == len(launches(tmp_path)) == report["trainings"]


def test_resume_after_sigkill_never_retrains_a_finished_configuration(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, "--sleep", "0.3")
    state = tmp_path / ".fusion-dd"
    sigkill_search_when(
        tmp_path,
        state / "journal.jsonl",
        lambda text: text.count('"trial_finished"') >= 4 and text.count('"trial_started"') > text.count('"trial_finished"'),
    )
    resumed = run_fusion_dd("resume", "--state-dir", str(state), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads((state / "report.json").read_text())
    assert report["status"] == "found"
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
    launched = launches(tmp_path)
    assert len(set(launched)) == len(launched), "a finished configuration was trained twice"


def test_changed_definition_is_refused_with_what_changed(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, budget=3)
    assert run_fusion_dd("search", cwd=tmp_path).returncode == 3
    write_config(tmp_path, "--culprits", CULPRIT, budget=3, metric={"goal": "min"})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2
    assert "metric.goal" in result.stderr and "Traceback" not in result.stderr


def test_baseline_failure_is_an_answer_not_an_error(tmp_path):
    write_config(tmp_path, "--nan")
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "baseline_fails"
    assert "not among the candidates" in report["message"]


def test_nothing_to_debug(tmp_path):
    write_config(tmp_path)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0
    assert json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())["status"] == "no_failure"


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


def test_dry_run_launches_nothing(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)
    result = run_fusion_dd("search", "--dry-run", "--devices", "4,5;6,7", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ASCEND_DEVICE_ID=4,5" in result.stdout and "ASCEND_DEVICE_ID=6,7" in result.stdout
    assert f'"{CULPRIT}": "off"' in result.stdout
    assert "nothing was launched" in result.stdout
    assert not (tmp_path / ".fusion-dd").exists()
    assert not (tmp_path / "launch.log").exists()


def test_held_lock_is_a_clear_error(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)
    state = tmp_path / ".fusion-dd"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from fusion_dd.store.journal import Journal;"
            "j = Journal.open(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)",
            str(state),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        result = run_fusion_dd("search", cwd=tmp_path)
        assert result.returncode == 2
        assert "another fusion-dd" in result.stderr
    finally:
        holder.kill()
        holder.wait(timeout=30)
        holder.stdout.close()


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 130), (signal.SIGINT, 130)])
def test_sigterm_and_ctrl_c_stop_cleanly(tmp_path, sig, code):
    write_config(tmp_path, "--culprits", CULPRIT, "--sleep", "30")
    state = tmp_path / ".fusion-dd"
    coordinator = start_search(tmp_path, subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (state / "trials" / "0002" / "supervisor.json").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    status = run_fusion_dd("status", "--state-dir", str(state), cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert f"running (coordinator pid {coordinator.pid})" in status.stdout
    assert "running #0001" in status.stdout and "running #0002" in status.stdout
    coordinator.send_signal(sig)
    out, err = coordinator.communicate(timeout=60)
    assert coordinator.returncode == code, err
    assert "Traceback" not in err
    report = json.loads((state / "report.json").read_text())
    assert report["status"] == "interrupted"
    assert {trial["outcome"] for trial in report["trials"]} == {"cancelled"}
    for trial_dir in (state / "trials").iterdir():
        status = json.loads((trial_dir / "status.json").read_text())
        assert status["cancelled"] is True


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


def flaky_config(tmp_path: Path, budget: int) -> str:
    """A training whose verdict flips on a seeded schedule (seed 1 flips a few mid-search trainings)."""
    culprit = GRAPH[7]
    write_config(
        tmp_path, "--culprits", culprit, "--flip-rate", "0.12", "--seed", "1",
        budget=budget, rules={"GraphFusion": GRAPH[:12], "UBFusion": []},
    )
    return culprit


def test_a_flaky_training_still_yields_the_culprit_and_the_report_shows_the_evidence(tmp_path):
    culprit = flaky_config(tmp_path, budget=80)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert [[rule["name"] for rule in c["rules"]] for c in report["culprits"]] == [[culprit]]
    assert report["flaky"] is True and report["inconsistencies"]
    evidence = report["inconsistencies"][0]
    assert evidence["explanation"] and evidence["configurations"][0]["trainings"]
    assert any(trial["role"] == "repeat" and trial["repeat"] > 0 for trial in report["trials"])
    assert "FLAKY" in result.stdout


def test_resume_of_a_flaky_search_trains_no_repeat_twice(tmp_path):
    culprit = flaky_config(tmp_path, budget=10)
    assert run_fusion_dd("search", cwd=tmp_path).returncode == 3
    resumed = run_fusion_dd("resume", "--budget", "80", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert [[rule["name"] for rule in c["rules"]] for c in report["culprits"]] == [[culprit]]
    launched = launches(tmp_path)
    assert len(set(launched)) == len(launched), "a (configuration, repeat) was trained twice"
