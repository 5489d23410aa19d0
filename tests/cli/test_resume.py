"""Stopping and going on through the CLI: budget, SIGKILL, signals, the lock, a changed config, flaky resumes.

Real subprocesses against the fake training in tests/fakes (split from test_search.py so that
the two files run on both xdist workers)."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import CULPRIT, GRAPH, launches, start_search, write_config
from tests.support.fake_training import (
    call_fusion_dd,
    fusion_dd_runner,
    run_fusion_dd,
    sigkill_search_when,
    start_fusion_dd,
)
from tests.support.processes import eventually


def test_budget_exhausted_then_resume_with_higher_budget(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, budget=5)
    first = run_fusion_dd("search", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "budget_exhausted"
    assert report["trainings"] == 5
    assert "fusion-dd resume" in report["continue_with"]
    journal = (tmp_path / ".fusion-dd" / "journal.jsonl").read_bytes()
    # A budget below the five trainings spent is refused in one line, before anything is journaled.
    low = run_fusion_dd("resume", "--state-dir", ".fusion-dd", "--budget", "4", cwd=tmp_path)
    assert low.returncode == 2
    assert low.stderr.strip().splitlines()[-1] == (
        "fusion-dd: error: budget 4 is below the 5 trainings this search has already launched (the budget counts "
        "every session's); give a larger one, e.g. --budget 15"
    ), low.stderr
    assert "Traceback" not in low.stderr
    assert (tmp_path / ".fusion-dd" / "journal.jsonl").read_bytes() == journal
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


def test_a_resume_with_another_fix_prefer_is_refused_naming_it(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, budget=3)
    assert run_fusion_dd("search", cwd=tmp_path).returncode == 3
    write_config(tmp_path, "--culprits", CULPRIT, budget=3, fix={"prefer": "speed"})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2
    assert "fix.prefer" in result.stderr and "Traceback" not in result.stderr


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
    status_of = fusion_dd_runner(sig == signal.SIGTERM)
    seen: list[subprocess.CompletedProcess[str]] = []

    def both_running() -> bool:
        seen.append(status_of("status", "--state-dir", str(state), cwd=tmp_path))
        return "running #0001" in seen[-1].stdout and "running #0002" in seen[-1].stdout

    assert eventually(both_running, within=60), seen[-1].stdout + seen[-1].stderr
    assert seen[-1].returncode == 0, seen[-1].stderr
    assert f"running (coordinator pid {coordinator.pid})" in seen[-1].stdout
    launched_at = time.monotonic()
    coordinator.send_signal(sig)
    out, err = coordinator.communicate(timeout=60)
    assert coordinator.returncode == code, err
    assert "Traceback" not in err
    report = json.loads((state / "report.json").read_text())
    assert report["status"] == "interrupted"
    assert {trial["outcome"] for trial in report["trials"]} == {"cancelled"}
    # Both held their devices from their launch to the interrupt: accelerator time the cost shows.
    cost = report["cost"]
    assert cost["cancelled"] == 2, cost
    assert 0 < cost["cancelled_device_seconds"] == cost["device_seconds"], cost
    assert cost["cancelled_device_seconds"] < 2 * (time.monotonic() - launched_at) + 60, cost
    assert f"in {cost['cancelled']} cancelled training(s)" in out + err
    for trial_dir in (state / "trials").iterdir():
        status = json.loads((trial_dir / "status.json").read_text())
        assert status["cancelled"] is True


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


def _mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a small tmpfs at ``path``; the reason when this machine cannot."""
    import os

    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    return None if done.returncode == 0 else f"cannot mount a tmpfs here: {done.stderr.strip()}"


def _fill(directory: Path) -> Path:
    """Write a file into ``directory`` until its filesystem is full."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def test_a_disk_filled_mid_run_names_the_path_and_loses_no_finished_training(tmp_path):
    state = tmp_path / "state"
    reason = _mount_tmpfs(state, "16m")
    if reason is not None:
        pytest.skip(reason)
    try:
        config = write_config(tmp_path, "--culprits", CULPRIT, "--sleep", "0.5")
        config.write_text(config.read_text() + f"state_dir: {state}\n")
        coordinator = start_search(tmp_path, subprocess.PIPE)
        try:
            journal = state / "journal.jsonl"
            deadline = time.monotonic() + 120
            while not (journal.exists() and journal.read_text().count('"trial_finished"') >= 3):
                assert coordinator.poll() is None and time.monotonic() < deadline, coordinator.communicate()
                time.sleep(0.05)
            filler = _fill(state)
            _, err = coordinator.communicate(timeout=120)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
                coordinator.communicate()
        assert coordinator.returncode == 2, err
        assert "Traceback" not in err
        error = err.strip().splitlines()[-1]
        assert error.startswith("fusion-dd: error: ") and "No space left on device" in error, err
        assert str(state) in error, error  # names the file it could not write
        finished = {
            json.loads(line)["trial_id"]
            for line in journal.read_text().splitlines()
            if '"trial_finished"' in line and '"kind":"metric"' in line
        }
        assert len(finished) >= 3
        before = len(launches(tmp_path))
        filler.unlink()
        resumed = run_fusion_dd("resume", "--state-dir", str(state), cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        report = json.loads((state / "report.json").read_text())
        assert report["status"] == "found"
        assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
        configs = {trial["trial_id"]: (frozenset(trial["configuration"]), trial["repeat"]) for trial in report["trials"]}
        again = {(frozenset(on), repeat) for on, repeat in launches(tmp_path)[before:]}
        assert not again & {configs[name] for name in finished}, "a finished training was trained again"
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


def _interrupt_when_journaled(cwd: Path, args: list[str], journal: Path, kind: str) -> subprocess.CompletedProcess:
    """Start ``fusion-dd ARGS``, SIGINT it as soon as a ``kind`` record is in its journal; its outcome."""
    from tests.support.fake_training import interrupt_when_journaled

    return interrupt_when_journaled(cwd, args, journal, f'"type":"{kind}"')


RECORD_TYPES = ["search_started", "session_started", "trial_started", "trial_launched", "trial_finished", "question"]


@pytest.mark.parametrize("kind", RECORD_TYPES)
def test_sigint_right_after_a_record_is_appended_exits_130_and_the_search_resumes(tmp_path, kind):
    """Ctrl-C at any moment of the journal's appends: never "tampered", always a clean stop and a resume."""
    write_config(tmp_path, "--culprits", CULPRIT)
    state = tmp_path / ".fusion-dd"
    stopped = _interrupt_when_journaled(tmp_path, ["search"], state / "journal.jsonl", kind)
    assert stopped.returncode == 130, stopped.stderr
    assert "Traceback" not in stopped.stderr and "another program" not in stopped.stderr, stopped.stderr
    resumed = run_fusion_dd("resume", "--state-dir", str(state), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads((state / "report.json").read_text())
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]


def test_sigint_right_after_the_guides_ranking_is_journaled_exits_130_and_the_demo_resumes(tmp_path):
    """The guide's ranking is the largest record a search writes: the case that was called tampered with."""
    args = ["demo", "--scenario", "quick", "--jobs", "2"]
    stopped = _interrupt_when_journaled(tmp_path, args, tmp_path / ".fusion-dd-demo-quick" / "journal.jsonl", "guide")
    assert stopped.returncode == 130, stopped.stderr
    assert "another program" not in stopped.stderr and "Traceback" not in stopped.stderr, stopped.stderr
    resumed = run_fusion_dd(*args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "all planted culprit sets found" in resumed.stdout


RULE_NAMES_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "journal-rule-names"


def copy_rule_names_journal(tmp_path: Path, journal: str) -> Path:
    """A search journaled with configurations by rule name, as its user left it (trial dirs not needed)."""
    import shutil

    from tests.support.fake_training import FAKE_TRAIN

    shutil.copy(RULE_NAMES_FIXTURE / "fusion-dd.yaml", tmp_path / "fusion-dd.yaml")
    shutil.copy(FAKE_TRAIN, tmp_path / "fake_train.py")
    state = tmp_path / ".fusion-dd"
    state.mkdir()
    shutil.copy(RULE_NAMES_FIXTURE / journal, state / "journal.jsonl")
    return state


def test_a_journal_with_configurations_by_rule_name_resumes_without_repeating_a_training(tmp_path):
    state = copy_rule_names_journal(tmp_path, "journal-exhausted.jsonl")
    legacy = (state / "journal.jsonl").read_bytes()
    finished_before = {
        tuple(record["config"])
        for record in map(json.loads, legacy.splitlines())
        if record["type"] == "trial_started"
    }
    # search beside the config: the journal's config_path names the directory it was made in.
    result = run_fusion_dd("search", "--budget", "60", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((state / "report.json").read_text())
    assert report["status"] == "found"
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == ["AASquareSumMaximumRsqrtMulFusionPass"]
    new = [config for config, _ in launches(tmp_path)]
    assert new and not set(new) & finished_before, "a training the old journal had finished was repeated"
    # The finished fixture's search took 8; the fix is now always trained twice ("verified" rests on both).
    assert report["trainings"] == len(finished_before) + len(new) == 9
    assert (state / "journal.jsonl").read_bytes().startswith(legacy), "the old lines must stay as they were"


def test_a_finished_journal_with_the_report_in_search_finished_shows_its_answer(tmp_path):
    state = copy_rule_names_journal(tmp_path, "journal-finished.jsonl")
    records = [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines()]
    journaled = records[-1]["report"]
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "already finished" in result.stderr
    assert not (tmp_path / "launch.log").exists(), "a finished search trains nothing"
    report = json.loads((state / "report.json").read_text())
    assert report["status"] == journaled["status"] == "found"
    assert report["switched_off"] == journaled["switched_off"] == ["AASquareSumMaximumRsqrtMulFusionPass"]
    assert report["trainings"] == journaled["trainings"] == 8


def journal_records(state: Path) -> list[dict]:
    return [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines()]


def devices_after_last_session(state: Path) -> set[tuple[str, ...]]:
    """The devices the trainings of the search's last session were started on."""
    records = journal_records(state)
    last = max(index for index, record in enumerate(records) if record["type"] == "session_started")
    return {tuple(record["device"]) for record in records[last:] if record["type"] == "trial_started"}


def test_interrupted_on_two_devices_the_printed_hint_resumes_on_both(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, "--sleep", "0.3", train={"devices": [0]})
    state = tmp_path / ".fusion-dd"
    coordinator = start_fusion_dd(tmp_path, "search", "--devices", "0,1", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert eventually(
            lambda: (state / "journal.jsonl").exists()
            and (state / "journal.jsonl").read_text().count('"trial_finished"') >= 3,
            within=120,
        )
        coordinator.send_signal(signal.SIGINT)
        out, err = coordinator.communicate(timeout=120)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait(timeout=30)
    assert coordinator.returncode == 130, err
    hint = [line for line in out.splitlines() if line.startswith("  continue with: ")]
    assert hint, out
    argv = shlex.split(hint[-1].removeprefix("  continue with: "))
    assert argv[:2] == ["fusion-dd", "resume"] and "--devices" in argv, argv
    resumed = run_fusion_dd(*argv[1:], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((state / "report.json").read_text())["status"] == "found"
    assert devices_after_last_session(state) == {("0",), ("1",)}


def test_resume_takes_the_devices_of_the_last_session_from_the_journal_and_says_so(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, budget=5, train={"devices": [0]})
    first = run_fusion_dd("search", "--devices", "0,1", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    resumed = run_fusion_dd("resume", "--budget", "60", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming on devices 0,1 (from the journal); --devices overrides" in resumed.stderr.splitlines()
    assert devices_after_last_session(tmp_path / ".fusion-dd") == {("0",), ("1",)}


def test_a_budget_given_on_the_command_line_caps_the_resumes_too(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)  # the config's own budget is larger
    first = run_fusion_dd("search", "--budget", "5", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    spent = launches(tmp_path)
    bare = run_fusion_dd("resume", cwd=tmp_path)
    assert bare.returncode == 3, bare.stderr  # still spent: nothing trained beyond the cap the user set
    assert "resuming on devices 0,1 with a budget of 5 trainings (from the journal); --devices, --budget override" in (
        bare.stderr.splitlines()
    ), bare.stderr
    assert launches(tmp_path) == spent
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "budget_exhausted" and report["trainings"] == 5
    raised = run_fusion_dd(*shlex.split(report["continue_with"])[1:], cwd=tmp_path)  # the hint names a larger one
    assert raised.returncode == 0, raised.stderr
    assert json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())["status"] == "found"


def test_a_config_changed_to_other_devices_or_another_launcher_than_the_journals_is_refused_in_one_line(tmp_path):
    config = write_config(tmp_path, "--culprits", CULPRIT, budget=5, train={"devices": [0]})
    assert call_fusion_dd("search", "--devices", "0,1", cwd=tmp_path).returncode == 3
    journal = (tmp_path / ".fusion-dd" / "journal.jsonl").read_bytes()
    write_config(tmp_path, "--culprits", CULPRIT, budget=5, train={"devices": [3]})
    refused = call_fusion_dd("search", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"fusion-dd: error: {config}: train.devices says 3, but this search ran on devices 0,1 (its journal); "
        "say which on the command line (--devices or --jobs)"
    ]
    write_config(tmp_path, "--culprits", CULPRIT, budget=5, train={"launcher": "dask", "scheduler": "tcp://127.0.0.1:9"})
    refused = call_fusion_dd("search", cwd=tmp_path)
    assert refused.returncode == 2
    [line] = refused.stderr.splitlines()
    assert "the dask launcher (scheduler tcp://127.0.0.1:9)" in line and "ran on the local launcher" in line, line
    assert (tmp_path / ".fusion-dd" / "journal.jsonl").read_bytes() == journal, "a refusal journals nothing"


def placements_after_last_session(state: Path) -> set[str]:
    """The launchers the trainings of the search's last session were placed by."""
    records = journal_records(state)
    last = max(index for index, record in enumerate(records) if record["type"] == "session_started")
    return {record["placement"]["launcher"] for record in records[last:] if record["type"] == "trial_launched"}


@pytest.mark.cluster
def test_interrupted_on_a_dask_cluster_a_bare_resume_and_the_printed_hint_go_on_on_the_cluster(tmp_path, cluster):
    import yaml

    from tests.support.clusters import dask_config

    config = dask_config(tmp_path, cluster, None, "--sleep", "0.3", small=False)
    document = yaml.safe_load(config.read_text())
    del document["train"]["launcher"], document["train"]["scheduler"]  # the cluster on the command line only
    config.write_text(yaml.safe_dump(document))
    state = tmp_path / ".fusion-dd"
    coordinator = start_fusion_dd(
        tmp_path, "search", "--scheduler", cluster.address, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert eventually(
            lambda: (state / "journal.jsonl").exists()
            and (state / "journal.jsonl").read_text().count('"trial_finished"') >= 3,
            within=120,
        )
        coordinator.send_signal(signal.SIGINT)
        out, err = coordinator.communicate(timeout=120)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait(timeout=30)
    assert coordinator.returncode == 130, err
    hint = [line for line in out.splitlines() if line.startswith("  continue with: ")]
    argv = shlex.split(hint[-1].removeprefix("  continue with: "))
    assert argv[:2] == ["fusion-dd", "resume"] and argv[argv.index("--scheduler") + 1] == cluster.address, argv
    # A bare resume, two trainings more: on the cluster, and it says where from.
    launched = json.loads((state / "report.json").read_text())["trainings"]
    bare = run_fusion_dd("resume", "--budget", str(launched + 2), cwd=tmp_path)
    assert bare.returncode == 3, bare.stderr
    assert (
        f"resuming on every device worker with the dask launcher (scheduler {cluster.address}) "
        "(from the journal); --devices, --scheduler or --launcher local override"
    ) in bare.stderr.splitlines(), bare.stderr
    assert placements_after_last_session(state) == {"dask"}
    resumed = run_fusion_dd(*argv[1:], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((state / "report.json").read_text())["status"] == "found"
    assert placements_after_last_session(state) == {"dask"}


def test_a_journal_leaves_out_what_replay_knows_and_the_finished_report_puts_it_back(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)
    assert run_fusion_dd("search", cwd=tmp_path).returncode == 0
    state = tmp_path / ".fusion-dd"
    written = json.loads((state / "report.json").read_text())
    records = [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines()]
    trials = [r for r in records if r["type"] in ("trial_started", "trial_launched", "trial_finished", "question")]
    # The usual trial directory and log, absent signals, early stops and pids, and the question's
    # time cost bytes at every trial and say nothing replay does not know.
    assert trials and not any(key in r for r in trials for key in ("trial_dir", "log"))
    assert not any(r.get(key, 0) is None for r in trials for key in ("signal", "early_stop", "supervisor_pid"))
    assert not any("time" in r for r in records if r["type"] == "question")
    finished = records[-1]
    assert finished["type"] == "search_finished" and "candidates" not in finished["report"]
    (state / "report.json").unlink()
    shown = run_fusion_dd("resume", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    again = json.loads((state / "report.json").read_text())
    assert again["candidates"] == written["candidates"] and len(again["candidates"]) == len(GRAPH) + 6
    assert [(t["trial_dir"], t["log"]) for t in again["trials"]] == [(t["trial_dir"], t["log"]) for t in written["trials"]]
    assert all(t["log"] == f"{t['trial_dir']}/output.log" for t in again["trials"])


def test_the_default_log_name_of_replay_is_the_supervisors():
    from fusion_dd.runner.supervisor import LOG_FILE
    from fusion_dd.store.state import LOG_NAME

    assert LOG_NAME == LOG_FILE


def test_resume_and_status_find_the_search_through_a_config_edited_since(tmp_path):
    """Without --state-dir they read only state_dir from fusion-dd.yaml: they run on the journaled config."""
    config = write_config(tmp_path, "--culprits", CULPRIT, budget=5)
    config.write_text(config.read_text() + "state_dir: runs\n")
    assert run_fusion_dd("search", cwd=tmp_path).returncode == 3
    config.write_text(config.read_text() + "next_experiment: 1\n")  # an edit the search never saw
    refused = run_fusion_dd("search", cwd=tmp_path)
    assert refused.returncode == 2 and "next_experiment: unknown key" in refused.stderr, refused.stderr
    status = run_fusion_dd("status", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"search in {(tmp_path / 'runs').resolve()}"), status.stdout
    resumed = run_fusion_dd("resume", "--budget", "60", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "runs" / "report.json").read_text())["status"] == "found"
    config.write_text(config.read_text().replace("state_dir: runs\n", "state_dir: 3\n"))
    bad = run_fusion_dd("status", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "fusion-dd: error: fusion-dd.yaml: state_dir: must be a non-empty string, got 3"
    ], bad.stderr
