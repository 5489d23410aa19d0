"""The journal: durable appends, torn tails, corrupt lines, the coordinator lock."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.core.errors import UsageError
from fusion_dd.store import journal as journal_module
from fusion_dd.store.journal import Journal, JournalLost, move_aside, read_records
from fusion_dd.store.state import launched_count, replay
from tests.support import FIXTURES


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
    # The line without a checksum (as 0.1.0 wrote them) is sealed before the first new record.
    assert [r["type"] for r in read_records(path)] == ["search_started", "legacy_sealed", "search_stopped"]


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
            "import sys, time; from pathlib import Path; from fusion_dd.store.journal import Journal;"
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


# -- checksums ---------------------------------------------------------------------

FIXTURE = FIXTURES / "journal-0.1.0" / "journal.jsonl"


def three_records(tmp_path):
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {"x": 1}})
        journal.append({"type": "trial_finished", "trial_id": "0001", "kind": "metric", "value": 0.5})
        journal.append({"type": "search_stopped", "reason": "x"})
    return tmp_path / "journal.jsonl"


def test_every_line_carries_a_checksum_that_the_reader_removes(tmp_path):
    path = three_records(tmp_path)
    assert all(line.startswith('{"crc":"') for line in path.read_text().splitlines())
    assert sorted(read_records(path)[1]) == ["kind", "trial_id", "type", "value"]


def test_a_line_edited_into_other_valid_json_is_refused_with_file_and_line(tmp_path):
    path = three_records(tmp_path)
    path.write_text(path.read_text().replace('"value":0.5', '"value":0.9'))
    with pytest.raises(UsageError, match=r"journal.jsonl:2: journal line does not match its checksum"):
        read_records(path)


def test_a_line_whose_checksum_was_removed_is_refused(tmp_path):
    path = three_records(tmp_path)
    lines = path.read_text().splitlines()
    record = json.loads(lines[1])
    del record["crc"]
    record["value"] = 0.9
    lines[1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=r"journal.jsonl:2: journal line without a checksum after line 1"):
        read_records(path)
    # The first line too: a new journal's first line has a checksum, so a bare one there is not "legacy".
    lines = three_records(tmp_path / "again").read_text().splitlines()
    first = json.loads(lines[0])
    del first["crc"]
    (tmp_path / "again" / "journal.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(UsageError, match=r"journal.jsonl:2: the lines before this one have no checksum"):
        read_records(tmp_path / "again" / "journal.jsonl")


def test_torn_tail_after_checksummed_lines_is_still_tolerated(tmp_path):
    path = three_records(tmp_path)
    full = path.read_bytes()
    path.write_bytes(full + full.splitlines(keepends=True)[1][:40])
    assert [r["type"] for r in read_records(path)] == ["search_started", "trial_finished", "search_stopped"]


def test_a_0_1_0_journal_is_read_then_sealed_and_its_old_lines_are_protected_from_then_on(tmp_path):
    legacy = read_records(FIXTURE)
    assert legacy[0]["type"] == "search_started" and legacy[-1] == {**legacy[-1], "reason": "budget_exhausted"}
    path = tmp_path / "journal.jsonl"
    path.write_bytes(FIXTURE.read_bytes())
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_stopped", "reason": "x"})
    records = read_records(path)
    assert records[: len(legacy)] == legacy
    assert [r["type"] for r in records[len(legacy):]] == ["legacy_sealed", "search_stopped"]
    Journal.open(tmp_path).close()  # sealed once only
    assert len(read_records(path)) == len(legacy) + 2
    path.write_text(path.read_text().replace('"value": 0.5', '"value": 0.9', 1))
    with pytest.raises(UsageError, match=rf"journal.jsonl:1-{len(legacy)}: the lines written by fusion-dd 0.1.0"):
        read_records(path)


# -- the journal must stay the file at its path -------------------------------------------


def test_appending_to_a_deleted_journal_is_refused_and_writes_nothing(tmp_path):
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {}})
        with open(tmp_path / "journal.jsonl", "rb") as held:
            (tmp_path / "journal.jsonl").unlink()
            with pytest.raises(JournalLost, match="journal.jsonl: the journal was deleted"):
                journal.append({"type": "search_stopped", "reason": "x"})
            with pytest.raises(JournalLost):  # and it stays refused
                journal.append({"type": "search_stopped", "reason": "x"})
            assert held.read().count(b"\n") == 1


def test_appending_to_a_replaced_journal_is_refused(tmp_path):
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {}})
        copy = tmp_path / "copy"
        copy.write_bytes((tmp_path / "journal.jsonl").read_bytes())
        os.replace(copy, tmp_path / "journal.jsonl")
        with pytest.raises(JournalLost, match="was replaced by another file"):
            journal.append({"type": "search_stopped", "reason": "x"})
    assert [r["type"] for r in read_records(tmp_path / "journal.jsonl")] == ["search_started"]


def test_appending_to_a_journal_truncated_by_someone_else_is_refused(tmp_path):
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {}})
        os.truncate(tmp_path / "journal.jsonl", 0)
        with pytest.raises(JournalLost, match="was truncated or written to by another program"):
            journal.append({"type": "search_stopped", "reason": "x"})
    assert (tmp_path / "journal.jsonl").read_bytes() == b""


# -- --restart ---------------------------------------------------------------------------------


def test_move_aside_picks_the_first_free_name_and_deletes_nothing(tmp_path):
    state = tmp_path / ".fusion-dd"
    assert move_aside(state) is None  # nothing there
    three_records(state)
    text = (state / "journal.jsonl").read_text()
    assert move_aside(state) == tmp_path / ".fusion-dd.1"
    assert (tmp_path / ".fusion-dd.1" / "journal.jsonl").read_text() == text and not state.exists()
    three_records(state)
    assert move_aside(state) == tmp_path / ".fusion-dd.2"
    assert (tmp_path / ".fusion-dd.1" / "journal.jsonl").read_text() == text


def test_move_aside_refuses_a_running_search_and_a_directory_that_is_no_state_dir(tmp_path):
    state = tmp_path / ".fusion-dd"
    with Journal.open(state):
        with pytest.raises(UsageError, match="another fusion-dd"):
            move_aside(state)
    assert state.is_dir()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(UsageError, match="not a fusion-dd state directory"):
        move_aside(other)
    assert (other / "notes.txt").exists()


# -- budget accounting ----------------------------------------------------------------------


def test_a_trial_whose_supervisor_never_started_costs_no_budget():
    started = {"type": "trial_started", "config": [], "repeat": 0, "trial_dir": "trials/0001", "trial_id": "0001"}
    never = replay([started, {"type": "trial_cancelled", "trial_id": "0001", "launched": False}])
    assert never.launched == 0
    lost = replay([started, {"type": "trial_cancelled", "trial_id": "0001", "launched": True}])
    assert lost.launched == 1
    legacy = replay([started, {"type": "trial_cancelled", "trial_id": "0001", "reason": "lost"}])
    assert legacy.launched == 1, "a 0.1.0 cancellation does not say, so it keeps counting"
    assert replay([started]).launched == 1, "an open trial may be starting right now"


def test_trial_numbers_continue_after_the_highest_even_with_gaps():
    records = [
        {"type": "trial_started", "config": [], "repeat": 0, "trial_dir": f"trials/{n}", "trial_id": n}
        for n in ("0001", "0003")
    ]
    assert replay(records).next_trial_number() == 4


def test_budget_and_trial_numbers_kept_as_records_arrive_match_a_count_of_all_trials():
    """The live counts (one per record, not a scan per question) agree with counting every trial."""
    import random

    rng = random.Random(11)
    records = []
    for _ in range(300):
        trial_id = f"{rng.randint(1, 60):04d}"
        kind = rng.choice(["trial_started", "trial_cancelled", "trial_cancelled", "trial_finished"])
        record = {"type": kind, "trial_id": trial_id}
        if kind == "trial_started":
            record.update(config=[], repeat=0, trial_dir=f"trials/{trial_id}")
        elif kind == "trial_cancelled":
            record["launched"] = rng.choice([True, False, None])
        else:
            record["kind"] = "metric"
        records.append(record)
        state = replay(records)
        assert state.launched == sum(1 for trial in state.trials.values() if trial.costs_budget) == launched_count(records)
        numbers = [int(trial_id) for trial_id in state.trials]
        assert state.next_trial_number() == max(numbers, default=0) + 1


def test_blank_lines_after_a_torn_tail_still_make_it_the_tail(tmp_path):
    path = tmp_path / "journal.jsonl"
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {}})
    with open(path, "ab") as handle:
        handle.write(b'{"type": "trial_sta\n\n  \n')
    with pytest.raises(UsageError, match=":2: corrupt journal line"):
        read_records(path)  # ends with a newline: not torn, so a corrupt line
    path.write_bytes(path.read_bytes().rstrip(b"\n ") + b"\n\n  ")
    assert [r["type"] for r in read_records(path)] == ["search_started"]


def test_a_journal_read_again_after_an_edit_is_checked_again(tmp_path):
    """Reading a journal twice reuses the first parse only for exactly the same bytes."""
    path = tmp_path / "journal.jsonl"
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {"x": 1}})
    first = read_records(path)[0]
    assert first["definition"] == {"x": 1}
    assert read_records(path)[0] is first  # shared by every reader, so read-only:
    with pytest.raises(TypeError, match="read-only"):
        first["definition"] = {"x": 2}
    mine = dict(first)  # a copy is the caller's own
    mine["definition"] = {"x": 2}
    assert read_records(path)[0]["definition"] == {"x": 1}
    path.write_bytes(path.read_bytes().replace(b'"x":1', b'"x":3'))  # same length, other content
    with pytest.raises(UsageError, match="does not match its checksum"):
        read_records(path)


def test_a_torn_tail_read_twice_is_ignored_twice(tmp_path):
    path = tmp_path / "journal.jsonl"
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {}})
    with open(path, "ab") as handle:
        handle.write(b'{"type": "trial_sta')
    assert [r["type"] for r in read_records(path)] == ["search_started"]
    assert [r["type"] for r in read_records(path)] == ["search_started"]


def test_a_journal_grown_by_appends_is_verified_from_where_the_last_read_stopped(tmp_path):
    """Reads after appends check only the new lines, yet an edit anywhere is still caught."""
    with Journal.open(tmp_path) as journal:
        for index in range(3):
            journal.append({"type": "note", "index": index})
    path = tmp_path / "journal.jsonl"
    assert [r["index"] for r in read_records(path)] == [0, 1, 2]
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "note", "index": 3})
    assert [r["index"] for r in read_records(path)] == [0, 1, 2, 3]
    # A bad checksum in an appended line names its own line number.
    with path.open("a") as handle:
        handle.write('{"type": "note", "index": 4, "crc": "00000000"}\n')
    with pytest.raises(UsageError, match=r"journal.jsonl:5: journal line does not match its checksum"):
        read_records(path)
    # An earlier line edited while the file also grew: the verified prefix changed, so all is checked.
    lines = path.read_text().splitlines(keepends=True)[:4]
    lines[1] = lines[1].replace('"index":1', '"index":7')
    path.write_text("".join(lines) + lines[3])
    with pytest.raises(UsageError, match=r"journal.jsonl:2: journal line does not match its checksum"):
        read_records(path)


def test_records_this_process_appended_read_back_as_a_fresh_parse_of_the_file_gives_them(tmp_path):
    """The writer hands its records to the readers' cache; they must be what parsing the file gives, key order too."""
    path = tmp_path / "journal.jsonl"
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {"b": 1, "a": (1, 2)}})
        assert len(read_records(path)) == 1
        journal.append({"type": "note", "z": {"y": 1, "x": 1e-300, "w": Path("p")}, "a": None})
        journal.append({"type": "note", "index": 2})
        cached = read_records(path)
        journal_module._last_scan = None  # forget every parse: the file alone
        fresh = read_records(path)
        assert cached == fresh
        assert [list(record) for record in cached] == [list(record) for record in fresh]
        assert list(cached[1]["z"]) == list(fresh[1]["z"]) == ["w", "x", "y"]
        # A line appended and then edited by someone else before the next read is caught.
        journal.append({"type": "note", "index": 3})
    path.write_bytes(path.read_bytes().replace(b'"index":3', b'"index":4'))
    with pytest.raises(UsageError, match=r"journal.jsonl:4: journal line does not match its checksum"):
        read_records(path)


def test_lines_in_the_spaced_spelling_of_earlier_versions_are_verified_by_their_content(tmp_path):
    """Lines written before the checksum came first (keys sorted, spaces) still resume; an edit is still caught."""
    records = [{"type": "search_started", "definition": {"x": 1}}, {"type": "note", "value": 0.5}]
    old = [json.dumps({**record, "crc": journal_module.checksum(record)}, sort_keys=True) + "\n" for record in records]
    path = tmp_path / "journal.jsonl"
    path.write_text("".join(old))
    with Journal.open(tmp_path) as journal:  # appends in today's spelling after the old lines
        journal.append({"type": "note", "value": 0.7})
    assert [record.get("value") for record in read_records(path)] == [None, 0.5, 0.7]
    path.write_text(path.read_text().replace('"value": 0.5', '"value": 0.9'))
    with pytest.raises(UsageError, match=r"journal.jsonl:2: journal line does not match its checksum"):
        read_records(path)


def test_a_record_appended_without_fsync_reads_back_and_the_next_durable_one_syncs_both(tmp_path, monkeypatch):
    """Questions and launch placements skip their own fsync: the next durable record writes them too."""
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    with Journal.open(tmp_path) as journal:
        before = len(synced)
        journal.append({"type": "question", "index": 0, "width": 2, "time": 1.0}, durable=False)
        assert len(synced) == before
        journal.append({"type": "note", "time": 2.0})
        assert len(synced) == before + 1
    assert [record["type"] for record in read_records(tmp_path / "journal.jsonl")][-2:] == ["question", "note"]


def _numbered_journal(tmp_path, count=4):
    path = tmp_path / "journal.jsonl"
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {"x": 1}})
        for index in range(1, count):
            journal.append({"type": "note", "index": index})
    journal_module._last_scan = None
    return path


def test_every_record_carries_its_position_inside_the_checksum_and_readers_do_not_see_it(tmp_path):
    path = _numbered_journal(tmp_path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["seq"] for line in lines] == [1, 2, 3, 4]
    assert all("seq" not in record for record in read_records(path))
    # The number is covered by the checksum: changing it alone is an edit.
    path.write_text(path.read_text().replace('"seq":3', '"seq":5'))
    with pytest.raises(UsageError, match=r"journal.jsonl:3: journal line does not match its checksum"):
        read_records(path)


@pytest.mark.parametrize(
    "damage, line",
    [
        (lambda lines: lines[:1] + [b""] + lines[2:], 2),  # a record emptied: a blank line
        (lambda lines: lines[:1] + lines[2:], 2),  # a record deleted
        (lambda lines: lines[:2] + lines[1:], 3),  # a record duplicated
        (lambda lines: [lines[0], lines[2], lines[1], lines[3]], 2),  # two records swapped
    ],
    ids=["blanked", "deleted", "duplicated", "reordered"],
)
def test_a_missing_duplicated_or_moved_record_is_refused_with_file_and_line(tmp_path, damage, line):
    path = _numbered_journal(tmp_path)
    lines = path.read_bytes().split(b"\n")[:-1]
    path.write_bytes(b"\n".join(damage(lines)) + b"\n")
    with pytest.raises(UsageError, match=rf"journal.jsonl:{line}: "):
        read_records(path)
    with pytest.raises(UsageError, match=rf"journal.jsonl:{line}: "):
        Journal.open(tmp_path)


def test_a_torn_last_line_of_a_numbered_journal_is_still_cut_and_the_numbering_goes_on(tmp_path):
    path = _numbered_journal(tmp_path, count=2)
    path.write_bytes(path.read_bytes() + b'{"crc":"00000000","seq":3,"type":"no')
    assert len(read_records(path)) == 2
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "note", "index": 9})
    assert [json.loads(line)["seq"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_records_of_an_unnumbered_journal_stay_readable_and_new_ones_are_numbered_by_position(tmp_path):
    records = [{"type": "search_started", "definition": {"x": 1}}, {"type": "note", "value": 0.5}]
    path = tmp_path / "journal.jsonl"
    # encode_record numbers nothing (the writer does): these are the lines of a journal before numbering.
    path.write_text("".join(journal_module.encode_record(record).decode() for record in records))
    assert "seq" not in path.read_text()
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "note", "value": 0.7})
    assert json.loads(path.read_text().splitlines()[-1])["seq"] == 3
    assert [record.get("value") for record in read_records(path)] == [None, 0.5, 0.7]
    # Deleting an unnumbered record before the numbered ones shifts them: caught.
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + lines[2])
    with pytest.raises(UsageError, match=r"journal.jsonl:2: the journal record is record 3 but stands at position 2"):
        read_records(path)


def test_the_0_1_0_journal_fixture_resumes_and_its_new_records_are_numbered(tmp_path):
    import shutil

    shutil.copy(FIXTURES / "journal-0.1.0" / "journal.jsonl", tmp_path / "journal.jsonl")
    before = len(read_records(tmp_path / "journal.jsonl"))
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "note"})
    journal_module._last_scan = None
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    assert [json.loads(line).get("seq") for line in lines[-2:]] == [before + 1, before + 2]  # the seal, the note
    assert len(read_records(tmp_path / "journal.jsonl")) == before + 2


class _Interrupt(BaseException):
    pass


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_an_interrupt_after_the_write_of_an_append_is_no_foreign_writer(tmp_path, monkeypatch, where):
    """Ctrl-C raises between any two statements: a line we wrote must not make the next append cry tampering."""
    path = tmp_path / "journal.jsonl"
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {}})
        real_write = journal._file.write
        real_fsync = os.fsync

        def write(data):
            count = real_write(data)
            if where == "write":
                raise _Interrupt
            return count

        def fsync(fd):
            real_fsync(fd)
            raise _Interrupt

        if where == "write":
            monkeypatch.setattr(journal, "_file", type("F", (), {"write": staticmethod(write), "fileno": journal._file.fileno})())
        else:
            monkeypatch.setattr(journal_module.os, "fsync", fsync)
        with pytest.raises(_Interrupt):
            journal.append({"type": "guide_ranked", "ranking": list(range(1000))})
        monkeypatch.undo()
        journal.append({"type": "search_stopped", "reason": "interrupted"})
    journal_module._last_scan = None
    assert [record["type"] for record in read_records(path)] == ["search_started", "guide_ranked", "search_stopped"]


def test_a_half_written_line_of_our_own_is_cut_and_the_record_written_again_by_the_next_append(tmp_path, monkeypatch):
    path = tmp_path / "journal.jsonl"
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {}})
        real = journal._file

        class Half:
            def write(self, data):
                real.write(data[: len(data) // 2])
                raise _Interrupt

            def fileno(self):
                return real.fileno()

        monkeypatch.setattr(journal, "_file", Half())
        with pytest.raises(_Interrupt):
            journal.append({"type": "note", "index": 1})
        monkeypatch.undo()
        journal.append({"type": "note", "index": 2})
    journal_module._last_scan = None
    assert [record.get("index") for record in read_records(path)] == [None, 2]


def test_a_write_by_another_program_is_still_called_one(tmp_path):
    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {}})
        with open(tmp_path / "journal.jsonl", "ab") as other:
            other.write(b'{"type":"note"}\n')
        with pytest.raises(JournalLost, match="written to by another program"):
            journal.append({"type": "note"})


def test_a_failed_journal_write_names_the_path_and_the_errno_text_and_leaves_no_half_line(tmp_path, monkeypatch):
    import errno

    with Journal.open(tmp_path) as journal:
        journal.append({"type": "search_started", "definition": {}})
        real = journal._file

        class Full:
            def write(self, data):
                real.write(data[:10])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            def fileno(self):
                return real.fileno()

        monkeypatch.setattr(journal, "_file", Full())
        with pytest.raises(UsageError, match=r"journal.jsonl: cannot write the journal \(No space left on device\)"):
            journal.append({"type": "note", "index": 1})
        monkeypatch.undo()
        journal.append({"type": "note", "index": 2})
    journal_module._last_scan = None
    assert [record.get("index") for record in read_records(tmp_path / "journal.jsonl")] == [None, 2]


def test_a_damaged_journal_s_way_out_names_its_own_state_directory(tmp_path):
    """Run as printed, the hint moves the damaged state directory aside, not the default one."""
    state = tmp_path / "elsewhere"
    with Journal.open(state) as journal:
        journal.append({"type": "search_started", "definition": {}})
    path = state / "journal.jsonl"
    path.write_bytes(path.read_bytes() + b"{not json\n")
    with pytest.raises(UsageError) as info:
        read_records(path)
    assert f"'fusion-dd search --restart --state-dir {state}', which moves that state directory aside" in str(info.value)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    record=st.dictionaries(st.text(max_size=6), _JSON_VALUES, min_size=1, max_size=4),
    tail=st.sampled_from(["", " ", "\r", " \t", "x", ",{}", "}", "\x00", " 1"]),
    cut=st.integers(min_value=0, max_value=40),
    ascii_only=st.booleans(),
)
def test_a_line_is_read_exactly_as_json_loads_reads_it_with_the_same_errors(record, tail, cut, ascii_only):
    text = json.dumps(record, ensure_ascii=ascii_only)
    for line in ((text + tail).encode("utf-8", "surrogatepass"), text.encode("utf-8", "surrogatepass")[: max(1, len(text) - cut)]):
        try:
            expected = json.loads(line)
        except ValueError:
            with pytest.raises(ValueError):
                journal_module._parse_line(line)
        else:
            assert journal_module._parse_line(line) == expected
