"""Trials as Python functions in this process: a launcher for tests and debugging.

The local launcher runs each training as a supervised process group: what a
user's training needs, and what lets a search outlive its coordinator. A test of
the engine, of replay or of localization needs neither. It needs a training whose
outcome it controls, that starts and ends in milliseconds, and that a debugger can
step into. ``InProcessLauncher`` calls a function per trial, in a thread, with the
trial directory, switch file, metrics file and environment values a training
process would get, and reads the result the way the local launcher does (metric,
verdict kind, artifact facts, early stop), so the engine cannot tell the two apart.

What it cannot do is outlive the coordinator or kill a function: a cancelled,
timed-out or early-stopped trial sets ``TrialContext.stop``, and the function is
expected to return soon after; one that does not within the trial's grace is left
behind and counted as killed. A trial that had not finished when the coordinator
stopped is gone on resume (``adopt`` finds nothing).
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..store.atomic import write_json_atomic
from .early_stop import make_monitor
from .launcher import Placement, TrialRequest, TrialResult, result_of, this_host
from .trial import EARLY_STOP_FILE, LOG_FILE, METRICS_FILE, SWITCH_FILE, TrialRun, early_stop_record, resolve_launch

_POLL = 0.01  # seconds between looks at a running function (it is in this process: cheap)
_KILLED = 9  # the signal a process launcher's SIGKILL would report


@dataclass(frozen=True)
class TrialContext:
    """What a training function gets: the training contract's values, and a stop flag."""

    trial_id: str
    trial_dir: Path
    switch_file: Path
    metrics_file: Path
    device: tuple[str, ...]
    repeat: int
    env: Mapping[str, str]
    stop: threading.Event  # set on cancel, timeout or early stop: return soon

    def print(self, *parts: object) -> None:
        """One line of the training's output (``output.log``), where the metric pattern looks."""
        with (self.trial_dir / LOG_FILE).open("a", encoding="utf-8") as log:
            log.write(" ".join(str(part) for part in parts) + "\n")

    def report(self, **record: Any) -> None:
        """One record of the metrics file (``{"step": .., "loss": .., "accuracy": ..}``)."""
        with self.metrics_file.open("a", encoding="utf-8") as metrics:
            metrics.write(json.dumps(record) + "\n")


#: A training: returns its exit code (None: 0); an exception is a crash with exit code 1.
TrainingFunction = Callable[[TrialContext], "int | None"]


class InProcessHandle:
    """One function call in a thread, watched like a supervised training."""

    def __init__(self, request: TrialRequest, context: TrialContext, training: TrainingFunction, placement: Placement) -> None:
        self.request = request
        self.context = context
        self.placement = placement
        self._exit_code: int | None = None
        self._cancelled = threading.Event()
        self._started_wall = time.time()
        self._started = time.monotonic()
        self._thread = threading.Thread(
            target=self._call, args=(training,), name=f"fusion-dd-inprocess-{context.trial_id}", daemon=True
        )
        self._thread.start()

    def _call(self, training: TrainingFunction) -> None:
        try:
            code = training(self.context)
            self._exit_code = 0 if code is None else int(code)
        except Exception:  # noqa: BLE001 - the training's own crash is its outcome
            self.context.print(traceback.format_exc().rstrip())
            self._exit_code = 1

    def cancel(self) -> None:
        self._cancelled.set()
        self.context.stop.set()

    def wait(self, cancel: threading.Event | None = None) -> TrialResult:
        spec = self.request.spec
        monitor = make_monitor(self.context.trial_dir, self.request.early_stop, list(self.request.baseline_curve))
        early_stop: dict[str, Any] | None = None
        timed_out = False
        while self._thread.is_alive() and not self.context.stop.is_set():
            if cancel is not None and cancel.is_set():
                self.cancel()
            elif spec.timeout is not None and time.monotonic() - self._started > spec.timeout:
                timed_out = True
                self.context.stop.set()
            elif monitor is not None and (decision := monitor()) is not None:
                early_stop = early_stop_record(decision, time.time(), time.monotonic() - self._started)
                write_json_atomic(self.context.trial_dir / EARLY_STOP_FILE, early_stop)
                self.context.stop.set()
            else:
                self._thread.join(_POLL)
        self._thread.join(spec.grace)
        ended = not self._thread.is_alive()
        stopped = self.context.stop.is_set()
        run = TrialRun(
            trial_id=spec.trial_id,
            trial_dir=self.context.trial_dir,
            exit_code=self._exit_code if ended and not stopped else None,
            signal=_KILLED if stopped or not ended else None,
            timed_out=timed_out,
            cancelled=self._cancelled.is_set() and early_stop is None,
            duration=time.monotonic() - self._started,
            start=self._started_wall,
            end=time.time(),
            log_path=self.context.trial_dir / LOG_FILE,
            metrics_path=self.context.metrics_file,
            timeout=spec.timeout,
            early_stop=early_stop,
        )
        return result_of(run, self.request)


class InProcessLauncher:
    """Runs ``training(context)`` for every trial, in a thread of this process."""

    name = "inprocess"

    def __init__(self, training: TrainingFunction) -> None:
        self.training = training
        self.host, self.boot_id = this_host()

    def start(self, request: TrialRequest) -> InProcessHandle:
        spec = request.spec
        trial_dir = Path(spec.trial_dir)
        trial_dir.mkdir(parents=True, exist_ok=True)
        trial_dir = trial_dir.resolve()
        for stale in (EARLY_STOP_FILE, METRICS_FILE):
            (trial_dir / stale).unlink(missing_ok=True)
        (trial_dir / SWITCH_FILE).write_text(spec.switch_text, encoding="utf-8")
        (trial_dir / LOG_FILE).write_bytes(b"")
        launch = resolve_launch(spec, trial_dir)
        context = TrialContext(
            trial_id=spec.trial_id,
            trial_dir=trial_dir,
            switch_file=trial_dir / SWITCH_FILE,
            metrics_file=trial_dir / METRICS_FILE,
            device=tuple(str(device) for device in spec.device),
            repeat=spec.repeat,
            env=launch["env"],
            stop=threading.Event(),
        )
        placement = Placement(self.name, self.host, self.boot_id, context.trial_id, context.device)
        return InProcessHandle(request, context, self.training, placement)

    def adopt(self, request: TrialRequest, placement: Mapping[str, Any] | None) -> None:
        """Nothing outlives the coordinator here: an unfinished trial is gone."""
        return None

    def ever_started(self, request: TrialRequest) -> bool:
        return (request.trial_dir / LOG_FILE).exists()
