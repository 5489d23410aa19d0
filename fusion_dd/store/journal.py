"""The append-only, durable record of one search (docs/architecture.md 4.4).

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

Record types (``type`` field): declared in ``fusion_dd.store.records``, each
with what it records; ``fusion_dd.store.state`` replays them.

Integrity: every line carries ``crc``, the CRC-32 of the canonical JSON of the
rest of the record, so a line edited into different but valid JSON is refused
with its file:line instead of being believed. Lines are written as ``{"crc":"...",``
followed by that canonical text, so that a reader checks the line's own bytes; lines
in another spelling (earlier versions wrote sorted keys with spaces) are checked by
writing their record out canonically, which costs as much as parsing them. Journals of fusion-dd 0.1.0 have no
checksums; such lines are accepted only as the file's leading lines, and the
first coordinator that resumes such a journal appends a ``legacy_sealed`` record
(checksummed) with the SHA-256 of those leading bytes, so that from then on an
edit of the old lines is caught as well. A line without a checksum after one
that has one is refused.

Order: every record also carries ``seq``, its 1-based position among the
journal's records, inside the checksum. A record deleted, emptied, duplicated or
moved leaves a record whose number is not its position, which is refused with its
file:line like any edit; a blank line is never written and is refused once numbered
records begin. Journals written before numbering have no ``seq``: their records are
accepted as the leading ones, and the first coordinator that resumes one numbers the
records it appends by their position, so a later deletion of an older line shifts
them and is caught too. (Only a deletion of the very last records cannot be seen in
the file itself.)

The coordinator also makes sure that it writes into the file that is at
``STATE/journal.jsonl``: a journal deleted or replaced during a search would
otherwise swallow every later record, and the next search would start over and
overwrite the trials (see :meth:`Journal.append`).
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import itertools
import json
import os
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from .records import RecordType

JOURNAL_NAME = "journal.jsonl"
LOCK_NAME = "lock"
TRIALS_DIR = "trials"
FORMAT_VERSION = 2
CHECKSUM_KEY = "crc"
SEQUENCE_KEY = "seq"
SEALED = RecordType.LEGACY_SEALED.value
def _untrusted(path: Path) -> str:
    """The way out of a damaged journal, naming its own state directory: run as printed, it moves that one aside."""
    return (
        "the search state cannot be trusted (restore the file, or start over with "
        f"'fusion-dd search --restart --state-dir {path.parent}', which moves that state directory aside)"
    )


class JournalLost(UsageError):
    """The journal file was deleted or replaced while this coordinator was writing to it."""


def _canonical(record: dict[str, Any]) -> str:
    """The one text a record's checksum is computed over (key order and spacing fixed)."""
    return json.dumps(record, sort_keys=True, allow_nan=False, separators=(",", ":"), ensure_ascii=True)


def checksum(record: dict[str, Any]) -> str:
    """CRC-32 (8 hex digits) of the record without its own checksum field.

    A CRC catches edits and damage, not forgery: anyone can recompute it. That is
    the point here: a person editing a line by hand, or a tool rewriting it,
    must not silently change what the search believes.
    """
    body = {key: value for key, value in record.items() if key != CHECKSUM_KEY}
    return f"{zlib.crc32(_canonical(body).encode('utf-8')):08x}"


def encode_record(record: dict[str, Any]) -> bytes:
    """One journal line: the record, its checksum added, and a newline.

    Values JSON cannot hold are stringified first (``default=str``) so that the
    checksum is computed over exactly what a reader will parse back; NaN and
    infinities are refused (``ValueError``) before anything is written.
    """
    return _encode(record)[0]


def _encode(record: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """The line of :func:`encode_record` and the record a reader parses back from it (checksum removed).

    The round trip sorts the keys at every level, as the line does, so the second
    value equals ``json.loads(line)`` without its checksum, key order included: the
    journal's writer hands it to the readers' cache instead of having the line parsed
    again (a search's last record holds its whole report, megabytes for a long search).
    """
    plain = json.loads(json.dumps(record, allow_nan=False, default=str, sort_keys=True))
    plain.pop(CHECKSUM_KEY, None)
    body = _canonical(plain).encode("utf-8")
    plain.pop(SEQUENCE_KEY, None)  # framing, like the checksum: readers get the record without it
    crc = f"{zlib.crc32(body):08x}".encode("ascii")
    # The checksum first, then the canonical text it covers: a reader checks the line's own
    # bytes (_covered) instead of writing the record out again, the costly half of a read.
    line = _CRC_HEAD + crc + (b'",' + body[1:] if body != b"{}" else b'"}') + b"\n"
    return line, plain


#: How a line encode_record writes begins: ``{"crc":"12345678",`` and then the
#: canonical JSON of the rest of the record without its opening brace.
_CRC_HEAD = b'{"' + CHECKSUM_KEY.encode("ascii") + b'":"'


def _covered(line: bytes, crc: Any) -> bool:
    """Whether ``line`` is a checksum followed by the canonical text it covers, and the checksum is right.

    True only for a line as :func:`encode_record` writes it; any other spelling of a
    record (an older writer's spaces, a line re-indented by a tool) is checked by
    writing the record out canonically (:func:`checksum`).
    """
    head = len(_CRC_HEAD)
    if not (line.startswith(_CRC_HEAD) and line[head + 8 : head + 10] == b'",' and isinstance(crc, str)):
        return False
    if line[head : head + 8] != crc.encode("ascii", "replace"):
        return False
    # The CRC of "{" and then the rest of the line, without copying the line (megabytes at most).
    return f"{zlib.crc32(memoryview(line)[head + 10 :], _CRC_OF_BRACE):08x}" == crc


_CRC_OF_BRACE = zlib.crc32(b"{")
_DECODER = json.JSONDecoder()
_JSON_SPACE = " \t\n\r"


def _parse_line(line: bytes) -> Any:
    """``json.loads(line)``, without its per-call detours for the lines the journal's writer writes.

    A line that begins ``{"`` is UTF-8 to ``json.loads`` too (its encoding guess
    looks at the first bytes), so decoding it here and handing the text to the
    decoder gives the same value and the same errors; any other line goes to
    ``json.loads`` itself. A journal's reading is mostly this, once per record.
    """
    if not line.startswith(b'{"'):
        return json.loads(line)
    text = line.decode("utf-8", "surrogatepass")
    value, end = _DECODER.raw_decode(text)
    if end != len(text) and text[end:].strip(_JSON_SPACE):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


class Record(dict):  # type: ignore[type-arg]
    """A journal record as read back: the same object for every reader of the journal, so read-only.

    A command reads its journal several times (the CLI, the lock's legacy check,
    the engine, the report, the HTML page); parsing 5,000 trials' records each
    time cost seconds, so every read after the first hands out the records of the
    first. Changing one would change what every later reader believes, hence the
    refusal here. Only the record itself is guarded: its nested lists and dicts
    are shared too and must not be changed either. ``dict(record)`` (or
    ``copy.copy``/``copy.deepcopy``, or pickling) gives a plain, mutable copy.
    """

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a journal record is shared by every reader of the journal and read-only; copy it with dict()")

    __setitem__ = __delitem__ = __ior__ = _read_only  # type: ignore[assignment]
    pop = popitem = clear = update = setdefault = _read_only  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)


@dataclass(frozen=True)
class _Scanned:
    """How far a verified scan of a journal's bytes got, so that the same journal grown by appends goes on from there.

    ``end``: bytes of whole lines verified; ``lines``: how many lines those are;
    ``records``: how many records they hold; ``legacy``: one of them had no
    checksum; ``checked_from``: the first line with one (None: none yet);
    ``numbered``: one of them carried its sequence number, so every later one must.
    """

    end: int = 0
    lines: int = 0
    records: int = 0
    legacy: bool = False
    checked_from: int | None = None
    numbered: bool = False


def _scan(
    path: Path, data: bytes, start: _Scanned = _Scanned()
) -> tuple[list[Record], int, _Scanned]:
    """Parse and verify a journal's bytes after ``start.end``: (those records, unsealed legacy length, how far).

    The second value is, for a journal written wholly without checksums (by
    0.1.0), its length: the bytes a ``legacy_sealed`` record must cover; 0 for
    every other journal.
    """
    lines = data[start.end :].split(b"\n")
    records: list[Record] = []
    offset = start.end  # byte offset of the current line
    legacy = start.legacy  # a line without a checksum was seen
    checked_from = start.checked_from  # line number of the first line with a checksum
    numbered = start.numbered  # a record with its sequence number was seen
    whole = None  # after the last line read with its newline: (offset, line number, records)
    # The last line with content, found once: asking "is everything after this line blank?"
    # at every line made reading a journal quadratic in its length.
    last = next((number for number in range(len(lines), 0, -1) if lines[number - 1].strip()), 0)
    for index, line in enumerate(lines, start=1):
        number = start.lines + index
        begin, offset = offset, offset + len(line) + 1
        if numbered and not line.strip() and index < len(lines):
            raise UsageError(
                f"{path}:{number}: blank journal line among numbered records: a record was emptied; {_untrusted(path)}"
            )
        if line.strip():
            try:
                record = _parse_line(line)
                if not isinstance(record, dict) or "type" not in record:
                    raise ValueError("not a journal record")
            except ValueError:
                if index == last and not data.endswith(b"\n"):
                    break  # torn tail: the write that was interrupted never counted
                raise UsageError(f"{path}:{number}: corrupt journal line; {_untrusted(path)}") from None
            if CHECKSUM_KEY not in record:
                if checked_from is not None:
                    raise UsageError(
                        f"{path}:{number}: journal line without a checksum after line {checked_from}, "
                        f"which has one: the line was edited or damaged; {_untrusted(path)}"
                    )
                legacy = True
            else:
                crc = record.pop(CHECKSUM_KEY)
                if not _covered(line, crc) and crc != checksum(record):  # the checksum covers the rest
                    raise UsageError(
                        f"{path}:{number}: journal line does not match its checksum: it was edited or "
                        f"damaged; {_untrusted(path)}"
                    )
                if checked_from is None:
                    checked_from = number
                    if legacy and record.get("type") != SEALED:
                        raise UsageError(
                            f"{path}:{number}: the lines before this one have no checksum and were never "
                            f"sealed: the journal was edited or damaged; {_untrusted(path)}"
                        )
                if record.get("type") == SEALED:
                    _check_seal(path, data, record, begin)
            position = start.records + len(records) + 1
            seq = record.pop(SEQUENCE_KEY, None)
            if seq is not None or numbered:
                _check_sequence(path, number, seq, position)
                numbered = True
            records.append(Record(record))
        if offset <= len(data):  # a whole line, its newline included: a later scan starts after it
            whole = (offset, number, len(records), legacy, checked_from, numbered)
    reached = start
    if whole is not None:
        offset, number, count, legacy_then, checked_then, numbered_then = whole
        reached = _Scanned(offset, number, start.records + count, legacy_then, checked_then, numbered_then)
    return records, (len(data) if legacy and checked_from is None else 0), reached


def _check_sequence(path: Path, number: int, seq: Any, position: int) -> None:
    """A numbered record must stand at its own position: else a record before it was lost, doubled or moved."""
    if seq == position and isinstance(seq, int) and not isinstance(seq, bool):
        return
    if seq is None:
        problem = "has no sequence number although the records before it have one: it was edited or damaged"
    elif not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        problem = f"has the sequence number {seq!r}, which is no record number: it was edited or damaged"
    else:
        problem = (
            f"is record {seq} but stands at position {position}: a record was deleted, emptied, "
            "duplicated or moved"
        )
    raise UsageError(f"{path}:{number}: the journal record {problem}; {_untrusted(path)}")


def _check_seal(path: Path, data: bytes, seal: dict[str, Any], start: int) -> None:
    """The legacy lines a seal covers must be exactly the bytes before it, unchanged."""
    covered = seal.get("legacy_bytes")
    if covered != start or hashlib.sha256(data[:start]).hexdigest() != seal.get("legacy_sha256"):
        lines = data[:start].count(b"\n")
        raise UsageError(
            f"{path}:1-{lines}: the lines written by fusion-dd 0.1.0 (without checksums) changed after "
            f"they were sealed: they were edited or damaged; {_untrusted(path)}"
        )


@dataclass
class _Verified:
    """The last journal read in this process: its verified bytes, how far the scan got, and its records.

    ``appended``: lines this process's :class:`Journal` wrote after ``data``, with
    their records; a read that finds exactly those bytes next takes them as they are.
    """

    path: str
    data: bytes
    scanned: _Scanned
    records: list[Record]
    appended: list[tuple[bytes, Record]]
    appended_end: int = 0  # where the next noted line must begin


#: A command reads its journal several times (the CLI's config and counter, the lock's
#: legacy check, the engine, the report and the HTML page, the final estimate): each read
#: after the first hands out the same records and parses only what was appended since.
_last_scan: _Verified | None = None
#: Held while the cache is read or changed: the engine appends on one thread while a
#: report snapshot or the progress display's estimate reads on another.
_cache_lock = threading.Lock()


def _scan_cached(path: Path, data: bytes) -> tuple[list[Record], int]:
    """``_scan``, parsing and verifying only the bytes that are new since the last scan of this journal.

    Bytes identical to a prefix verified before (compared, not assumed: an edit
    anywhere in it is a different prefix, and all of it is verified again) give
    the records parsed then, the same :class:`Record` objects; lines this process
    appended give the records it wrote; only the rest is parsed and verified.
    """
    with _cache_lock:
        return _scan_cached_locked(path, data)


def _scan_cached_locked(path: Path, data: bytes) -> tuple[list[Record], int]:
    global _last_scan
    cached = _last_scan
    if cached is None or cached.path != str(path) or not data.startswith(cached.data):
        records, legacy, reached = _scan(path, data)
        _last_scan = _Verified(str(path), data[: reached.end], reached, records, [])
        return list(records), legacy
    if cached.appended:
        _take_appended(cached, data)
    new, legacy, reached = _scan(path, data, cached.scanned)
    records = cached.records + new  # a complete last line without its newline is read, not yet kept
    cached.records.extend(new[: reached.records - cached.scanned.records])
    if reached.end != cached.scanned.end:
        cached.data = data[: reached.end]
    cached.scanned = reached
    return records, legacy


def _take_appended(cached: _Verified, data: bytes) -> None:
    """Fold the lines this process appended into the cache when the file holds exactly them next."""
    end = cached.scanned.end
    lines = b"".join(line for line, _ in cached.appended)
    if data[end : end + len(lines)] == lines:
        cached.data = data[: end + len(lines)]
        cached.records.extend(record for _, record in cached.appended)
        scanned = cached.scanned
        cached.scanned = _Scanned(
            end + len(lines),
            scanned.lines + len(cached.appended),
            scanned.records + len(cached.appended),
            scanned.legacy,
            scanned.checked_from if scanned.checked_from is not None else scanned.lines + 1,
            True,
        )
    cached.appended = []


def _note_appended(path: Path, offset: int, line: bytes, record: dict[str, Any]) -> None:
    """A :class:`Journal` wrote ``line`` at ``offset``: remember its record for the next read.

    Only when the cache is of this journal and ends exactly where the line begins
    (after any lines noted before it), and the cached lines are checksummed: the
    first checksummed line after 0.1.0 lines is a seal, which a read must check.
    """
    with _cache_lock:
        cached = _last_scan
        if cached is None or cached.path != str(path) or (cached.scanned.legacy and cached.scanned.checked_from is None):
            return
        if not cached.appended:
            cached.appended_end = cached.scanned.end
        if cached.appended_end != offset:
            cached.appended = []
            return
        cached.appended.append((line, Record(record)))
        cached.appended_end += len(line)


def read_records(path: Path) -> list[dict[str, Any]]:
    """All complete, verified records of a journal file, in order (checksums removed).

    A torn last line (the coordinator died mid-write) is ignored; a corrupt line
    anywhere else, or one that fails its checksum, means the file was damaged or
    edited by something else, and guessing would risk a wrong answer, so it is
    an error naming the file and line.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the journal ({exc})") from None
    return _scan_cached(path, data)[0]


@dataclass(frozen=True)
class _Tail:
    """Where the journal ends after the writer's last append: bytes and records."""

    size: int
    records: int


@dataclass(frozen=True)
class _Pending:
    """An append under way: the tail before it and the line it writes."""

    before: _Tail
    line: bytes


class Journal:
    """The coordinator's handle: the lock plus durable appends."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / JOURNAL_NAME
        self._lock_file: Any = None
        self._file: Any = None
        self._lost: str | None = None
        # The file's size and record count after our last write (nobody else writes to it), one
        # object so that a single assignment moves both: an interrupt never leaves them apart.
        self._tail = _Tail(0, 0)
        # The line being appended, from before its write until the tail counts it (see append).
        self._pending: _Pending | None = None

    @classmethod
    def open(cls, state_dir: Path) -> "Journal":
        """Take the coordinator lock and open the journal for appending."""
        journal = cls(state_dir)
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{state_dir}: cannot create the state directory ({exc})") from None
        journal._acquire_lock()
        try:
            journal._repair_torn_tail()
            journal._file = open(journal.path, "ab", buffering=0)
            journal._seal_legacy_lines()
        except BaseException:
            journal.close()
            raise
        return journal

    def _seal_legacy_lines(self) -> None:
        """Cover the checksum-less lines of a 0.1.0 journal with one checksummed record.

        Nothing is rewritten (a journal is only ever appended to): the new
        record holds the SHA-256 of the old lines, so that their later edit is
        caught like the edit of any new line.
        """
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot read the journal ({exc})") from None
        records, legacy = _scan_cached(self.path, data)
        self._tail = _Tail(len(data), len(records))
        if legacy:
            self.append(
                {
                    "type": SEALED,
                    "legacy_lines": data[:legacy].count(b"\n"),
                    "legacy_bytes": legacy,
                    "legacy_sha256": hashlib.sha256(data[:legacy]).hexdigest(),
                    "format": FORMAT_VERSION,
                }
            )

    def _acquire_lock(self) -> None:
        lock_path = self.state_dir / LOCK_NAME
        try:
            lock_file = open(lock_path, "a+")
        except OSError as exc:
            raise UsageError(f"{lock_path}: cannot open the coordinator's lock file ({exc.strerror or exc})") from None
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            holder = lock_file.read().strip() or "unknown"
            lock_file.close()
            raise UsageError(held_by_another(self.state_dir, holder)) from None
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
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot read the journal ({exc.strerror or exc})") from None
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            try:
                with open(self.path, "r+b") as handle:
                    handle.truncate(keep)
                    handle.flush()
                    os.fsync(handle.fileno())
            except OSError as exc:
                raise UsageError(
                    f"{self.path}: cannot cut the torn last line of the journal ({exc.strerror or exc})"
                ) from None

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.path)

    def append(self, record: dict[str, Any], durable: bool = True) -> None:
        """Write one record durably: one write call, flush, fsync.

        ``durable=False`` skips the fsync for a record whose loss in a crash of the
        machine costs nothing: the next durable record's fsync writes it too (one file,
        in order), and a crash before that loses it together with all that depends on
        it (a question's width, a launch's placement: resume then asks, or looks, again).
        At a few records per training of a fraction of a second, an fsync matters.

        First checks that the open file is still the one at the journal's path
        (:meth:`check_in_place`); once it is not, every append raises
        :class:`JournalLost`, so nothing more is written into a deleted file and,
        since a launch is journaled before it happens, nothing more is launched.
        """
        if self._file is None:
            raise RuntimeError("journal is not open")
        self.check_in_place()
        tail = self._tail
        line, plain = _encode({**record, SEQUENCE_KEY: tail.records + 1})
        # Noted before the write: an interrupt (Ctrl-C raises in the middle of anything) after the
        # write but before the tail is moved leaves a line this writer can recognise as its own
        # (_settle_pending), instead of a file "written to by another program".
        self._pending = _Pending(tail, line)
        try:
            written = 0
            while written < len(line):
                written += self._file.write(line[written:]) or 0
            if durable:
                os.fsync(self._file.fileno())
        except OSError as exc:
            self._undo_pending()
            raise UsageError(f"{self.path}: cannot write the journal ({exc.strerror or exc})") from None
        self._tail = _Tail(tail.size + len(line), tail.records + 1)
        self._pending = None
        _note_appended(self.path, tail.size, line, plain)

    def _settle_pending(self, size: int) -> None:
        """Account for an append that an interrupt cut short, from the file's own bytes.

        The line is ours when the file holds exactly it after the tail we knew
        (the write went through: the tail moves over it) or a prefix of it (a
        write cut short: the prefix is cut off, the record was never written). Any
        other size is left to :meth:`check_in_place` to call a foreign write.
        """
        pending, self._pending = self._pending, None
        if pending is None or self._tail is not pending.before:
            return  # none, or the tail already counts it
        start, line = pending.before.size, pending.line
        if size == start:
            return
        if start < size <= start + len(line) and self._bytes_at(start, size - start) == line[: size - start]:
            if size == start + len(line):
                self._tail = _Tail(size, pending.before.records + 1)
            else:
                self._pending = pending
                self._undo_pending()

    def _bytes_at(self, offset: int, length: int) -> bytes:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        except OSError:
            return b""

    def _undo_pending(self) -> None:
        """Cut what a failed append wrote (a full disk may take half a line), so the next append starts clean."""
        pending, self._pending = self._pending, None
        if pending is None or self._file is None:
            return
        with contextlib.suppress(OSError):
            if os.fstat(self._file.fileno()).st_size > pending.before.size:
                os.ftruncate(self._file.fileno(), pending.before.size)

    def check_in_place(self) -> None:
        """Raise :class:`JournalLost` unless the path still names the file we append to.

        Compares the open descriptor (fstat) with the path (stat): a deleted
        file has no link left or no path; a replaced one (a restored copy, an
        editor's save-by-rename) has another inode. Reopening by path would be
        wrong in both cases: the records written so far are not in that file.
        A size other than the one our last write left means someone truncated
        or wrote to it: appending would build on records we never wrote. An
        append of our own that an interrupt cut short is recognised by its bytes
        first (:meth:`_settle_pending`), so it is never taken for another writer.
        """
        if self._lost is None:
            assert self._file is not None
            try:
                mine = os.fstat(self._file.fileno())
                there: os.stat_result | None = os.stat(self.path)
            except FileNotFoundError:
                there = None
            except OSError as exc:
                raise UsageError(f"{self.path}: cannot check the journal ({exc.strerror or exc})") from None
            if self._pending is not None:
                self._settle_pending(mine.st_size)
                mine = os.fstat(self._file.fileno())
            if there is not None and (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
                self._lost = "was replaced by another file"
            elif there is None or mine.st_nlink == 0:
                self._lost = "was deleted"
            elif mine.st_size != self._tail.size:
                self._lost = "was truncated or written to by another program"
        if self._lost is not None:
            raise JournalLost(
                f"{self.path}: the journal {self._lost} while this search was running; stopped without "
                "launching another training (running ones were cancelled). Restore the journal if you "
                "have a copy, or start over with 'fusion-dd search --restart'"
            )

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


def held_by_another(state_dir: Path, holder: object) -> str:
    """The refusal of a second fusion-dd on a state directory whose lock ``holder`` (a pid) holds."""
    return (
        f"{state_dir}: another fusion-dd (pid {holder}) is running on this "
        "state directory; wait for it, stop it, or use another --state-dir"
    )


def move_aside(state_dir: Path) -> Path | None:
    """Rename a search's state directory to the first free ``NAME.1``, ``NAME.2``, ...

    For ``fusion-dd search --restart``: a fresh search without destroying the
    old one (its journal, trials and report stay readable, and ``fusion-dd
    status --state-dir NAME.1`` still works). Nothing is ever deleted. Returns
    the new path, or None when there was nothing to move (no directory, or an
    empty one). Refused while a coordinator holds the directory's lock, and for
    a non-empty directory that does not look like a state directory.
    """
    try:
        entries = {entry.name for entry in state_dir.iterdir()}
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{state_dir}: cannot read the state directory ({exc})") from None
    if not entries:
        return None
    if not entries & {JOURNAL_NAME, LOCK_NAME, TRIALS_DIR}:
        raise UsageError(
            f"{state_dir}: is not a fusion-dd state directory (no {JOURNAL_NAME}, no {TRIALS_DIR}/), so "
            "--restart leaves it alone; choose another --state-dir"
        )
    holder = Journal(state_dir)
    holder._acquire_lock()  # refuses while a search runs here; held until the move is done
    try:
        for number in itertools.count(1):
            target = state_dir.with_name(f"{state_dir.name}.{number}")
            if os.path.lexists(target):
                continue
            try:
                os.rename(state_dir, target)
            except OSError as exc:
                raise UsageError(f"{state_dir}: cannot move it aside to {target} ({exc})") from None
            return target
    finally:
        holder.close()
    raise AssertionError("unreachable")  # pragma: no cover
