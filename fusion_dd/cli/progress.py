"""What a person sees while a search runs.

On a terminal: event lines scroll above a live panel drawn with rich (trainings
used of the budget and finished, every device of the pool with the trial running
on it, its configuration size, elapsed time and last reported step and loss, or
"idle"; the smallest failing set so far, and the estimate of trainings left and of
the finishing time), refreshed
every second by a small ticker thread. Elsewhere (CI, nohup, a log file): one
plain line per event, nothing redrawn; the estimate is a plain line too, printed
when its range changes.

The estimate (fusion_dd.coordinator.estimate) replays the journal, so it is computed on its
own thread, never on the engine's: once the session launched its first training
(a resume replays the search first), then after each finished trial.
"""

from __future__ import annotations

import math
import re
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..core.rules import Rule
from ..runner.metrics import parse_number
from ..search.oracle import Outcome
from ..store.state import TrialState
from ..store.snapshots import REST as SNAPSHOT_REST, SETTLE as SNAPSHOT_SETTLE


def _config_text(names: frozenset[str], total: int) -> str:
    if not names:
        return "all candidates off"
    if len(names) == total:
        return "all candidates on"
    if len(names) <= 3:
        return "on: " + ", ".join(sorted(names))
    return f"{len(names)} of {total} on"


ESTIMATE_INTERVAL = 3.0  # seconds between two estimates at most once per finished trial

#: A step number on a printed line (``step 120``, ``step=120``, ``Step: 120``).
STEP_ON_LINE = re.compile(r"\bstep[=:\s]\s*(\d+)", re.IGNORECASE)
LOG_READ_BYTES = 1 << 20  # per poll and trial: a chatty training must not stall the panel


class LogProgress:
    """The last (step, loss) a training printed, from its output.log, read incrementally.

    For trainings that write no metrics file: the loss is what ``metric.loss_pattern``
    matches (the same pattern that scans the log for divergence), the step the
    ``step N`` on the same line, if any. Only new bytes are read at each poll.
    """

    def __init__(self, path: Path, loss_pattern: re.Pattern[str]) -> None:
        self.path = path
        self.loss_pattern = loss_pattern
        self._offset = 0
        self._pending = b""

    def read_new(self) -> tuple[int | None, float] | None:
        """The last report among the lines completed since the previous call, or None."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read(LOG_READ_BYTES)
        except OSError:
            return None
        self._offset += len(chunk)
        lines = re.split(rb"\r\n|\r|\n", self._pending + chunk)
        self._pending = lines.pop()
        if len(self._pending) > LOG_READ_BYTES:
            self._pending = b""  # one endless line: no report in it worth the memory
        last: tuple[int | None, float] | None = None
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            match = self.loss_pattern.search(line)
            if match is None:
                continue
            loss = parse_number(match.group(1) if match.groups() else match.group(0))
            if loss is None:
                continue
            step = STEP_ON_LINE.search(line)
            last = (int(step.group(1)) if step else None, loss)
        return last


#: What a finished training's line says in place of a verdict it has not got.
_UNJUDGED = {"baseline": "reference", "all_on": "reference", "localize": "dumped"}  # no verdict of their own


class ConsoleEvents:
    """SearchEvents for the CLI; thread-safe."""

    def __init__(
        self,
        *,
        total_rules: int,
        budget: int,
        stream: TextIO | None = None,
        live: bool | None = None,
        devices: Sequence[Sequence[str]] = (),
        loss_pattern: str | None = None,
    ) -> None:
        """``devices``: the pool, each listed in the panel even while idle; ``loss_pattern``:
        ``metric.loss_pattern``, for the step and loss of a training without a metrics file."""
        from ..runner.metrics import DEFAULT_LOSS_PATTERN

        self.devices = [",".join(str(part) for part in device) for device in devices]
        self.loss_pattern = (
            None if loss_pattern is None
            else re.compile(loss_pattern, re.IGNORECASE if loss_pattern == DEFAULT_LOSS_PATTERN.pattern else 0)
        )
        self._logs: dict[str, LogProgress] = {}
        self._from_metrics: set[str] = set()  # trials whose metrics file reported: it wins over the log
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.total_rules = total_rules
        self.budget = budget
        self._lock = threading.Lock()
        self._running: dict[str, TrialState] = {}
        self._progress: dict[str, tuple[int | None, float]] = {}  # trial -> last (step, loss)
        self._readers: dict[str, Any] = {}
        self._launched = 0
        self._launched_before = 0  # by earlier sessions of the search: the counts then name their scope
        self._finished = 0
        self._smallest: frozenset[Rule] | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._state_dir: Path | None = None
        self._estimate: Any = None  # fusion_dd.coordinator.estimate.Estimate, once computed
        self._estimate_said: tuple[tuple[int, int], str] | None = None
        self._wanted = threading.Event()
        self._estimator: threading.Thread | None = None
        self._console: Any = None
        self._live: Any = None

    # -- life cycle ----------------------------------------------------------

    def start(self, launched_before: int = 0, state_dir: Path | None = None) -> None:
        self._launched = launched_before
        self._launched_before = launched_before
        self._state_dir = state_dir
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(file=self.stream, force_terminal=True, highlight=False)
            self._live = Live(self._panel(), console=self._console, auto_refresh=False, transient=True)
            self._live.start()
            self._ticker = threading.Thread(target=self._tick, name="fusion-dd-progress", daemon=True)
            self._ticker.start()
        if state_dir is not None:
            # The first estimate is wanted once the session launches its first training
            # (trial_started), not now: until then the engine replays the journal, and an
            # estimate (a replay of its own) would compete with it for the interpreter:
            # seconds for a journal of thousands of trials, and for nothing when the
            # replay ends with the answer.
            self._estimator = threading.Thread(target=self._estimate_loop, name="fusion-dd-estimate", daemon=True)
            self._estimator.start()

    def close(self, final_estimate: bool = True, answered: bool = False) -> None:
        """Stop the live panel and the estimator; ``final_estimate`` is False when the session was refused.

        ``answered``: the search ended with its answer, so the last estimate is 0
        without replaying the journal (seconds for a search of thousands of trials).
        """
        self._stop.set()
        self._wanted.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        if self._estimator is not None:
            self._estimator.join(timeout=5)
        with self._lock:
            if self._live is not None:
                self._live.stop()
                self._live = None
        if self._state_dir is not None and final_estimate:
            self._final_estimate(answered)

    def _final_estimate(self, answered: bool) -> None:
        """The estimate once the session ended (0 when the search has its answer), as a plain line."""
        from ..coordinator.estimate import Estimate, estimate_from_dir

        try:
            if answered:
                found: Estimate | None = Estimate(0, "done", 0)
            else:
                found = estimate_from_dir(self._state_dir) if self._state_dir is not None else None
        except Exception:  # noqa: BLE001 - the search is over; its answer matters, not this line
            return
        if found is None:
            return
        with self._lock:
            self._estimate = found
            if (found.range, found.basis) != self._estimate_said or self.live:
                self.stream.write(f"       {found.text()}\n")
                self.stream.flush()
            self._estimate_said = (found.range, found.basis)

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._read_progress()
            with self._lock:
                self._refresh()

    # -- the estimate ------------------------------------------------------------

    def _estimate_loop(self) -> None:
        from ..coordinator.estimate import estimate_from_dir

        while True:
            self._wanted.wait()
            if self._stop.is_set():
                return
            self._wanted.clear()
            # Wanted when a trial starts or ends: first let the coordinator launch what comes next.
            if self._stop.wait(SNAPSHOT_SETTLE):
                return
            assert self._state_dir is not None
            began = time.monotonic()
            try:
                found = estimate_from_dir(self._state_dir)
            except Exception:  # noqa: BLE001 - an estimate must never disturb a search
                found = None
            # It replays the whole journal: the same share of a core as report snapshots take.
            rest = max(ESTIMATE_INTERVAL, SNAPSHOT_REST * (time.monotonic() - began))
            if found is None:
                self._stop.wait(rest)
                continue
            with self._lock:
                self._estimate = found
                said = (found.range, found.basis)
                if not self.live and said != self._estimate_said:
                    self.stream.write(f"       {found.text()}\n")
                    self.stream.flush()
                self._estimate_said = said
                self._refresh()
            # Trainings take minutes to hours: one estimate per few seconds is plenty, and
            # a burst of short trainings must not keep a core busy replaying the journal.
            self._stop.wait(rest)

    def estimate(self) -> Any:
        """The latest estimate (fusion_dd.coordinator.estimate.Estimate), or None before the first one."""
        with self._lock:
            return self._estimate

    # -- drawing ---------------------------------------------------------------

    def _read_progress(self) -> None:
        """The last (step, loss) each running training reported in its metrics file."""
        if self._state_dir is None:
            return
        from ..runner.early_stop import ReportReader

        with self._lock:
            running = list(self._running.values())
        for trial in running:
            reader = self._readers.get(trial.trial_id)
            if reader is None:
                reader = self._readers[trial.trial_id] = ReportReader(self._state_dir / trial.trial_dir)
            try:
                reports = reader.read_new()
            except (OSError, ValueError):
                reports = []
            if reports:
                with self._lock:
                    self._progress[trial.trial_id] = reports[-1]
                    self._from_metrics.add(trial.trial_id)
                continue
            if self.loss_pattern is None or trial.trial_id in self._from_metrics:
                continue
            from ..runner.supervisor import LOG_FILE

            log = self._logs.get(trial.trial_id)
            if log is None:
                log = self._logs[trial.trial_id] = LogProgress(self._state_dir / trial.trial_dir / LOG_FILE, self.loss_pattern)
            printed = log.read_new()
            if printed is not None:
                with self._lock:
                    self._progress[trial.trial_id] = printed

    def _panel(self) -> Any:
        from rich.table import Table

        now = time.time()
        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
        for column in ("device", "trial", "rules on", "role", "elapsed", "step", "loss"):
            table.add_column(column, justify="right" if column in ("rules on", "elapsed", "step", "loss") else "left")
        busy: dict[str, list[TrialState]] = {}
        for trial in sorted(self._running.values(), key=lambda t: t.trial_id):
            busy.setdefault(",".join(trial.device), []).append(trial)
        # Every device of the pool in its order, idle ones too; then any other a trial runs on.
        for device in [*self.devices, *(name for name in busy if name not in self.devices)]:
            trials = busy.get(device)
            if not trials:
                table.add_row(device, "idle", "", "", "", "", "")
                continue
            for trial in trials:
                known = self._progress.get(trial.trial_id)
                step, loss = known if known is not None else (None, None)
                table.add_row(
                    device, f"#{trial.trial_id}", str(len(trial.config)), trial.role,
                    _elapsed(now - trial.started_at), "-" if step is None else str(step),
                    "-" if loss is None else f"{loss:.4g}" if math.isfinite(loss) else str(loss),
                )
        smallest = f"{len(self._smallest)} rules" if self._smallest else "none yet"
        if self._launched_before:  # a resumed search: counts over all its sessions, and this one's
            counts = (
                f"{self._launched}/{self.budget} trainings in all, {self._launched - self._launched_before} "
                f"this session, {self._finished} of them finished"
            )
        else:
            counts = f"{self._launched}/{self.budget} trainings, {self._finished} finished"
        head = f"fusion-dd: {counts}; smallest failing: {smallest}"
        estimate = self._estimate.text() if self._estimate is not None else "estimate: computing..."
        grid = Table.grid()
        grid.add_row(head)
        grid.add_row(estimate)
        grid.add_row(table if self._running or self.devices else "no training running")
        return grid

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._panel(), refresh=True)

    def _line(self, text: str) -> None:
        with self._lock:
            if self._live is not None:
                self._console.print(text, markup=False, highlight=False, soft_wrap=True)
                self._refresh()
            else:
                self.stream.write(text + "\n")
                self.stream.flush()

    # -- SearchEvents ------------------------------------------------------------

    def message(self, text: str) -> None:
        self._line(text)

    def trial_started(self, trial: TrialState) -> None:
        with self._lock:
            self._running[trial.trial_id] = trial
            self._launched += 1
            first = self._estimate is None
        if first:
            self._wanted.set()  # the replay is over: the first estimate (see start)
        self._line(
            f"[{self._launched}/{self.budget}] start  #{trial.trial_id} on device {','.join(trial.device)}: "
            f"{_config_text(trial.config, self.total_rules)} ({trial.role})"
        )

    def trial_finished(self, trial: TrialState, outcome: Outcome | None) -> None:
        with self._lock:
            self._running.pop(trial.trial_id, None)
            self._progress.pop(trial.trial_id, None)
            self._readers.pop(trial.trial_id, None)
            self._logs.pop(trial.trial_id, None)
            self._from_metrics.discard(trial.trial_id)
            self._finished += trial.finished is not None
        self._wanted.set()
        if outcome is None and trial.finished is None:
            self._line(f"       cancel #{trial.trial_id}")
            return
        measurement = trial.measurement
        value = ""
        if measurement is not None:
            value = f"metric {measurement.value:.6g}" if measurement.value is not None else measurement.kind
            if measurement.reason and measurement.kind != "metric":
                value += f" ({measurement.reason})"
        # Without a verdict: a reference (it sets the threshold) or a training that ended before the
        # threshold was known (adopted on resume, or beside the references): judged once it is.
        verdict = outcome.value.upper() if outcome is not None else _UNJUDGED.get(trial.role, "unjudged")
        duration = trial.finished.get("duration") if trial.finished else None
        took = f" in {duration:.1f}s" if isinstance(duration, (int, float)) else ""
        self._line(f"       done   #{trial.trial_id} {verdict:<10} {value}{took}")

    def best_so_far(self, config: frozenset[Rule] | None) -> None:
        """Remember the smallest failing configuration seen, for the status line."""
        with self._lock:
            if config is not None and (self._smallest is None or len(config) < len(self._smallest)):
                self._smallest = config


def _elapsed(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
