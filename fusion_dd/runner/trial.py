"""One training of the user's network, run under a supervisor that outlives us.

A trial is one training on one configuration. Trainings take hours, so this
module never runs the training as its own child: it starts
:mod:`fusion_dd.runner.supervisor` in a new session, which owns the training, enforces
the timeout and writes ``status.json``. If fusion-dd dies (Ctrl-C, SIGKILL, a
lost SSH session), the training goes on, and :func:`adopt_trial` picks it up on
resume (docs/architecture.md 4.3).

The training is told where its files are in two ways, because frameworks differ
in what they can read: placeholders inside the command's argv elements, and
environment variables (see :data:`PLACEHOLDERS`).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import fusion_dd

from . import shell, strays
from ..core.errors import UsageError
from ..core.safe_read import SMALL_FILE_BYTES, loads_json, read_text
from .wakeup import CancelEvent, watch_exit

if TYPE_CHECKING:
    from .forkserver import ForkServer
from .supervisor import (
    LAUNCH_FILE,
    LOG_FILE,
    STATUS_FILE,
    SUPERVISOR_FILE,
    SUPERVISOR_LOG_FILE,
    write_json_atomic,
)

SWITCH_FILE = "fusion_switch.cfg"
#: The key of the search id and configuration digest in launch.json, supervisor.json and status.json.
BINDING_KEY = "binding"
METRICS_FILE = "metrics.jsonl"
#: Written by the coordinator *before* it kills a training that has already
#: failed (see :mod:`fusion_dd.runner.early_stop`), so that the reason survives a
#: coordinator crash between the decision and the collection of the result.
EARLY_STOP_FILE = "early_stop.json"

#: Placeholder name -> environment variable carrying the same value. The device
#: goes into the configured device variable instead (``TrialSpec.device_env``).
PLACEHOLDERS: Mapping[str, str | None] = {
    "switch_file": "FUSION_DD_SWITCH_FILE",
    "trial_dir": "FUSION_DD_TRIAL_DIR",
    "metrics_file": "FUSION_DD_METRICS_FILE",
    "device": None,
    "trial_id": "FUSION_DD_TRIAL_ID",
}
REPEAT_ENV = "FUSION_DD_REPEAT"
#: Placeholders of localization trainings only (``localize:`` in the config): the
#: trial's tensor-dump directory. Ordinary trainings must not dump (it is slow and
#: big), so ``train.*`` does not know it and no environment variable carries it.
DUMP_PLACEHOLDERS: Mapping[str, str] = {"dump_dir": "dump"}
_SUPERVISOR_MODULE = "fusion_dd.runner.supervisor"
# ``{{name}}`` (or ``{{name}``) is the escape for a literal ``{name}``; tried first.
_ESCAPED_OR_TOKEN = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}?|\{([A-Za-z_][A-Za-z0-9_]*)\}")


class StopRequest(Protocol):
    """What a ``wait`` monitor returns to stop a training early
    (:class:`fusion_dd.runner.early_stop.StopDecision` is one)."""

    @property
    def kind(self) -> str: ...

    @property
    def step(self) -> int | None: ...

    @property
    def reason(self) -> str: ...


def early_stop_record(decision: StopRequest, now: float, elapsed: float) -> dict[str, Any]:
    """What ``early_stop.json`` holds, and the finished record carries: the decision, when and
    how long into the training (``departed``, the first step outside the band, where known)."""
    record: dict[str, Any] = {"kind": decision.kind, "step": decision.step, "reason": decision.reason}
    departed = getattr(decision, "departed", None)
    if isinstance(departed, int):
        record["departed"] = departed
    return {**record, "time": now, "elapsed": round(elapsed, 3)}


@dataclass(frozen=True)
class TrialSpec:
    """Everything needed to run one training; placeholders still unresolved."""

    trial_id: str
    trial_dir: Path
    command: Sequence[str]
    workdir: str
    base_dir: Path
    env: Mapping[str, str]
    device: Sequence[str]
    device_env: str
    timeout: float | None
    repeat: int
    switch_text: str
    grace: float = 10.0
    # The compiler backend's environment defaults (CANN: ASCEND_WORK_PATH={trial_dir});
    # placeholders allowed; a value the user or the inherited environment set wins.
    env_defaults: Mapping[str, str] = field(default_factory=dict)
    # A localization training (``fusion_dd.report.localize``): ``{dump_dir}`` is
    # ``{trial_dir}/dump``, created before the training starts.
    dumps: bool = False
    # Which search and which configuration this trial is (trial_binding): written into the
    # trial directory before the training starts, checked before its outcome is ever taken.
    binding: Mapping[str, Any] = field(default_factory=dict)
    # The most output.log may hold (bytes, None: no cap): the supervisor keeps head and tail.
    log_limit: int | None = None

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError("the training command is empty")
        if self.repeat < 0:
            raise ValueError(f"repeat must be >= 0, got {self.repeat}")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout}")
        if self.grace < 0:
            raise ValueError(f"grace must be >= 0, got {self.grace}")


@dataclass(frozen=True)
class TrialRun:
    """How one training ended, as recorded by its supervisor.

    ``exit_code`` is set when the training exited, ``signal`` when a signal killed
    it; both are None when it never ran (then ``error`` says why, e.g.
    ``"command not found: xyz"``). ``start``/``end`` are wall-clock epoch seconds.

    ``early_stop`` is the content of ``early_stop.json`` when the coordinator
    stopped the training because it had already failed (NaN loss, divergence):
    ``kind``, ``step``, ``reason``, ``time``, ``elapsed``. Such a run is not
    ``cancelled``: its result counts.
    """

    trial_id: str
    trial_dir: Path
    exit_code: int | None
    signal: int | None
    timed_out: bool
    cancelled: bool
    duration: float
    start: float
    end: float
    log_path: Path
    metrics_path: Path
    error: str | None = None
    timeout: float | None = None
    early_stop: Mapping[str, Any] | None = None
    #: The status went into the space reserved for it because the disk was full: the
    #: training's own output may have lost writes too.
    disk_full: bool = False

    @property
    def succeeded(self) -> bool:
        """Exited 0 on its own (says nothing about the metric)."""
        return (
            self.exit_code == 0
            and self.error is None
            and not self.timed_out
            and not self.cancelled
            and self.early_stop is None
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types, for the journal."""
        return {
            "trial_id": self.trial_id,
            "trial_dir": str(self.trial_dir),
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "duration": self.duration,
            "start": self.start,
            "end": self.end,
            "log_path": str(self.log_path),
            "metrics_path": str(self.metrics_path),
            "error": self.error,
            "timeout": self.timeout,
            "early_stop": dict(self.early_stop) if self.early_stop is not None else None,
            "disk_full": self.disk_full,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TrialRun":
        return cls(
            trial_id=str(data["trial_id"]),
            trial_dir=Path(data["trial_dir"]),
            exit_code=data.get("exit_code"),
            signal=data.get("signal"),
            timed_out=bool(data.get("timed_out", False)),
            cancelled=bool(data.get("cancelled", False)),
            duration=float(data.get("duration", 0.0)),
            start=float(data.get("start", 0.0)),
            end=float(data.get("end", 0.0)),
            log_path=Path(data["log_path"]),
            metrics_path=Path(data["metrics_path"]),
            error=data.get("error"),
            timeout=data.get("timeout"),
            early_stop=data.get("early_stop"),
            disk_full=bool(data.get("disk_full", False)),
        )


def substitute(argv_element: str, values: Mapping[str, str]) -> str:
    """Replace every ``{name}`` whose name is in ``values``; ``{{name}}`` is a literal ``{name}``.

    Not ``str.format``: commands legitimately contain braces (JSON, shell
    ``${VAR}``, ``awk '{ print $1 }'``), which stay as they are; only a doubled
    brace around a name is unescaped (the config refuses an unknown ``{name}``
    and tells the user to write ``{{name}}``). Substituted values are not
    scanned again, so a path containing ``{device}`` stays literal.
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return "{" + match.group(1) + "}"
        return values.get(match.group(2), match.group(0))

    return _ESCAPED_OR_TOKEN.sub(replace, argv_element)


def unknown_placeholders(text: str, known: Sequence[str] = tuple(PLACEHOLDERS)) -> list[str]:
    """The ``{name}`` tokens in ``text`` that are no placeholder (``{{name}}`` and shell ``${name}`` excepted)."""
    found = []
    for match in _ESCAPED_OR_TOKEN.finditer(text):
        name = match.group(2)
        if name is not None and name not in known and not text[: match.start()].endswith("$"):
            found.append(name)
    return found


def looks_like_script(argument: str) -> bool:
    """A command argument that names a script file (``train.py``, ``run/train.sh``)."""
    return (
        argument.endswith((".py", ".sh"))
        and not argument.startswith("-")
        and not any(ch.isspace() for ch in argument)
        and "=" not in argument
    )


def resolve_relative(argv: Sequence[str], base_dir: Path) -> list[str]:
    """Relative paths of the program and of script arguments, made absolute beside the config.

    ``["python", "train.py"]`` with ``workdir: "{trial_dir}"`` must run the
    ``train.py`` beside fusion-dd.yaml, not look for one in the (empty) trial
    directory. A relative path is taken from the config file's directory when
    the file exists there; otherwise it is left for the workdir to resolve.
    A program without a ``/`` is a PATH lookup and stays as it is.
    """
    resolved = list(argv)
    for index, argument in enumerate(resolved):
        path_like = ("/" in argument) if index == 0 else looks_like_script(argument)
        if not path_like or os.path.isabs(argument) or argument.startswith("~"):
            continue
        candidate = _absolute(base_dir) / argument
        if candidate.is_file():
            resolved[index] = os.path.normpath(str(candidate))
    return resolved


def substitute_command(command: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """The training's argv with its placeholders replaced (what runs, and what ``--dry-run`` shows).

    Each element as :func:`substitute` does, except the script of a shell
    invocation (``bash -c "..."``), where each value is shell-quoted for where
    it stands, so that a path with a space or a ``$(...)`` stays one literal
    word (:mod:`fusion_dd.runner.shell`).
    """
    script = shell.script_index([str(part) for part in command])
    return [
        shell.substitute_script(str(part), values) if position == script else substitute(str(part), values)
        for position, part in enumerate(command)
    ]


def placeholder_values(spec: TrialSpec, trial_dir: Path | None = None) -> dict[str, str]:
    """The value of each placeholder for this trial (absolute paths)."""
    directory = trial_dir if trial_dir is not None else _absolute(spec.trial_dir)
    values = {
        "switch_file": str(directory / SWITCH_FILE),
        "trial_dir": str(directory),
        "metrics_file": str(directory / METRICS_FILE),
        "device": ",".join(str(d) for d in spec.device),
        "trial_id": spec.trial_id,
    }
    if spec.dumps:
        values.update({name: str(directory / sub) for name, sub in DUMP_PLACEHOLDERS.items()})
    return values


def resolve_launch(spec: TrialSpec, trial_dir: Path | None = None) -> dict[str, Any]:
    """argv, workdir and the complete environment the training will get.

    The user's extra env values may use placeholders too (``{trial_dir}/cache``).
    fusion-dd's own variables win over inherited and user values, since they
    are the contract; the compiler backend's defaults (CANN: ``ASCEND_WORK_PATH``
    = the trial directory, so that every trial gets its own compiler work
    directory) apply unless the user set the variable deliberately.
    """
    directory = trial_dir if trial_dir is not None else _absolute(spec.trial_dir)
    values = placeholder_values(spec, directory)
    argv = resolve_relative(substitute_command(spec.command, values), spec.base_dir)
    workdir = substitute(spec.workdir, values) if spec.workdir else ""
    workdir_path = Path(workdir).expanduser()
    if not workdir_path.is_absolute():
        workdir_path = _absolute(spec.base_dir) / workdir_path
    env = dict(os.environ)
    env.update({str(k): substitute(str(v), values) for k, v in spec.env.items()})
    for name, variable in PLACEHOLDERS.items():
        if variable is not None:
            env[variable] = values[name]
    env[REPEAT_ENV] = str(spec.repeat)
    if spec.device_env:
        env[spec.device_env] = values["device"]
    for name, value in spec.env_defaults.items():
        env.setdefault(str(name), substitute(str(value), values))
    return {
        "trial_id": spec.trial_id,
        "argv": argv,
        "workdir": os.path.normpath(str(workdir_path)),
        "env": env,
        "timeout": spec.timeout,
        "grace": spec.grace,
        BINDING_KEY: dict(spec.binding),
        "log_limit": spec.log_limit,
    }


def start_trial(spec: TrialSpec, forkserver: "ForkServer | None" = None) -> "RunningTrial":
    """Prepare the trial directory and start its supervisor; returns at once.

    Always starts afresh: files of an earlier attempt in the same directory
    (status, log, metrics) are replaced, so a stale metric can never be read as
    this run's. On resume, call :func:`adopt_trial` first. With a
    ``forkserver`` the supervisor is forked by it (no interpreter start; the
    trial is then watched like an adopted one, by pid and pidfd), else started
    as ``python -m fusion_dd.runner.supervisor``.
    """
    trial_dir = Path(spec.trial_dir)
    try:
        trial_dir.mkdir(parents=True)
        fresh = True
    except FileExistsError:
        fresh = False
    trial_dir = trial_dir.resolve()
    try:
        _prepare(spec, trial_dir, fresh)
    except OSError as exc:
        # A full or read-only disk: the file it could not write, with the errno's text.
        raise OSError(exc.errno, exc.strerror or str(exc), exc.filename or str(trial_dir)) from None
    pid = forkserver.spawn(str(trial_dir)) if forkserver is not None else None
    if pid is not None:
        return RunningTrial(spec.trial_id, trial_dir, pid=pid, process=None)
    with open(trial_dir / SUPERVISOR_LOG_FILE, "ab") as supervisor_log:
        process = subprocess.Popen(
            # -S: no site-packages scan (fusion_dd comes from PYTHONPATH, the supervisor needs
            # only the standard library): it starts once per training and must start fast.
            [sys.executable, "-S", "-m", _SUPERVISOR_MODULE, str(trial_dir)],
            cwd=trial_dir,
            env=supervisor_env(),
            stdin=subprocess.DEVNULL,
            # Never our stdout: if we die, a write to a dead pipe would kill it.
            stdout=supervisor_log,
            stderr=subprocess.STDOUT,
            # Own session: Ctrl-C on our terminal must not reach the training;
            # we cancel it explicitly, and it must survive our death.
            start_new_session=True,
            close_fds=True,
        )
    return RunningTrial(spec.trial_id, trial_dir, pid=process.pid, process=process)


def _prepare(spec: TrialSpec, trial_dir: Path, fresh: bool) -> None:
    """The trial directory's files before its supervisor starts: switch file, empty log, launch record."""
    if not fresh:
        # An earlier attempt's files; a new directory has none. (Creating a file costs about
        # a millisecond on some disks, on every training's way to its start: the metrics
        # file, which the training appends to, is emptied only when it is there.)
        for stale in (STATUS_FILE, SUPERVISOR_FILE, EARLY_STOP_FILE):
            with contextlib.suppress(FileNotFoundError):
                (trial_dir / stale).unlink()
        if (trial_dir / METRICS_FILE).exists():
            _write_file(trial_dir / METRICS_FILE, b"")
    _write_file(trial_dir / SWITCH_FILE, spec.switch_text.encode("utf-8"))
    _write_file(trial_dir / LOG_FILE, b"")  # there from the start, for whoever follows it
    if spec.dumps:
        for sub in DUMP_PLACEHOLDERS.values():
            (trial_dir / sub).mkdir(exist_ok=True)
    # 0600: the launch record holds the complete environment, secrets included. Not
    # fsynced: after a crash of the machine the trial starts again and writes it anew.
    write_json_atomic(trial_dir / LAUNCH_FILE, resolve_launch(spec, trial_dir), mode=0o600, durable=False)


def _write_file(path: Path, data: bytes) -> None:
    """Write a whole file; an error names it (a failing close, as on a full disk, names none by itself)."""
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None


def trial_binding(
    search_id: str | None, trial_id: str, enabled: Iterable[str], repeat: int, role: str
) -> dict[str, Any]:
    """What ties a trial directory to its journal: the search's id and the trial's configuration digest.

    The digest covers what the journal says the trial is (its id, the switched-on
    candidates, the repeat, the role), not the rendered switch file, so that the
    same journal gives the same digest in every version of fusion-dd.
    """
    described = json.dumps([trial_id, sorted(enabled), repeat, role], separators=(",", ":"))
    return {"search_id": search_id, "config_digest": hashlib.sha256(described.encode("utf-8")).hexdigest()[:32]}


class ForeignTrial(Exception):
    """A trial directory holds another search's or another configuration's training: set aside, never adopted."""

    def __init__(self, trial_id: str, trial_dir: Path, moved_to: Path | None, problem: str) -> None:
        where = f"moved aside to {moved_to.name}" if moved_to is not None else "left where it is (it could not be moved)"
        super().__init__(f"trial {trial_id}: {trial_dir} {problem}; {where}, and the trial is trained again")
        self.trial_id = trial_id
        self.trial_dir = trial_dir
        self.moved_to = moved_to
        self.problem = problem


def binding_problem(trial_dir: Path, expected: Mapping[str, Any]) -> str | None:
    """Why ``trial_dir`` is not the trial ``expected`` describes (None: it is).

    Every record in the directory that carries a binding (the launch record the
    coordinator wrote, the supervisor's record and status, which copy it) must
    carry exactly this one. A directory without any binding was written by a
    fusion-dd before bindings: it is taken only for a search that has no id
    either (a journal of that same older version). A directory without any of
    these records holds nothing that could be taken as an outcome.
    """
    found = records = False
    for name in (STATUS_FILE, SUPERVISOR_FILE, LAUNCH_FILE):
        record = _read_json(trial_dir / name)
        records = records or record is not None or (trial_dir / name).exists()
        if record is None or BINDING_KEY not in record:
            continue
        found = True
        binding = record.get(BINDING_KEY)
        if not isinstance(binding, dict):
            return f"has an unreadable binding in {name}"
        if binding.get("search_id") != expected.get("search_id"):
            return (
                f"belongs to search {binding.get('search_id')} ({name}), not to this journal's search "
                f"{expected.get('search_id')}"
            )
        if binding.get("config_digest") != expected.get("config_digest"):
            return f"holds another configuration than the journal's for this trial ({name})"
    if records and not found and expected.get("search_id") is not None:
        return f"names no search (no binding in {LAUNCH_FILE}, {SUPERVISOR_FILE} or {STATUS_FILE})"
    return None


def set_aside(trial_dir: Path) -> Path | None:
    """Rename a foreign trial directory to the first free ``NAME.foreign``, ``NAME.foreign.2``, ...; None if it cannot."""
    for number in itertools.count(1):
        target = trial_dir.with_name(f"{trial_dir.name}.foreign" + (f".{number}" if number > 1 else ""))
        if os.path.lexists(target):
            continue
        try:
            os.rename(trial_dir, target)
        except OSError:
            return None
        return target
    raise AssertionError("unreachable")  # pragma: no cover


def adopt_trial(
    trial_dir: str | os.PathLike[str], binding: Mapping[str, Any] | None = None
) -> "RunningTrial | None":
    """Reattach to a trial started by an earlier coordinator, if it can still count.

    Finished (status.json exists): a handle whose ``wait`` returns at once.
    Still supervised: a handle that waits for it. Otherwise the training never
    finished and must run again; any orphaned training processes of this trial
    are killed first so that they do not keep holding the device.

    ``binding`` (:func:`trial_binding`): the directory must be this trial's, or it
    is set aside and :class:`ForeignTrial` raised; nothing in it is read as the
    trial's outcome, and no process of it is killed (they are not ours).
    """
    directory = Path(trial_dir)
    if not directory.is_dir():
        return None
    directory = directory.resolve()
    if binding:
        problem = binding_problem(directory, binding)
        if problem is not None:
            raise ForeignTrial(_trial_id_of(directory), directory, set_aside(directory), problem)
    trial_id = _trial_id_of(directory)
    if (directory / STATUS_FILE).exists():
        return RunningTrial(trial_id, directory, pid=None, process=None)
    record = _read_json(directory / SUPERVISOR_FILE) or {}
    pid = record.get("supervisor_pid")
    if not (isinstance(pid, int) and _is_our_supervisor(pid, directory)):
        # supervisor.json may not exist yet if we died right after the launch.
        pid = _find_supervisor(directory)
    if pid is not None:
        return RunningTrial(trial_id, directory, pid=pid, process=None)
    if (directory / STATUS_FILE).exists():  # finished while we looked
        return RunningTrial(trial_id, directory, pid=None, process=None)
    _kill_strays(directory)
    return None


def supervisor_started(trial_dir: str | os.PathLike[str]) -> bool:
    """Did a supervisor ever run for this trial? (It writes supervisor.json first thing.)

    For a trial whose journal has no ``trial_launched`` record, this tells a
    training that ran (and costs budget) from one whose coordinator died
    before the supervisor started (which costs nothing).
    """
    directory = Path(trial_dir)
    return (directory / SUPERVISOR_FILE).exists() or (directory / STATUS_FILE).exists()


def supervised_state(trial_dir: str | os.PathLike[str]) -> tuple[str, dict[str, Any] | None]:
    """What a trial's own files say, without the journal: for ``fusion-dd status``.

    ``("ended", status)`` once the supervisor wrote ``status.json`` (also after
    the coordinator died: the supervisor outlives it); ``("running", None)``
    while its supervisor lives; ``("gone", None)`` otherwise. Read-only: unlike
    :func:`adopt_trial` it kills nothing.
    """
    directory = Path(trial_dir)
    status = _read_json(directory / STATUS_FILE)
    if status is not None:
        return "ended", status
    if directory.is_dir():
        directory = directory.resolve()
        pid = (_read_json(directory / SUPERVISOR_FILE) or {}).get("supervisor_pid")
        if isinstance(pid, int) and _is_our_supervisor(pid, directory):
            return "running", None
        status = _read_json(directory / STATUS_FILE)  # it may have ended while we looked
        if status is not None:
            return "ended", status
    return "gone", None


class RunningTrial:
    """Handle on a supervised training: poll it, wait for it, cancel it.

    Either our own child (``process`` set, reaped by us) or adopted from an
    earlier coordinator (only the pid, re-checked each time against pid reuse).
    """

    def __init__(
        self,
        trial_id: str,
        trial_dir: Path,
        pid: int | None,
        process: subprocess.Popen[bytes] | None,
    ) -> None:
        self.trial_id = trial_id
        self.trial_dir = trial_dir
        self.pid = pid
        self._process = process
        self._cancel_sent = False
        self._result: TrialRun | None = None
        self._created = time.time()
        #: Set when the early-stop monitor raised; the trial then runs on unwatched.
        self.monitor_error: str | None = None

    def poll(self) -> TrialRun | None:
        """The result if the trial has ended, else None; never blocks for long."""
        if self._result is not None:
            return self._result
        result = self._read_status()
        if result is None and not self._supervisor_alive():
            result = self._read_status()  # it may have finished just now
            if result is None:
                result = self._lost()
        if result is not None:
            self._reap()
            self._result = result
        return result

    def wait(
        self,
        cancel: threading.Event | None = None,
        poll: float = 0.2,
        monitor: Callable[[], StopRequest | None] | None = None,
    ) -> TrialRun:
        """Block until the trial ends; when ``cancel`` is set, cancel it and keep waiting.

        ``monitor`` is called every poll while the training runs; when it
        returns a decision, the training is stopped early (:meth:`stop_early`).
        A stop that an earlier coordinator decided but could not finish
        (``early_stop.json`` present, training still running) is finished first.

        After cancelling, the wait lasts until the supervisor has killed the
        training's process group (at most its grace period), so the device is
        free when this returns.
        """
        if not self._cancel_sent and (self.trial_dir / EARLY_STOP_FILE).exists():
            if self.poll() is None:
                self.cancel()
        # Woken by the supervisor's exit or a cancellation, not by the poll (fusion_dd.runner.wakeup).
        wake = threading.Event()
        watched = self.poll() is None and watch_exit(self._process, self.pid, wake)
        if watched and isinstance(cancel, CancelEvent):
            cancel.also_wake(wake)
        try:
            return self._wait(cancel, poll, monitor, wake if watched else None)
        finally:
            if isinstance(cancel, CancelEvent):
                cancel.forget(wake)

    def _wait(
        self,
        cancel: threading.Event | None,
        poll: float,
        monitor: Callable[[], StopRequest | None] | None,
        wake: threading.Event | None,
    ) -> TrialRun:
        while True:
            if wake is not None:
                wake.clear()  # before looking: a wake-up from now on is not lost
            result = self.poll()
            if result is not None:
                return result
            if not self._cancel_sent:
                if monitor is not None and self.monitor_error is None:
                    decision = self._ask(monitor)
                    if decision is not None and self.stop_early(decision):
                        continue
                if cancel is not None and cancel.is_set():
                    self.cancel()
                    continue
            if wake is not None and (cancel is None or isinstance(cancel, CancelEvent) or self._cancel_sent):
                wake.wait(poll)
            elif cancel is not None and not self._cancel_sent:
                cancel.wait(poll)
            else:
                time.sleep(poll)

    def stop_early(self, decision: StopRequest) -> bool:
        """Record why the training has already failed, then stop it like a cancellation.

        ``early_stop.json`` is written (atomically) *before* the SIGTERM: if we
        die in between, a resumed coordinator finishes the stop, and a run
        collected later is still classified by the decision. Returns False when
        the trial had ended or was being cancelled already.
        """
        if self._result is not None or self._cancel_sent or not self._supervisor_alive():
            return False
        now = time.time()
        record = _read_json(self.trial_dir / SUPERVISOR_FILE) or {}
        started = record.get("start")
        elapsed = now - float(started) if isinstance(started, (int, float)) else now - self._created
        write_json_atomic(self.trial_dir / EARLY_STOP_FILE, early_stop_record(decision, now, max(elapsed, 0.0)))
        self.cancel()
        return True

    def _ask(self, monitor: Callable[[], StopRequest | None]) -> StopRequest | None:
        """The monitor's decision; a monitor that fails is switched off, never fatal.

        Losing early stopping costs device time; losing the training (or the
        search) to a bug in a log reader would cost far more.
        """
        try:
            return monitor()
        except Exception as exc:  # noqa: BLE001 - any failure of the monitor
            self.monitor_error = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"trial {self.trial_id}: early-stop monitor failed, watching no more: "
                f"{self.monitor_error}",
                RuntimeWarning,
                stacklevel=2,
            )
            return None

    def cancel(self) -> None:
        """Ask the supervisor to kill the training (SIGTERM, grace, SIGKILL); do not wait."""
        if self._result is not None or self.pid is None:
            return
        if self._process is not None:
            if self._process.poll() is not None:
                return
        elif not _is_our_supervisor(self.pid, self.trial_dir):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        self._cancel_sent = True

    def _supervisor_alive(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self.pid is not None and _is_our_supervisor(self.pid, self.trial_dir)

    def _reap(self) -> None:
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=10)

    def _paths(self) -> dict[str, Path]:
        return {
            "log_path": self.trial_dir / LOG_FILE,
            "metrics_path": self.trial_dir / METRICS_FILE,
        }

    def _early_stop(self, cancelled: bool) -> dict[str, Any] | None:
        """The early-stop record, if this run was really ended by it.

        Only a run that the supervisor reports as cancelled was stopped by us; a
        training that finished on its own just before our SIGTERM landed keeps
        its own, complete result even though early_stop.json exists.
        """
        if not cancelled:
            return None
        return _read_json(self.trial_dir / EARLY_STOP_FILE)

    def _read_status(self) -> TrialRun | None:
        status = _read_json(self.trial_dir / STATUS_FILE)
        if status is None:
            return None
        launch = _read_json(self.trial_dir / LAUNCH_FILE) or {}
        cancelled = bool(status.get("cancelled", False))
        early_stop = self._early_stop(cancelled)
        return TrialRun(
            trial_id=self.trial_id,
            trial_dir=self.trial_dir,
            exit_code=status.get("exit_code"),
            signal=status.get("signal"),
            timed_out=bool(status.get("timed_out", False)),
            cancelled=cancelled and early_stop is None,
            early_stop=early_stop,
            duration=float(status.get("duration", 0.0)),
            start=float(status.get("start", 0.0)),
            end=float(status.get("end", 0.0)),
            error=status.get("error"),
            timeout=status.get("timeout", launch.get("timeout")),
            disk_full=bool(status.get("disk_full", False)),
            **self._paths(),
        )

    def _lost(self) -> TrialRun:
        """The supervisor died without a status (e.g. SIGKILL, OOM killer)."""
        _kill_strays(self.trial_dir)
        record = _read_json(self.trial_dir / SUPERVISOR_FILE) or {}
        now = time.time()
        start = float(record.get("start", now))
        code = self._process.returncode if self._process is not None else None
        how = f" (exit status {code})" if code is not None else ""
        early_stop = self._early_stop(self._cancel_sent)
        return TrialRun(
            trial_id=self.trial_id,
            trial_dir=self.trial_dir,
            exit_code=None,
            signal=None,
            timed_out=False,
            cancelled=self._cancel_sent and early_stop is None,
            early_stop=early_stop,
            duration=max(now - start, 0.0),
            start=start,
            end=now,
            error=f"supervisor died without a status{how}; see {SUPERVISOR_LOG_FILE}",
            timeout=(_read_json(self.trial_dir / LAUNCH_FILE) or {}).get("timeout"),
            **self._paths(),
        )

    def __repr__(self) -> str:
        return f"RunningTrial({self.trial_id!r}, pid={self.pid})"


# --- helpers -----------------------------------------------------------------


def _absolute(path: Path | str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(str(path))))


def supervisor_env() -> dict[str, str]:
    """Our environment, plus whatever makes ``fusion_dd`` importable in a fresh python."""
    env = dict(os.environ)
    package_root = str(Path(fusion_dd.__file__).resolve().parent.parent)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = package_root + (os.pathsep + existing if existing else "")
    return env


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from a file written atomically; None when absent or unreadable.

    The training runs in its trial dir and can replace these files with anything
    (a FIFO, a huge or deeply nested file): read them like any artifact.
    """
    try:
        data = loads_json(read_text(path, path.name, SMALL_FILE_BYTES), str(path), path.name)
    except (UsageError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _trial_id_of(trial_dir: Path) -> str:
    launch = _read_json(trial_dir / LAUNCH_FILE) or {}
    trial_id = launch.get("trial_id")
    return str(trial_id) if trial_id is not None else trial_dir.name


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0") if part]


def _is_our_supervisor(pid: int, trial_dir: Path) -> bool:
    """Is ``pid`` alive AND the supervisor of this trial (not a reused pid)?

    A started supervisor names its trial on its command line; a forked one
    (:mod:`fusion_dd.runner.forkserver`) is the process that ``supervisor.json``
    names by pid and start time. A zombie counts as dead either way (empty
    command line, no start time), which is right: it can no longer write a status.
    """
    if pid <= 0:
        return False
    if not Path("/proc/self/cmdline").exists():  # no procfs: trust the pid
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    argv = _cmdline(pid)
    if argv and _SUPERVISOR_MODULE in argv and str(trial_dir) in argv:
        return True
    record = _read_json(trial_dir / SUPERVISOR_FILE) or {}
    ticks = record.get("supervisor_start_ticks")
    return (
        record.get("supervisor_pid") == pid
        and isinstance(ticks, int)
        and strays.start_ticks(pid) == ticks
    )


def _find_supervisor(trial_dir: Path) -> int | None:
    for pid in strays.live_pids():
        if pid != os.getpid() and _is_our_supervisor(pid, trial_dir):
            return pid
    return None


def _kill_strays(trial_dir: Path) -> int:
    """SIGKILL processes left from a trial whose supervisor died; returns how many.

    They are recognised by ``FUSION_DD_TRIAL_DIR`` in their initial environment,
    which every process of the training inherits (``setsid`` daemons too), so a
    reused pid is never hit. Without the supervisor there is no ancestry to
    follow: its orphans were re-parented away (see :mod:`fusion_dd.runner.strays`).
    """
    launch_env = (_read_json(trial_dir / LAUNCH_FILE) or {}).get("env")
    marker = launch_env.get(strays.TRIAL_DIR_ENV) if isinstance(launch_env, dict) else None
    return strays.kill_now(str(marker) if marker else str(trial_dir))


__all__ = [
    "BINDING_KEY",
    "DUMP_PLACEHOLDERS",
    "ForeignTrial",
    "EARLY_STOP_FILE",
    "early_stop_record",
    "PLACEHOLDERS",
    "RunningTrial",
    "StopRequest",
    "TrialRun",
    "TrialSpec",
    "adopt_trial",
    "binding_problem",
    "placeholder_values",
    "resolve_launch",
    "resolve_relative",
    "start_trial",
    "substitute",
    "set_aside",
    "substitute_command",
    "supervised_state",
    "supervisor_started",
    "trial_binding",
    "unknown_placeholders",
]
