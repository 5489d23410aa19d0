"""What every cluster launcher needs around a training, whatever runs the task.

A cluster launcher (dask, Slurm, a third party's) runs a trial somewhere else,
on a state directory every host shares. The pieces here do not depend on which
engine placed the task:

* **Claim** (``claim.json``, created by ``link``, so complete or absent): a task
  claims its trial before it trains; a second task for the same trial finds the
  claim and refuses, because a training must never run twice in one trial
  directory (a scheduler's re-run after a lost worker, a job submitted twice).
* **Cancel request** (``cancel.request``): the coordinator writes it before it
  cancels a task with the engine's own call; a task that claims afterwards sees
  it and does not train, one that trains stops its training.
* **Kept result** (``fusion_dd_result.json``, JSON and never a pickle: the
  training can write anything into its own directory): the task's
  ``TrialResult`` next to the trial, for a coordinator that comes back after the
  task was forgotten.
* **Shared-state token**: a random token written into the state directory and
  read back where trainings run proves they see the same directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .launcher import Placement, TrialRequest, TrialResult, result_of
from .supervisor import write_json_atomic

CLAIM_FILE = "claim.json"
RESULT_FILE = "fusion_dd_result.json"
CANCEL_FILE = "cancel.request"
PROOF_PREFIX = ".cluster-proof-"


class ClaimTaken(RuntimeError):
    """A second task for a claimed trial attempt: it must not train again."""


def read_json(path: Path) -> dict[str, Any] | None:
    """A small JSON object, or None when absent, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def claim(trial_dir: Path, record: Mapping[str, Any]) -> bool:
    """Create ``claim.json`` with ``record`` unless it exists: complete or absent, never torn."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    temporary = trial_dir / f".claim.{os.getpid()}.{secrets.token_hex(4)}"
    temporary.write_text(json.dumps(dict(record)), encoding="utf-8")
    try:
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.link(temporary, trial_dir / CLAIM_FILE)  # atomic; fails when the claim exists
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()


def request_cancel(trial_dir: Path) -> None:
    """Ask the trial's task to stop (or never to start) its training; the trial directory may not
    exist yet (the task has not run), and the request must be there when it does."""
    with contextlib.suppress(OSError):
        trial_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(trial_dir / CANCEL_FILE, {"time": time.time()})


def cancel_requested(trial_dir: Path) -> bool:
    return (trial_dir / CANCEL_FILE).exists()


def keep_result(trial_dir: Path, result: TrialResult) -> None:
    """The result next to the trial, for a coordinator that re-attaches after the task was forgotten."""
    write_json_atomic(trial_dir / RESULT_FILE, dataclasses.asdict(result))


def loaded_result(trial_dir: Path) -> TrialResult | None:
    """The result a task kept (``keep_result``); None when absent or not one (read like any artifact)."""
    from .trial import _read_json as read_small_json

    data = read_small_json(trial_dir / RESULT_FILE)
    if data is None:
        return None
    names = {f.name for f in dataclasses.fields(TrialResult)}
    try:
        fields = {name: value for name, value in data.items() if name in names}
        fields["log_tail"] = tuple(str(line) for line in fields.get("log_tail") or ())
        result = TrialResult(**fields)
    except (TypeError, ValueError):
        return None
    return result if isinstance(result.cancelled, bool) and isinstance(result.kind, str) else None


def lost(reason: str, started: float) -> TrialResult:
    """A crash the coordinator records for a training it knows ended without a result."""
    return TrialResult(cancelled=False, kind="crash", reason=reason, duration=max(0.0, time.time() - started))


def _watch_cancel(trial_dir: Path, cancel: threading.Event, done: threading.Event) -> None:
    while not done.wait(0.2):
        if cancel_requested(trial_dir):
            cancel.set()
            return


def wait_with_watchers(request: TrialRequest, running: Any, stop: threading.Event | None = None) -> TrialResult:
    """Wait for a supervised training with the early-stop monitor and the cancel request watched
    (``stop``: an event of the caller's that also stops it, e.g. a signal from the cluster)."""
    from .early_stop import make_monitor
    from .wakeup import CancelEvent

    trial_dir = Path(request.spec.trial_dir)
    cancel = CancelEvent()
    done = threading.Event()
    watchers = [threading.Thread(target=_watch_cancel, args=(trial_dir, cancel, done), daemon=True)]
    if stop is not None:
        def forward() -> None:
            while not done.is_set():
                if stop.wait(0.2):
                    cancel.set()
                    return

        watchers.append(threading.Thread(target=forward, daemon=True))
    for watcher in watchers:
        watcher.start()
    try:
        monitor = make_monitor(running.trial_dir, request.early_stop, list(request.baseline_curve))
        return result_of(running.wait(cancel, monitor=monitor), request)
    finally:
        done.set()


def write_token(state_dir: Path) -> tuple[Path, str]:
    """A fresh proof token in the state directory (remove it with ``path.unlink()``)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    path = state_dir / f"{PROOF_PREFIX}{token[:8]}"
    path.write_text(token, encoding="utf-8")
    return path, token


def read_token(path: str, dask_worker: Any = None) -> str | None:
    """The proof token as this host sees it (None: it cannot see the file)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def not_shared_message(state_dir: Path, where: str) -> str:
    return (
        f"state directory {state_dir.resolve()}: {where} cannot see it at the same path; every host that trains "
        "must share it (e.g. a network file system mounted at the same path), because trainings write their "
        "logs, claims and results there; or give a --state-dir they all share"
    )


__all__ = [
    "CANCEL_FILE",
    "CLAIM_FILE",
    "PROOF_PREFIX",
    "RESULT_FILE",
    "ClaimTaken",
    "cancel_requested",
    "claim",
    "keep_result",
    "loaded_result",
    "lost",
    "not_shared_message",
    "read_json",
    "read_token",
    "request_cancel",
    "wait_with_watchers",
    "write_token",
]


class FinishedHandle:
    """The handle of a trial that ended while no coordinator waited (or was cancelled before it
    ran): its result is known already, so waiting returns it and cancelling does nothing."""

    def __init__(self, result: TrialResult, placement: Placement) -> None:
        self.result = result
        self.placement = placement

    def wait(self, cancel: threading.Event | None = None) -> TrialResult:
        return self.result

    def cancel(self) -> None:
        pass
