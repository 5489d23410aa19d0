"""The launcher seam: start a trial from a self-contained request, wait for a result record.

The engine decides *what* to train and journals it; a launcher decides *where*
and runs it. Everything a launcher needs travels in a ``TrialRequest`` (the
trial spec, how to read the metric, the artifact hooks, the early-stop rule and
the baseline curve it compares against), which is plain data and pickles, so a
launcher may run the trial in another process or on another host. What comes
back is a ``TrialResult`` record (exit status, metric, log tail, early-stop
verdict, artifact facts), computed where the trial ran, never files the
coordinator must read off its own disk. ``Placement`` says where the trial
runs; the engine journals it with the trial's start, and only the launcher that
matches it may look for the trial's processes again (pid checks only ever on
the host that started them: hostname and boot id).

``LocalLauncher`` is today's behaviour: a supervisor process per trial on this
machine (``fusion_dd.runner.trial``). A cluster launcher implements the same three
calls (the submitit shape: one interface, implementations side by side).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .broken import log_tail
from .early_stop import EarlyStopRule, make_monitor
from ..core.hooks import ArtifactHook, TrialFiles, collect_artifacts
from .metrics import MetricSpec, classify, read_metric
from ..store.state import encode_float
from .forkserver import ForkServer
from .trial import (
    STATUS_FILE,
    RunningTrial,
    TrialRun,
    TrialSpec,
    adopt_trial,
    start_trial,
    supervisor_env,
    supervisor_started,
)

LOG_TAIL_LINES = 20
_LOG_TAIL_BYTES = 16 * 1024


@dataclass(frozen=True)
class TrialRequest:
    """One trial, self-contained: a launcher needs nothing of the engine to run it."""

    spec: TrialSpec
    metric: MetricSpec
    hooks: Sequence[ArtifactHook] = ()
    enabled: frozenset[str] = frozenset()  # names of the candidates switched on
    role: str = "search"
    early_stop: EarlyStopRule | None = None
    baseline_curve: Sequence[tuple[int, float]] = ()

    @property
    def trial_dir(self) -> Path:
        return Path(self.spec.trial_dir)


@dataclass(frozen=True)
class Placement:
    """Where a trial runs: journaled with its start, checked before any process lookup."""

    launcher: str
    host: str
    boot_id: str | None
    job_id: str | None  # the launcher's own id (local: the supervisor's pid)
    device: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        placed = {"launcher": self.launcher, "host": self.host, "boot_id": self.boot_id, "device": list(self.device)}
        if self.job_id is not None:  # readers take a missing id for None
            placed["job_id"] = self.job_id
        return placed


class NotStarted(Exception):
    """``start`` gave up before anything of the trial ran (Ctrl-C while a cluster would not take the job).

    Not a failure to start: the search was stopped, and a trial that never ran
    costs no budget, so the coordinator records it cancelled without a launch.
    """


@dataclass(frozen=True)
class TrialResult:
    """How a trial ended, as the journal records it (``cancelled``: nothing to record but that)."""

    cancelled: bool
    kind: str = "crash"
    value: float | None = None
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    duration: float = 0.0
    log: str = ""  # the log's file name inside the trial directory
    early_stop: Mapping[str, Any] | None = None
    artifacts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    log_tail: tuple[str, ...] = ()

    def record_fields(self) -> dict[str, Any]:
        """The fields of a ``trial_finished`` record (the log tail only where no metric came)."""
        fields: dict[str, Any] = {
            "kind": self.kind,
            "value": encode_float(self.value),
            "reason": self.reason,
            "exit_code": self.exit_code,
            "duration": round(self.duration, 3),
            # A hook with nothing to say is left out, like an absent signal or early stop: readers
            # take a missing key for None (or no facts), and a thousand trials pay for each key.
            "artifacts": {name: dict(facts) for name, facts in self.artifacts.items() if facts},
        }
        if self.signal is not None:
            fields["signal"] = self.signal
        if self.early_stop:
            fields["early_stop"] = dict(self.early_stop)
        if self.kind != "metric" and self.log_tail:
            fields["log_tail"] = list(self.log_tail)
        return fields


class TrialHandle(Protocol):
    placement: Placement

    def wait(self, cancel: threading.Event | None = None) -> TrialResult:
        """Block until the trial ended (cancel it when ``cancel`` is set, then keep waiting)."""
        ...

    def cancel(self) -> None: ...


class Launcher(Protocol):
    name: str

    def start(self, request: TrialRequest) -> TrialHandle:
        """Start the trial; returns once it runs (raises when it could not be started, ``NotStarted``
        when a cancel ended the wait for it to start)."""
        ...

    def adopt(self, request: TrialRequest, placement: Mapping[str, Any] | None) -> TrialHandle | None:
        """Re-attach to a trial an earlier coordinator started (None: it never finished and is gone)."""
        ...

    def ever_started(self, request: TrialRequest) -> bool:
        """Whether the trial's training was ever started (for a trial with no journaled launch)."""
        ...

    # Optional: ``run_started()``, called before a run of the engine trains, may prepare what
    # the launcher keeps between trials (the local fork server starts while the search sets
    # up); ``run_ended()``, called when the run ends, frees it; the launcher must still work
    # afterwards.


def call_hook(launcher: object, name: str) -> None:
    """The launcher's optional ``name`` (``run_started``, ``run_ended``, ``close``), where it has one."""
    hook = getattr(launcher, name, None)
    if callable(hook):
        hook()


def this_host() -> tuple[str, str | None]:
    """Hostname and boot id: a pid means something only on the host, and boot, that gave it out."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        boot_id = None
    return socket.gethostname(), boot_id


def result_of(run: TrialRun, request: TrialRequest) -> TrialResult:
    """Read a finished run where it ran: metric, verdict kind, artifact facts, log tail."""
    if run.cancelled:
        return TrialResult(cancelled=True, duration=run.duration)
    reading = read_metric(run, request.metric)
    kind, reason = classify(run, reading)
    if run.disk_full and kind != "metric":
        # Its status survived a full disk, but its output may not have: no metric is no evidence.
        return TrialResult(
            cancelled=True,
            reason="lost: the disk was full when the training ended and its output holds no metric; trained again",
            duration=run.duration,
        )
    artifacts = collect_artifacts(request.hooks, TrialFiles(Path(run.trial_dir), request.enabled, request.role))
    return TrialResult(
        cancelled=False,
        kind=kind,
        value=reading.value,
        reason=reason,
        exit_code=run.exit_code,
        signal=run.signal,
        duration=run.duration,
        log=Path(run.log_path).name,
        early_stop=run.early_stop,
        artifacts=artifacts,
        log_tail=tuple(log_tail(Path(run.log_path), LOG_TAIL_LINES, _LOG_TAIL_BYTES)),
    )


class LocalHandle:
    """A trial supervised on this machine."""

    def __init__(self, running: RunningTrial, request: TrialRequest, placement: Placement) -> None:
        self.running = running
        self.request = request
        self.placement = placement

    def wait(self, cancel: threading.Event | None = None) -> TrialResult:
        monitor = make_monitor(self.running.trial_dir, self.request.early_stop, list(self.request.baseline_curve))
        return result_of(self.running.wait(cancel, monitor=monitor), self.request)

    def cancel(self) -> None:
        self.running.cancel()


class LocalLauncher:
    """Trials as supervised process groups on this machine (``fusion_dd.runner.trial``).

    Supervisors are forked by a fork server started when a run starts, or else
    on the first trial (:mod:`fusion_dd.runner.forkserver`), so a training costs no interpreter
    start of ours; where that is not possible each supervisor is started as
    its own interpreter, as before.
    """

    name = "local"

    def __init__(self) -> None:
        self.host, self.boot_id = this_host()
        self._forkserver = ForkServer(supervisor_env())

    def run_started(self) -> None:
        """Start the fork server now: its interpreter starts on another core while the search sets up."""
        self._forkserver.prepare()

    def run_ended(self) -> None:
        """Stop the fork server until the next trial (running supervisors are not affected)."""
        self._forkserver.close()

    def _placement(self, request: TrialRequest, pid: int | None) -> Placement:
        return Placement(
            "local", self.host, self.boot_id, None if pid is None else str(pid), tuple(request.spec.device)
        )

    def start(self, request: TrialRequest) -> LocalHandle:
        running = start_trial(request.spec, self._forkserver)
        return LocalHandle(running, request, self._placement(request, running.pid))

    def adopt(self, request: TrialRequest, placement: Mapping[str, Any] | None) -> LocalHandle | None:
        if (request.trial_dir / STATUS_FILE).exists():
            # It ended and said how: no process to look for (and nothing taken from it unless it is this trial).
            running = adopt_trial(request.trial_dir, request.spec.binding)
            return None if running is None else LocalHandle(running, request, self._placement(request, None))
        if placement and placement.get("launcher") not in (None, "local"):
            from ..core.errors import UsageError

            # Another launcher runs it, maybe still: only that launcher can tell, and a training
            # still running must never be trained again.
            raise UsageError(
                f"trial {request.spec.trial_id} was started by the {placement.get('launcher')} launcher and has not "
                f"been collected: resume with that launcher (e.g. --launcher {placement.get('launcher')} --scheduler "
                "ADDRESS), which takes its result or finds it gone"
            )
        if placement and placement.get("host") not in (None, self.host):
            return None  # started on another host: its pids mean nothing here
        if placement and placement.get("boot_id") not in (None, self.boot_id):
            return None  # this host rebooted since: the training died with it
        running = adopt_trial(request.trial_dir, request.spec.binding)
        if running is None:
            return None
        return LocalHandle(running, request, self._placement(request, running.pid))

    def ever_started(self, request: TrialRequest) -> bool:
        return supervisor_started(request.trial_dir)
