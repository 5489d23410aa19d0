"""The append-only, durable record of one search (DESIGN.md 4.4).

Every training costs hours, so a record is on disk (written, flushed, fsynced)
before anything depends on it. The journal is the single source of truth: the
cache of finished trials, the budget used, resume and the report are all rebuilt
by replaying it.

Concurrency: only one coordinator may append. It holds an ``flock`` on
``STATE/lock`` for its whole life; the kernel drops the lock when the process dies
(even by SIGKILL), so a crash never blocks resume the way an ``O_EXCL`` lock file
would. Readers (``fusion-dd status``) do not take the lock: appends are single
``write`` calls of whole lines, so a reader sees at worst a torn last line, which it
ignores.

Record types (``type`` field): ``search_started``, ``trial_started``,
``trial_finished``, ``trial_cancelled``, ``search_finished``.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import UsageError

JOURNAL_NAME = "journal.jsonl"
LOCK_NAME = "lock"
FORMAT_VERSION = 1


def read_records(path: Path) -> list[dict[str, Any]]:
    """All complete records of a journal file, in order.

    A torn last line (the coordinator died mid-write) is ignored; a corrupt line
    anywhere else means the file was damaged by something else, and guessing
    would risk a wrong answer, so it is an error naming the line.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the journal ({exc})") from None
    lines = data.split(b"\n")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        is_last = number == len(lines) or all(not rest.strip() for rest in lines[number:])
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "type" not in record:
                raise ValueError("not a journal record")
        except ValueError:
            if is_last and not data.endswith(b"\n"):
                break  # torn tail: the write that was interrupted never counted
            raise UsageError(
                f"{path}:{number}: corrupt journal line; the search state cannot be "
                "trusted (restore the file or start over with another --state-dir)"
            ) from None
        records.append(record)
    return records


class Journal:
    """The coordinator's handle: the lock plus durable appends."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / JOURNAL_NAME
        self._lock_file: Any = None
        self._file: Any = None

    @classmethod
    def open(cls, state_dir: Path) -> "Journal":
        """Take the coordinator lock and open the journal for appending."""
        journal = cls(state_dir)
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{state_dir}: cannot create the state directory ({exc})") from None
        journal._acquire_lock()
        journal._repair_torn_tail()
        journal._file = open(journal.path, "ab")
        return journal

    def _acquire_lock(self) -> None:
        lock_path = self.state_dir / LOCK_NAME
        lock_file = open(lock_path, "a+")
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            holder = lock_file.read().strip() or "unknown"
            lock_file.close()
            raise UsageError(
                f"{self.state_dir}: another fusion-dd (pid {holder}) is running on this "
                "state directory; wait for it, stop it, or use another --state-dir"
            ) from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(str(os.getpid()))
        lock_file.flush()
        self._lock_file = lock_file

    def _repair_torn_tail(self) -> None:
        """Cut a torn last line so that the next append starts on a fresh line."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as handle:
                handle.truncate(keep)
                handle.flush()
                os.fsync(handle.fileno())

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.path)

    def append(self, record: dict[str, Any]) -> None:
        """Write one record durably: one write call, flush, fsync."""
        if self._file is None:
            raise RuntimeError("journal is not open")
        line = json.dumps(record, sort_keys=True, allow_nan=False, default=str) + "\n"
        self._file.write(line.encode("utf-8"))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lock_file is not None:
            self._lock_file.close()  # closing the descriptor releases the flock
            self._lock_file = None

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_type(records: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    """The records of one type, in order."""
    return (record for record in records if record.get("type") == kind)
