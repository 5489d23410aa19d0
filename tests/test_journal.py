"""The journal: durable appends, torn tails, corrupt lines, the coordinator lock."""

import subprocess
import sys
import time

import pytest

from fusion_dd.errors import UsageError
from fusion_dd.journal import Journal, read_records
from fusion_dd.state import replay


def test_append_and_replay(tmp_path):
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {"x": 1}})
        journal.append(
            {"type": "trial_started", "trial_id": "0001", "config": ["A"], "repeat": 0, "trial_dir": "trials/0001"}
        )
        journal.append({"type": "trial_finished", "trial_id": "0001", "kind": "metric", "value": 0.5})
    state = replay(read_records(tmp_path / "journal.jsonl"))
    assert state.definition == {"x": 1}
    assert state.launched == 1
    assert state.cache()[(frozenset({"A"}), 0)].measurement.value == 0.5


def test_torn_last_line_is_ignored_and_cut_on_next_open(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_text('{"type": "search_started", "definition": {}}\n{"type": "trial_sta')
    assert len(read_records(path)) == 1
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_stopped", "reason": "x"})
    assert [r["type"] for r in read_records(path)] == ["search_started", "search_stopped"]


def test_corrupt_middle_line_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_text('{"type": "search_started"}\ngarbage\n{"type": "search_stopped"}\n')
    with pytest.raises(UsageError, match=r"journal.jsonl:2: corrupt"):
        read_records(path)


def test_second_coordinator_is_refused(tmp_path):
    with Journal.open(tmp_path):
        with pytest.raises(UsageError, match="another fusion-dd"):
            Journal.open(tmp_path)


def test_lock_is_released_when_the_holder_is_killed(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from fusion_dd.journal import Journal;"
            "j = Journal.open(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(UsageError):
            Journal.open(tmp_path)
        holder.kill()
        holder.wait(timeout=30)
        deadline = time.monotonic() + 30
        while True:
            try:
                Journal.open(tmp_path).close()
                break
            except UsageError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.stdout.close()


def test_a_record_that_cannot_be_encoded_writes_nothing(tmp_path):
    with Journal.open(tmp_path) as journal:
        with pytest.raises(ValueError):
            journal.append({"type": "x", "value": float("nan")})
    assert (tmp_path / "journal.jsonl").read_text() == ""
