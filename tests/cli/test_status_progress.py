"""``fusion-dd status`` (fusion_dd/cli/status_view.py) and the progress lines (fusion_dd/cli/progress.py).

Status reads a journal written here through ``Journal`` and trial directories
laid out the way supervisors leave them; progress writes to a string stream,
both plain (CI, a log file) and live (a terminal's redrawn status line).
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest

from fusion_dd.cli.progress import ConsoleEvents
from fusion_dd.cli.status_view import coordinator_pid, status_lines
from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import Rule, Section
from fusion_dd.search.oracle import Outcome
from fusion_dd.store.journal import Journal
from fusion_dd.store.state import replay
from tests.support.states import cancelled, search_started, session_started, started, trial


def write_journal(state_dir: Path, records: list[dict]) -> None:
    with Journal.open(state_dir) as journal:
        for record in records:
            journal.append(record)


def stopped_search() -> list[dict]:
    return [
        search_started(),
        session_started(budget=12),
        *trial("0001", [], 0.9, role="baseline"),
        *trial("0002", ["A", "B", "C"], 0.5, role="all_on", device="1"),
        started("0003", ["A"]), cancelled("0003", was_launched=False),
        started("0004", ["B"], device="1"),  # its supervisor wrote status.json: it ended
        started("0005", ["C"]),  # nothing on disk: lost
        {"type": "search_stopped", "reason": "interrupted"},
    ]


def test_status_without_a_journal_or_without_a_search_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no search here"):
        status_lines(tmp_path)
    write_journal(tmp_path, [session_started()])
    with pytest.raises(UsageError, match="holds no search_started record"):
        status_lines(tmp_path)


def test_status_of_trials_without_their_journal_points_where_a_search_would(tmp_path: Path) -> None:
    """'start one with fusion-dd search' would be refused there: the trials belong to no journal."""
    (tmp_path / "trials" / "0001").mkdir(parents=True)
    with pytest.raises(UsageError) as info:
        status_lines(tmp_path)
    assert str(info.value) == (
        f"{tmp_path}: no journal.jsonl, but trial directories under trials/ (was the journal deleted?); "
        f"restore it, or start over with 'fusion-dd search --restart --state-dir {tmp_path}'"
    )


def test_status_of_a_search_that_spent_its_budget_offers_a_larger_one(tmp_path: Path) -> None:
    """Run as printed, the hint continues: a resume on the spent budget would stop at once."""
    records = stopped_search()
    records[-1] = {"type": "search_stopped", "reason": "budget_exhausted"}
    write_journal(tmp_path, records)
    lines = status_lines(tmp_path)
    assert lines[3] == (
        f"  state: stopped (budget_exhausted); continue with 'fusion-dd resume --state-dir {tmp_path} --budget 22'"
    )


def test_status_of_a_stopped_search_counts_and_names_every_trial(tmp_path: Path) -> None:
    write_journal(tmp_path, stopped_search())
    ended = tmp_path / "trials" / "0004"
    ended.mkdir(parents=True)
    (ended / "status.json").write_text(json.dumps({"exit_code": 0, "duration": 3.2}))
    lines = status_lines(tmp_path)
    assert coordinator_pid(tmp_path) is None
    assert lines[0] == f"search in {tmp_path}"
    assert lines[1] == "  3 candidate rules, strategy bisect, command: python3 train.py"
    assert lines[2] == "  trainings launched: 4 of budget 12; finished 3, cancelled or lost 2, running 0"
    assert lines[3] == f"  state: stopped (interrupted); continue with 'fusion-dd resume --state-dir {tmp_path} --budget 12'"
    assert "  ended   #0004 on device 1 (exit code 0) after 3s; 'fusion-dd resume' records its result" in lines
    assert any(line.startswith("  lost    #0005 on device 0: its supervisor is gone") for line in lines)
    assert lines[-3:] == [
        "  last finished trainings:",
        "    #0001 baseline     0 rules on  metric     0.9",
        "    #0002 all_on       3 rules on  metric     0.5",
    ]


def test_status_while_a_coordinator_holds_the_lock_shows_it_running(tmp_path: Path) -> None:
    records = stopped_search()[:-1]
    with Journal.open(tmp_path) as journal:
        for record in records:
            journal.append(record)
        assert coordinator_pid(tmp_path) == os.getpid()
        lines = status_lines(tmp_path)
    assert any(line.startswith(f"  state: running (coordinator pid {os.getpid()}), 1 session(s)") for line in lines)
    assert "running 2" in lines[2], "without its supervisor's files a trial of a live coordinator is still starting"
    assert any(line.startswith("  running #0005 on device 0 for ") for line in lines)


def test_status_of_a_finished_search_ends_with_its_summary(tmp_path: Path) -> None:
    report = {"status": "no_failure", "message": "refused: all candidates on does not fail", "trainings": 2,
              "budget": 12, "baseline": 0.9, "all_on": 0.9}
    records = [*stopped_search()[:4], {"type": "search_finished", "report": report}]
    write_journal(tmp_path, records)
    lines = status_lines(tmp_path)
    assert "  state: finished" in lines
    assert "fusion-dd: refused: all candidates on does not fail" in lines
    assert lines[-1] == f"  report: {tmp_path / 'report.json'}"


def test_status_of_a_dask_search_shows_the_occupancy_per_host_and_device(tmp_path: Path) -> None:
    """Trainings on a cluster: where each runs (host, the device id it saw, its worker), per host.
    Their pids mean nothing here, so a trial runs until its supervisor's status.json says it ended."""

    def placed(trial_id: str, host: str, device: str, worker: str) -> dict:
        return {"type": "trial_launched", "trial_id": trial_id, "supervisor_pid": None,
                "placement": {"launcher": "dask", "host": host, "boot_id": "b", "job_id": f"k-{trial_id}",
                              "device": [device], "worker": f"tcp://{host}:1", "worker_name": worker}}

    write_journal(tmp_path, [
        search_started(),
        session_started(devices=("nodeA:0", "nodeA:1", "nodeB:0")),
        *trial("0001", [], 0.9, role="baseline", device="nodeA:0"),
        started("0002", ["A"], device="nodeA:1"), placed("0002", "nodeA", "1", "npuA1"),
        started("0003", ["B"], device="nodeB:0"), placed("0003", "nodeB", "0", "npuB0"),
        started("0004", ["C"], device="nodeA:0"), placed("0004", "nodeA", "0", "npuA0"),
        started("0005", ["A", "B"], device="nodeB:0"), placed("0005", "nodeB", "0", "npuB0"),
    ])
    ended = tmp_path / "trials" / "0005"
    ended.mkdir(parents=True)
    (ended / "status.json").write_text(json.dumps({"exit_code": 0, "duration": 3.0}))
    lines = status_lines(tmp_path)
    assert "running 3" in lines[2], lines
    assert any(line.startswith("  running #0003 on nodeB device 0 (worker npuB0) for ") for line in lines), lines
    at = lines.index("  devices in use, per host:")
    assert lines[at + 1: at + 3] == ["    nodeA: device 0 #0004, device 1 #0002", "    nodeB: device 0 #0003"]
    assert not any("#0005" in line for line in lines[at:at + 3]), "an ended training occupies no device"


# --- progress ----------------------------------------------------------------------------------


def trial_state(records: list[dict], trial_id: str):
    return replay(records).trials[trial_id]


def test_plain_progress_is_one_line_per_event_counting_on_from_earlier_sessions() -> None:
    stream = io.StringIO()
    events = ConsoleEvents(total_rules=10, budget=20, stream=stream, live=False)
    events.start(launched_before=5)
    baseline = trial_state(trial("0006", [], 0.9, role="baseline"), "0006")
    events.trial_started(baseline)
    events.trial_finished(baseline, Outcome.PASS)
    few = trial_state([started("0007", ["B", "A"], device="1")], "0007")
    events.trial_started(few)
    events.trial_finished(few, None)
    many = trial_state([started("0008", [str(i) for i in range(4)])], "0008")
    everything = trial_state([started("0009", [str(i) for i in range(10)])], "0009")
    events.trial_started(many)
    events.trial_started(everything)
    events.close()
    assert stream.getvalue().splitlines() == [
        "[6/20] start  #0006 on device 0: all candidates off (baseline)",
        "       done   #0006 PASS       metric 0.9 in 2.0s",
        "[7/20] start  #0007 on device 1: on: A, B (search)",
        "       cancel #0007",
        "[8/20] start  #0008 on device 0: 4 of 10 on (search)",
        "[9/20] start  #0009 on device 0: all candidates on (search)",
    ]


def test_a_result_without_a_metric_shows_its_kind_and_reason() -> None:
    stream = io.StringIO()
    events = ConsoleEvents(total_rules=3, budget=5, stream=stream, live=False)
    crashed = trial_state(trial("0001", ["A"], None, kind="crash", reason="exit code 3"), "0001")
    events.trial_finished(crashed, Outcome.UNRESOLVED)
    assert stream.getvalue() == "       done   #0001 UNRESOLVED crash (exit code 3) in 2.0s\n"


def test_a_finished_training_without_a_verdict_says_why_it_has_none() -> None:
    stream = io.StringIO()
    events = ConsoleEvents(total_rules=3, budget=5, stream=stream, live=False)
    events.trial_finished(trial_state(trial("0001", [], 0.9, role="baseline"), "0001"), None)
    events.trial_finished(trial_state(trial("0004", ["A"], 0.6), "0004"), None)  # adopted before the threshold
    events.trial_finished(trial_state(trial("0005", ["A"], 0.6, role="localize"), "0005"), None)  # tensors, no verdict
    assert stream.getvalue().splitlines() == [
        "       done   #0001 reference  metric 0.9 in 2.0s",
        "       done   #0004 unjudged   metric 0.6 in 2.0s",
        "       done   #0005 dumped     metric 0.6 in 2.0s",
    ]


def test_live_view_keeps_event_lines_and_the_smallest_failing_set_in_its_panel() -> None:
    stream = io.StringIO()
    events = ConsoleEvents(total_rules=3, budget=5, stream=stream, live=True)
    events.start()
    running = trial_state([started("0001", ["A"], time=0.0)], "0001")
    events.best_so_far(frozenset({Rule("A", Section.GRAPH), Rule("B", Section.GRAPH)}))
    events.best_so_far(frozenset({Rule("A", Section.GRAPH), Rule("B", Section.GRAPH), Rule("C", Section.GRAPH)}))
    events.best_so_far(None)
    events.trial_started(running)
    events.message("hello")
    panel = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert "smallest failing: 2 rules" in panel, "the smallest failing set so far, never a larger one"
    assert "#0001" in panel and "1/5 trainings" in panel
    events.close()
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert "[1/5] start  #0001" in shown and "hello" in shown, "event lines stay above the panel"


def test_after_a_resume_the_live_view_says_which_counts_are_over_all_sessions_and_which_this_sessions() -> None:
    stream = io.StringIO()
    events = ConsoleEvents(total_rules=3, budget=60, stream=stream, live=True)
    events.start(launched_before=17)
    events.trial_started(trial_state([started("0018", ["A"], time=0.0)], "0018"))
    panel = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    events.close()
    assert "18/60 trainings in all, 1 this session, 0 of them finished" in panel


def test_status_of_a_search_of_several_sessions_says_its_counts_are_over_all_of_them(tmp_path: Path) -> None:
    records = stopped_search()
    records.insert(-1, session_started())
    write_journal(tmp_path, records)
    lines = status_lines(tmp_path)
    assert lines[2].startswith("  trainings launched in all (2 sessions): 4 of budget 20; "), lines[2]


def test_live_view_lists_every_device_and_reads_step_and_loss_from_stdout_without_a_metrics_file(
    tmp_path: Path,
) -> None:
    """A training that prints ``step N loss X`` (the default metric.loss_pattern) and writes no
    metrics file shows its step and loss; the devices with nothing running are listed as idle."""
    import time

    trial_dir = tmp_path / "trials" / "0001"
    trial_dir.mkdir(parents=True)
    (trial_dir / "output.log").write_text("loading data\nstep 1 loss 2.5\nstep 2 loss 1.25\nstep 3 loss 0.625\n")
    stream = io.StringIO()
    events = ConsoleEvents(total_rules=3, budget=5, stream=stream, live=True, devices=[("0",), ("1",), ("2",)],
                           loss_pattern=r"loss[=:\s]\s*(\S+)")
    events.start(state_dir=tmp_path)
    events.trial_started(trial_state([started("0001", ["A"], device="1", time=time.time())], "0001"))
    deadline = time.monotonic() + 60
    pattern = re.compile(r"1\s+#0001\s+1\s+search\s+\S+\s+3\s+0\.625")
    while not pattern.search(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())):
        assert time.monotonic() < deadline, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
        time.sleep(0.05)
    panel = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    events.close(final_estimate=False)
    assert re.search(r"^\s*0\s+idle", panel, re.M) and re.search(r"^\s*2\s+idle", panel, re.M), panel


def test_status_of_a_running_search_lists_its_idle_devices(tmp_path: Path) -> None:
    records = [search_started(), session_started(budget=12, devices=("0", "1", "2")), started("0001", ["A"], device="1")]
    with Journal.open(tmp_path) as journal:
        for record in records:
            journal.append(record)
        lines = status_lines(tmp_path)
    assert "  idle: device 0, 2" in lines, lines
