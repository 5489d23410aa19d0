"""A fork server for supervisors: one interpreter start per search, not one per training.

Starting ``python -m fusion_dd.runner.supervisor`` costs an interpreter's start
and its imports, about 60 ms on a small machine: more than a whole training of
a compiler that compiles in 0.3 s, paid again for every training. So the
coordinator starts this module once (``python -S -m fusion_dd.runner.forkserver``,
in a session of its own), and for each trial asks it over a pipe to fork a
supervisor that already has everything imported. The forked supervisor runs
the very same code as a started one (:func:`fusion_dd.runner.supervisor.run_guarded`)
and is just as independent of the coordinator:

* it calls ``setsid`` (Ctrl-C on the coordinator's terminal never reaches it),
  changes to its trial directory, reads nothing from the server's pipes (its
  stdin is ``/dev/null``, its stdout and stderr go to ``supervisor.log``);
* the server exits when the coordinator closes its end of the request pipe,
  however the coordinator ended (SIGKILL included); running supervisors are
  then re-parented like any orphan and finish their trainings.

A forked supervisor's command line is the server's and names no trial, so it
is recognised by ``supervisor.json`` instead: its pid with its start time
(:func:`fusion_dd.runner.strays.start_ticks`). The server writes that file for
the child before it answers, so any supervisor a coordinator was told about can
be found again by a resumed one.

Protocol, one JSON value per line: the coordinator writes the trial directory
(a string), the server answers ``{"pid": N}`` or ``{"error": "..."}``. The
server imports only what the supervisor imports (standard library).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import traceback

from . import strays, supervisor
from ..store.atomic import write_json_atomic

_MODULE = "fusion_dd.runner.forkserver"

#: Set to 0 to start every supervisor as its own interpreter (the way before the fork server).
DISABLE_ENV = "FUSION_DD_FORKSERVER"


def _reap(signum: int = 0, frame: object = None) -> None:
    """Collect every ended supervisor, so that none lingers as a zombie that looks alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child(trial_dir: str, named_fd: int) -> None:
    """The forked supervisor: detach from the server, run the trial, never return."""
    code = 1
    try:
        os.setsid()
        for signum in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        log = os.open(
            os.path.join(trial_dir, supervisor.SUPERVISOR_LOG_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
        )
        # The server's reply pipe is fd 1: replacing it leaves the child no end of the server's pipes.
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(trial_dir)
        code = supervisor.run_guarded(trial_dir, named_fd)
    except BaseException:  # noqa: BLE001 - a forked child must never return into the server's loop
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _spawn(trial_dir: str) -> dict[str, object]:
    """Fork one supervisor; answer once its ``supervisor.json`` names it.

    The server writes that first record itself, from the child's pid and start
    time, instead of waiting for the child to set up and write it: the child's
    start-up then runs while the coordinator goes on. The child writes the file
    again (with its training) only after the byte that says this one is written.
    """
    if not os.path.isdir(trial_dir):
        return {"error": f"trial directory not found: {trial_dir}"}
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        return {"error": f"cannot fork a supervisor: {exc.strerror or exc}"}
    if pid == 0:
        os.close(write_fd)
        _child(trial_dir, read_fd)
    os.close(read_fd)
    try:
        record = {
            "supervisor_pid": pid,
            "supervisor_start_ticks": strays.start_ticks(pid),
            "trial_dir": trial_dir,
        }
        with contextlib.suppress(OSError):  # the child writes its own record soon after; it runs either way
            write_json_atomic(os.path.join(trial_dir, supervisor.SUPERVISOR_FILE), record, durable=False)
    finally:
        with contextlib.suppress(OSError):  # a child that already ended reads nothing
            os.write(write_fd, b"+")
        os.close(write_fd)
    return {"pid": pid}


def serve() -> int:
    """Answer requests on stdin until the coordinator closes it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, _reap)
    requests = os.fdopen(0, "rb", buffering=0)
    pending = b""
    while True:
        try:
            chunk = requests.read(65536)
        except InterruptedError:
            continue
        if not chunk:
            return 0
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            try:
                trial_dir = json.loads(line)
                answer = _spawn(trial_dir) if isinstance(trial_dir, str) else {"error": "not a path"}
            except ValueError as exc:
                answer = {"error": f"unreadable request: {exc}"}
            data = (json.dumps(answer) + "\n").encode()
            while data:
                try:
                    data = data[os.write(1, data):]
                except InterruptedError:
                    continue
        _reap()


class ForkServer:
    """The coordinator's end: starts the server on first use, asks it for supervisors.

    Thread-safe (the executor starts trials from several threads). When the
    server cannot be used (no ``fork``, no ``/proc`` or pidfds to watch a process
    that is not our child, ``FUSION_DD_FORKSERVER=0``, or the server died), :meth:`spawn`
    returns None and the caller starts the supervisor as its own interpreter.
    """

    def __init__(self, env: dict[str, str]) -> None:
        self._env = env
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._broken = not usable()

    def spawn(self, trial_dir: str) -> int | None:
        """The pid of a supervisor forked for ``trial_dir`` (its supervisor.json written), or None."""
        with self._lock:
            if self._broken:
                return None
            try:
                process = self._started()
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write((json.dumps(trial_dir) + "\n").encode())
                process.stdin.flush()
                answer = json.loads(process.stdout.readline() or b"null")
            except (OSError, ValueError):
                answer = None
            if not isinstance(answer, dict) or not isinstance(answer.get("pid"), int):
                # The server died or cannot fork: start interpreters from now on.
                self._broken = True
                self._stop()
                return None
            return answer["pid"]

    def prepare(self) -> None:
        """Start the server, if it can be used, without waiting for it (the first spawn then waits less)."""
        with self._lock:
            if self._broken:
                return
            try:
                self._started()
            except OSError:
                self._broken = True

    def close(self) -> None:
        """Let the server exit (the supervisors it forked run on)."""
        with self._lock:
            self._stop()

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            if self._process is not None:
                _close_pipes(self._process)  # a server that died: its pipes would stay open with us
            self._process = subprocess.Popen(
                [sys.executable, "-S", "-m", _MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self._env,
                cwd="/",
                # Ctrl-C on our terminal is ours to handle, not the server's.
                start_new_session=True,
                close_fds=True,
            )
        return self._process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        _close_pipes(process)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def _close_pipes(process: subprocess.Popen[bytes]) -> None:
    """Close our ends of a server's pipes: it sees the end of its requests and exits."""
    for stream in (process.stdin, process.stdout):
        with contextlib.suppress(OSError):
            if stream is not None:
                stream.close()


def usable() -> bool:
    """Can forked supervisors be watched and recognised here (fork, /proc, pidfds; not switched off)?"""
    if os.environ.get(DISABLE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if not hasattr(os, "fork") or not hasattr(os, "pidfd_open") or not os.path.isdir("/proc/self"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel before 5.3, or a sandbox that forbids it
        return False
    return True


if __name__ == "__main__":
    sys.exit(serve())
