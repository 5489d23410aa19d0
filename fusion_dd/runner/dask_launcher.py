"""Trainings on a dask.distributed cluster: the launcher seam's cluster implementation.

One dask task per trial (``train.launcher: dask``, ``--scheduler ADDRESS``). Each
task runs where a worker offers a ``device`` resource; that worker is one device
(or one device group), fixed in its environment under ``train.device_env``, and
started with ``--nthreads 1 --resources device=1``. The task runs the ordinary
supervisor and early-stop monitor next to the training (``fusion_dd.runner.trial``) and
returns the ``TrialResult`` record.

Why these pieces:

* **Claim.** dask re-runs a task whose worker died (``allowed-failures`` is the
  scheduler's, not ours). A training must never run twice in one trial
  directory, so the task first claims its trial atomically on the shared state
  directory (``claim.json``, created by ``link``, which fails if it exists); a
  re-run finds the claim and refuses. fusion-dd then counts the trial as a
  crash and ``train.retries`` starts a new trial.
* **Orphans.** The supervisor runs in its own session so that the training
  outlives the coordinator (``fire_and_forget``). It must not outlive its
  *worker*: dask has given the device to someone else. A tiny watcher process
  (``fusion_dd.runner.dask_reaper``) holds a pipe from the worker; when the pipe
  closes without a "done", the worker died and the watcher stops the training.
  A worker that *closes* (retired, its nanny or its scheduler gone) is not a death:
  the task tells the watcher to stay with the training (``detached.json``), and the
  coordinator takes the outcome from the trial directory when it ends.
  A worker that starts (a restarted one included) first kills leftovers on its
  device whose worker is gone (``fusion_dd.runner.dask_worker``: a plugin the
  coordinator registers, or ``--preload``); a task also waits for (then kills)
  leftovers of earlier trainings on its device before it starts its own.
* **Devices.** The slots the engine schedules over are the cluster's devices,
  ``HOST:ID/WORKER`` (the id in a device worker's environment, and the worker's
  name), not ``train.devices``: the session journals them, and the parallelism
  of each question with them.
* **Placement** is what the task saw: host, worker, and the device id in the
  worker's environment, recorded in the claim before the training starts and
  journaled by the engine with ``trial_launched``.
* **Cancel.** A running dask task cannot be interrupted, so the coordinator
  writes ``cancel.request`` into the trial directory; the task sees it within
  a fraction of a second, has the supervisor SIGTERM the training (grace, then
  SIGKILL of the process group) and ends, which frees the worker's slot.
* **Scheduler lost.** dask cancels a client's futures when its connection breaks, which
  says nothing about the tasks (``fire_and_forget`` keeps them on the scheduler, and a
  training outlives its scheduler anyway). So a future that ends cancelled without our
  cancel is followed by its key after a bounded reconnect; a task the scheduler does not
  hold takes its outcome from the trial directory; a scheduler gone past the bound stops
  the search in one line and leaves the trainings to ``resume``.
* **Shared state.** Everything above lives in the state directory, which must be
  the same path on every worker: at start a token written here is read back by
  every worker, and fusion-dd refuses otherwise.
* **Resume.** A trial whose task the scheduler still holds is re-attached; one
  it has forgotten is checked on the worker that ran it (pid checks only there).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .dask_reaper import DETACHED_FILE
from .dask_worker import DEVICE_MARK_ENV, PLUGIN_NAME, WORKER_MARK_ENV, LeftoverCleaner, process_mark
from ..core.errors import UsageError
from .launcher import NotStarted, Placement, TrialRequest, TrialResult, this_host
from .cluster import (
    CANCEL_FILE,
    CLAIM_FILE,
    RESULT_FILE,
    ClaimTaken,
    FinishedHandle,
    cancel_requested,
    claim as _claim,
    keep_result as _keep_result,
    loaded_result as _loaded_result,
    lost as _lost,
    not_shared_message,
    read_json as _read_json,
    read_token,
    request_cancel,
    wait_with_watchers as _wait_with_watchers,
    write_token,
)
from .supervisor import STATUS_FILE, SUPERVISOR_FILE

#: How long a task waits for leftover trainings on its device before it kills them.
LEFTOVER_WAIT = 15.0
#: A worker gone from the scheduler this long means its training is lost (a nanny restarts in less).
WORKER_GONE_SECONDS = 5.0
#: A detached training whose watcher has not touched ``detached.json`` for this long is lost.
DETACHED_SILENCE = 30.0
INSTALL_HINT = "pip install 'fusion-dd[dask]'"


def require_dask() -> Any:
    """The ``distributed`` module, or a one-line usage error saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise UsageError(f"train.launcher dask: dask.distributed is not installed; {INSTALL_HINT}") from None
    return distributed


#: What ``_wait_claim`` returns when the search was cancelled before the task claimed its trial.
_CANCELLED = object()


@dataclass(frozen=True)
class DaskPlacement(Placement):
    """A placement that also names the dask worker (its address when the task claimed the trial)."""

    worker: str = ""
    worker_name: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "worker": self.worker, "worker_name": self.worker_name}


# --- on the worker -------------------------------------------------------------------


def worker_facts(device_env: str, dask_worker: Any = None) -> dict[str, Any]:
    """What the coordinator needs to know about one worker (run there by ``Client.run``).

    Also imports what a trial's task needs, once per worker here rather than inside the
    first training's start-up (a few tenths of a second of CPU per worker).
    """
    from . import early_stop, trial  # noqa: F401 - warm-up

    host, boot_id = this_host()
    return {"host": host, "boot_id": boot_id, "device": os.environ.get(device_env), "pid": os.getpid()}


def _device_leftovers(device: str, own_marker: str) -> list[int]:
    """Processes of trainings that dask tasks started on this device (by their environment) and
    whose worker is gone, other than this trial's (``own_marker``, ``NAME=VALUE`` of its
    environment): orphans of a worker that died on this host. A live worker's training is never
    one: under Slurm or in containers, workers on one host may each see their own device under
    the same id."""
    from .dask_worker import leftovers

    name, _, value = own_marker.partition("=")
    return leftovers(device, sparing=(name, value))


def _clear_device(device: str, own_marker: str, wait: float, trial_dir: Path | None = None) -> bool:
    """Before a training starts here: a detached training on this device (its worker closed, its
    result still wanted) is waited for, as long as it runs; leftovers of earlier ones (a crashed
    worker's orphan being stopped by its watcher) get ``wait`` seconds to end, then SIGKILL.
    False when this trial was cancelled meanwhile."""
    from .dask_worker import detached_trainings

    while detached_trainings(device):
        if trial_dir is not None and cancel_requested(trial_dir):
            return False
        time.sleep(0.5)
    deadline = time.monotonic() + wait
    while True:
        left = _device_leftovers(device, own_marker)
        if not left:
            return True
        if time.monotonic() >= deadline:
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            return True
        time.sleep(0.2)


def _start_reaper(trial_dir: Path, supervisor_pid: int) -> subprocess.Popen[bytes]:
    """The watcher that stops this training if the worker dies (see module docstring)."""
    from .trial import supervisor_env

    return subprocess.Popen(
        [sys.executable, "-S", "-m", "fusion_dd.runner.dask_reaper", str(trial_dir), str(supervisor_pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=supervisor_env(),
        start_new_session=True,
        close_fds=True,
    )


#: Worker states in which it is leaving the cluster on its own (not a crash): its training goes on.
_LEAVING = ("closing_gracefully", "closing", "closed", "failed")


def _detach_when_leaving(worker: Any, reaper: subprocess.Popen[bytes], done: threading.Event) -> None:
    """Tell the watcher to stay with the training once this worker is closing (retired, its nanny
    closing, its scheduler gone): such a worker says so before it goes, a killed one cannot, and
    the training's result is still wanted (see ``fusion_dd.runner.dask_reaper``)."""
    while not done.wait(0.2):
        status = getattr(getattr(worker, "status", None), "name", "")
        if status in _LEAVING:
            with contextlib.suppress(OSError, ValueError):
                assert reaper.stdin is not None
                reaper.stdin.write(b"detach\n")
                reaper.stdin.flush()
            return


def _reaper_done(reaper: subprocess.Popen[bytes] | None) -> None:
    if reaper is None:
        return
    with contextlib.suppress(OSError, ValueError):
        assert reaper.stdin is not None
        reaper.stdin.write(b"done\n")
        reaper.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        reaper.wait(timeout=10)


def run_trial(request: TrialRequest, key: str, device_env: str) -> TrialResult:
    """The dask task of one trial attempt: claim it, run it supervised here, return its record."""
    from .trial import start_trial

    trial_dir = Path(request.spec.trial_dir)
    device = os.environ.get(device_env)
    worker_address = worker_name = ""
    worker = None
    with contextlib.suppress(Exception):
        from distributed import get_worker

        worker = get_worker()
        worker_address, worker_name = str(worker.address), str(worker.name)
    host, boot_id = this_host()
    if not device:
        raise RuntimeError(
            f"dask worker {worker_name or worker_address} on {host} has no {device_env} in its environment: "
            f"start it with {device_env}=ID (see docs/clusters.md, 'On a dask cluster')"
        )
    claim = {
        "key": key,
        "trial_id": request.spec.trial_id,
        "host": host,
        "boot_id": boot_id,
        "worker": worker_address,
        "worker_name": worker_name,
        "worker_pid": os.getpid(),
        "device": device,
        "time": time.time(),
    }
    if cancel_requested(trial_dir):
        # Cancelled (Ctrl-C) before this task ran: dask may still run a task client.cancel missed.
        return TrialResult(cancelled=True)
    if not _claim(trial_dir, claim):
        held = _read_json(trial_dir / CLAIM_FILE) or {}
        raise ClaimTaken(
            f"trial {request.spec.trial_id} was already claimed by worker {held.get('worker_name') or held.get('worker')} "
            f"on {held.get('host')} (dask re-ran the task after its worker died): not trained again"
        )
    # Marks by which a restarted worker on this device tells our orphans (fusion_dd.runner.dask_worker).
    marks = {DEVICE_MARK_ENV: device, WORKER_MARK_ENV: process_mark(os.getpid()) or ""}
    spec = replace(request.spec, device=(device,), env={**request.spec.env, **marks})
    request = replace(request, spec=spec)
    if cancel_requested(trial_dir):  # the cancel raced the claim: the claim refuses to train
        return TrialResult(cancelled=True)
    marker = f"FUSION_DD_TRIAL_DIR={trial_dir.resolve()}"
    if not _clear_device(device, marker, LEFTOVER_WAIT, trial_dir):
        return TrialResult(cancelled=True)
    running = start_trial(spec)
    reaper = None
    done = threading.Event()
    try:
        reaper = _start_reaper(running.trial_dir, running.pid or 0)
        if worker is not None:
            threading.Thread(target=_detach_when_leaving, args=(worker, reaper, done), daemon=True).start()
        result = _wait_with_watchers(request, running)
        _keep_result(running.trial_dir, result)
        return result
    finally:
        done.set()
        _reaper_done(reaper)


def adopt_on_worker(request: TrialRequest, device_env: str) -> TrialResult | None:
    """Run on the worker that ran a trial the scheduler forgot: wait for its training if it still
    runs there (pid checks on its own host only), None when it is gone."""
    from .trial import adopt_trial

    trial_dir = Path(request.spec.trial_dir)
    claim = _read_json(trial_dir / CLAIM_FILE) or {}
    if claim.get("device"):
        request = replace(request, spec=replace(request.spec, device=(str(claim["device"]),)))
    running = adopt_trial(trial_dir)
    if running is None:
        return None
    result = _wait_with_watchers(request, running)
    _keep_result(trial_dir, result)
    return result


def task_state(key: str, dask_scheduler: Any = None) -> str | None:
    """The scheduler's state of a task (run on the scheduler), None when it does not hold it."""
    task = dask_scheduler.tasks.get(key)
    return None if task is None else str(task.state)


# --- on the coordinator ----------------------------------------------------------------


def _refuse_foreign(request: TrialRequest) -> None:
    """Raise ForeignTrial (the directory set aside) when the trial directory is not this trial's."""
    from .trial import ForeignTrial, binding_problem, set_aside

    trial_dir = request.trial_dir
    if request.spec.binding and trial_dir.is_dir():
        problem = binding_problem(trial_dir, request.spec.binding)
        if problem is not None:
            raise ForeignTrial(request.spec.trial_id, trial_dir, set_aside(trial_dir), problem)


class DaskHandle:
    """A trial running as a dask task; the coordinator holds its future while it waits."""

    def __init__(
        self, launcher: "DaskLauncher", future: Any, request: TrialRequest, placement: Placement, key: str = ""
    ) -> None:
        self.launcher = launcher
        self.future = future
        self.key = key or (future.key if future is not None else "")
        self.request = request
        self.placement = placement
        self._cancel_sent = False
        self._started = time.time()
        self._beat: tuple[float | None, float] = (None, 0.0)

    def cancel(self) -> None:
        """Ask the task to stop its training (it SIGTERMs the supervisor; grace; group killed).

        Not once the scheduler is declared gone: the search then stops and leaves the trainings
        running, for ``resume`` (with a scheduler again) to take their results."""
        if self.launcher.scheduler_gone:
            return
        if not self._cancel_sent:
            self._cancel_sent = True
            request_cancel(self.request.trial_dir)

    def wait(self, cancel: threading.Event | None = None) -> TrialResult:
        """Until the task ended: its future, or for a re-attached task (``future`` None: dask does
        not tell a new client about a task another client submitted) the scheduler's state
        of its key and the result the task keeps in the trial directory."""
        worker = getattr(self.placement, "worker", "")
        gone_since: float | None = None
        last_check = 0.0
        while True:
            if cancel is not None and cancel.is_set():
                self.cancel()
            if self.future is not None and self.future.done():
                if not _ended_with_the_connection(self.future, self.launcher) or self._cancel_sent:
                    return self._outcome()
                # The future ended because the connection to the scheduler did: the training did not.
                self.future = None
            if self.future is None:
                kept = _loaded_result(self.request.trial_dir)
                if kept is not None:
                    return kept
            now = time.monotonic()
            if now - last_check >= 1.0:
                last_check = now
                self.launcher.ensure_connected()  # bounded; raises SchedulerGone, leaving the training be
                if self.future is None and self.launcher.task_state(self.key) in (None, "erred", "forgotten", "released"):
                    ended = self._from_trial_dir()
                    if ended is not None:
                        return ended
                    if self._cancel_sent:
                        return TrialResult(cancelled=True)
                    if not (self.request.trial_dir / STATUS_FILE).exists() and (
                        not worker or self.launcher.worker_alive(worker) or self._detached_alive()
                    ):
                        # The scheduler does not hold the task (a new scheduler) but the training's
                        # worker is there, or its watcher stays with it: the training may still
                        # run. Its status file will say.
                        gone_since = None
                        continue
                    if (self.request.trial_dir / DETACHED_FILE).exists():
                        return _lost(f"its dask worker closed and the training went silent (no sign of it for "
                                     f"{DETACHED_SILENCE:.0f}s) without a result", self._started)
                    return _lost("the dask task ended without a result (see the worker's log)", self._started)
                if not worker or self.launcher.worker_alive(worker):
                    gone_since = None
                elif gone_since is None:
                    gone_since = now
                elif now - gone_since >= WORKER_GONE_SECONDS and not (self.future is not None and self.future.done()):
                    if self._detached_alive():
                        # The worker closed and left the training running: follow it in its directory.
                        if self.future is not None:
                            with contextlib.suppress(Exception):
                                self.launcher.client.cancel([self.future], force=True)  # pinned to a gone worker
                        self.future = None
                        continue
                    return self._worker_died(worker)
            if cancel is not None:
                cancel.wait(0.1)
            else:
                time.sleep(0.1)

    def _detached_alive(self) -> bool:
        """Whether the training goes on without its worker: ``detached.json`` there and touched by
        its watcher lately (seen changing from here: no clock of another host is compared)."""
        try:
            beat = (self.request.trial_dir / DETACHED_FILE).stat().st_mtime
        except OSError:
            return False
        now = time.monotonic()
        if beat != self._beat[0]:
            self._beat = (beat, now)
            return True
        return now - self._beat[1] < DETACHED_SILENCE

    def _from_trial_dir(self) -> TrialResult | None:
        """The outcome the trial directory proves: the kept result, or, once the supervisor wrote the
        status file (the training ended), the result read from its files here (shared directory)."""
        kept = _loaded_result(self.request.trial_dir)
        if kept is not None:
            return kept
        if not (self.request.trial_dir / STATUS_FILE).exists():
            return None
        deadline = time.monotonic() + 3.0  # the task writes its result right after the status
        while time.monotonic() < deadline:
            time.sleep(0.2)
            kept = _loaded_result(self.request.trial_dir)
            if kept is not None:
                return kept
        return ended_in_trial_dir(self.request)

    def _worker_died(self, worker: str) -> TrialResult:
        """The worker that ran this trial left the cluster: its watcher stopped the training."""
        kept = _loaded_result(self.request.trial_dir)
        if kept is not None:
            return kept
        if self.future is not None:
            with contextlib.suppress(Exception):
                # force: fire_and_forget keeps wanting it; a task pinned to a dead worker would wait forever.
                self.launcher.client.cancel([self.future], force=True)
        if self._cancel_sent:
            return TrialResult(cancelled=True)
        return _lost(f"the dask worker {worker} running it died; the trial is not trained again in its directory",
                     self._started)

    def _outcome(self) -> TrialResult:
        try:
            result = self.future.result()
        except Exception as exc:  # noqa: BLE001 - the task's failure is this trial's result
            kept = _loaded_result(self.request.trial_dir)
            if kept is not None:
                return kept
            if self._cancel_sent:
                return TrialResult(cancelled=True)
            name = type(exc).__name__
            if name == "ClaimTaken" or "already claimed" in str(exc):
                return _lost(str(exc), self._started)
            return _lost(f"the dask task failed: {name}: {exc}", self._started)
        if result is None:  # an adoption found the training gone
            return _lost("lost: the training was gone from its worker when resumed", self._started)
        return result


def _ended_with_the_connection(future: Any, launcher: "DaskLauncher") -> bool:
    """A future this client did not cancel that ended cancelled, or any while the client has lost
    the scheduler: dask says "scheduler-connection-lost", not what became of the task."""
    return launcher.connection_lost() or str(getattr(future, "status", "")) == "cancelled"


class SchedulerGone(UsageError):
    """The scheduler did not come back within the reconnect bound: the search stops in one line."""


#: How long the coordinator tries to reconnect to a lost scheduler (FUSION_DD_DASK_RECONNECT overrides).
RECONNECT_SECONDS = 60.0


def reconnect_seconds() -> float:
    try:
        value = float(os.environ.get("FUSION_DD_DASK_RECONNECT", RECONNECT_SECONDS))
    except ValueError:
        return RECONNECT_SECONDS
    return value if value > 0 else RECONNECT_SECONDS


def ended_in_trial_dir(request: TrialRequest) -> TrialResult | None:
    """The result of a training whose supervisor wrote its status file, read from the trial
    directory (no process is looked for: it ended and said how)."""
    from .trial import adopt_trial

    running = adopt_trial(request.trial_dir)
    if running is None:
        return None
    return _wait_with_watchers(request, running)


def connect_timeout() -> float:
    """Seconds to wait for the scheduler: 10, or dask's ``distributed.comm.timeouts.connect`` when
    shorter (dask's own default, 30 s, is long for a command that says it cannot reach it)."""
    import dask
    from dask.utils import parse_timedelta

    try:
        configured = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds")
    except (KeyError, TypeError, ValueError):
        configured = None
    return min(10.0, float(configured)) if configured else 10.0


def _address_in(scheduler_file: str) -> str:
    """The scheduler's address from dask's scheduler file (``dask scheduler --scheduler-file``)."""
    data = _read_json(Path(scheduler_file).expanduser())
    address = (data or {}).get("address")
    if not isinstance(address, str) or not address:
        raise UsageError(
            f"train.scheduler_file {scheduler_file}: no scheduler address in it (is the file there and written "
            "by 'dask scheduler --scheduler-file FILE'?)"
        )
    return address


def describe_workers(workers: Mapping[str, Mapping[str, Any]]) -> str:
    """The cluster's workers and their resources, for a message that says why nothing can be placed."""
    if not workers:
        return "the cluster has no workers"
    parts = [
        f"{info.get('name', address)} ({address}): resources {dict(info.get('resources') or {}) or 'none'}"
        for address, info in sorted(workers.items())
    ]
    return "; ".join(parts)


def find_devices(
    client: Any, workers: Mapping[str, Mapping[str, Any]], address: str, device_env: str, allowed: set[str] | None
) -> list[dict[str, Any]]:
    """The cluster's devices as the search would use them, found without writing anything.

    One entry per worker that offers a ``device`` resource (only the devices
    ``train.devices`` lists, when given: plain ids, ``HOST:ID`` or the slot), sorted
    by slot: ``{"slot": "HOST:ID/WORKER", "host", "device", "name", "address"}``.
    The slot names the device as people know it (a host and the id in its
    worker's environment) and the worker's name, which dask keeps unique: under
    Slurm or in containers, workers on one host may each see their own device as
    ``0``, so the id alone does not tell devices apart; a worker restarted with
    the same ``--name`` takes the same slot. Fails with the cluster's resources
    listed when no worker can take a training.
    """
    offering = {a: info for a, info in workers.items() if (info.get("resources") or {}).get("device", 0) >= 1}
    if not offering:
        raise UsageError(
            f"--scheduler {address}: no dask worker offers a 'device' resource, so no training can be placed "
            f"({describe_workers(workers)}); start one worker per device with "
            "'dask worker ADDRESS --nthreads 1 --resources device=1' (see docs/clusters.md, 'On a dask cluster')"
        )
    facts = client.run(worker_facts, device_env, workers=list(offering))
    missing = sorted(str(offering[a].get("name", a)) for a, f in facts.items() if not f.get("device"))
    if missing:
        raise UsageError(
            f"dask workers {', '.join(missing)} offer a device but have no {device_env} in their "
            f"environment (train.device_env): start each with {device_env}=ID"
        )
    found = [
        {"slot": f"{f['host']}:{f['device']}/{offering[a].get('name', a)}", "host": str(f["host"]),
         "device": str(f["device"]),
         "name": str(offering[a].get("name", a)), "address": a}
        for a, f in facts.items()
    ]
    chosen = [
        e for e in found
        if allowed is None or not {e["device"], f"{e['host']}:{e['device']}", e["slot"]}.isdisjoint(allowed)
    ]
    if not chosen:
        seen = ", ".join(sorted({e["slot"] for e in found}))
        raise UsageError(
            f"train.devices: none of the listed devices is offered by a dask worker (workers' devices: {seen})"
        )
    return sorted(chosen, key=lambda e: (e["slot"], e["address"]))


class DaskLauncher:
    """Trials as dask tasks, one per device worker; see the module docstring."""

    name = "dask"

    def __init__(
        self,
        address: str,
        state_dir: Path,
        device_env: str,
        devices: Sequence[Sequence[str]] | None = None,
        *,
        timeout: float | None = None,
        scheduler_file: str | None = None,
    ) -> None:
        distributed = require_dask()
        self._distributed = distributed
        if not address and scheduler_file:
            address = _address_in(scheduler_file)
        self.address = address
        self.state_dir = Path(state_dir)
        self.device_env = device_env
        self.allowed = None if devices is None else {",".join(device) for device in devices}
        try:
            # An address dask cannot parse is refused before a Client exists: a Client that fails
            # on one prints a traceback at exit, after a 20 s wait.
            distributed.comm.resolve_address(address)
            # tls:// takes its certificates from dask's own configuration (distributed.comm.tls.*).
            self.client = distributed.Client(address, timeout=timeout or connect_timeout(), set_as_default=False)
        except (OSError, ValueError, TimeoutError) as exc:
            raise UsageError(f"--scheduler {address}: cannot connect to the dask scheduler ({exc})") from None
        self._proven: set[str] = set()
        self._slots: dict[str, str] = {}  # slot ("HOST:DEVICE/WORKER") -> worker address
        self._cleaner_registered = False
        self._busy: set[str] = set()  # worker addresses running one of our trials
        self._lock = threading.Lock()
        self._alive_lock = threading.Lock()
        self._alive: set[str] = set()
        self._alive_at = -1e9
        self._salt = hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:10]
        self.scheduler_file = scheduler_file
        self.scheduler_gone = False
        self.reconnect_seconds = reconnect_seconds()
        self._reconnect_lock = threading.Lock()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()

    # -- the connection to the scheduler ---------------------------------------------

    def connection_lost(self) -> bool:
        """Whether the client has lost the scheduler (dask closes a client it cannot reconnect)."""
        return str(getattr(self.client, "status", "running")) not in ("running", "connecting", "newly-created")

    def ensure_connected(self) -> None:
        """Reconnect to the scheduler when the connection is lost, for at most ``reconnect_seconds``,
        saying so with the time waited; raises ``SchedulerGone`` after that (and from then on).

        With ``train.scheduler_file`` the file is read again on every attempt: a scheduler
        started anew writes its (new) address there.
        """
        if self.scheduler_gone:
            raise SchedulerGone(self._gone_message())
        if not self.connection_lost():
            return
        with self._reconnect_lock:
            if self.scheduler_gone:
                raise SchedulerGone(self._gone_message())
            if not self.connection_lost():
                return
            started = time.monotonic()
            said = -1e9
            while True:
                waited = time.monotonic() - started
                if time.monotonic() - said >= 5.0:
                    said = time.monotonic()
                    print(f"fusion-dd: lost the dask scheduler at {self.address}; reconnecting "
                          f"({waited:.0f}s of {self.reconnect_seconds:.0f}s)", file=sys.stderr, flush=True)
                try:
                    address = _address_in(self.scheduler_file) if self.scheduler_file else self.address
                    client = self._distributed.Client(address, timeout=min(5.0, self.reconnect_seconds),
                                                      set_as_default=False)
                except Exception:  # noqa: BLE001 - not there yet
                    client = None
                if client is not None:
                    old, self.client, self.address = self.client, client, address
                    with contextlib.suppress(Exception):
                        old.close()
                    with self._alive_lock:
                        self._alive_at = -1e9
                    self._cleaner_registered = False
                    print(f"fusion-dd: reconnected to the dask scheduler at {address} after {waited:.0f}s",
                          file=sys.stderr, flush=True)
                    return
                if time.monotonic() - started >= self.reconnect_seconds:
                    self.scheduler_gone = True
                    raise SchedulerGone(self._gone_message())
                time.sleep(1.0)

    def _gone_message(self) -> str:
        return (
            f"the dask scheduler at {self.address} is gone (no connection for {self.reconnect_seconds:.0f}s); "
            "trainings already running go on: start a scheduler (and its workers) again and run "
            "'fusion-dd resume --scheduler ADDRESS', which takes their results and trains nothing twice"
        )

    # -- the cluster ---------------------------------------------------------------

    def _workers(self) -> dict[str, dict[str, Any]]:
        return dict(self.client.scheduler_info(n_workers=-1).get("workers", {}))

    def worker_alive(self, address: str) -> bool:
        """Whether the scheduler knows this worker; one question per second for all waiting trials
        (each asking on its own would cost the scheduler a round trip per trial and second)."""
        with self._alive_lock:
            if time.monotonic() - self._alive_at >= 1.0:
                try:
                    self._alive = set(self._workers())
                except Exception:  # noqa: BLE001 - the scheduler unreachable for a moment is not a dead worker
                    return True
                self._alive_at = time.monotonic()
            return address in self._alive

    def describe_cluster(self, workers: Mapping[str, Mapping[str, Any]] | None = None) -> str:
        return describe_workers(self._workers() if workers is None else workers)

    def devices(self) -> list[dict[str, Any]]:
        """The cluster's devices as the search would use them (``find_devices``), found without writing anything."""
        return find_devices(self.client, self._workers(), self.address, self.device_env, self.allowed)

    def slots(self) -> list[tuple[str, ...]]:
        """One slot per device of the cluster (``devices``), each proven to see the state directory."""
        self.ensure_connected()
        found = self.devices()
        addresses = {e["address"]: e for e in found}
        self._prove_shared_state(sorted(set(addresses) - self._proven), {a: {"name": e["name"]} for a, e in addresses.items()})
        self._register_cleaner()
        with self._lock:
            self._slots = {entry["slot"]: entry["address"] for entry in found}
        return [(slot,) for slot in sorted(self._slots)]

    def _register_cleaner(self) -> None:
        """Once per coordinator: have every worker, and every worker that joins or restarts later, kill
        leftover trainings on its device before it takes work (fusion_dd.runner.dask_worker; the
        ``--preload`` form does the same for workers started with it)."""
        if self._cleaner_registered:
            return
        self._cleaner_registered = True
        register = getattr(self.client, "register_plugin", None) or self.client.register_worker_plugin
        with contextlib.suppress(Exception):  # an older or locked-down scheduler: the preload and each task's check remain
            register(LeftoverCleaner(self.device_env), name=PLUGIN_NAME)

    def _prove_shared_state(self, addresses: list[str], infos: Mapping[str, Mapping[str, Any]]) -> None:
        """A token written here must read back the same on every worker: the state directory is shared."""
        if not addresses:
            return
        path, token = write_token(self.state_dir)
        try:
            seen = self.client.run(read_token, str(path.resolve()), workers=addresses)
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        blind = sorted(str(infos[a].get("name", a)) for a in addresses if seen.get(a) != token)
        if blind:
            raise UsageError(not_shared_message(self.state_dir, f"dask worker(s) {', '.join(blind)}"))
        self._proven.update(addresses)

    def key_of(self, request: TrialRequest) -> str:
        """Stable per search and trial (a retry is a new trial, so also per attempt)."""
        return f"fusion-dd-{self._salt}-{request.spec.trial_id}"

    def _pick_worker(self, slot: str, cancel: threading.Event | None = None) -> str | None:
        """The slot's worker if it is alive and free, else any free device worker (a restarted one).

        Waits while every device worker is busy (a dead worker's slot shares the
        live ones); fails only when the cluster has had no usable worker for a minute.
        None when ``cancel`` is set while it waits.
        """
        empty_since: float | None = None
        while True:
            if cancel is not None and cancel.is_set():
                return None
            address = self._slots.get(slot)
            if address is not None and self.worker_alive(address):
                with self._lock:
                    if address not in self._busy:
                        self._busy.add(address)
                        return address
            problem = None
            try:
                self.slots()
            except SchedulerGone:
                raise
            except UsageError as exc:
                problem = exc
            with self._lock:
                address = self._slots.get(slot)
                if address is not None and address not in self._busy:
                    self._busy.add(address)
                    return address
                free = [a for name, a in sorted(self._slots.items()) if a not in self._busy]
                if free and address is None:
                    self._busy.add(free[0])
                    return free[0]
            if problem is None:
                empty_since = None
            elif empty_since is None:
                empty_since = time.monotonic()
            elif time.monotonic() - empty_since >= 60.0:
                raise problem
            if cancel is not None:
                cancel.wait(0.5)
            else:
                time.sleep(0.5)

    def release(self, address: str) -> None:
        with self._lock:
            self._busy.discard(address)

    # -- the seam ----------------------------------------------------------------------

    def start(self, request: TrialRequest, cancel: threading.Event | None = None) -> Any:
        """Submit the trial's task to its slot's worker; return once the task has claimed the trial.

        A worker that leaves before its task claimed the trial ran nothing of it: the task is
        withdrawn and submitted again (same trial, a new key) to another device worker. When
        ``cancel`` is set meanwhile (Ctrl-C), the cancel request is written first, so that a task
        that claims afterwards does not train, then the task is cancelled with dask's own
        ``client.cancel``, and ``NotStarted`` says that nothing of the trial ran (no budget spent).
        """
        slot = ",".join(request.spec.device)
        for submission in range(1, 1000):
            address = self._pick_worker(slot, cancel)
            if address is None:
                raise NotStarted(f"trial {request.spec.trial_id} was never submitted: cancelled while every device worker was busy")
            key = self.key_of(request) + ("" if submission == 1 else f"-r{submission}")
            try:
                future = self.client.submit(
                    run_trial,
                    request,
                    key,
                    self.device_env,
                    key=key,
                    pure=False,
                    resources={"device": 1},
                    workers=[address],
                    allow_other_workers=False,
                )
                self._distributed.fire_and_forget(future)
                claim = self._wait_claim(request, future, key, worker=address, cancel=cancel)
            except BaseException:
                self.release(address)
                raise
            if claim is _CANCELLED:
                self.release(address)
                raise NotStarted(f"trial {request.spec.trial_id} never started: cancelled while its task waited for a device")
            if claim is not None:
                return _ReleasingHandle(self, future, request, self._placement(key, claim), address)
            with contextlib.suppress(Exception):
                self.client.cancel([future], force=True)
            self.release(address)
        raise RuntimeError(f"trial {request.spec.trial_id}: no dask worker stayed long enough to start it")

    def _wait_claim(
        self, request: TrialRequest, future: Any, key: str = "", worker: str = "",
        cancel: threading.Event | None = None,
    ) -> Any:
        """Block until the task has claimed the trial: then it runs, and its placement is known.

        None when it never will: without a future (a re-attached task) once the scheduler no
        longer holds ``key``; with ``worker``, once that worker has been gone for a while.
        ``_CANCELLED`` when ``cancel`` was set first: the task is cancelled and will not train.
        """
        path = request.trial_dir / CLAIM_FILE
        last_check = time.monotonic()
        gone_since: float | None = None
        while True:
            claim = _read_json(path)
            if claim is not None:
                return claim
            if cancel is not None and cancel.is_set():
                request_cancel(request.trial_dir)  # first: a claim written after this refuses to train
                if future is not None:
                    with contextlib.suppress(Exception):
                        self.client.cancel([future], force=True)
                claim = _read_json(path)
                return claim if claim is not None else _CANCELLED
            now = time.monotonic()
            if now - last_check >= 1.0:
                last_check = now
                if future is None and self.task_state(key) in (None, "erred", "forgotten", "released"):
                    return _read_json(path)
                if worker and not self.worker_alive(worker):
                    gone_since = gone_since or now
                    if now - gone_since >= WORKER_GONE_SECONDS:
                        return _read_json(path)
                else:
                    gone_since = None
            if future is not None and future.done() and _ended_with_the_connection(future, self):
                self.ensure_connected()  # bounded; then the task is followed by its key
                future = None
                continue
            if future is not None and future.done():
                claim = _read_json(path)
                if claim is not None:
                    return claim
                try:
                    future.result()
                except Exception as exc:  # noqa: BLE001 - the reason the trial could not start
                    raise RuntimeError(f"trial {request.spec.trial_id}: the dask task failed before it started: {exc}") from None
                raise RuntimeError(f"trial {request.spec.trial_id}: the dask task ended without claiming the trial")
            time.sleep(0.05)

    def task_state(self, key: str) -> str | None:
        """The scheduler's state of a task; "unknown" while the scheduler cannot be asked."""
        try:
            return self.client.run_on_scheduler(task_state, key)
        except Exception:  # noqa: BLE001 - a moment without the scheduler is not a lost task
            return "unknown"

    def _placement(self, key: str, claim: Mapping[str, Any]) -> DaskPlacement:
        return DaskPlacement(
            launcher="dask",
            host=str(claim.get("host", "")),
            boot_id=claim.get("boot_id"),
            job_id=key,
            device=(str(claim.get("device", "")),),
            worker=str(claim.get("worker", "")),
            worker_name=str(claim.get("worker_name", "")),
        )

    def adopt(self, request: TrialRequest, placement: Mapping[str, Any] | None) -> DaskHandle | None:
        """Re-attach to a trial of an earlier coordinator; None when it never finished and is gone."""
        if placement and placement.get("launcher") == "local":
            from .launcher import LocalLauncher

            return LocalLauncher().adopt(request, placement)  # started here before the search moved to dask
        key = str((placement or {}).get("job_id") or self.key_of(request))
        _refuse_foreign(request)  # before a kept result or a status of the directory is believed
        kept = _loaded_result(request.trial_dir)
        claim = _read_json(request.trial_dir / CLAIM_FILE)
        place = self._placement(key, claim or dict(placement or {}))
        if kept is not None:
            return FinishedHandle(kept, place)
        state = self.task_state(key)
        if state is not None and state not in ("erred", "forgotten", "released"):
            # Still held: re-attach to the same task (it claims, or has claimed, the trial).
            if claim is None:
                claim = self._wait_claim(request, None, key)
                if claim is None:
                    return None
                place = self._placement(key, claim)
            return DaskHandle(self, None, request, place, key=key)
        if claim is None:
            return None  # never claimed and the scheduler does not hold it: it never ran
        if (request.trial_dir / STATUS_FILE).exists():
            # The training ended and said how (its task may have been lost with a scheduler):
            # its result is read from the shared trial directory, no worker needed.
            ended = ended_in_trial_dir(request)
            if ended is not None:
                return FinishedHandle(ended, place)
            return self._check_on_worker(request, place, None)
        worker = str(claim.get("worker", ""))
        if worker and self.worker_alive(worker):
            return self._check_on_worker(request, place, worker)
        if (request.trial_dir / DETACHED_FILE).exists():
            # Its worker closed and left the training running with its watcher: follow it in its
            # directory (lost only once the watcher goes silent without a status).
            return DaskHandle(self, None, request, place, key=key)
        return None  # its worker is gone, and its watcher stopped the training with it

    def _check_on_worker(self, request: TrialRequest, place: DaskPlacement, worker: str | None) -> DaskHandle:
        """Let the recorded worker (or any, once the training has ended) look for the training."""
        future = self.client.submit(
            adopt_on_worker,
            request,
            self.device_env,
            key=f"{self.key_of(request)}-adopt-{secrets.token_hex(3)}",
            pure=False,
            workers=[worker] if worker else None,
            allow_other_workers=worker is None,
        )
        self._distributed.fire_and_forget(future)
        return DaskHandle(self, future, request, place)

    def ever_started(self, request: TrialRequest) -> bool:
        return (request.trial_dir / CLAIM_FILE).exists() or (request.trial_dir / SUPERVISOR_FILE).exists()


def _require_scheduler(train: Any, source: Any) -> None:
    """Refused when the search starts, not while the file is read: --scheduler may give the address."""
    if not train.scheduler and not getattr(train, "scheduler_file", None):
        raise UsageError(
            f"{source}: train.launcher: dask needs the scheduler: train.scheduler (an address such as "
            "tcp://host:8786), train.scheduler_file, or --scheduler on the command line"
        )


def dask_launcher_for(config: Any) -> "DaskLauncher":
    """The dask launcher of a search's configuration (``train.scheduler`` or ``train.scheduler_file``)."""
    train = config.train
    _require_scheduler(train, getattr(config, "source", "the config"))
    return DaskLauncher(
        train.scheduler,
        config.state_dir,
        train.device_env,
        train.devices if train.devices_given else None,
        scheduler_file=getattr(train, "scheduler_file", None),
    )


def cluster_devices(train: Any, state_dir: Path) -> list[dict[str, Any]]:
    """The devices a search with this ``train`` section would use (``DaskLauncher.devices``), for
    ``--dry-run``: nothing is written (the shared-state proof runs when the search starts)."""
    _require_scheduler(train, "the config")
    launcher = DaskLauncher(
        train.scheduler, state_dir, train.device_env, train.devices if train.devices_given else None,
        scheduler_file=getattr(train, "scheduler_file", None),
    )
    try:
        return launcher.devices()
    finally:
        launcher.close()


class _ReleasingHandle(DaskHandle):
    """A handle that gives its worker back to the launcher's free list when the trial ended."""

    def __init__(self, launcher: DaskLauncher, future: Any, request: TrialRequest, placement: Placement, address: str) -> None:
        super().__init__(launcher, future, request, placement)
        self._address = address

    def wait(self, cancel: threading.Event | None = None) -> TrialResult:
        try:
            return super().wait(cancel)
        finally:
            self.launcher.release(self._address)


__all__ = [
    "CANCEL_FILE",
    "CLAIM_FILE",
    "ClaimTaken",
    "DaskHandle",
    "DaskLauncher",
    "DaskPlacement",
    "RESULT_FILE",
    "adopt_on_worker",
    "cluster_devices",
    "connect_timeout",
    "require_dask",
    "run_trial",
]
