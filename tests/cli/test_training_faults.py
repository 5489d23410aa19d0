"""Trainings that misbehave, through the CLI: noisy references, NaN, a device that fails, a given metric
that training contradicts. Real subprocesses against the fake training in tests/fakes."""

from __future__ import annotations

import json

import pytest
import yaml

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
    # all-on went NaN too: the summary says what it did, not a blank where its metric would be
    on = next(line for line in result.stdout.splitlines() if line.strip().startswith("all candidates on:"))
    assert "fails, no metric (stopped early at step" in on and "loss nan" in on, result.stdout


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


def test_a_training_that_exits_125_is_recorded_as_unevaluable_not_as_a_crash(tmp_path):
    """Exit 125 (git bisect's "skip"): the training cannot evaluate this configuration. Here any
    configuration with GRAPH[7] on but GRAPH[8] off, as if GRAPH[7] needed GRAPH[8] to build.
    Such a training is not retried, never counts as a failure, and the summary and the page list it."""
    prelude = (
        "import json\n"
        "switch = json.load(open(os.environ['FUSION_DD_SWITCH_FILE']))['Switch']\n"
        "on = {name for section in switch.values() for name, state in section.items() if state == 'on'}\n"
        f"if {GRAPH[7]!r} in on and {GRAPH[8]!r} not in on:\n"
        "    sys.exit(125)\n"
    )
    wrap_fake_train(tmp_path, "needs_a_pass.py", prelude, "--culprits", CULPRIT)
    result = run_fusion_dd("search", cwd=tmp_path, env={"FUSION_DD_HTML": "1"})
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found"
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
    skipped = [trial for trial in report["trials"] if trial.get("kind") == "unevaluable"]
    assert skipped, "the search never asked a configuration the training cannot evaluate"
    for trial in skipped:
        assert trial["outcome"] == "unresolved" and trial["attempt"] == 1 and "exit code 125" in trial["reason"]
        on = set(trial["configuration"])
        assert GRAPH[7] in on and GRAPH[8] not in on
        retried = [other for other in report["trials"] if other["configuration"] == trial["configuration"]
                   and other["repeat"] == trial["repeat"] and other["attempt"] > 1]
        assert not retried, "a training that cannot evaluate its configuration is not trained again"
    assert not any(trial.get("kind") == "crash" for trial in report["trials"])
    assert [entry["trial_id"] for entry in report["unevaluable"]] == [trial["trial_id"] for trial in skipped]
    assert f"cannot evaluate: {len(skipped)} training(s) exited 125" in result.stdout
    page = (tmp_path / ".fusion-dd" / "report.html").read_text()
    assert "cannot evaluate (the training exited 125)" in page


@pytest.mark.parametrize("how", ["crash", "exit125"])
def test_a_pass_the_training_cannot_run_without_is_reported_as_required_and_the_culprit_still_found(tmp_path, how):
    """The training cannot run with GRAPH[3] off (a compile error, or its own exit 125), so the
    all-off baseline cannot run: GRAPH[3] is found required, kept on in every later training and in
    the fix, listed apart from the culprits with the error's line, and the culprit is still found."""
    required = GRAPH[3]
    ending = "print('RuntimeError: cannot compile the graph without the pass', flush=True)\n    sys.exit(1)\n"
    prelude = (
        "import json\n"
        "switch = json.load(open(os.environ['FUSION_DD_SWITCH_FILE']))['Switch']\n"
        "on = {name for section in switch.values() for name, state in section.items() if state == 'on'}\n"
        f"if {required!r} not in on:\n"
        + (f"    {ending}" if how == "crash" else "    sys.exit(125)\n")
    )
    wrap_fake_train(tmp_path, "needs_a_pass.py", prelude, "--culprits", CULPRIT)
    result = run_fusion_dd("search", cwd=tmp_path, env={"FUSION_DD_HTML": "1"})
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found", report["message"]
    assert [[rule["name"] for rule in culprit["rules"]] for culprit in report["culprits"]] == [[CULPRIT]]
    assert report["culprits"][0]["support"] >= 1
    assert report["required"]["rules"] == [required]
    assert report["switched_off"] == [CULPRIT] and report["fix_verified"]
    fix = json.loads((tmp_path / ".fusion-dd" / "fusion_switch.cfg").read_text())["Switch"]
    assert fix["GraphFusion"][required] == "on" and fix["GraphFusion"][CULPRIT] == "off"
    assert report["required"]["trial_id"] in {trial["trial_id"] for trial in report["trials"] if not trial["configuration"]}
    # After the required search, every training keeps the required pass on.
    ran = [tuple(on) for on, _ in launches(tmp_path)]
    after = ran[next(index for index, on in enumerate(ran) if on == (required,)) :]
    assert after and all(required in on for on in after)
    assert report["baseline"] is not None and "(required on, rest off)" in result.stdout
    assert f"required: {required} must stay on for the training to run" in result.stdout + result.stderr
    assert f"  required: {required} (not a culprit" in result.stdout
    if how == "crash":
        assert "| RuntimeError: cannot compile the graph without the pass" in result.stdout
    assert "set aside" not in result.stdout + result.stderr  # crashes of the required search retire no device
    assert "fusion is not the cause" not in result.stdout
    page = (tmp_path / ".fusion-dd" / "report.html").read_text()
    assert 'id="required"' in page and required in page
    # A replay of the journal (fusion-dd report) tells the same.
    replayed = run_fusion_dd("report", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert f"  required: {required} (not a culprit" in replayed.stdout


@pytest.mark.parametrize(
    "metric",
    [
        {"key": "Top-1"},  # no pattern: the metric is read from metrics.jsonl, which stays empty
        {"pattern": r"Top-1=(\S+)"},  # a pattern that wants '=' where the training prints ': '
    ],
)
def test_a_metric_printed_where_the_config_does_not_read_it_is_refused_with_the_pattern_that_reads_it(tmp_path, metric):
    config = write_config(tmp_path, "--culprits", CULPRIT, "--no-metrics-file", "--metric-name", "Top-1", budget=30)
    document = yaml.safe_load(config.read_text())
    document["metric"] = metric
    config.write_text(yaml.safe_dump(document))
    refused = run_fusion_dd("search", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert len(launches(tmp_path)) == 2  # training the references again would print the metric the same way
    error = next(line for line in refused.stderr.splitlines() if line.startswith("fusion-dd: error:"))
    assert "output.log prints 'Top-1: 0.9'" in error or "output.log prints 'Top-1: 0.5'" in error, error
    advised = error.rsplit("set metric.pattern: ", 1)[1]
    document["metric"]["pattern"] = yaml.safe_load(advised)  # the advice as a user would paste it into the file
    config.write_text(yaml.safe_dump(document))
    fixed = run_fusion_dd("search", "--restart", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found" and report["baseline"] == 0.9 and report["all_on"] == 0.5
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
