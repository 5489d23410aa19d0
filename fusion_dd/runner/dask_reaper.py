"""Stops a training whose dask worker died: ``python -S -m fusion_dd.runner.dask_reaper TRIAL_DIR SUPERVISOR_PID``.

The dask task starts this watcher next to the training's supervisor, with a pipe
on its stdin that only the worker process holds. A training must outlive the
coordinator, but not its worker: once the worker is gone, dask hands the device
to another task and fusion-dd retries the trial as a new one, so a training
still running would be an orphan on a device that is no longer its own. The
pipe closes when the worker exits, however it dies (SIGKILL included): without
the task's "done" first, the watcher sends SIGTERM to the supervisor, which
stops the training as for a cancellation (grace, then SIGKILL of its group) and
writes its status. Standard library only: it starts once per training.
"""

from __future__ import annotations

import os
import signal
import sys
import time

_SUPERVISOR_MODULE = "fusion_dd.runner.supervisor"


def _is_supervisor(pid: int, trial_dir: str) -> bool:
    """Alive and still this trial's supervisor (never a reused pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [part.decode("utf-8", "surrogateescape") for part in handle.read().split(b"\0") if part]
    except OSError:
        return False
    return _SUPERVISOR_MODULE in argv and trial_dir in argv


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m fusion_dd.runner.dask_reaper TRIAL_DIR SUPERVISOR_PID", file=sys.stderr)
        return 2
    trial_dir, pid = argv[0], int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    said = b""
    while True:
        try:
            chunk = os.read(0, 64)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            break
        said += chunk
    if b"done" in said or os.path.exists(os.path.join(trial_dir, "status.json")):
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
