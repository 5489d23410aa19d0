"""Telling "the training does not run" from "the baseline's metric is bad".

A search needs trainings that run and print a metric. When the reference
trainings (baseline, all-on) cannot start, or end without a metric every time,
or the baseline cannot finish within ``train.timeout``, the search has learnt
nothing about fusion: refusing with ``baseline_fails`` ("fusion is not the
cause") would be a wrong answer. It stops at once instead, with status
``training_broken``, exit code 2, the reason, the command and the end of the
training's output, so the user fixes the training rather than the rules.

Pure: the engine hands in the reference trials as the journal knows them; this
module only reads their records (and, for the report, the tail of one log).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.status import SearchStatus
from ..store.state import TrialState
from .metrics import PRINTED_METRIC_ADVICE

STATUS = SearchStatus.TRAINING_BROKEN
#: Reference trainings without any metric that are enough to call a training broken.
MAX_BROKEN_TRAININGS = 4
#: Lines of the training's output.log shown on the terminal and kept in the report.
LOG_TAIL_LINES = 20
#: How fusion_dd.runner.supervisor's ``_start_error`` words a training that never started:
#: training again cannot help, so these are never retried.
START_ERROR_PREFIXES = (
    "command not found",
    "permission denied",
    "cannot execute",
    "working directory not found",
    "cannot start",
)


@dataclass(frozen=True)
class BrokenTraining:
    """Why the training cannot answer anything, and which trial shows it."""

    reason: str
    trial: TrialState | None = None
    command: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)


class TrainingBroken(Exception):
    """Raised by the engine to stop a search whose training does not run."""

    def __init__(self, broken: BrokenTraining) -> None:
        super().__init__(broken.reason)
        self.broken = broken


def is_start_error(trial: TrialState | None) -> bool:
    """Did this training fail to start at all (not found, not executable)?"""
    if trial is None or trial.finished is None or trial.finished.get("kind") != "crash":
        return False
    if trial.finished.get("exit_code") is not None or trial.finished.get("signal") is not None:
        return False
    return str(trial.finished.get("reason", "")).startswith(START_ERROR_PREFIXES)


def is_misread(trial: TrialState | None) -> bool:
    """Did this training end well and print its metric where the config does not read it?

    Training it again prints the metric the same way, so such a reference is not
    retried: the fix is in fusion-dd.yaml, and the reason says which.
    """
    if trial is None or trial.finished is None or trial.finished.get("kind") != "no_metric":
        return False
    return trial.finished.get("exit_code") == 0 and PRINTED_METRIC_ADVICE in str(trial.finished.get("reason", ""))


def diagnose_references(
    trials: Sequence[TrialState],
    baseline_settled: Sequence[TrialState],
    all_settled: bool,
) -> BrokenTraining | None:
    """The reference trainings so far (every attempt, in order) -> broken or not.

    ``baseline_settled`` are the trials that stand for the baseline's keys once
    their retries are used up; ``all_settled`` says every reference key is decided.

    Broken when: any reference training could not start; the baseline timed out
    on its last allowed attempt (a training that cannot finish says nothing about
    fusion); or no reference training produced a metric while every reference key
    is decided, or ``MAX_BROKEN_TRAININGS`` of them have failed so, or every one
    launched has ended and one printed its metric where the config does not read
    it (:func:`is_misread`: a retry prints it the same way).
    """
    finished = [trial for trial in trials if trial.finished is not None]
    for trial in finished:
        if is_start_error(trial):
            return BrokenTraining(f"the training could not start: {trial.finished['reason']}", trial)
    for trial in baseline_settled:
        if trial.finished is not None and trial.finished.get("kind") == "timeout":
            return BrokenTraining(
                f"the baseline (all candidates off) {trial.finished.get('reason', 'timed out')} on every "
                "attempt: a training that cannot finish says nothing about fusion; raise train.timeout",
                trial,
            )
    if not finished or any(trial.resolved for trial in finished):
        return None
    misread = next((trial for trial in reversed(finished) if is_misread(trial)), None)
    if misread is None and not all_settled and len(finished) < MAX_BROKEN_TRAININGS:
        return None
    if misread is not None and len(finished) < len(trials) and not all_settled:
        return None  # the other references are still training: their outcome is theirs to say
    last = misread or finished[-1]
    kinds = {trial.finished["kind"] for trial in finished}  # type: ignore[index]
    count = f"{len(finished)} reference training(s)"
    if kinds == {"no_metric"}:
        why = f"{count} exited without a metric: {last.finished.get('reason')}"  # type: ignore[union-attr]
    elif kinds == {"timeout"}:
        why = f"{count} timed out ({last.finished.get('reason')}); raise train.timeout"  # type: ignore[union-attr]
    else:
        why = f"{count} ended before any metric; last: {last.finished.get('reason')}"  # type: ignore[union-attr]
    return BrokenTraining(f"the training does not run: {why}", last)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> list[str]:
    """The last ``lines`` lines of a (possibly huge) log, read from its end only."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return []
    text = data.decode("utf-8", "replace")
    return [line[:500] for line in text.splitlines()[-lines:]]


def launched_command(trial_dir: Path) -> tuple[tuple[str, ...], str | None]:
    """The argv (placeholders resolved) and workdir a trial was started with, from its launch.json."""
    try:
        launch = json.loads((trial_dir / "launch.json").read_text(encoding="utf-8"))
        return tuple(str(part) for part in launch["argv"]), str(launch.get("workdir"))
    except (OSError, ValueError, KeyError, TypeError):
        return (), None


def report_details(broken: BrokenTraining, state_dir: Path, command: Sequence[str], workdir: str | None) -> dict[str, Any]:
    """The ``training_broken`` entry of report.json: reason, command, trial and its log's tail."""
    details: dict[str, Any] = {"reason": broken.reason, "command": shlex.join(command), "workdir": workdir}
    if broken.trial is not None:
        log = state_dir / broken.trial.trial_dir / "output.log"
        details.update(trial_id=broken.trial.trial_id, log=str(Path(broken.trial.trial_dir) / "output.log"))
        details["log_tail"] = log_tail(log)
    details.update(broken.details)
    return details


def broken_lines(report: dict[str, Any]) -> list[str]:
    """What the terminal shows (on stderr) for a training that does not run."""
    details = report.get(STATUS) or {}
    lines = [f"fusion-dd: error: {details.get('reason', report.get('message'))}"]
    if details.get("command"):
        where = f" (in {details['workdir']})" if details.get("workdir") else ""
        lines.append(f"  command{where}: {details['command']}")
    for problem in details.get("problems") or []:
        lines.append(f"  {problem}")
    if details.get("log"):
        tail = details.get("log_tail") or []
        lines.append(f"  last {len(tail)} line(s) of {details['log']}:" if tail else f"  {details['log']} is empty")
        lines.extend(f"    | {line}" for line in tail)
    if details.get("preflight"):
        lines.append("  nothing was launched; fix the command (or the config) and run `fusion-dd search` again")
    else:
        lines.append(
            "  no answer about fusion was reached; fix the training (try the command by hand) and run "
            "`fusion-dd search` again (the references are trained afresh); after a change of fusion-dd.yaml, "
            "run `fusion-dd search --restart`"
        )
    return lines
