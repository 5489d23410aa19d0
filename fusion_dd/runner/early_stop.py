"""Stop a training as soon as it has already failed, instead of hours later.

A training whose loss went NaN at step 200, or whose loss sits far above the
baseline's curve, will fail however long it runs; every further minute only
keeps a device busy. This module decides *when* such a run may be stopped; the
stopping itself is :meth:`fusion_dd.runner.trial.RunningTrial.wait` (``monitor=``).

Three layers, so that the decision can be tested without processes or clocks:

* :class:`EarlyStopRule` says what counts as failed (NaN/Inf loss; loss above
  the baseline's band for ``patience`` reports in a row).
* :class:`Judge` (and the pure wrapper :func:`decide`) turns a baseline curve and
  the run's ``(step, loss)`` reports into ``None`` or a :class:`StopDecision`.
* :class:`TrialFollower` reads, on each call, only what is new in a running
  trial's ``metrics.jsonl`` (and ``output.log`` when ``step_pattern`` is set) and
  feeds it to a judge; it is the ``monitor`` that ``wait`` calls every poll.

"The baseline's loss at the same step" is the baseline's loss at the *nearest
earlier or equal* step it reported (a step function, no interpolation). Losses
normally fall, so an earlier baseline value is a little higher than the exact
one would be: the band errs towards not stopping, which is the safe side (a
wrongly stopped run wastes a whole search decision, a run stopped late wastes
only minutes). Reports before the baseline's first step have no reference and
are not judged for divergence.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..core.errors import UsageError
from .horizon import Baseline, LossReading, PassAt, prepared
from .metrics import LongLine, PieceCursor, log_tail, parse_number, shortened
from .supervisor import LOG_FILE
from .trial import METRICS_FILE

StopKind = Literal["nonfinite", "diverged", "early_pass", "early_fail"]
Curve = Sequence[tuple[int, float]]

#: At most this many new bytes are read from each file per call, so that one
#: poll never stalls on a training that has just dumped gigabytes; the follower
#: catches up over the next polls.
MAX_READ_BYTES = 8 << 20
#: A log "line" without any line end (a progress bar gone wild) is cut here
#: rather than buffered without bound.
MAX_LINE_BYTES = 1 << 20
_LOG_LINE_END = re.compile(rb"\r\n|\r|\n")

_CONFIG_KEYS = ("nan", "divergence", "relative", "patience", "step_pattern", "start_step", "pass_at")


@dataclass(frozen=True)
class EarlyStopRule:
    """When a running training counts as failed already.

    ``divergence`` is the width of the band above the baseline's curve: a report
    is *above the band* when ``loss > ref + divergence`` (absolute), or, with
    ``relative``, when ``loss > ref + divergence * |ref|`` (0.5 = 50% above).
    None switches the divergence check off. ``patience`` reports above the band
    in a row (at distinct steps) are needed, because single spikes are normal.
    ``start_step`` skips the noisy first steps for the divergence check (never
    for NaN). ``step_pattern`` (two groups: step, loss) additionally reads the
    reports from the training's output, for trainings that write no metrics file;
    without one, ``read_output`` lets the references' output name the pattern
    (:func:`printed_step_pattern`), which then reads every later training's.

    ``pass_at`` is the user's setting for speculative early passes
    (:mod:`fusion_dd.runner.horizon`); ``pass_step`` the horizon the engine
    derived from it for one training: a run whose every report from
    ``start_step`` on stayed inside the band is stopped at the first report at
    or beyond it, as an ``early_pass``. With ``fail_band``, a run that leaves
    the band for ``patience`` reports in a row is stopped there as an
    ``early_fail`` (when ``divergence`` is set, that is a real ``diverged``
    stop instead). Both are speculative: the engine backs every claim it hands
    over by full trainings. None and False (the defaults, and always for the
    references) give no early verdicts.
    """

    nan: bool = True
    divergence: float | None = None
    relative: bool = False
    patience: int = 3
    step_pattern: re.Pattern[str] | None = None
    read_output: bool = True
    start_step: int = 0
    pass_at: PassAt = PassAt()
    pass_step: int | None = None
    fail_band: bool = False

    def __post_init__(self) -> None:
        if self.divergence is not None and not (
            math.isfinite(self.divergence) and self.divergence >= 0
        ):
            raise ValueError(f"divergence must be a finite number >= 0, got {self.divergence}")
        if self.patience < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        if self.step_pattern is not None and self.step_pattern.groups < 2:
            raise ValueError(
                f"step_pattern '{self.step_pattern.pattern}' needs two groups: step and loss"
            )

    @property
    def active(self) -> bool:
        """Whether there is anything to watch; without it, pass no monitor at all."""
        return self.nan or self.divergence is not None or self.pass_step is not None or self.fail_band

    @classmethod
    def from_config(cls, section: Any, where: str = "early_stop") -> "EarlyStopRule":
        """Build from the ``early_stop:`` section of fusion-dd.yaml; errors name the key.

        ``None`` (section absent) or ``true`` gives the default (stop at NaN only);
        ``false`` gives an inactive rule.
        """
        if section is None or section is True:
            return cls()
        if section is False:
            return cls(nan=False)
        if not isinstance(section, Mapping):
            raise UsageError(f"{where}: must be a mapping (keys: {', '.join(_CONFIG_KEYS)}) or true/false")
        unknown = sorted(str(key) for key in section if key not in _CONFIG_KEYS)
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(_CONFIG_KEYS), n=1)
            hint = f"; did you mean '{where}.{close[0]}'?" if close else ""
            raise UsageError(
                f"{where}.{unknown[0]}: unknown key{hint} (allowed here: {', '.join(_CONFIG_KEYS)})"
            )
        nan = _bool(section.get("nan", True), f"{where}.nan")
        relative = _bool(section.get("relative", False), f"{where}.relative")
        divergence = section.get("divergence")
        if divergence is not None:
            if isinstance(divergence, bool) or not isinstance(divergence, (int, float)) or not (
                math.isfinite(divergence) and divergence >= 0
            ):
                raise UsageError(
                    f"{where}.divergence: {divergence!r} is not valid; use a number >= 0 "
                    "(loss units, or a fraction of the baseline's loss with relative: true)"
                )
            divergence = float(divergence)
        patience = _int(section.get("patience", 3), f"{where}.patience", minimum=1)
        start_step = _int(section.get("start_step", 0), f"{where}.start_step", minimum=0)
        pass_at = PassAt.parse(section.get("pass_at", "auto"), f"{where}.pass_at")
        pattern = section.get("step_pattern")
        compiled = None
        read_output = pattern is not False and pattern != "off"  # YAML reads a bare off as false
        if pattern is not None and read_output:
            if not isinstance(pattern, str):
                raise UsageError(
                    f"{where}.step_pattern: must be a string such as 'step (\\d+) loss (\\S+)', "
                    "or off to read no loss from the output"
                )
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise UsageError(
                    f"{where}.step_pattern: '{pattern}' is not a valid regular expression ({exc})"
                ) from None
            if compiled.groups < 2:
                raise UsageError(
                    f"{where}.step_pattern: '{pattern}' needs two groups, step then loss, "
                    "e.g. 'step (\\d+) loss (\\S+)'"
                )
        return cls(
            nan=nan, divergence=divergence, relative=relative, patience=patience,
            step_pattern=compiled, read_output=read_output, start_step=start_step, pass_at=pass_at,
        )


@dataclass(frozen=True)
class StopDecision:
    """Why a run may be stopped now: its kind (as :func:`fusion_dd.runner.metrics.classify`
    will report it), the step it was seen at (None when the report had no step)
    and a one-line reason for the journal and the report. ``departed``: for a run
    stopped for its loss, the first step at which a report lay outside the band, which
    may come well before the stop (patience): whether early passes could have seen
    the damage is told by it, not by the step of the stop."""

    kind: StopKind
    step: int | None
    reason: str
    departed: int | None = None

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"kind": self.kind, "step": self.step, "reason": self.reason}
        if self.departed is not None:
            record["departed"] = self.departed
        return record


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{where}: {value!r} is not valid; use true or false")
    return value


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{where}: {value!r} is not valid; use a whole number >= {minimum}")
    return value


# --- the decision -------------------------------------------------------------------


class Judge:
    """Feeds on a run's reports one at a time; says when the run may be stopped.

    Incremental so that a follower polling a long training costs O(new reports)
    per poll, not O(all reports). Each step is judged once for divergence: a
    report whose step is not above every step judged so far (the same step from
    the log and the metrics file, or a restart from a checkpoint) only counts
    for the NaN rule. Once it has decided, the decision stays.
    """

    def __init__(self, rule: EarlyStopRule, baseline: Baseline | Iterable[tuple[int, float]] = ()) -> None:
        self.rule = rule
        self.baseline = prepared(baseline)
        self.decision: StopDecision | None = None
        self._last_step: int | None = None
        self._run: list[int] = []  # steps of the current run of reports above the band
        self._left_band = False  # some judged report lay above the band: no early pass
        self._departed: int | None = None  # the first step of such a report
        self._reading = LossReading(smooth=rule.divergence is None)

    def feed(self, step: int | None, loss: float) -> StopDecision | None:
        if self.decision is not None:
            return self.decision
        rule = self.rule
        if not math.isfinite(loss):
            if rule.nan:
                where = f"step {step}" if step is not None else "a report without a step"
                self.decision = StopDecision("nonfinite", step, f"stopped early at {where}: loss {loss}")
            self._left_band = True  # a tolerated NaN says nothing about the band, but no run with one passes early
            return self.decision
        if step is None or not self.baseline:
            return None
        if rule.divergence is None and rule.pass_step is None and not rule.fail_band:
            return None
        if self._last_step is not None and step <= self._last_step:
            return None
        self._last_step = step
        if step < rule.start_step:
            return None
        value = self._reading.feed(loss)
        reference = self.baseline.top(step, rule.divergence, rule.relative)
        if reference is None:
            return None
        ref_step, ref_loss, top = reference
        inside = value <= top
        self._left_band = self._left_band or not inside
        if not inside and self._departed is None:
            self._departed = step
        if rule.pass_step is not None and step >= rule.pass_step and not self._left_band:
            self.decision = StopDecision(
                "early_pass",
                step,
                f"passed early at step {step}: every loss up to it stayed inside the baseline's band "
                f"(horizon {rule.pass_step}); a speculative pass, proven only by a full training",
            )
            return self.decision
        if inside:
            self._run.clear()
            return None
        self._run.append(step)
        if len(self._run) >= rule.patience and rule.divergence is None:
            if rule.fail_band:
                # The pass band, not a divergence the user set: the run can no longer pass early,
                # and it left the band as the all-on run did. A speculative failure.
                self.decision = StopDecision(
                    "early_fail",
                    step,
                    f"failed early at step {step}: loss {loss:.6g} left the baseline's band ({ref_loss:.6g} at its "
                    f"step {ref_step}) for {len(self._run)} reports in a row (since step {self._run[0]}); a "
                    "speculative failure, proven only by a full training",
                    departed=self._departed,
                )
        elif len(self._run) >= rule.patience:
            band = (
                f"{rule.divergence:g} x |{ref_loss:.6g}|" if rule.relative else f"{rule.divergence:g}"
            )
            since = f" (since step {self._run[0]})" if len(self._run) > 1 else ""
            self.decision = StopDecision(
                "diverged",
                step,
                f"stopped early at step {step}: loss {loss:.6g} above the baseline's "
                f"{ref_loss:.6g} (its step {ref_step}) + {band} for {len(self._run)} "
                f"report{'s' if len(self._run) > 1 else ''} in a row{since}",
                departed=self._departed,
            )
        return self.decision

    def feed_all(self, reports: Iterable[tuple[int | None, float]]) -> StopDecision | None:
        for step, loss in reports:
            if self.feed(step, loss) is not None:
                break
        return self.decision


def decide(
    rule: EarlyStopRule,
    baseline: Curve,
    reports: Iterable[tuple[int | None, float]],
) -> StopDecision | None:
    """The first point at which the run could have been stopped; None if none.

    Pure: the same as feeding the reports one by one into a fresh :class:`Judge`.
    """
    return Judge(rule, baseline).feed_all(reports)


def envelope(curves: Iterable[Curve]) -> list[tuple[int, float]]:
    """One baseline curve from several repeats: at each step, the highest of them.

    With repeated baselines the band should sit above all of them, else the
    baseline's own noise would stop healthy runs. Each curve is read with the
    same nearest-earlier rule as a single baseline.
    """
    repeats = [Baseline(curve) for curve in curves]
    steps = sorted({step for curve in repeats for step in curve.steps})
    result: list[tuple[int, float]] = []
    for step in steps:
        values = [point[1] for curve in repeats if (point := curve.at(step)) is not None]
        result.append((step, max(values)))
    return result


def estimate_savings(
    stop: Mapping[str, Any], baseline_last_step: int | None, baseline_duration: float | None
) -> dict[str, float | int | None]:
    """What an early stop saved, against a full-length (baseline) training.

    ``stop`` is the content of ``early_stop.json`` (``TrialRun.early_stop``).
    Values are None when unknown, never negative.
    """
    step, elapsed = stop.get("step"), stop.get("elapsed")
    steps = (
        max(baseline_last_step - int(step), 0)
        if baseline_last_step is not None and isinstance(step, int)
        else None
    )
    seconds = (
        max(float(baseline_duration) - float(elapsed), 0.0)
        if baseline_duration is not None and isinstance(elapsed, (int, float))
        else None
    )
    return {"steps_saved": steps, "seconds_saved": seconds}


# --- reading a training's reports ---------------------------------------------------


@dataclass
class _Tail:
    """Where we are in one growing file, and the torn line not yet ended."""

    path: Path
    offset: int = 0
    pending: bytes = b""
    identity: tuple[int, int] | None = None
    # A log line longer than MAX_LINE_BYTES being read in pieces (fusion_dd.runner.metrics.LongLine),
    # with where the pattern's matches in it got to: never held whole.
    long_line: LongLine | None = None
    cursor: PieceCursor | None = None

    def read_new(self, limit: int = MAX_READ_BYTES) -> bytes:
        """Bytes appended since the last call (the torn tail is the caller's business).

        A file that shrank or was replaced (a restarted trial) is read again from
        the start, so a new attempt's reports are never skipped.
        """
        try:
            handle = open(self.path, "rb")
        except OSError:
            return b""
        with handle:
            stat = os.fstat(handle.fileno())
            identity = (stat.st_dev, stat.st_ino)
            if identity != self.identity or stat.st_size < self.offset:
                self.identity, self.offset, self.pending = identity, 0, b""
                self.long_line = self.cursor = None
            if stat.st_size == self.offset:
                return b""
            handle.seek(self.offset)
            data = handle.read(limit)
        self.offset += len(data)
        return data


def _records_from_jsonl(chunk: bytes, tail: _Tail) -> list[tuple[int | None, float]]:
    """(step, loss) of each complete new line; the torn last line waits in ``tail``."""
    data = tail.pending + chunk
    lines = data.split(b"\n")
    tail.pending = lines.pop()  # b"" when the chunk ended with a newline
    if len(tail.pending) > MAX_LINE_BYTES:  # no record is that long: not JSON, drop it
        tail.pending = b""
    reports: list[tuple[int | None, float]] = []
    for raw in lines:
        try:
            record = json.loads(raw.decode("utf-8", "replace"))
        except (ValueError, RecursionError):  # RecursionError: a line nested 100,000 deep
            continue  # a corrupt line says nothing; metrics.py reports those
        report = _report_of(record)
        if report is not None:
            reports.append(report)
    return reports


def _report_of(record: Any) -> tuple[int | None, float] | None:
    if not isinstance(record, dict) or "loss" not in record:
        return None
    loss = parse_number(record["loss"])
    if loss is None:
        return None
    return _step_of(record.get("step")), loss


def _step_of(token: Any) -> int | None:
    number = parse_number(token)
    if number is None or not math.isfinite(number):
        return None
    return int(number)


def _records_from_log(
    chunk: bytes, tail: _Tail, pattern: re.Pattern[str]
) -> list[tuple[int | None, float]]:
    """(step, loss) of each ``pattern`` match in the new complete lines of the log.

    ``\\r`` ends a line too: progress bars rewrite one line with carriage
    returns and would otherwise look like one endless torn line. A line longer
    than :data:`MAX_LINE_BYTES` (output without any line end) is read in
    overlapping pieces, so a match across a read's boundary is still found once.
    """
    data = tail.pending + chunk
    tail.pending = b""
    reports: list[tuple[int | None, float]] = []

    def take(matches: Iterable[re.Match[str]]) -> None:
        for match in matches:
            loss = parse_number(match.group(2))
            if loss is not None:
                reports.append((_step_of(match.group(1)), loss))

    if tail.long_line is not None:
        assert tail.cursor is not None
        end = _LOG_LINE_END.search(data)
        piece_data, data = (data, b"") if end is None else (data[: end.start()], data[end.end() :])
        for piece in tail.long_line.feed(piece_data, final=end is not None):
            take(tail.cursor.matches(piece))
        if end is None:
            return reports
        tail.long_line = tail.cursor = None
    lines = _LOG_LINE_END.split(data)
    tail.pending = lines.pop()
    for raw in lines:
        if raw:
            take(pattern.finditer(raw.decode("utf-8", "replace")))
    if len(tail.pending) > MAX_LINE_BYTES:
        tail.long_line, tail.cursor = LongLine(), PieceCursor(pattern)
        for piece in tail.long_line.feed(tail.pending, final=False):
            take(tail.cursor.matches(piece))
        tail.pending = b""
    return reports


class ReportReader:
    """The (step, loss) reports a training has written, read incrementally.

    Each call of :meth:`read_new` returns only the reports that became
    complete since the previous call: the metrics file's first, then the log's
    (when ``step_pattern`` is set). Offsets are remembered, so a poll of a
    long-running training reads only the new bytes.
    """

    def __init__(self, trial_dir: str | os.PathLike[str], step_pattern: re.Pattern[str] | None = None) -> None:
        directory = Path(trial_dir)
        self.step_pattern = step_pattern
        self._metrics = _Tail(directory / METRICS_FILE)
        self._log = _Tail(directory / LOG_FILE) if step_pattern is not None else None

    def read_new(self, limit: int = MAX_READ_BYTES) -> list[tuple[int | None, float]]:
        reports = _records_from_jsonl(self._metrics.read_new(limit), self._metrics)
        if self._log is not None and self.step_pattern is not None:
            reports += _records_from_log(self._log.read_new(limit), self._log, self.step_pattern)
        return reports

    def read_all(self) -> list[tuple[int | None, float]]:
        """Everything up to the current end of the files (for finished runs).

        The metrics file's reports first, then the log's, as :meth:`read_new`
        orders them; a last line without a newline counts, since nothing more
        will be written to it.
        """
        reports: list[tuple[int | None, float]] = []
        while chunk := self._metrics.read_new():
            reports += _records_from_jsonl(chunk, self._metrics)
        reports += _records_from_jsonl(b"\n", self._metrics)
        if self._log is not None and self.step_pattern is not None:
            while chunk := self._log.read_new():
                reports += _records_from_log(chunk, self._log, self.step_pattern)
            reports += _records_from_log(b"\n", self._log, self.step_pattern)
        return reports


class TrialFollower:
    """The ``monitor`` for :meth:`RunningTrial.wait`: new reports in, decision out.

    Cheap to call every poll: it reads only new bytes (at most
    :data:`MAX_READ_BYTES` per file per call) and judges only new reports.
    Works the same for an adopted trial: it then starts by catching up from the
    beginning of the files.
    """

    def __init__(
        self,
        trial_dir: str | os.PathLike[str],
        rule: EarlyStopRule,
        baseline: Baseline | Curve = (),
    ) -> None:
        self.reader = ReportReader(trial_dir, rule.step_pattern)
        self.judge = Judge(rule, baseline)

    def __call__(self) -> StopDecision | None:
        if self.judge.decision is None:
            self.judge.feed_all(self.reader.read_new())
        return self.judge.decision


def make_monitor(
    trial_dir: str | os.PathLike[str], rule: EarlyStopRule | None, baseline: Baseline | Curve = ()
) -> Callable[[], StopDecision | None] | None:
    """The monitor to pass to ``wait``, or None when the rule watches nothing."""
    if rule is None or not rule.active:
        return None
    return TrialFollower(trial_dir, rule, baseline)


def read_curve(
    trial_dir: str | os.PathLike[str], step_pattern: re.Pattern[str] | None = None
) -> list[tuple[int, float]]:
    """A finished run's loss curve, for use as a baseline: sorted by step, one loss per step.

    From metrics.jsonl, plus the ``step_pattern`` matches of output.log when
    given. Reports without a step or with a non-finite loss are left out; when a
    step is reported more than once, the first report counts (the same choice
    the judge makes for a running training).
    """
    by_step: dict[int, float] = {}
    for step, loss in ReportReader(trial_dir, step_pattern).read_all():
        if step is not None and math.isfinite(loss) and step not in by_step:
            by_step[step] = loss
    return sorted(by_step.items())


class LossCurveHook:
    """Journal a reference training's loss curve when it ends (an artifact hook, ``fusion_dd.core.hooks``).

    Early stopping compares every later training with the baseline's curve; as
    a journaled fact it survives resume without reading the baseline's files
    again (and without them being on the coordinator's disk). At most
    ``MAX_CURVE_POINTS`` points are kept, evenly spread, the last one included.

    A training that prints its curve (``step 40 loss 0.21``) but writes no
    metrics file is read with the pattern its own output names when the config
    gives none (``read_output``): the fact ``step_pattern`` says which, so that
    the engine reads the later trainings' output the same way, and the printed
    line it was made from (``printed``) is what the user is shown.
    """

    name = "loss_curve"

    def __init__(self, step_pattern: re.Pattern[str] | None = None, read_output: bool = True) -> None:
        self.step_pattern = step_pattern
        self.read_output = read_output

    def collect(self, files: Any) -> dict[str, Any]:
        # Read here, where the trial's files are: the coordinator may never see them.
        curve = read_curve(files.trial_dir, self.step_pattern)
        found: dict[str, Any] = {}
        if not curve and self.step_pattern is None and self.read_output:
            printed = printed_step_pattern(Path(files.trial_dir) / LOG_FILE)
            if printed is not None:
                curve = read_curve(files.trial_dir, re.compile(printed[0]))
                found = {"step_pattern": printed[0], "printed": printed[1]} if curve else {}
        if files.role not in CURVE_ROLES:
            # What the training cost in steps: the search's cost in training-steps (report.py).
            return {"last_step": curve[-1][0]} if curve else {}
        if len(curve) > MAX_CURVE_POINTS:
            stride = len(curve) / MAX_CURVE_POINTS
            kept = {int(i * stride) for i in range(MAX_CURVE_POINTS)} | {len(curve) - 1}
            curve = [curve[i] for i in sorted(kept)]
        return {"curve": [[step, loss] for step, loss in curve], "last_step": curve[-1][0] if curve else None, **found}


MAX_CURVE_POINTS = 5000
#: The references whose whole curves are journaled: the baseline's is the band,
#: the all-on one's departure from it sets the horizon of early passes.
CURVE_ROLES = ("baseline", "all_on")


#: How much of the end of output.log :func:`printed_step_pattern` reads first, and at most.
PRINTED_TAIL_BYTES = 64 * 1024
PRINTED_MAX_BYTES = 64 * 1024 * 1024
#: A line that reports a step and a loss, as trainings print them ("step 40 loss 0.21", "Step: 40, Loss: 0.21",
#: "global_step 40 train_loss 0.21").
_PRINTED_STEP = re.compile(
    r"(?<![\w.])(\w*?(?:step|iter(?:ation)?))\b\D{0,20}?(\d+).*?(?<![\w.])(\w*?loss)\s*[=:]?\s*[-+]?(?:\d|\.\d|nan|inf)",
    re.IGNORECASE,
)


def _tail_with_step_lines(log: Path) -> str | None:
    """The end of the log back to its last lines that report a step and a loss (None: unreadable).

    The last 64 KiB usually hold them; a training may print pages after its last
    step (an evaluation, the compiler's own log on stdout), so the read goes four
    times further back each time none is there, up to ``PRINTED_MAX_BYTES``.
    """
    try:
        length = log.stat().st_size
    except OSError:
        return None
    size = PRINTED_TAIL_BYTES
    while True:
        tail = log_tail(log, size)
        if tail is None or size >= min(length, PRINTED_MAX_BYTES) or _PRINTED_STEP.search(tail):
            return tail
        size *= 4


def printed_step_pattern(log: Path) -> tuple[str, str] | None:
    """The ``early_stop.step_pattern`` that reads the loss curve a training prints, and the line it is made from.

    Made from the lines of the end of the log that report a step and a loss
    (as far back as the last of them, ``_tail_with_step_lines``),
    with the words as the training spells them (``Step``, ``global_step``,
    ``train_loss``), each a whole word, so that ``val_loss`` is not read as
    ``loss``. Where lines spell them differently (the training loss every step,
    a validation loss every tenth), the most frequent spelling is the curve, the
    later one among equals; the pattern is checked to read its last line. None
    when the log prints no such line or the pattern would not read it.
    """
    tail = _tail_with_step_lines(log)
    if tail is None:
        return None
    spellings: Counter[tuple[str, str]] = Counter()
    latest: dict[tuple[str, str], tuple[int, re.Match[str]]] = {}
    for number, line in enumerate(tail.splitlines()):
        if (hit := _PRINTED_STEP.search(line)) is not None:
            words = (hit.group(1), hit.group(3))
            spellings[words] += 1
            latest[words] = (number, hit)
    if not spellings:
        return None
    found = latest[max(spellings, key=lambda words: (spellings[words], latest[words][0]))][1]
    step, loss = (re.escape(found.group(index)) for index in (1, 3))
    pattern = f"(?<![\\w.]){step}\\D{{0,20}}?(\\d+).*?(?<![\\w.]){loss}\\s*[=:]?\\s*([^\\s,;]+)"
    check = re.compile(pattern).search(found.string)
    if check is None or _step_of(check.group(1)) is None or parse_number(check.group(2)) is None:
        return None
    return pattern, shortened(found.string)


__all__ = [
    "Baseline",
    "LossCurveHook",
    "EarlyStopRule",
    "Judge",
    "ReportReader",
    "StopDecision",
    "TrialFollower",
    "decide",
    "envelope",
    "estimate_savings",
    "make_monitor",
    "printed_step_pattern",
    "read_curve",
]
