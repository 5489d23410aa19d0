"""The journal as a user meets it, through the CLI: deletion, stray trial dirs,
checksums, 0.1.0 journals, budget, progress, status, interrupted reports, --restart.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

from fusion_dd.store.journal import Journal
from tests.support import FIXTURES
from tests.support.cli import CULPRIT, launches, start_search, wrap_fake_train, write_config
from tests.support.fake_training import FAKE_TRAIN, call_fusion_dd, fusion_dd_runner, run_fusion_dd
from tests.support.processes import eventually

FIXTURE = FIXTURES / "journal-0.1.0"


def journal_lines(state: Path) -> list[dict]:
    return [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines()]


def exhausted_search(tmp_path: Path, budget: int = 5) -> Path:
    """A search that ran out of budget: a journal with finished trainings to resume."""
    write_config(tmp_path, "--culprits", CULPRIT, budget=budget)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    return tmp_path / ".fusion-dd"


def report_of(state: Path) -> dict:
    return json.loads((state / "report.json").read_text())


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)


def test_a_journal_deleted_mid_search_stops_it_before_the_next_launch_and_nothing_is_overwritten(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, "--sleep", "3")
    state = tmp_path / ".fusion-dd"
    journal = state / "journal.jsonl"
    coordinator = start_search(tmp_path, subprocess.PIPE)
    try:
        # Both references launched and journaled as such, the second record's line whole (a record's
        # type is its last key): no append is under way while they train.
        def references_launched() -> bool:
            text = journal.read_bytes() if journal.exists() else b""
            return text.count(b'"type":"trial_launched"') == 2 and text.endswith(b"}\n")

        assert eventually(references_launched, within=60), "the references never started"
        with open(journal, "rb") as held:
            before = held.read()
            journal.unlink()
            out, err = coordinator.communicate(timeout=120)
            written_after = held.read()
    finally:
        stop(coordinator)
    assert coordinator.returncode == 2, err
    assert "Traceback" not in err
    assert "the journal was deleted while this search was running" in err
    assert written_after == b"", "records went on into the deleted file"
    assert before.count(b'"trial_started"') == 2
    assert sorted(path.name for path in (state / "trials").iterdir()) == ["0001", "0002"]
    assert len(launches(tmp_path)) == 2, "a training was launched after the journal was gone"
    logs = {name: (state / "trials" / name / "output.log").read_bytes() for name in ("0001", "0002")}

    # The next search must not start over in that directory and overwrite trials/0001...
    again = run_fusion_dd("search", cwd=tmp_path)
    assert again.returncode == 2, again.stderr
    assert "no journal" in again.stderr and "--restart" in again.stderr and "Traceback" not in again.stderr
    assert len(launches(tmp_path)) == 2
    assert {name: (state / "trials" / name / "output.log").read_bytes() for name in logs} == logs

    # ... but --restart moves it aside, untouched, and starts afresh (trainings without the sleep now).
    write_config(tmp_path, "--culprits", CULPRIT)
    fresh = run_fusion_dd("search", "--restart", cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    kept = tmp_path / ".fusion-dd.1"
    assert {name: (kept / "trials" / name / "output.log").read_bytes() for name in logs} == logs
    assert report_of(state)["status"] == "found"


def test_a_trial_directory_the_journal_does_not_know_is_never_reused(tmp_path):
    state = exhausted_search(tmp_path)
    stray = state / "trials" / "0006"
    stray.mkdir()
    (stray / "output.log").write_text("results of a training fusion-dd knows nothing about\n")
    result = run_fusion_dd("resume", "--budget", "60", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "trials/0006" in result.stderr and "left untouched" in result.stderr
    assert [path.name for path in stray.iterdir()] == ["output.log"]
    assert (stray / "output.log").read_text() == "results of a training fusion-dd knows nothing about\n"
    report = report_of(state)
    assert report["status"] == "found"
    ids = [trial["trial_id"] for trial in report["trials"]]
    assert "0006" not in ids and "0007" in ids
    assert report["trainings"] == len(launches(tmp_path))


def test_a_journal_line_edited_into_other_valid_json_is_refused_with_file_and_line(tmp_path):
    state = exhausted_search(tmp_path)
    lines = (state / "journal.jsonl").read_text().splitlines(keepends=True)
    number = next(
        index
        for index, line in enumerate(lines, start=1)
        if '"trial_finished"' in line and '"value":0.5' in line and index < len(lines)
    )
    lines[number - 1] = lines[number - 1].replace('"value":0.5', '"value":0.9')
    (state / "journal.jsonl").write_text("".join(lines))
    before = len(launches(tmp_path))
    for command in (["resume", "--budget", "60"], ["status"], ["search"]):
        # status reads and writes nothing: in-process; the commands that would train, real processes.
        result = fusion_dd_runner(command != ["status"])(*command, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        assert f"journal.jsonl:{number}: journal line does not match its checksum" in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert len(launches(tmp_path)) == before


def test_a_torn_last_line_is_still_tolerated(tmp_path):
    state = exhausted_search(tmp_path)
    with open(state / "journal.jsonl", "ab") as handle:
        handle.write(b'{"attempt": 1, "config": [], "crc": "0000')
    result = run_fusion_dd("resume", "--budget", "60", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert report_of(state)["status"] == "found"


def copy_fixture(tmp_path: Path) -> Path:
    """The 0.1.0 search as its user left it: config, training script, journal (trial dirs not needed)."""
    shutil.copy(FIXTURE / "fusion-dd.yaml", tmp_path / "fusion-dd.yaml")
    shutil.copy(FAKE_TRAIN, tmp_path / "fake_train.py")
    state = tmp_path / ".fusion-dd"
    state.mkdir()
    shutil.copy(FIXTURE / "journal.jsonl", state / "journal.jsonl")
    return state


def test_a_journal_written_by_0_1_0_resumes(tmp_path):
    state = copy_fixture(tmp_path)
    legacy = (state / "journal.jsonl").read_bytes()
    finished_before = {
        tuple(record["config"])
        for record in map(json.loads, legacy.splitlines())
        if record["type"] == "trial_started"
    }
    result = run_fusion_dd("search", "--budget", "60", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = report_of(state)
    assert report["status"] == "found"
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == ["AASquareSumMaximumRsqrtMulFusionPass"]
    new = [config for config, _ in launches(tmp_path)]
    assert new and not set(new) & finished_before, "a training the 0.1.0 journal had finished was repeated"
    assert report["trainings"] == len(finished_before) + len(new)
    assert "[6/60] start" in result.stderr
    assert (state / "journal.jsonl").read_bytes().startswith(legacy), "the old lines must stay as they were"
    assert call_fusion_dd("status", cwd=tmp_path).returncode == 0


def test_the_progress_counter_goes_on_from_the_trainings_of_earlier_sessions(tmp_path):
    exhausted_search(tmp_path, budget=5)
    result = run_fusion_dd("resume", "--budget", "60", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    counters = [line.split("]")[0] + "]" for line in result.stderr.splitlines() if "] start" in line]
    assert counters[0] == "[6/60]", counters
    assert counters[-1] == f"[{report_of(tmp_path / '.fusion-dd')['trainings']}/60]"


def test_a_trial_whose_supervisor_never_started_costs_no_budget(tmp_path):
    state = exhausted_search(tmp_path, budget=5)
    # The coordinator died between journaling the start of trial 0006 and starting its supervisor.
    with Journal.open(state) as journal:
        journal.append(
            {
                "type": "trial_started", "trial_id": "0006", "config": [], "repeat": 5, "attempt": 1,
                "device": ["0"], "trial_dir": "trials/0006", "role": "search", "time": time.time(),
            }
        )
    result = run_fusion_dd("resume", "--budget", "6", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert len(launches(tmp_path)) == 6, "the never-launched trial took the last training of the budget"
    report = report_of(state)
    assert report["trainings"] == 6
    (lost,) = [trial for trial in report["trials"] if trial["trial_id"] == "0006"]
    assert lost["outcome"] == "cancelled" and "never launched" in lost["reason"]


def test_status_after_sigkill_of_the_coordinator_reads_what_the_supervisors_wrote(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, "--sleep", "2")
    state = tmp_path / ".fusion-dd"
    coordinator = start_search(tmp_path, subprocess.DEVNULL)
    try:
        assert eventually(
            lambda: all((state / "trials" / name / "supervisor.json").exists() for name in ("0001", "0002")),
            within=60,
        )
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(timeout=30)
    finally:
        stop(coordinator)
    assert eventually(
        lambda: all((state / "trials" / name / "status.json").exists() for name in ("0001", "0002")), within=60
    ), "the supervisors did not finish their trainings"
    result = call_fusion_dd("status", cwd=tmp_path)  # status in a real process: tests/cli/test_search.py
    assert result.returncode == 0, result.stderr
    assert "running #" not in result.stdout
    assert "ended   #0001" in result.stdout and "ended   #0002" in result.stdout
    assert "(exit code 0)" in result.stdout and "running 0" in result.stdout


def test_an_interrupted_report_has_the_references_and_says_how_to_continue(tmp_path):
    wrap_fake_train(
        tmp_path,
        "slow_search.py",
        "if int(os.environ['FUSION_DD_TRIAL_ID']) > 2:\n    time.sleep(30)\n",
        "--culprits",
        CULPRIT,
    )
    state = tmp_path / ".fusion-dd"
    coordinator = start_search(tmp_path, subprocess.PIPE)
    try:
        # The references are measured; the first search training (slowed down) is running.
        assert eventually(lambda: (state / "trials" / "0003" / "supervisor.json").exists(), within=60)
        coordinator.send_signal(signal.SIGTERM)
        out, err = coordinator.communicate(timeout=90)
    finally:
        stop(coordinator)
    assert coordinator.returncode == 130, err
    report = report_of(state)
    assert report["status"] == "interrupted"
    assert report["baseline"] == 0.9 and report["all_on"] == 0.5
    assert report["threshold"]["limit"] < 0.9
    # The budget is said even when the config's: a later session's cap must not change what this hint does.
    assert report["continue_with"] == "fusion-dd resume --state-dir .fusion-dd --budget 100"
    assert out.strip().splitlines()[-1] == "  continue with: fusion-dd resume --state-dir .fusion-dd --budget 100"
    assert "baseline (all candidates off): 0.9" in out


def test_a_budget_that_runs_out_among_the_references_still_reports_the_baseline(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, budget=3, score={"baseline_repeats": 3})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    report = report_of(tmp_path / ".fusion-dd")
    assert report["status"] == "budget_exhausted"
    assert report["baseline"] == 0.9 and report["baseline_runs"] == [0.9, 0.9, 0.9]
    assert result.stdout.strip().splitlines()[-1].startswith("  continue with: fusion-dd resume --state-dir")


def test_restart_moves_the_old_search_aside_and_keeps_its_journal(tmp_path):
    state = exhausted_search(tmp_path, budget=3)
    old_journal = (state / "journal.jsonl").read_bytes()
    write_config(tmp_path, "--culprits", CULPRIT, "--accuracy", "0.95", budget=60)
    refused = run_fusion_dd("search", cwd=tmp_path)
    assert refused.returncode == 2
    assert "changed: train.command" in refused.stderr and "fusion-dd search --restart" in refused.stderr
    assert (state / "journal.jsonl").read_bytes() == old_journal

    result = run_fusion_dd("search", "--restart", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "moved the old search aside: .fusion-dd -> .fusion-dd.1" in result.stderr
    assert (tmp_path / ".fusion-dd.1" / "journal.jsonl").read_bytes() == old_journal
    # The moved search's hint names its new place, not the new search's.
    assert report_of(tmp_path / ".fusion-dd.1")["continue_with"].startswith("fusion-dd resume --state-dir .fusion-dd.1 ")
    assert report_of(state)["status"] == "found" and report_of(state)["baseline"] == 0.95
    assert json.loads((state / "journal.jsonl").read_text().splitlines()[0])["definition"]["command"][-1] == "0.95"

    again = run_fusion_dd("search", "--restart", "--budget", "3", cwd=tmp_path)
    assert again.returncode == 3, again.stderr
    assert (tmp_path / ".fusion-dd.1" / "journal.jsonl").read_bytes() == old_journal
    assert report_of(tmp_path / ".fusion-dd.2")["status"] == "found"


def _record_line(lines: list[str], kind: str) -> int:
    """The line number of the first ``kind`` record that is not the last line."""
    return next(index for index, line in enumerate(lines, start=1) if f'"{kind}"' in line and index < len(lines))


def test_a_blanked_or_duplicated_record_is_refused_with_file_and_line(tmp_path):
    state = exhausted_search(tmp_path)
    original = (state / "journal.jsonl").read_text()
    lines = original.splitlines(keepends=True)
    number = _record_line(lines, "trial_finished")
    damaged = {
        "blanked": "".join(lines[: number - 1] + ["\n"] + lines[number:]),
        "deleted": "".join(lines[: number - 1] + lines[number:]),
        "duplicated": "".join(lines[:number] + [lines[number - 1]] + lines[number:]),
    }
    before = len(launches(tmp_path))
    for how, text in damaged.items():
        (state / "journal.jsonl").write_text(text)
        where = number + 1 if how == "duplicated" else number
        for command in (["resume", "--budget", "60"], ["status"]):
            result = fusion_dd_runner(command != ["status"])(*command, cwd=tmp_path)
            assert result.returncode == 2, (how, command, result.stderr)
            assert f"journal.jsonl:{where}: " in result.stderr, (how, result.stderr)
            assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert len(launches(tmp_path)) == before
    (state / "journal.jsonl").write_text(original)
    assert run_fusion_dd("resume", "--budget", "60", cwd=tmp_path).returncode == 0


def _interrupted_search(tmp_path: Path, devices: list[int]) -> Path:
    """A search SIGKILLed with trainings open in its journal (started, not finished)."""
    from tests.support.fake_training import sigkill_search_when

    tmp_path.mkdir()
    write_config(tmp_path, "--culprits", CULPRIT, "--sleep", "0.3", train={"devices": devices})
    state = tmp_path / ".fusion-dd"
    sigkill_search_when(
        tmp_path,
        state / "journal.jsonl",
        lambda text: text.count('"trial_finished"') >= 3 and text.count('"trial_started"') > text.count('"trial_finished"'),
    )
    return state


def test_another_searchs_journal_in_a_state_dir_is_refused_or_its_trials_retrained_never_adopted(tmp_path):
    """Same definition, other devices: the journal's trial numbers name other trainings of this directory."""
    theirs = _interrupted_search(tmp_path / "theirs", [0, 1])
    ours_dir = tmp_path / "ours"
    ours_dir.mkdir()
    write_config(ours_dir, "--culprits", CULPRIT, train={"devices": [0]})
    assert run_fusion_dd("search", cwd=ours_dir).returncode == 0
    ours = ours_dir / ".fusion-dd"
    our_id = json.loads((ours / "search_id.json").read_text())["search_id"]
    their_id = journal_lines(theirs)[0]["search_id"]
    shutil.copy(theirs / "journal.jsonl", ours / "journal.jsonl")
    open_trials = {
        line["trial_id"] for line in journal_lines(ours) if line["type"] == "trial_started"
    } - {line["trial_id"] for line in journal_lines(ours) if line["type"] in ("trial_finished", "trial_cancelled")}
    assert open_trials and all((ours / "trials" / name).is_dir() for name in open_trials)
    before = len(launches(ours_dir))

    # The state directory knows its own search: the foreign journal is refused in one line.
    refused = run_fusion_dd("resume", cwd=ours_dir)
    assert refused.returncode == 2, refused.stderr
    assert our_id in refused.stderr and their_id in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert len(launches(ours_dir)) == before

    # Without that record, every open trial's directory is checked: ours, not theirs, so set aside and retrained.
    (ours / "search_id.json").unlink()
    resumed = run_fusion_dd("resume", cwd=ours_dir)
    assert resumed.returncode == 0, resumed.stderr
    for name in open_trials:
        assert (ours / "trials" / f"{name}.foreign").is_dir(), name
        assert f"trial {name}:" in resumed.stderr and "moved aside" in resumed.stderr
    report = report_of(ours)
    assert report["status"] == "found"
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
    outcomes = {trial["trial_id"]: trial["outcome"] for trial in report["trials"]}
    assert all(outcomes[name] != "metric" for name in open_trials if name in outcomes), outcomes
    assert json.loads((ours / "search_id.json").read_text())["search_id"] == their_id
