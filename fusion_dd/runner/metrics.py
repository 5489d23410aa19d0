"""What a finished training measured, and what kind of result that is.

The metric is read from the training's own output (the last match of the user's
regex) or from the metrics file it appended to (the last record with the metric
key), as docs/architecture.md 4.3 promises. NaN or Inf anywhere, in the metric or in any
loss, is recorded separately: a diverged training is the precision failure
fusion-dd hunts for, even when the training still exits 0 or crashes afterwards.

Logs can be hundreds of MB, so they are streamed line by line and never loaded
whole; a pattern therefore matches within one line. A line longer than
:data:`LINE_CAP` (a progress bar rewriting itself with ``\r``, output without
newlines) is scanned in overlapping pieces, so memory stays bounded whatever the
training prints.
"""

from __future__ import annotations

import codecs
import io
import json
import math
import re
import signal as signal_module
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..core.errors import UsageError
from .trial import TrialRun

#: Default for :attr:`MetricSpec.loss_pattern`: ``loss 0.3``, ``loss=nan``,
#: ``Loss: inf`` (case-insensitive; ``loss_scale`` does not match).
DEFAULT_LOSS_PATTERN = re.compile(r"loss[=:\s]\s*(\S+)", re.IGNORECASE)

Goal = Literal["max", "min"]
Kind = Literal[
    "metric", "nonfinite", "diverged", "early_pass", "early_fail", "crash", "timeout", "cancelled", "no_metric", "unevaluable"
]
KINDS: tuple[str, ...] = (
    "metric", "nonfinite", "diverged", "early_pass", "early_fail", "crash", "timeout", "cancelled", "no_metric", "unevaluable",
)
#: A training exits with this code to say "this configuration cannot be evaluated" (it does not
#: build or compile with these rules off, say): git bisect's "skip" code. Not a crash.
UNEVALUABLE_EXIT = 125

_STRAY = ",;:()[]{}<>'\"%|"
_BLOCK_BYTES = 1 << 20
# "info"/"INFO" is in nearly every log line and is never a number: skip it.
_INF_NOT_INFO = re.compile(rb"inf(?!o)")


@dataclass(frozen=True)
class MetricSpec:
    """Where the metric is and which direction is better.

    ``pattern`` None means "read the metrics file": the last record that has
    ``key``. ``loss_pattern`` None switches the loss scan of the log off (the
    metrics file's ``loss`` values are always checked).
    """

    pattern: re.Pattern[str] | None = None
    key: str = "accuracy"
    goal: Goal = "max"
    loss_pattern: re.Pattern[str] | None = field(default=DEFAULT_LOSS_PATTERN)

    def __post_init__(self) -> None:
        if self.goal not in ("max", "min"):
            raise ValueError(f"goal must be 'max' or 'min', got {self.goal!r}")
        for name in ("pattern", "loss_pattern"):
            compiled = getattr(self, name)
            if compiled is not None and compiled.groups < 1:
                raise ValueError(
                    f"{name} '{compiled.pattern}' needs a capturing group around the number"
                )

    @classmethod
    def from_text(
        cls,
        pattern: str | None,
        key: str = "accuracy",
        goal: str = "max",
        loss_pattern: str | None = DEFAULT_LOSS_PATTERN.pattern,
        where: str = "metric",
    ) -> "MetricSpec":
        """Build from configuration strings; ``where`` names the config key in errors."""
        compiled = _compile(pattern, f"{where}.pattern") if pattern is not None else None
        loss = None
        if loss_pattern is not None:
            flags = re.IGNORECASE if loss_pattern == DEFAULT_LOSS_PATTERN.pattern else 0
            loss = _compile(loss_pattern, f"{where}.loss_pattern", flags)
        if goal not in ("max", "min"):
            raise UsageError(f"{where}.goal: {goal!r} is not valid; use 'max' or 'min'")
        if not key:
            raise UsageError(f"{where}.key: must not be empty")
        return cls(pattern=compiled, key=key, goal=goal, loss_pattern=loss)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MetricReading:
    """The metric of one run (None when absent) and whether anything went NaN/Inf.

    ``detail`` is a human-readable sentence: where the value came from, or why
    there is none, or where the first non-finite value was seen.
    """

    value: float | None
    nonfinite: bool
    detail: str


def read_metric(run: TrialRun, spec: MetricSpec) -> MetricReading:
    """Read the metric and scan for NaN/Inf in the run's log and metrics file."""
    log = _scan_log(Path(run.log_path), spec)
    records = _scan_metrics_file(Path(run.metrics_path), spec.key)
    nonfinite = log.first_nonfinite or records.first_nonfinite

    value: float | None
    if spec.pattern is not None:
        value, detail = _value_from_log(log, spec)
        if log.last_token is None:
            detail += _unmatched_pattern_hint(Path(run.log_path), spec.pattern)
    else:
        value, detail = _value_from_records(records, spec.key)
        if value is None:
            detail += _printed_metric_hint(Path(run.metrics_path), Path(run.log_path), spec.key)
    if value is not None and not math.isfinite(value):
        nonfinite = nonfinite or f"metric is {value}"
    if nonfinite:
        prefix = f"non-finite value: {nonfinite}"
        detail = prefix if value is None else f"{prefix}; {detail}"
    return MetricReading(value=value, nonfinite=bool(nonfinite), detail=detail)


def classify(run: TrialRun, reading: MetricReading) -> tuple[Kind, str]:
    """What kind of result a run is, with a one-line reason.

    NaN/Inf wins over everything: it is a precision failure whatever the exit
    code. A run stopped early (``early_stop.json``) is next: it was killed
    because it had already failed, so its signal says nothing, and its kind is
    the decision's (``"nonfinite"`` or ``"diverged"``). Then the ways a run can
    end without a trustworthy metric. A run that exits 0 with a finite metric
    is ``"metric"``.
    """
    stop = run.early_stop
    if stop is not None and stop.get("kind") == "nonfinite":
        return "nonfinite", _stop_reason(stop)
    if reading.nonfinite:
        return "nonfinite", reading.detail
    if stop is not None and stop.get("kind") in ("early_pass", "early_fail"):
        # Stopped at the horizon inside the band, or before it outside: a speculative verdict.
        return stop["kind"], _stop_reason(stop)
    if stop is not None:
        return "diverged", _stop_reason(stop)
    if run.cancelled:
        return "cancelled", "cancelled"
    if run.timed_out:
        limit = run.timeout if run.timeout is not None else run.duration
        return "timeout", f"timed out after {limit:g} s"
    if run.error:
        return "crash", run.error
    if run.signal is not None:
        return "crash", f"killed by signal {run.signal}{_signal_name(run.signal)}"
    if run.exit_code is None:
        return "crash", "no exit status recorded"
    if run.exit_code == UNEVALUABLE_EXIT:
        return "unevaluable", f"exit code {UNEVALUABLE_EXIT}: the training cannot evaluate this configuration"
    if run.exit_code != 0:
        last = last_output_line(Path(run.log_path))
        return "crash", f"exit code {run.exit_code}" + (f"; output.log ends {last!r}" if last else "")
    if reading.value is None:
        return "no_metric", reading.detail
    return "metric", reading.detail


# --- parsing -------------------------------------------------------------------


def parse_number(token: Any) -> float | None:
    """A float from a log token or a JSON value; None when it is not a number.

    Stray punctuation around log tokens is dropped (``0.91,`` ``(nan)``
    ``93.1%``), and the spellings Python and JSON writers use for NaN/Inf
    (``nan``, ``NaN``, ``-inf``, ``Infinity``) are accepted.
    """
    if isinstance(token, bool) or token is None:
        return None
    if isinstance(token, (int, float)):
        return float(token)
    if not isinstance(token, str):
        return None
    text = token.strip().strip(_STRAY).rstrip(".")
    try:
        return float(text)
    except ValueError:
        return None


@dataclass
class _LogScan:
    matches: int = 0
    last_token: str | None = None
    last_line: int = 0
    first_nonfinite: str = ""


@dataclass
class _RecordScan:
    with_key: int = 0
    last_value: Any = None
    last_line: int = 0
    skipped: int = 0
    first_nonfinite: str = ""


@dataclass(frozen=True)
class Piece:
    """Part of a line longer than :data:`LINE_CAP` bytes, scanned without holding the line whole.

    ``text`` starts with the last :data:`OVERLAP` characters of the piece
    before it; ``offset`` is where ``text`` starts in the line (characters), so
    that a scanner can go on after the last match it took (:class:`PieceCursor`).
    ``first``/``final``: the line starts/ends with this piece.
    """

    text: str
    offset: int
    final: bool
    first: bool = False


class PieceCursor:
    """The matches of one pattern in the pieces of one long line, each taken once.

    A match is taken in the first piece that holds it whole: one that touches
    the end of a piece that is not the line's last may go on, and is looked for
    again in the next piece, which repeats the last :data:`OVERLAP` characters.
    (Only a single match longer than the overlap can be missed, or read as a shorter
    match that starts inside it.)
    """

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.done = 0  # where in the line the next match may start

    def matches(self, piece: Piece) -> Iterator[re.Match[str]]:
        if piece.first:
            self.done = 0
        for match in self.pattern.finditer(piece.text, max(0, self.done - piece.offset)):
            if not piece.final and match.end() >= len(piece.text):
                return
            self.done = piece.offset + match.end()
            yield match


#: The longest line held whole; longer ones (a progress bar that rewrites itself with
#: ``\r`` for hours, a training printing without newlines) are scanned in pieces.
LINE_CAP = 1 << 20
OVERLAP = 64 << 10


def _iter_blocks(path: Path) -> Iterator[list[bytes] | Piece]:
    """A possibly huge file as lists of whole lines of about 1 MB, streamed, in bounded memory.

    A line longer than :data:`LINE_CAP` comes as :class:`Piece` items instead:
    whatever the training printed, at most a few blocks are held.
    """
    try:
        handle = open(path, "rb")
    except OSError:
        return
    carry = b""
    long_line: LongLine | None = None
    with handle:
        while True:
            chunk = handle.read(_BLOCK_BYTES)
            data = carry + chunk if carry else chunk
            carry = b""
            if long_line is not None:
                end = data.find(b"\n") + 1
                if not end and chunk:
                    yield from long_line.feed(data, final=False)
                    continue
                yield from long_line.feed(data[:end] if end else data, final=True)
                long_line, data = None, data[end:] if end else b""
            if not chunk:
                if data:
                    yield [data]
                return
            end = data.rfind(b"\n") + 1
            if end:
                yield io.BytesIO(data[:end]).readlines()
            carry = data[end:]
            if len(carry) > LINE_CAP:
                long_line, carry = LongLine(), b""
                yield from long_line.feed(data[end:], final=False)


class LongLine:
    """Turns the bytes of one over-long line into overlapping :class:`Piece` items."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._tail = ""  # the last OVERLAP characters of the piece before
        self._offset = 0  # where _tail starts in the line
        self._started = False

    def feed(self, data: bytes, final: bool) -> Iterator[Piece]:
        first = not self._started
        self._started = True
        text = self._tail + self._decoder.decode(data, final)
        yield Piece(text, self._offset, final, first)
        keep = min(len(text), OVERLAP)
        self._offset += len(text) - keep
        self._tail = text[len(text) - keep :]


def _iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a possibly non-UTF-8 file, streamed; of an over-long line only its end."""
    number = 0
    for lines in _iter_blocks(path):
        if isinstance(lines, Piece):
            number += lines.final  # no record is that long: skipped, like any unreadable line
            continue
        for raw in lines:
            number += 1
            yield number, raw.decode("utf-8", "replace")


def _scan_log(path: Path, spec: MetricSpec) -> _LogScan:
    """One pass over output.log: every metric match, and the first non-finite loss.

    Every NaN/Inf spelling that ``float`` accepts contains "nan" or "inf", so a
    block without those letters cannot hold a non-finite loss and the loss
    pattern is not even tried on it: the scan of a long healthy log costs
    little more than reading it.
    """
    scan = _LogScan()
    pattern, loss_pattern = spec.pattern, spec.loss_pattern
    number = 0
    cursors: dict[str, PieceCursor] = {}
    for lines in _iter_blocks(path):
        if isinstance(lines, Piece):
            _scan_piece(scan, lines, spec, path.name, number + 1, cursors)
            number += lines.final
            continue
        check_loss = (
            loss_pattern is not None
            and not scan.first_nonfinite
            and _may_hold_nonfinite(b"".join(lines))
        )
        if pattern is None and not check_loss:
            number += len(lines)
            continue
        for raw in lines:
            number += 1
            line = raw.decode("utf-8", "replace")
            if pattern is not None:
                for match in pattern.finditer(line):
                    token = match.group(1)
                    scan.matches += 1
                    scan.last_token, scan.last_line = token, number
                    _note_nonfinite(scan, token, f"metric {token!r} at {path.name} line {number}")
            if check_loss and not scan.first_nonfinite:
                for match in loss_pattern.finditer(line):  # type: ignore[union-attr]
                    token = match.group(1)
                    _note_nonfinite(scan, token, f"loss {token!r} at {path.name} line {number}")
    return scan


def _scan_piece(
    scan: _LogScan, piece: Piece, spec: MetricSpec, name: str, number: int, cursors: dict[str, PieceCursor]
) -> None:
    """The metric and loss matches of one piece of an over-long line (line ``number``)."""
    if spec.pattern is not None:
        for match in cursors.setdefault("metric", PieceCursor(spec.pattern)).matches(piece):
            token = match.group(1)
            scan.matches += 1
            scan.last_token, scan.last_line = token, number
            _note_nonfinite(scan, token, f"metric {token!r} at {name} line {number}")
    if spec.loss_pattern is not None and not scan.first_nonfinite:
        for match in cursors.setdefault("loss", PieceCursor(spec.loss_pattern)).matches(piece):
            _note_nonfinite(scan, match.group(1), f"loss {match.group(1)!r} at {name} line {number}")


def _may_hold_nonfinite(block: bytes) -> bool:
    # lower() + literal searches: a case-insensitive regex is ten times slower.
    low = block.lower()
    return b"nan" in low or _INF_NOT_INFO.search(low) is not None


def _note_nonfinite(scan: _LogScan | _RecordScan, token: Any, where: str) -> None:
    if scan.first_nonfinite:
        return
    number = parse_number(token)
    if number is not None and not math.isfinite(number):
        scan.first_nonfinite = where


def _scan_metrics_file(path: Path, key: str) -> _RecordScan:
    scan = _RecordScan()
    for number, line, complete in _tail_safe_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # a line nested past Python's recursion is not a record
            if complete:  # a torn last line is expected; anything else is noted
                scan.skipped += 1
            continue
        if not isinstance(record, dict):
            scan.skipped += 1
            continue
        for name in ("loss", key):
            if name in record:
                _note_nonfinite(
                    scan, record[name], f"{name} {record[name]!r} at {path.name} line {number}"
                )
        if key in record and record[key] is not None:
            scan.with_key += 1
            scan.last_value, scan.last_line = record[key], number
    return scan


def _tail_safe_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """Lines of the metrics file, each flagged whether it ended with a newline."""
    for number, line in _iter_lines(path):
        complete = line.endswith("\n")
        yield number, line.rstrip("\r\n"), complete


def _value_from_log(scan: _LogScan, spec: MetricSpec) -> tuple[float | None, str]:
    assert spec.pattern is not None
    if scan.last_token is None:
        return None, f"no match of pattern '{spec.pattern.pattern}' in output.log"
    value = parse_number(scan.last_token)
    if value is None:
        return None, (
            f"the last match of pattern '{spec.pattern.pattern}' (output.log line "
            f"{scan.last_line}) is not a number: {scan.last_token!r}"
        )
    plural = "match" if scan.matches == 1 else "matches"
    return value, f"{value:g} from output.log line {scan.last_line} (last of {scan.matches} {plural})"


def log_tail(log: Path, size: int) -> str | None:
    """The last ``size`` bytes of a training's log as text (None when it cannot be read).

    The advice and reasons below read only the end of a log: they run for
    every run without a metric or with a crash, on logs of any size.
    """
    try:
        with log.open("rb") as handle:
            end = handle.seek(0, io.SEEK_END)
            handle.seek(max(0, end - size))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return None


def last_match(tail: str, pattern: re.Pattern[str]) -> re.Match[str] | None:
    """The match of ``pattern`` in the last line of ``tail`` that has one."""
    return next((hit for line in reversed(tail.splitlines()) if (hit := pattern.search(line))), None)


def shortened(line: str, limit: int = 80) -> str:
    """A printed line as a reason quotes it: stripped, and cut with "..." beyond ``limit`` characters."""
    line = line.strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


#: How much of the end of output.log :func:`last_output_line` reads, and how much of the line it keeps.
LAST_LINE_TAIL_BYTES = 4096
LAST_LINE_CHARS = 120
_NON_EMPTY = re.compile(r"\S")


def last_output_line(log: Path) -> str | None:
    """The last non-empty line a crashed training printed: a Python traceback's exception, a CANN error code.

    "exit code 1" alone sends the user to the trial's directory for every
    crash; the line that says why is usually the last one.
    """
    tail = log_tail(log, LAST_LINE_TAIL_BYTES)
    found = last_match(tail, _NON_EMPTY) if tail is not None else None
    return shortened(found.string, LAST_LINE_CHARS) if found is not None else None


#: How much of the end of output.log is read for :func:`_printed_metric_hint`: where a final metric is printed.
HINT_TAIL_BYTES = 64 * 1024
#: The words of a no-metric reason whose training printed its metric where the config does not read it:
#: the same training run again prints it the same way (fusion_dd.runner.broken does not retry it).
PRINTED_METRIC_ADVICE = "to read the metric from the output, set metric.pattern"


def _printed_metric_hint(metrics: Path, log: Path, key: str) -> str:
    """Why the metrics file had no metric, and the fix when the output prints one.

    Without ``metric.pattern`` the metric comes from the metrics file alone. A
    training that prints ``accuracy: 0.76`` and writes no metrics file is the
    first thing a new user tries; the reason then names the line it printed
    and the pattern that reads it, instead of leaving the two side by side.
    """
    written = "" if metrics.exists() else f" (the training wrote no {metrics.name})"
    return written + _printed_hint(log, key)


#: The word a metric pattern starts with (``accuracy`` of ``accuracy[=:]``), after any inline flags.
_LEADING_WORD = re.compile(r"^(?:\(\?[aiLmsux]+\))?([A-Za-z_][\w-]{2,})")


def _unmatched_pattern_hint(log: Path, pattern: re.Pattern[str]) -> str:
    """When ``metric.pattern`` matched nothing: the line that prints its word with a number, and a pattern
    that reads it (``eval accuracy = 0.77`` against a pattern that wants no space before the ``=``)."""
    word = _LEADING_WORD.match(pattern.pattern)
    return _printed_hint(log, word.group(1)) if word else ""


def _printed_hint(log: Path, word: str) -> str:
    """"; output.log prints '<line>': set metric.pattern: '<pattern>'" for the last line that prints
    ``word`` and a number, the pattern spelling the word as the training does and checked to read
    that line; "" when there is none. Only the end of the log is read: this runs for runs without
    a metric, on logs of any size."""
    tail = log_tail(log, HINT_TAIL_BYTES)
    if tail is None:
        return ""
    printed = re.compile(
        rf"(?<![\w.])({re.escape(word)})(\s*[=:]\s*|\s+)[-+]?(?:\d|\.\d|nan|inf)", re.IGNORECASE
    )
    found = last_match(tail, printed)
    if found is None:
        return ""
    separator = "\\s*[=:]\\s*" if found.group(2).strip() else "\\s+"
    advised = f"{re.escape(found.group(1))}{separator}(\\S+)"
    check = re.compile(advised).search(found.string)
    if check is None or parse_number(check.group(1)) is None:
        return ""
    return f"; {log.name} prints {shortened(found.string)!r}: {PRINTED_METRIC_ADVICE}: '{advised}'"


def _value_from_records(scan: _RecordScan, key: str) -> tuple[float | None, str]:
    skipped = f" ({scan.skipped} unreadable lines skipped)" if scan.skipped else ""
    if scan.with_key == 0:
        return None, f"no record with key {key!r} in metrics.jsonl{skipped}"
    value = parse_number(scan.last_value)
    if value is None:
        return None, (
            f"{key!r} in metrics.jsonl line {scan.last_line} is not a number: "
            f"{scan.last_value!r}{skipped}"
        )
    return value, f"{key} {value:g} from metrics.jsonl line {scan.last_line}{skipped}"


def _stop_reason(stop: Any) -> str:
    reason = stop.get("reason")
    if isinstance(reason, str) and reason:
        return reason
    step = stop.get("step")
    return f"stopped early at step {step}" if step is not None else "stopped early"


def _signal_name(number: int) -> str:
    try:
        return f" ({signal_module.Signals(number).name})"
    except ValueError:
        return ""


def _compile(text: str, where: str, flags: int = 0) -> re.Pattern[str]:
    try:
        compiled = re.compile(text, flags)
    except re.error as exc:
        raise UsageError(f"{where}: '{text}' is not a valid regular expression ({exc})") from None
    if compiled.groups < 1:
        raise UsageError(
            f"{where}: '{text}' needs a capturing group around the number, e.g. 'acc: (\\S+)'"
        )
    return compiled


__all__ = [
    "DEFAULT_LOSS_PATTERN",
    "KINDS",
    "LINE_CAP",
    "LongLine",
    "OVERLAP",
    "Piece",
    "PieceCursor",
    "UNEVALUABLE_EXIT",
    "MetricReading",
    "MetricSpec",
    "classify",
    "parse_number",
    "read_metric",
]
