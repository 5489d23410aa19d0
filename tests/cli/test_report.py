"""`fusion-dd report`: the report rebuilt from the journal alone matches the engine's own."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import CULPRIT, GRAPH, UB, write_config
from tests.support.fake_training import call_fusion_dd, fusion_dd_runner, run_fusion_dd, sigkill_search_when

SAME = ("culprits", "trainings", "smallest_failing", "switched_off", "fix_verified", "baseline", "all_on", "threshold")


def journal_lines(state: Path) -> list[str]:
    return (state / "journal.jsonl").read_text().splitlines()


def report_json(state: Path) -> dict:
    return json.loads((state / "report.json").read_text())


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One finished search (an interacting pair and a single culprit) to cut journals from."""
    folder = tmp_path_factory.mktemp("finished")
    write_config(folder, "--culprits", CULPRIT, "--pair", f"{GRAPH[3]}+{UB[2]}")
    result = run_fusion_dd("search", cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder


def cut(finished: Path, folder: Path, finished_trials: int | None, torn: bool) -> Path:
    """A copy of the finished search whose journal ends after ``finished_trials`` trial_finished
    records (None: only search_finished dropped), optionally with a torn last line; no report.json."""
    shutil.copy(finished / "fusion-dd.yaml", folder / "fusion-dd.yaml")
    state = folder / ".fusion-dd"
    state.mkdir()
    kept: list[str] = []
    count = 0
    for line in journal_lines(finished / ".fusion-dd"):
        record = json.loads(line)
        if record["type"] == "search_finished":
            break
        kept.append(line)
        count += record["type"] == "trial_finished"
        if finished_trials is not None and count == finished_trials:
            break
    text = "\n".join(kept) + "\n" + ('{"type": "trial_started", "trial_id": "00' if torn else "")
    (state / "journal.jsonl").write_text(text)
    return state


def test_report_of_a_finished_search_is_the_engines(finished, tmp_path):
    engine = report_json(finished / ".fusion-dd")
    result = run_fusion_dd("report", "--json", cwd=finished)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == engine
    summary = call_fusion_dd("report", cwd=finished)  # the same command's other format, in-process
    assert "culprits found" in summary.stdout and CULPRIT in summary.stdout


def test_a_fix_file_edited_by_hand_is_kept_aside_not_overwritten(finished, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(finished, folder)
    fix = folder / ".fusion-dd" / "fusion_switch.cfg"
    searched = fix.read_text()
    fix.write_text(searched.replace('"off"', '"on"'))  # the user's edit
    result = run_fusion_dd("report", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "fusion_switch.cfg differed from the search's fix (edited?): kept as" in result.stderr
    assert fix.read_text() == searched
    assert (folder / ".fusion-dd" / "fusion_switch.cfg.edited").read_text() == searched.replace('"off"', '"on"')
    again = run_fusion_dd("report", cwd=folder)  # the file is the search's now: nothing more is kept
    assert "differed" not in again.stderr and not (folder / ".fusion-dd" / "fusion_switch.cfg.edited.2").exists()


def test_crash_before_search_finished_rebuilds_the_answer(finished, tmp_path):
    state = cut(finished, tmp_path, None, torn=True)
    result = run_fusion_dd("report", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rebuilt = json.loads(result.stdout)
    engine = report_json(finished / ".fusion-dd")
    assert rebuilt["status"] == "found"
    for key in SAME:
        assert rebuilt[key] == engine[key], key
    assert report_json(state) == rebuilt, "after a crash report.json is rewritten"
    assert (state / "fusion_switch.cfg").exists()


@pytest.mark.parametrize("trials", [4, 9])
def test_crashed_midway_matches_a_resume_that_may_launch_nothing(finished, tmp_path, trials):
    """A torn journal cut mid-search: the rebuilt report equals what the engine itself reports at that point."""
    crashed, resumed = tmp_path / "crashed", tmp_path / "resumed"
    crashed.mkdir()
    resumed.mkdir()
    state = cut(finished, crashed, trials, torn=True)
    result = fusion_dd_runner(trials == 4)("report", "--json", cwd=crashed)  # one case in a real process
    assert result.returncode == 0, result.stderr
    rebuilt = json.loads(result.stdout)
    assert rebuilt["status"] == "interrupted"
    assert "killed or crashed" in rebuilt["message"]
    assert rebuilt["continue_with"].startswith("fusion-dd resume")
    assert report_json(state) == rebuilt

    cut(finished, resumed, trials, torn=True)
    engine_run = run_fusion_dd("resume", "--budget", str(rebuilt["trainings"]), cwd=resumed)
    assert engine_run.returncode == 3, engine_run.stderr  # nothing left to launch: budget exhausted
    engine = report_json(resumed / ".fusion-dd")
    for key in SAME:
        assert rebuilt[key] == engine[key], key
    # The engine recorded its stop; the report now says so, and still agrees.
    again = json.loads(call_fusion_dd("report", "--json", cwd=resumed).stdout)
    assert again["status"] == "budget_exhausted"
    for key in SAME:
        assert again[key] == engine[key], key


def test_interrupted_search_report_matches_the_engines(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, budget=6)
    first = run_fusion_dd("search", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    engine = report_json(tmp_path / ".fusion-dd")
    rebuilt = json.loads(run_fusion_dd("report", "--json", cwd=tmp_path).stdout)
    assert rebuilt["status"] == engine["status"] == "budget_exhausted"
    for key in SAME + ("continue_with", "trials"):
        assert rebuilt[key] == engine[key], key


def test_a_session_killed_after_a_clean_stop_is_reported_as_killed_not_as_that_stop(tmp_path):
    """Only a stop journaled by the last session says how it ended: an earlier session's does not."""
    write_config(tmp_path, "--culprits", CULPRIT, budget=6)
    assert run_fusion_dd("search", cwd=tmp_path).returncode == 3  # a clean stop: budget exhausted
    journal = tmp_path / ".fusion-dd" / "journal.jsonl"

    def resumed_and_training(text: str) -> bool:
        tail = text.split('"type":"session_started"')[-1] if text.count('"type":"session_started"') > 1 else ""
        return '"type":"trial_launched"' in tail

    sigkill_search_when(tmp_path, journal, resumed_and_training, args=("resume", "--budget", "40"))
    status = call_fusion_dd("status", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert "state: stopped (coordinator gone)" in status.stdout, status.stdout
    # The killed session's own cap, not a raised one as after a spent budget.
    assert status.stdout.split("continue with", 1)[1].splitlines()[0].endswith("--budget 40'"), status.stdout
    # Nothing runs it: the time left, never a finishing time.
    estimate = next(line.strip() for line in status.stdout.splitlines() if line.strip().startswith("estimate:"))
    assert "finishing" not in estimate and estimate.endswith(" of training once resumed"), estimate
    rebuilt = json.loads(run_fusion_dd("report", "--json", cwd=tmp_path).stdout)
    assert rebuilt["status"] == "interrupted" and "killed or crashed" in rebuilt["message"]


def test_report_while_a_search_runs_writes_nothing_into_the_state_dir(finished, tmp_path):
    """A coordinator holds the lock (here: this test): report reads, prints, writes only where --html points."""
    state = cut(finished, tmp_path, 6, torn=False)
    lock = open(state / "lock", "w")
    lock.write(str(os.getpid()))
    lock.flush()
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        before = {path.name: path.stat().st_mtime_ns for path in state.iterdir()}
        result = run_fusion_dd("report", "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        rebuilt = json.loads(result.stdout)
        assert rebuilt["status"] == "running"
        assert rebuilt["trainings"] == 6
        assert f"coordinator pid {os.getpid()}" in result.stderr
        assert {path.name: path.stat().st_mtime_ns for path in state.iterdir()} == before
        # The lock is still ours: report never took or broke it.
        with pytest.raises(BlockingIOError):
            with open(state / "lock") as other:
                fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        lock.close()


def test_a_killed_search_leaves_a_report_of_its_finished_trials(tmp_path):
    """report.json is rewritten as trials finish: SIGKILL leaves a current one."""
    write_config(tmp_path, "--culprits", CULPRIT, "--sleep", "0.3")
    state = tmp_path / ".fusion-dd"
    sigkill_search_when(tmp_path, state / "journal.jsonl", lambda text: text.count('"trial_finished"') >= 4)
    records = [json.loads(line) for line in journal_lines(state) if line.endswith("}")]
    finished_ids = {record["trial_id"] for record in records if record["type"] == "trial_finished"}
    snapshot = report_json(state)
    assert snapshot["status"] == "running"
    in_report = {trial["trial_id"] for trial in snapshot["trials"] if trial["outcome"] not in ("running", "cancelled")}
    # The last trial may have finished between its journal record and the snapshot's write.
    assert finished_ids - in_report <= {max(finished_ids)}
    assert len(in_report) >= len(finished_ids) - 1 >= 3


def _read_only_copy(finished: Path, folder: Path) -> tuple[Path, str | None]:
    """A copy of the finished search with its state dir behind a read-only bind mount (root alone: chmod is no bar)."""
    import subprocess

    shutil.copytree(finished, folder / "search")
    state = folder / "search" / ".fusion-dd"
    if os.geteuid() != 0:
        return state, "a read-only bind mount needs root"
    mount = subprocess.run(["mount", "--bind", "-o", "ro", str(state), str(state)], capture_output=True, text=True)
    if mount.returncode != 0:
        return state, f"cannot bind-mount read-only here: {mount.stderr.strip()}"
    probe = state / ".write-probe"
    try:
        probe.write_text("")
    except OSError:
        return state, None
    probe.unlink()
    subprocess.run(["umount", str(state)], capture_output=True)
    return state, "the bind mount did not become read-only"


def test_report_and_status_work_on_a_read_only_state_dir(finished, tmp_path):
    import subprocess

    state, reason = _read_only_copy(finished, tmp_path)
    if reason is not None:
        pytest.skip(reason)
    try:
        expected = report_json(state)
        before = sorted(path.name for path in state.iterdir())
        cwd = state.parent
        as_json = run_fusion_dd("report", "--json", cwd=cwd)
        assert as_json.returncode == 0, as_json.stderr
        assert {key: json.loads(as_json.stdout)[key] for key in SAME} == {key: expected[key] for key in SAME}
        assert "read-only" in as_json.stderr and "Traceback" not in as_json.stderr
        page = tmp_path / "elsewhere" / "report.html"
        page.parent.mkdir()
        html = call_fusion_dd("report", "--html", str(page), cwd=cwd)
        assert html.returncode == 0, html.stderr
        assert page.stat().st_size > 0
        summary = call_fusion_dd("report", cwd=cwd)
        assert summary.returncode == 0 and CULPRIT in summary.stdout, summary.stderr
        status = run_fusion_dd("status", cwd=cwd)
        assert status.returncode == 0, status.stderr
        assert sorted(path.name for path in state.iterdir()) == before
    finally:
        subprocess.run(["umount", str(state)], capture_output=True)


def test_report_html_into_a_missing_folder_names_the_path_given(finished, tmp_path):
    target = tmp_path / "missing" / "page.html"
    result = run_fusion_dd("report", "--html", str(target), cwd=finished)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"fusion-dd: error: --html {target}: cannot write the page (No such file or directory); choose a writable path"
    )
    assert ".tmp" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("given", [".", "./", "..", "sub"])
def test_report_html_naming_a_directory_is_one_line_not_a_crash(finished, given):
    (finished / "sub").mkdir(exist_ok=True)
    result = call_fusion_dd("report", "--html", given, cwd=finished)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("fusion-dd: error: --html ")
    assert "is a directory; give the page's file path" in result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
