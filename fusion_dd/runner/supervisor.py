"""The tiny process that owns one training, so that no finished training is lost.

fusion-dd (the coordinator) starts ``python -m fusion_dd.runner.supervisor TRIAL_DIR`` in
a session of its own, or, on this machine, has its fork server fork one
(:mod:`fusion_dd.runner.forkserver`: same code, without an interpreter's start per training). The supervisor, not the coordinator, is the training's
parent: if the coordinator is killed (even with SIGKILL) the supervisor keeps
going, enforces the timeout, and records how the training ended in
``status.json``; a resumed coordinator adopts it by the pid in
``supervisor.json`` (DESIGN.md 4.3, 4.4).

Files in TRIAL_DIR (all JSON files are written atomically: temp file, fsync,
``os.replace``, so a reader never sees half a file):

* ``launch.json`` (input, written by :mod:`fusion_dd.runner.trial`): ``argv`` (already
  resolved), ``workdir``, ``env`` (the complete environment), ``timeout``
  (seconds or null), ``grace`` (seconds between SIGTERM and SIGKILL),
  ``trial_id``, ``binding`` (the search id and configuration digest, copied
  into ``supervisor.json`` and ``status.json``).
* ``supervisor.json``: the supervisor's pid and start time (clock ticks since
  boot: with the pid it names the process for the host's uptime), then also the
  training's pid/pgid and its start time.
* ``output.log``: the training's stdout and stderr, combined; past ``log_limit``
  bytes (launch.json) its head and latest tail are kept, the cut marked (:class:`_LogCap`).
* ``status.json``: ``exit_code`` or ``signal``, ``timed_out``, ``cancelled``,
  ``start``, ``end``, ``duration``, ``error`` (why the training could not run).
* ``supervisor.log``: the supervisor's own stdout/stderr (normally empty).
* ``.status.reserve``: space taken for the status while the training runs, so
  that a full disk at its end cannot lose it (then the status says ``disk_full``).

This module imports nothing heavy: it runs once per training and must start fast.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

from . import strays
from ..store.atomic import write_json_atomic

# No pathlib, no typing: they cost a tenth of the supervisor's start-up, paid once per training.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from os import PathLike
    from typing import Any

LAUNCH_FILE = "launch.json"
SUPERVISOR_FILE = "supervisor.json"
STATUS_FILE = "status.json"
LOG_FILE = "output.log"
SUPERVISOR_LOG_FILE = "supervisor.log"
#: Space for the status, taken before the training starts: when the disk is full at its end,
#: the status is written into these bytes (already allocated) instead of a new file.
STATUS_RESERVE_FILE = ".status.reserve"
_RESERVE_BYTES = 16 * 1024

#: How often the supervisor looks at its training; short enough that a
#: cancellation or a timeout is acted on promptly, long enough to cost nothing.
_POLL_SECONDS = 0.05
_PR_SET_CHILD_SUBREAPER = 36


class _Stop:
    """Why the supervisor is ending the training early (set from signal handlers)."""

    def __init__(self) -> None:
        self.cancelled = False

    def on_signal(self, signum: int, frame: object) -> None:
        self.cancelled = True


def _become_subreaper() -> None:
    """Adopt the training's orphaned grandchildren so they can be reaped.

    Without this, a grandchild whose parent exited is re-parented to PID 1, and
    in containers PID 1 often never reaps: the zombie keeps the process group
    "alive" for ``killpg`` and the supervisor would wait out the whole grace
    period. Linux only; elsewhere the supervisor still works, just less tidily.
    """
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class _Children:
    """Reaps every child and remembers the training's own wait status.

    The supervisor reaps with ``waitpid(-1)`` (it is a subreaper), so it cannot
    let ``Popen.wait`` reap the training: whoever reaps first gets the status.
    """

    def __init__(self, training_pid: int) -> None:
        self.training_pid = training_pid
        self.training_status: int | None = None
        self.training_end: float | None = None

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.training_pid:
                self.training_status = status
                self.training_end = time.time()

    @property
    def training_done(self) -> bool:
        return self.training_status is not None


class _Wakeup:
    """Sleep until a signal arrives (SIGCHLD: a child ended; SIGTERM/SIGINT: cancel) or a timeout.

    ``signal.set_wakeup_fd`` makes every signal write a byte to a pipe, so a
    ``poll`` on it wakes for the signals whose Python handlers are installed,
    also one that arrived just before the ``poll``: no polling interval
    between a training's end and its status. Without it (not the main thread)
    the sleep falls back to ``_POLL_SECONDS``.
    """

    #: The longest sleep: a safety net against a lost wake-up, not the way an end is noticed.
    LONGEST = 1.0

    def __init__(self) -> None:
        self._read: int | None = None
        self._poller: Any = None
        try:
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.set_blocking(write, False)
            signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        except (OSError, ValueError):
            return
        self._read = read
        self._poller = select.poll()
        self._poller.register(read, select.POLLIN)

    def sleep(self, timeout: float | None) -> None:
        if self._read is None:
            time.sleep(_POLL_SECONDS)
            return
        limit = self.LONGEST if timeout is None else max(0.0, min(timeout, self.LONGEST))
        self._poller.poll(int(limit * 1000) + 1)
        with contextlib.suppress(OSError):
            while os.read(self._read, 512):
                pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end_training(pgid: int, children: _Children, grace: float, trial_marker: str) -> None:
    """Stop everything of the training that is still running: SIGTERM, ``grace`` seconds, SIGKILL.

    The whole process group, because trainings start data loaders and
    per-device workers that would otherwise keep holding the accelerator; and
    the strays that left the group (``setsid`` daemons), found by ancestry and by
    the trial's environment marker (:mod:`fusion_dd.runner.strays`). Also after a
    normal exit, so nothing of a trial outlives it. Returns at once when
    nothing is left.
    """

    def training_gone() -> bool:
        children.reap()
        return children.training_done and not _group_alive(pgid)

    if training_gone():
        # Reaped, group empty: usually nothing is left, which the children lists say cheaply.
        if strays.has_children(os.getpid()) is False or not strays.find(trial_marker, root=os.getpid(), outside=pgid):
            return
    strays.terminate(
        trial_marker,
        root=os.getpid(),
        grace=grace,
        pgid=pgid,
        also_done=training_gone,
        on_poll=children.reap,
    )


def _start_error(exc: OSError, argv: list[str], workdir: str) -> str:
    """A one-line reason that tells the user what to fix."""
    program = argv[0] if argv else ""
    if not os.path.isdir(workdir):
        return f"working directory not found: {workdir}"
    if isinstance(exc, FileNotFoundError):
        if os.sep in program and os.path.isfile(os.path.join(workdir, program)):
            return f"cannot execute {program}: the interpreter in its #! line was not found"
        return f"command not found: {program}"
    if isinstance(exc, PermissionError):
        return f"permission denied: {program} (is it executable?)"
    return f"cannot start {program}: {exc.strerror or exc}"


def run(trial_dir: str | PathLike[str], named_fd: int | None = None) -> int:
    """Run the training described by ``trial_dir/launch.json``; always try to leave a status.

    ``named_fd``: a forked supervisor's pipe from the fork server, which writes the
    first ``supervisor.json`` itself (so that it can answer the coordinator at once)
    and then sends a byte: this supervisor writes that file only after the byte.
    """
    trial_dir = os.fspath(trial_dir)
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop.on_signal)
    signal.signal(signal.SIGINT, stop.on_signal)
    # The coordinator's terminal going away is not a reason to lose a training.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # Woken at once by the training's end (SIGCHLD) and by SIGTERM/SIGINT, not by a poll.
    wakeup = _Wakeup()
    _become_subreaper()

    # The pid with its start time names this process even after the pid is reused.
    record: dict[str, Any] = {
        "supervisor_pid": os.getpid(),
        "supervisor_start_ticks": strays.start_ticks(os.getpid()),
        "trial_dir": str(trial_dir),
    }
    if named_fd is None:
        write_json_atomic(os.path.join(trial_dir, SUPERVISOR_FILE), record, durable=False)

    start = time.time()
    status: dict[str, Any] = {
        "trial_id": None,
        "exit_code": None,
        "signal": None,
        "timed_out": False,
        "cancelled": False,
        "timeout": None,
        "start": start,
        "end": start,
        "duration": 0.0,
        "error": None,
    }
    try:
        with open(os.path.join(trial_dir, LAUNCH_FILE), encoding="utf-8") as handle:
            launch = json.loads(handle.read())
        argv = [str(part) for part in launch["argv"]]
        workdir = str(launch["workdir"])
        env = {str(k): str(v) for k, v in launch["env"].items()}
        timeout = launch.get("timeout")
        timeout = float(timeout) if timeout is not None else None
        grace = float(launch.get("grace", 10.0))
        log_limit = launch.get("log_limit")
        log_cap = _LogCap(os.path.join(trial_dir, LOG_FILE), int(log_limit)) if log_limit else None
        status["trial_id"] = launch.get("trial_id")
        status["timeout"] = timeout
        if isinstance(launch.get("binding"), dict):
            # The search and configuration this training is, in every record it leaves:
            # a resumed coordinator takes nothing from a directory that is not its trial's.
            record["binding"] = status["binding"] = launch["binding"]
        if not argv:
            raise ValueError("the command is empty")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        status["error"] = f"unreadable {LAUNCH_FILE}: {exc}"
        _write_status(trial_dir, status)
        return 0

    if stop.cancelled:  # cancelled while starting up: do not start the training
        status.update(cancelled=True, end=time.time())
        _write_status(trial_dir, status)
        return 0

    _reserve_status(trial_dir)
    with open(os.path.join(trial_dir, LOG_FILE), "ab") as log:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            end = time.time()
            status.update(error=_start_error(exc, argv, workdir), end=end, duration=end - start)
            _write_status(trial_dir, status)
            return 0

    started = time.time()
    status["start"] = started
    pgid = proc.pid  # start_new_session makes the training its own group leader
    record.update(training_pid=proc.pid, training_pgid=pgid, start=started)
    if named_fd is not None:
        _wait_for_byte(named_fd)  # the fork server's record first, never after ours
    # Best effort: on a full disk the first record (the supervisor's pid) names us still, and a
    # supervisor that died here would leave its training running unsupervised.
    with contextlib.suppress(OSError):
        write_json_atomic(os.path.join(trial_dir, SUPERVISOR_FILE), record, durable=False)

    children = _Children(proc.pid)
    clock = time.monotonic()  # immune to wall-clock jumps during long trainings
    deadline = clock + timeout if timeout is not None else None
    while True:
        children.reap()
        if children.training_done:
            break
        if stop.cancelled:
            status["cancelled"] = True
            break
        if deadline is not None and time.monotonic() >= deadline:
            status["timed_out"] = True
            break
        if log_cap is not None:
            log_cap.check()
        wakeup.sleep(None if deadline is None else deadline - time.monotonic())

    # Also after a normal exit: leftovers would hold the device.
    _end_training(pgid, children, grace, env.get(strays.TRIAL_DIR_ENV, str(trial_dir)))
    children.reap()
    proc.returncode = 0  # reaped by us; keeps Popen from reaping or warning later

    if log_cap is not None:
        log_cap.check()
    # The training's own end, not the cleanup of leftovers after it.
    end = children.training_end or time.time()
    if children.training_status is not None:
        code = os.waitstatus_to_exitcode(children.training_status)
        if code < 0:
            status["signal"] = -code
        else:
            status["exit_code"] = code
    else:
        status["error"] = "the training could not be killed (still running)"
    status.update(end=end, duration=end - started)
    _write_status(trial_dir, status)
    return 0


class _LogCap:
    """Keeps ``output.log`` under ``limit`` bytes: its head, a line that marks the cut, and its latest tail.

    The training writes the log itself (through a descriptor opened for appending),
    so the supervisor looks at its size whenever it wakes (at least once a second)
    and, past the limit, keeps the first half and the latest quarter: it copies
    that tail, truncates the file after the head, and appends the mark and the
    tail. The training's next writes append after them. The log may run over the
    limit by what the training prints between two looks, and a write landing in
    the instant of a cut may be lost or come before the mark.
    """

    def __init__(self, path: str, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.head = limit // 2
        self.keep = limit // 4
        self.left_out = 0
        self.kept_to = self.head  # where the output not yet cut begins (after the head and a mark)

    def check(self) -> None:
        try:
            size = os.stat(self.path).st_size
            if size <= self.limit:
                return
            with open(self.path, "rb") as handle:
                handle.seek(size - self.keep)
                tail = handle.read(self.keep)
            self.left_out += size - self.keep - self.kept_to  # after the head and the last cut's mark
            os.truncate(self.path, self.head)
            mark = (
                f"\n[fusion-dd: {self.left_out} bytes of output cut here to keep output.log under "
                f"train.log_limit ({self.limit} bytes); the start and the latest output are kept]\n"
            ).encode("utf-8")
            with open(self.path, "ab") as handle:
                handle.write(mark + tail)
            self.kept_to = self.head + len(mark)
        except OSError:
            pass  # a log that stays long costs disk space, never the training


def _reserve_status(trial_dir: str) -> None:
    """Take the space of a status before the training runs (see :func:`_write_status`); best effort."""
    with contextlib.suppress(OSError):
        fd = os.open(os.path.join(trial_dir, STATUS_RESERVE_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b" " * _RESERVE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_status(trial_dir: str, status: dict[str, Any]) -> None:
    """``status.json``, atomically; on a full disk, into the space reserved before the training.

    A training that ran for hours and then found the disk full must not be
    counted as lost for want of a few hundred bytes: its status (exit code,
    times) is what lets a resumed coordinator take its result instead of
    training it again. Overwriting bytes a file already holds needs no new
    space; the rename then makes it the status, whole. Such a status says
    ``disk_full``, since the training's own output may have lost writes too.
    """
    path = os.path.join(trial_dir, STATUS_FILE)
    reserve = os.path.join(trial_dir, STATUS_RESERVE_FILE)
    try:
        write_json_atomic(path, status)
    except OSError:
        data = (json.dumps({**status, "disk_full": True}, indent=2, sort_keys=True) + "\n").encode("utf-8")
        if not os.path.exists(reserve) or len(data) > _RESERVE_BYTES:
            raise
        fd = os.open(reserve, os.O_WRONLY)
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(reserve, path)
        return
    with contextlib.suppress(OSError):
        os.unlink(reserve)


def _wait_for_byte(fd: int) -> None:
    """Block until the pipe gives a byte or is closed, then close it."""
    with contextlib.suppress(OSError):
        os.read(fd, 1)
    with contextlib.suppress(OSError):
        os.close(fd)


def run_guarded(trial_dir: str, named_fd: int | None = None) -> int:
    """:func:`run`, and when it fails, a status that says so before the exception goes on.

    A status that says what went wrong beats a trial that looks like it is
    still running. The traceback goes to supervisor.log (our stderr).
    """
    try:
        return run(trial_dir, named_fd)
    except Exception as exc:
        if not os.path.exists(os.path.join(trial_dir, STATUS_FILE)):
            now = time.time()
            with contextlib.suppress(Exception):
                write_json_atomic(
                    os.path.join(trial_dir, STATUS_FILE),
                    {"exit_code": None, "signal": None, "timed_out": False,
                     "cancelled": False, "start": now, "end": now, "duration": 0.0,
                     "error": f"supervisor failed: {exc!r}"},
                )
        raise


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fusion_dd.runner.supervisor TRIAL_DIR", file=sys.stderr)
        return 2
    return run_guarded(os.path.realpath(args[0]))


if __name__ == "__main__":
    sys.exit(main())
