"""Event-driven waits for the coordinator: wake when a supervisor exits or a job is cancelled.

A coordinator that polls its trainings every 0.2 s spends 0.2 s per training
doing nothing once trainings take a fraction of a second (compilers such as
ONNX Runtime or XLA make that real). So a wait here sleeps until something
happened: the supervisor process ended (a thread blocked in ``waitpid`` for our
own child, or in ``poll`` on a pidfd for an adopted one), or the job was
cancelled (:class:`CancelEvent` wakes every wait registered on it). The poll
interval of the callers stays as a bound for what has no event (the early-stop
monitor, a supervisor on a system without pidfds), never as the way an end is
noticed.

This module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import threading


class CancelEvent(threading.Event):
    """A cancellation flag that also wakes the waits registered on it with :meth:`also_wake`."""

    def __init__(self) -> None:
        super().__init__()
        self._wakes: list[threading.Event] = []
        self._wakes_lock = threading.Lock()

    def also_wake(self, event: threading.Event) -> None:
        """Set ``event`` when this one is set (at once if it already is)."""
        with self._wakes_lock:
            self._wakes.append(event)
        if self.is_set():
            event.set()

    def forget(self, event: threading.Event) -> None:
        with self._wakes_lock, contextlib.suppress(ValueError):
            self._wakes.remove(event)

    def set(self) -> None:
        super().set()
        with self._wakes_lock:
            wakes = list(self._wakes)
        for event in wakes:
            event.set()


def watch_exit(process: subprocess.Popen[bytes] | None, pid: int | None, wake: threading.Event) -> bool:
    """Set ``wake`` when the process ends, from a daemon thread; False when that cannot be watched.

    Our own child: the thread blocks in ``Popen.wait`` (which reaps it; a
    concurrent ``Popen.poll`` meanwhile just says "running"). Another process
    (a supervisor adopted from an earlier coordinator): the thread blocks on
    its pidfd (Linux 5.3+); without pidfds the caller keeps polling.
    """
    if process is not None:

        def reap() -> None:
            with contextlib.suppress(Exception):
                process.wait()
            wake.set()

        threading.Thread(target=reap, name="fusion-dd-exit-watch", daemon=True).start()
        return True
    if pid is None or not hasattr(os, "pidfd_open"):
        return False
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False

    def watch() -> None:
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            poller.poll()
        except OSError:
            pass
        finally:
            os.close(pidfd)
            wake.set()

    threading.Thread(target=watch, name="fusion-dd-exit-watch", daemon=True).start()
    return True
