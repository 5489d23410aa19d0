"""On a dask worker as it starts: kill leftover fusion-dd trainings on this worker's device.

    dask worker ADDRESS --nthreads 1 --resources device=1 --preload fusion_dd.runner.dask_worker

Why: a worker that crashes (or is SIGKILLed, or restarted by its nanny) leaves
its training running without it. The training's watcher (``fusion_dd.runner.dask_reaper``)
stops it, with a grace period; but the restarted worker is handed the device at
once, and a new training must never share the device with an orphan. So before a
worker takes work it kills every training that a fusion-dd dask task started on
its device and whose worker is no longer alive. The trial of such an orphan is
already counted as lost by its coordinator (and retried as a new trial), so
nothing of value is killed.

A process counts as such a training only by its environment, which every
training a dask task starts carries (``fusion_dd.runner.dask_launcher.run_trial``):
``FUSION_DD_DASK_DEVICE`` (the device id) and ``FUSION_DD_DASK_WORKER`` (the pid
and start time of the worker process that started it). A local search's
trainings, anything else on the host, and the trainings of live workers (this
one's included, when the plugin is registered on a running worker) are never
touched; nor is a training whose worker *closed* (retired, its nanny or its
scheduler gone) and said so: its watcher stays with it (``detached.json``), and
its result is still wanted.

Two ways to run it, both before the worker takes a task:

* ``--preload fusion_dd.runner.dask_worker`` (``dask_setup`` below runs before the worker
  registers with the scheduler); the device variable is ``FUSION_DD_DEVICE_ENV``
  in the worker's environment, default ``ASCEND_DEVICE_ID`` (as ``train.device_env``);
* ``LeftoverCleaner``, a worker plugin the coordinator registers with the
  scheduler when a search starts, so that workers that join or restart later run
  it as well (dask sets up registered plugins before a worker handles tasks).

Linux only (``/proc``); elsewhere it finds nothing to kill.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from typing import Any

try:
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError:  # fusion-dd without the dask extra: the marks below are still needed
    WorkerPlugin = object  # type: ignore[misc,assignment]

from .dask_reaper import DETACHED_FILE

#: The device id of a training a dask task started (its worker's device).
DEVICE_MARK_ENV = "FUSION_DD_DASK_DEVICE"
#: ``PID:STARTTIME`` of the worker process that started a training: alive or not decides a leftover.
WORKER_MARK_ENV = "FUSION_DD_DASK_WORKER"
#: Names the worker's device variable for the ``--preload`` form (the plugin is told by the coordinator).
DEVICE_ENV_VAR = "FUSION_DD_DEVICE_ENV"
DEFAULT_DEVICE_ENV = "ASCEND_DEVICE_ID"
#: Registered under this name, so a later search replaces it rather than adding another.
PLUGIN_NAME = "fusion-dd-leftovers"

logger = logging.getLogger("fusion_dd.runner.dask_worker")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a process; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b") ", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def process_mark(pid: int) -> str | None:
    """``PID:STARTTIME``: names one process for good (a pid alone may be given out again)."""
    stat = _stat(pid)
    return None if stat is None else f"{pid}:{stat[1]}"


def _alive(mark: str) -> bool:
    pid, _, _ = mark.partition(":")
    if not pid.isdigit():
        return False
    stat = _stat(int(pid))
    return stat is not None and stat[0] != "Z" and process_mark(int(pid)) == mark


def _environ(pid: int) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    pairs = (item.decode("utf-8", "surrogateescape").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def device_trainings(device: str) -> list[tuple[int, dict[str, str]]]:
    """Live processes of trainings that fusion-dd dask tasks started on ``device`` here, with their environment."""
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        environ = _environ(pid)
        if environ is None or environ.get(DEVICE_MARK_ENV) != device:
            continue
        stat = _stat(pid)
        if stat is not None and stat[0] != "Z":
            found.append((pid, environ))
    return found


def detached(trial_dir: str | None) -> bool:
    """Whether the training of ``trial_dir`` goes on without its worker, with its watcher beside it
    (``fusion_dd.runner.dask_reaper``: its worker closed; the coordinator still wants its result)."""
    if not trial_dir:
        return False
    try:
        with open(os.path.join(trial_dir, DETACHED_FILE), encoding="utf-8") as handle:
            mark = json.load(handle).get("reaper")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(mark, str) and _alive(mark)


def detached_trainings(device: str) -> list[int]:
    """Trainings on ``device`` that go on without their worker (``detached``): a task waits for them."""
    return [pid for pid, environ in device_trainings(device) if detached(environ.get("FUSION_DD_TRIAL_DIR"))]


def leftovers(device: str, sparing: tuple[str, str] | None = None) -> list[int]:
    """Trainings on ``device`` whose worker is gone: nobody will wait for them, and the device is needed.

    A detached training (its worker closed and said so) is not one: its result is still wanted.
    ``sparing``: ``(NAME, VALUE)``; a process with that in its environment is not one (a task's own trial).
    """
    found = []
    for pid, environ in device_trainings(device):
        if environ.get(WORKER_MARK_ENV) and _alive(environ[WORKER_MARK_ENV]):
            continue
        if detached(environ.get("FUSION_DD_TRIAL_DIR")):
            continue
        if sparing is not None and environ.get(sparing[0]) == sparing[1]:
            continue
        found.append(pid)
    return found


def kill_leftovers(device: str, wait: float = 10.0) -> list[int]:
    """SIGKILL the leftovers on ``device`` and wait (up to ``wait`` seconds) until they are gone."""
    killed: list[int] = []
    deadline = time.monotonic() + wait
    while True:
        left = leftovers(device)
        if not left or time.monotonic() >= deadline:
            return killed
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            if pid not in killed:
                killed.append(pid)
        time.sleep(0.05)


def clean_device(device_env: str) -> list[int]:
    """What a starting worker does: its device from ``device_env``, then its leftovers killed."""
    device = os.environ.get(device_env)
    if not device:
        logger.warning("fusion-dd: %s is not set in this worker's environment; no leftover check", device_env)
        return []
    killed = kill_leftovers(device)
    if killed:
        logger.warning(
            "fusion-dd: killed %d leftover training process(es) on device %s (their worker is gone): %s",
            len(killed), device, ", ".join(map(str, killed)),
        )
    return killed


def dask_setup(worker: Any = None) -> None:
    """``dask worker --preload fusion_dd.runner.dask_worker``: runs before the worker registers, so before any task."""
    clean_device(os.environ.get(DEVICE_ENV_VAR) or DEFAULT_DEVICE_ENV)


class LeftoverCleaner(WorkerPlugin):  # type: ignore[misc]
    """The same as a worker plugin: the coordinator registers it, dask sets it up on every worker
    that is there or joins later (a restarted one included) before that worker handles tasks."""

    name = PLUGIN_NAME
    idempotent = False  # a new registration runs again where it is set up: harmless, it spares live workers

    def __init__(self, device_env: str = DEFAULT_DEVICE_ENV) -> None:
        self.device_env = device_env

    def setup(self, worker: Any = None) -> None:
        clean_device(self.device_env)


__all__ = [
    "DEVICE_MARK_ENV",
    "LeftoverCleaner",
    "WORKER_MARK_ENV",
    "clean_device",
    "dask_setup",
    "detached",
    "detached_trainings",
    "device_trainings",
    "kill_leftovers",
    "leftovers",
    "process_mark",
]
