"""Stops a training whose dask worker died: ``python -S -m fusion_dd.runner.dask_reaper TRIAL_DIR SUPERVISOR_PID``.

The dask task starts this watcher next to the training's supervisor, with a pipe
on its stdin that only the worker process holds. A training must outlive the
coordinator, but not a worker that *died*: once the worker is gone, dask hands the
device to another task and fusion-dd retries the trial as a new one, so a training
still running would be an orphan on a device that is no longer its own. The
pipe closes when the worker exits, however it dies (SIGKILL included): without
the task's "done" first, the watcher sends SIGTERM to the supervisor, which
stops the training as for a cancellation (grace, then SIGKILL of its group) and
writes its status.

A worker that *closes* (retired, its nanny closing, its scheduler gone) says so
first: the task writes "detach". Killing that training would throw away work
whose result is still wanted, so the watcher lets it run and stays with it
instead: it writes ``detached.json`` into the trial directory (its own pid and
start time, so that a worker starting later on this device spares the training
and a task waits for it rather than share the device), touches that file every
few seconds while the training runs (the coordinator's proof that it still
does), and passes on a ``cancel.request`` of the coordinator as SIGTERM. It ends
when the supervisor wrote ``status.json``, from which the coordinator takes the
outcome. Standard library only: it starts once per training.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

_SUPERVISOR_MODULE = "fusion_dd.runner.supervisor"
#: Written into the trial directory when the training goes on without its worker.
DETACHED_FILE = "detached.json"
#: How often the detached watcher touches ``detached.json``; the coordinator allows many times this.
HEARTBEAT_SECONDS = 2.0
_STATUS_FILE = "status.json"
_CANCEL_FILE = "cancel.request"


def _is_supervisor(pid: int, trial_dir: str) -> bool:
    """Alive and still this trial's supervisor (never a reused pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [part.decode("utf-8", "surrogateescape") for part in handle.read().split(b"\0") if part]
    except OSError:
        return False
    return _SUPERVISOR_MODULE in argv and trial_dir in argv


def _own_mark() -> str:
    """``PID:STARTTIME`` of this process (as ``fusion_dd.runner.dask_worker.process_mark``)."""
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return f"{pid}:{int(handle.read().rsplit(b') ', 1)[1].split()[19])}"
    except (OSError, IndexError, ValueError):
        return f"{pid}:0"


def _write_detached(trial_dir: str) -> str:
    path = os.path.join(trial_dir, DETACHED_FILE)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({"reaper": _own_mark(), "time": time.time()}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return path


def stay_with(trial_dir: str, pid: int) -> int:
    """The training goes on without its worker: heartbeat, pass a cancel on, end with the training."""
    path = _write_detached(trial_dir)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a closing worker's process group is not ours to follow
    cancelled = False
    while True:
        if os.path.exists(os.path.join(trial_dir, _STATUS_FILE)) or not _is_supervisor(pid, trial_dir):
            return 0
        if not cancelled and os.path.exists(os.path.join(trial_dir, _CANCEL_FILE)):
            cancelled = True
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                return 0
        try:
            os.utime(path)
        except OSError:
            pass
        time.sleep(HEARTBEAT_SECONDS)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m fusion_dd.runner.dask_reaper TRIAL_DIR SUPERVISOR_PID", file=sys.stderr)
        return 2
    trial_dir, pid = argv[0], int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    said = b""
    while b"done" not in said and b"detach" not in said:
        try:
            chunk = os.read(0, 64)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            break
        said += chunk
    if b"detach" in said:
        return stay_with(trial_dir, pid)
    if b"done" in said or os.path.exists(os.path.join(trial_dir, _STATUS_FILE)):
        return 0
    # The worker died with the training running: stop it like a cancellation.
    if _is_supervisor(pid, trial_dir):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            return 0
        # Stay until it ended, so that a look at this host finds the stop still in progress.
        deadline = time.monotonic() + 120
        while _is_supervisor(pid, trial_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
