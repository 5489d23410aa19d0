"""What a person sees while a search runs.

On a terminal: event lines scroll above one live status line (trainings used of
the budget, running trials with device and elapsed time, the smallest failing
set so far), refreshed every second by a small ticker thread. Elsewhere (CI, a
log file): one plain line per event, nothing redrawn.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from .rules import Rule
from .search.oracle import Outcome
from .state import TrialState


def _config_text(names: frozenset[str], total: int) -> str:
    if not names:
        return "all candidates off"
    if len(names) == total:
        return "all candidates on"
    if len(names) <= 3:
        return "on: " + ", ".join(sorted(names))
    return f"{len(names)} of {total} on"


class ConsoleEvents:
    """SearchEvents for the CLI; thread-safe."""

    def __init__(self, *, total_rules: int, budget: int, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.total_rules = total_rules
        self.budget = budget
        self._lock = threading.Lock()
        self._running: dict[str, TrialState] = {}
        self._launched = 0
        self._smallest: frozenset[Rule] | None = None
        self._status_shown = False
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- life cycle ----------------------------------------------------------

    def start(self, launched_before: int = 0) -> None:
        self._launched = launched_before
        if self.live:
            self._ticker = threading.Thread(target=self._tick, name="fusion-dd-progress", daemon=True)
            self._ticker.start()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        with self._lock:
            self._clear_status()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                self._draw_status()

    # -- drawing ---------------------------------------------------------------

    def _clear_status(self) -> None:
        if self.live and self._status_shown:
            self.stream.write("\r\x1b[2K")
            self._status_shown = False

    def _draw_status(self) -> None:
        if not self.live:
            return
        now = time.time()
        running = ", ".join(
            f"#{trial.trial_id} dev {','.join(trial.device)} {int(now - trial.started_at)}s"
            for trial in sorted(self._running.values(), key=lambda t: t.trial_id)
        )
        smallest = f" | smallest failing: {len(self._smallest)} rules" if self._smallest else ""
        text = f"[{self._launched}/{self.budget} trainings] running: {running or 'none'}{smallest}"
        self.stream.write("\r\x1b[2K" + text[:200])
        self.stream.flush()
        self._status_shown = True

    def _line(self, text: str) -> None:
        with self._lock:
            self._clear_status()
            self.stream.write(text + "\n")
            self._draw_status()
            self.stream.flush()

    # -- SearchEvents ------------------------------------------------------------

    def message(self, text: str) -> None:
        self._line(text)

    def trial_started(self, trial: TrialState) -> None:
        with self._lock:
            self._running[trial.trial_id] = trial
            self._launched += 1
        self._line(
            f"[{self._launched}/{self.budget}] start  #{trial.trial_id} on device {','.join(trial.device)}: "
            f"{_config_text(trial.config, self.total_rules)} ({trial.role})"
        )

    def trial_finished(self, trial: TrialState, outcome: Outcome | None) -> None:
        with self._lock:
            self._running.pop(trial.trial_id, None)
        if outcome is None and trial.finished is None:
            self._line(f"       cancel #{trial.trial_id}")
            return
        measurement = trial.measurement
        value = ""
        if measurement is not None:
            value = f"metric {measurement.value:.6g}" if measurement.value is not None else measurement.kind
            if measurement.reason and measurement.kind != "metric":
                value += f" ({measurement.reason})"
        verdict = outcome.value.upper() if outcome is not None else "done"
        duration = trial.finished.get("duration") if trial.finished else None
        took = f" in {duration:.1f}s" if isinstance(duration, (int, float)) else ""
        self._line(f"       done   #{trial.trial_id} {verdict:<10} {value}{took}")

    def best_so_far(self, config: frozenset[Rule] | None) -> None:
        """Remember the smallest failing configuration seen, for the status line."""
        with self._lock:
            if config is not None and (self._smallest is None or len(config) < len(self._smallest)):
                self._smallest = config
