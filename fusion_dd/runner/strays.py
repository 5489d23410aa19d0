"""Finding the processes of one trial that escaped its process group, and killing them.

A training is started as the leader of its own process group, and the supervisor
kills that group when the training ends. A worker that calls ``setsid()`` (a
daemonized data server, a launcher that "detaches" its ranks) leaves the group,
so ``killpg`` misses it and it would hold the device long after its trial, and
after the whole search. Two marks still tie such a process to
its trial:

* ancestry: the supervisor is a child subreaper, so an orphaned descendant of
  the training is re-parented to the supervisor, not to PID 1; every live
  descendant of the supervisor belongs to its trial, whatever it did to its
  environment;
* environment: ``FUSION_DD_TRIAL_DIR`` (an absolute path, unique per trial,
  unlike ``FUSION_DD_TRIAL_ID``) is in the initial environment of every process
  the training starts, and ``/proc/PID/environ`` keeps it even after a re-parent
  to PID 1, which is what is left once a supervisor itself was killed.

Linux only (``/proc``); elsewhere nothing is found and only the process group
is killed, as before. A process is remembered with its start time so that a pid
reused by an unrelated process is never signalled. This module imports nothing
heavy: the supervisor uses it once per training.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

TRIAL_DIR_ENV = "FUSION_DD_TRIAL_DIR"

#: pid -> start time (clock ticks since boot, /proc/PID/stat field 22).
Processes = dict[int, int]

_POLL_SECONDS = 0.05
#: How often a wait looks again for processes it did not know (forked meanwhile).
_RESCAN_SECONDS = 0.5


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def live_pids() -> list[int]:
    """Every pid in /proc (none where there is no procfs)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    return [int(name) for name in names if name.isdigit()]


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, parent pid, process group, start time) of a process, or None when it is gone."""
    try:
        raw = _read(f"/proc/{pid}/stat")
        fields = raw.rsplit(b") ", 1)[1].split()
        return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int | None:
    """When a live process started (clock ticks since boot); None when it is gone or a zombie.

    A pid and its start time name one process for the whole uptime of the host,
    so a record holding both is never fooled by a reused pid. This is how a
    supervisor forked by :mod:`fusion_dd.runner.forkserver`, whose command line
    is the fork server's and names no trial, is recognised.
    """
    stat = _stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return None
    return stat[3]


def has_children(pid: int) -> bool | None:
    """Whether ``pid`` has a child process (zombies included); None when the kernel cannot say.

    Reads ``/proc/PID/task/*/children`` (Linux with ``CONFIG_PROC_CHILDREN``):
    a few small reads, where a scan of every process costs milliseconds per
    training. A supervisor is a subreaper, so while it lives every orphan of
    its training is re-parented to it: no child left means nothing of the
    trial left to look for.
    """
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        return any(_read(f"/proc/{pid}/task/{task}/children").strip() for task in tasks)
    except OSError:
        return None


def _environ_has(pid: int, marker: bytes) -> bool:
    try:
        environ = _read(f"/proc/{pid}/environ")
    except OSError:  # gone, or not ours to read
        return False
    return marker in environ.split(b"\0")


Stat = tuple[str, int, int, int]


def _scan() -> dict[int, Stat]:
    return {pid: stat for pid in live_pids() if (stat := _stat(pid)) is not None}


def _trial_processes(trial_dir: str, root: int | None) -> dict[int, Stat]:
    """Every live process of the trial (see :func:`find`), with its stat."""
    me = os.getpid()
    stats = _scan()
    found: dict[int, Stat] = {}
    if root is not None:
        children: dict[int, list[int]] = {}
        for pid, (_, ppid, _, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        stack = [root]
        while stack:
            for child in children.get(stack.pop(), []):
                if child not in found:
                    found[child] = stats[child]
                    stack.append(child)
    marker = f"{TRIAL_DIR_ENV}={trial_dir}".encode("utf-8", "surrogateescape")
    for pid, stat in stats.items():
        if pid not in found and pid != me and _environ_has(pid, marker):
            found[pid] = stat
    return {pid: stat for pid, stat in found.items() if pid not in (me, root) and stat[0] != "Z"}


def find(trial_dir: str, root: int | None = None, outside: int | None = None) -> Processes:
    """Live processes of this trial: descendants of ``root`` and carriers of its marker.

    ``trial_dir`` is the value of ``FUSION_DD_TRIAL_DIR`` the training got.
    Members of process group ``outside`` are left out (the supervisor signals
    the training's group as a whole, and a training that handles a second
    SIGTERM as "abort now" must get one only). The caller and ``root``
    themselves are never included; nor are zombies (they have ended; their
    parent reaps them).
    """
    return {pid: stat[3] for pid, stat in _trial_processes(trial_dir, root).items() if stat[2] != outside}


def alive(processes: Processes) -> Processes:
    """Those still running: same pid *and* start time, and not a zombie."""
    result: Processes = {}
    for pid, start in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[3] == start and stat[0] != "Z":
            result[pid] = start
    return result


def send(processes: Processes, sig: int) -> None:
    """Signal each process that is still the one we found (never a reused pid)."""
    for pid in alive(processes):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def terminate(
    trial_dir: str,
    root: int | None = None,
    grace: float = 0.0,
    *,
    pgid: int | None = None,
    also_done: Callable[[], bool] = lambda: True,
    on_poll: Callable[[], None] = lambda: None,
    give_up: float = 30.0,
) -> Processes:
    """SIGTERM the trial (its group ``pgid`` and every process :func:`find` finds),
    wait up to ``grace`` s, then SIGKILL what is left.

    One grace period for all, so a stray never doubles the time a cancellation
    takes. The group is signalled with ``killpg`` (one signal per member, no
    fork race), once per phase, and only while one of the trial's own
    processes is in it: a group number whose members are all gone may have
    been reused. (Without ``/proc`` the group is signalled as before.) ``also_done`` says
    whether the caller's own part has ended (the supervisor: its training
    reaped and its group empty); ``on_poll`` runs every poll (the supervisor
    reaps its children there, re-parented strays included). Processes forked
    meanwhile are looked for every ``_RESCAN_SECONDS``. The SIGKILL phase lasts
    at most ``give_up`` seconds. Returns the processes found outside the group.
    """
    found: Processes = {}
    procfs = os.path.isdir("/proc/self")

    def scan(sig: int, group: bool) -> None:
        everything = _trial_processes(trial_dir, root)
        if group and pgid is not None and (not procfs or any(stat[2] == pgid for stat in everything.values())):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        new = {pid: stat[3] for pid, stat in everything.items() if stat[2] != pgid and pid not in found}
        found.update(new)
        send(new, sig)

    for sig, limit in ((signal.SIGTERM, max(grace, 0.0)), (signal.SIGKILL, give_up)):
        if sig == signal.SIGKILL:
            send(found, sig)
        scan(sig, group=True)
        deadline = time.monotonic() + limit
        scanned = time.monotonic()
        while True:
            on_poll()
            if time.monotonic() - scanned >= _RESCAN_SECONDS:
                scanned = time.monotonic()
                scan(sig, group=False)  # the group had its signal
            if also_done() and not alive(found):
                return found
            if time.monotonic() >= deadline:
                break
            time.sleep(_POLL_SECONDS)
    return found


def kill_now(trial_dir: str, settle: float = 5.0) -> int:
    """SIGKILL every process carrying this trial's marker; returns how many were found.

    For a trial whose supervisor died: there is nobody left to be polite for,
    and its training must not keep holding the device. One scan of ``/proc``
    can miss a child forked while it ran, so scans repeat until one finds
    nothing alive (a killed process takes a moment to become a zombie), for at
    most ``settle`` seconds.
    """
    killed: set[int] = set()
    deadline = time.monotonic() + settle
    while True:
        found = find(trial_dir)
        if not found:
            return len(killed)
        send(found, signal.SIGKILL)
        killed.update(found)
        if time.monotonic() >= deadline:
            return len(killed)
        time.sleep(0.02)
