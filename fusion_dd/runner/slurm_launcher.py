"""Trainings as Slurm jobs (``train.launcher: slurm``): one ``sbatch`` job per trial.

No process besides fusion-dd itself: each trial is a batch job whose script runs
``python -m fusion_dd.runner.slurm_job`` (:mod:`fusion_dd.runner.slurm_job`) on the
node Slurm chose, which claims the trial, runs the ordinary supervisor with the
device Slurm granted, and keeps the result in the trial directory. The
coordinator talks to Slurm only through its command-line tools
(:mod:`fusion_dd.runner.slurm_commands`).

* **Parallelism** is ``train.slurm.max_jobs``: that many slots, each holding one
  submitted job (pending or running) at a time. A slot is not a device: the
  device is whatever Slurm grants the job (``train.slurm.gres``), and the
  training sees it under ``train.device_env`` as Slurm set it.
* **Identity.** Every job of a search has the name ``fusion-dd-SALT-TRIAL`` (the
  salt is the state directory's), so a job whose id a killed coordinator never
  journaled is still found by name; ``slurm_job.json`` in the trial directory
  records the id as soon as ``sbatch`` gave it.
* **Outcome.** The kept result when the job left one; otherwise the job's final
  state from ``squeue``/``scontrol``: cancelled from outside, killed at the time
  limit, failed, out of memory, preempted: a crash (``train.retries`` starts a
  new trial). Requeued jobs are followed as the same trial.
* **Cancel.** ``cancel.request`` first (a job that starts afterwards does not
  train), then ``scancel``: pending jobs leave the queue at once, running ones
  get SIGTERM and the supervisor's grace. ``close`` scancels whatever job of
  the search is still queued, so that Ctrl-C and SIGTERM leave nothing behind.
* **Controller out of reach.** A silence of ``squeue``/``sbatch`` after the controller
  answered this session is waited out (a restart, a failover), a submission tried
  again unless a job of the trial's name is queued by then; one that never answered,
  and a job ``sbatch`` refuses, stop the search in one line.
* **Shared state.** Each job first reads back a token the coordinator wrote into
  the state directory and exits with a distinct code otherwise; the search
  then stops with one line, before any training of that node ran.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import pickle
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from . import slurm_commands as slurm
from .cluster import (
    CLAIM_FILE,
    ClaimTaken,
    FinishedHandle,
    loaded_result,
    lost,
    not_shared_message,
    read_json,
    read_token,
    request_cancel,
    write_token,
)
from .launcher import NotStarted, Placement, TrialRequest, TrialResult
from .slurm_job import CLAIM_TAKEN, NOT_SHARED, REQUEST_FILE, STOPPED_FILE
from .supervisor import STATUS_FILE, SUPERVISOR_FILE, write_json_atomic

JOB_FILE = "slurm_job.json"
PROOF_FILE = ".slurm-shared-state-proof"
SCRIPT_FILE = "slurm_job.sh"
#: Added to train.timeout (and kill_grace) for the job's default time limit: start-up, the
#: supervisor's grace, the result written; the training's own timeout should end it first.
TIME_MARGIN_SECONDS = 300.0
#: How often the coordinator asks Slurm about all of its jobs at once.
POLL_SECONDS = 1.0
#: After a job ended, how long its result may take to appear (a network file system's cache).
RESULT_GRACE_SECONDS = 10.0
#: How long a job that left the running states is watched for being requeued (pending again, or
#: a higher restart count, which Slurm raises at once): briefly
#: after an ordinary end, longer when its job said Slurm stopped it (``scancel``, preemption or a
#: requeue look alike from inside the job; only a requeue makes it pending again, and a loaded
#: controller can take seconds to show that).
REQUEUE_WATCH_SECONDS = 2.0
REQUEUE_WATCH_STOPPED_SECONDS = 30.0


def time_limit(configured: str | None, timeout: float | None, grace: float) -> str | None:
    """The job's ``--time``: the configured one, else the training's timeout plus grace and margin,
    in whole minutes (None: no timeout, the partition's default applies)."""
    if configured is not None:
        return configured
    if timeout is None:
        return None
    return str(max(1, math.ceil((timeout + grace + TIME_MARGIN_SECONDS) / 60.0)))


def resource_options(settings: Any, timeout: float | None, grace: float) -> dict[str, str | int | None]:
    """What each job asks Slurm for (``train.slurm``), as ``sbatch`` option names and values."""
    return {
        "partition": settings.partition,
        "gres": settings.gres,
        "time": time_limit(settings.time, timeout, grace),
        "cpus-per-task": settings.cpus_per_task,
        "mem": settings.mem,
        "account": settings.account,
        "qos": settings.qos,
        "ntasks": 1,
    }


def _script_head(options: dict[str, str | int | None], settings: Any) -> list[str]:
    """A batch script's first lines: the interpreter, then its ``#SBATCH`` options and ``train.slurm.extra``."""
    return ["#!/bin/sh", *slurm.sbatch_options(options, settings.extra)]


def would_take(settings: Any, timeout: float | None, grace: float) -> str | None:
    """Ask Slurm whether it would take a job asking for what ``train.slurm`` says (``sbatch --test-only``).

    sbatch's answer ("Job N to start at ... in partition P"), None when sbatch is not
    on this host's PATH (a config written elsewhere). Raises ``SlurmUnavailable`` or
    ``SubmissionRefused`` as a submission would: what the search's first job would meet.
    """
    if shutil.which("sbatch") is None:
        return None
    options = {"job-name": "fusion-dd-test-only", "output": "/dev/null", **resource_options(settings, timeout, grace)}
    lines = [*_script_head(options, settings), "exit 0"]
    with tempfile.TemporaryDirectory(prefix="fusion-dd-slurm-") as directory:
        script = Path(directory) / SCRIPT_FILE
        script.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return slurm.test_only(str(script))


def job_script(request: TrialRequest, name: str, settings: Any, token: tuple[str, str]) -> str:
    """The batch script of one trial (plain ``sh``; every value quoted)."""
    spec = request.spec
    trial_dir = str(Path(spec.trial_dir).resolve())
    options: dict[str, str | int | None] = {
        "job-name": name,
        "output": f"{trial_dir}/slurm-%j.out",
        "chdir": trial_dir,
        **resource_options(settings, spec.timeout, spec.grace),
    }
    lines = _script_head(options, settings)
    argv = [sys.executable, "-m", "fusion_dd.runner.slurm_job", trial_dir, token[0], token[1]]
    lines.append("exec " + shlex.join(argv))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class SlurmPlacement(Placement):
    """A placement whose job id is the Slurm job's."""

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "slurm_job_id": self.job_id}


class SlurmHandle:
    """One trial's Slurm job, followed through the launcher's shared poll of the queue."""

    def __init__(self, launcher: "SlurmLauncher", request: TrialRequest, job_id: str) -> None:
        self.launcher = launcher
        self.request = request
        self.job_id = job_id
        self.placement = SlurmPlacement("slurm", "", None, job_id, ())
        self._cancel_sent = False
        self._cancelled_at = 0.0
        self._started = time.time()
        self._restarts_proven = 0  # the restart count of the last requeue this handle accepted

    def cancel(self) -> None:
        """Ask the job not to train (or to stop), then ``scancel`` it, pending or running."""
        if self._cancel_sent:
            return
        self._cancel_sent = True
        self._cancelled_at = time.monotonic()
        request_cancel(self.request.trial_dir)
        with contextlib.suppress(slurm.SlurmUnavailable):
            slurm.cancel([self.job_id])

    def wait(self, cancel: threading.Event | None = None) -> TrialResult:
        unavailable_since: float | None = None
        try:
            while True:
                if cancel is not None and cancel.is_set():
                    self.cancel()
                kept = loaded_result(self.request.trial_dir)
                if kept is not None:
                    if self._cancel_sent:
                        self._wait_gone_from_queue()
                        if kept.kind != "metric":  # killed by our scancel's SIGTERM: cancelled, as asked
                            return TrialResult(cancelled=True, duration=kept.duration)
                    return kept
                try:
                    state = self.launcher.state_of(self.job_id)
                    unavailable_since = None
                except slurm.SlurmUnavailable as exc:
                    unavailable_since = unavailable_since or time.monotonic()
                    self.launcher.note_unavailable(exc, time.monotonic() - unavailable_since)
                    state = "UNKNOWN"
                if state != "UNKNOWN" and state not in slurm.ACTIVE_STATES and not self._requeued():
                    return self._ended(state)
                if cancel is not None:
                    cancel.wait(POLL_SECONDS / 2)
                else:
                    time.sleep(POLL_SECONDS / 2)
        finally:
            self.launcher.forget(self.job_id)

    def _ended(self, state: str | None) -> TrialResult:
        """The job left the queue: its kept result, or how Slurm says it ended."""
        deadline = time.monotonic() + RESULT_GRACE_SECONDS
        facts: dict[str, str] | None = None
        with contextlib.suppress(slurm.SlurmUnavailable):
            facts = slurm.job_facts(self.job_id)
        final = (facts or {}).get("JobState") or state or "gone"
        exit_code = (facts or {}).get("ExitCode", "")
        claimed = (self.request.trial_dir / CLAIM_FILE).exists()
        while True:
            kept = loaded_result(self.request.trial_dir)
            if kept is not None:
                return kept
            if self._cancel_sent or time.monotonic() >= deadline or final != "COMPLETED":
                break
            time.sleep(0.5)
        if self._cancel_sent:
            self._wait_gone_from_queue()
            return TrialResult(cancelled=True, duration=time.time() - self._started)
        code = exit_code.split(":")[0]
        node = (facts or {}).get("NodeList") or "its node"
        if not claimed and code == str(NOT_SHARED):
            raise UsageError(not_shared_message(self.launcher.state_dir, f"Slurm job {self.job_id} on {node}"))
        if not claimed and code == str(CLAIM_TAKEN):
            raise ClaimTaken(f"trial {self.request.spec.trial_id}: Slurm job {self.job_id} found its trial claimed")
        how = slurm.ENDED_HOW.get(final, f"ended {final}")
        where = f"; see {self.request.trial_dir.name}/slurm-{self.job_id}.out"
        if final == "COMPLETED":
            return lost(f"Slurm job {self.job_id} completed without a result (exit code {exit_code}){where}",
                        self._started)
        return lost(f"Slurm job {self.job_id} {how} (state {final}, exit code {exit_code or '?'}) before the training "
                    f"finished; it is not trained again in its directory{where}", self._started)


    def _requeued(self) -> bool:
        """A job being requeued passes through a final-looking state (its run ended): asked again a
        moment later, a requeued job is pending again, so it is the same trial continuing."""
        if self._cancel_sent:
            return False
        begun = time.monotonic()
        stopped = self._stopped_run()
        while time.monotonic() - begun < (REQUEUE_WATCH_STOPPED_SECONDS if stopped else REQUEUE_WATCH_SECONDS):
            time.sleep(0.5)
            stopped = stopped or self._stopped_run()  # written as the run ends
            with contextlib.suppress(slurm.SlurmUnavailable):
                facts = slurm.job_facts(self.job_id)
                if facts is None:
                    continue
                if facts.get("JobState") in slurm.ACTIVE_STATES:
                    return True
                # Slurm counts the requeue at once: more restarts than the stopped run had is proof.
                # A count already accepted proves nothing more: the requeued run itself may have
                # ended since (Slurm refuses to start a job whose credential it revoked that second).
                restarts = facts.get("Restarts", "")
                if stopped and restarts.isdigit() and int(restarts) > int(stopped.get("restarts", 0)):
                    self._restarts_proven = int(restarts)
                    return True
        return False

    def _stopped_run(self) -> dict[str, Any] | None:
        """What the job wrote when Slurm stopped its run, unless that is the run of a requeue this
        handle already accepted (then it tells nothing about the run that ended now)."""
        stopped = read_json(self.request.trial_dir / STOPPED_FILE)
        if not isinstance(stopped, dict) or int(stopped.get("restarts", 0)) < self._restarts_proven:
            return None
        return stopped

    def _wait_gone_from_queue(self) -> None:
        """A cancelled job is listed (COMPLETING) until its processes ended: wait for that, but no
        longer than the supervisor's grace and a little more (Ctrl-C must stay bounded; Slurm's
        own KillWait then SIGKILLs what is left)."""
        deadline = self._cancelled_at + self.request.spec.grace + 3.0
        while time.monotonic() < deadline:
            try:
                if not slurm.still_listed(self.job_id):
                    return
            except slurm.SlurmUnavailable:
                return
            time.sleep(0.3)


class SlurmLauncher:
    """Trials as Slurm batch jobs; see the module docstring."""

    name = "slurm"

    def __init__(self, settings: Any, state_dir: Path) -> None:
        slurm.require_tools()
        self.settings = settings
        self.state_dir = Path(state_dir)
        self._salt = hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:10]
        self._lock = threading.Lock()
        self._jobs: set[str] = set()  # ids of this coordinator's jobs that may still be queued
        self._states: dict[str, str] = {}
        self._polled_at = -1e9
        self._token: tuple[str, str] | None = None
        self._warned_at: dict[str, float] = {}  # when each kind of wait was last said
        # The controller answered this session: from then on a silence is an outage to wait out.
        self._answered = False

    # -- the cluster ----------------------------------------------------------------

    def slots(self) -> list[tuple[str, ...]]:
        """``train.slurm.max_jobs`` slots; the devices are Slurm's to grant, per job."""
        return [(f"slurm/{index}",) for index in range(1, self.settings.max_jobs + 1)]

    def _proof(self) -> tuple[str, str]:
        """The shared-state token each job reads back before it trains: one per state directory and
        kept, since a job may start long after the session that submitted it (and after a resume)."""
        with self._lock:
            if self._token is None:
                path = self.state_dir / PROOF_FILE
                token = read_token(str(path))
                if not token:
                    written, token = write_token(self.state_dir)
                    os.replace(written, path)
                self._token = (str(path.resolve()), token)
            return self._token

    def job_name(self, request: TrialRequest) -> str:
        return f"fusion-dd-{self._salt}-{request.spec.trial_id}"

    def state_of(self, job_id: str) -> str | None:
        """The job's state (Slurm's name), None when the controller no longer knows it; one
        ``squeue`` per second for all the jobs this coordinator follows."""
        with self._lock:
            self._jobs.add(job_id)
            if time.monotonic() - self._polled_at >= POLL_SECONDS:
                self._states = slurm.queued(self._jobs)
                self._polled_at = time.monotonic()
                self._answered = True
            state = self._states.get(job_id)
        if state is not None:
            return state
        facts = slurm.job_facts(job_id)  # listed no more: ended a moment ago, or forgotten
        return None if facts is None else facts.get("JobState")

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._jobs.discard(job_id)
            self._states.pop(job_id, None)

    def note_unavailable(self, exc: Exception, seconds: float, what: str = "for the jobs") -> None:
        """The controller does not answer: say so every half minute while the jobs are waited for
        (or a job waits ``what``: to be submitted)."""
        now = time.monotonic()
        if now - self._warned_at.get(what, -1e9) >= 30.0:
            self._warned_at[what] = now
            print(f"fusion-dd: Slurm does not answer for {seconds:.0f}s ({exc}); still waiting {what}",
                  file=sys.stderr, flush=True)

    # -- the seam ---------------------------------------------------------------------

    def start(self, request: TrialRequest, cancel: threading.Event | None = None) -> SlurmHandle:
        """Submit the trial's job; returns once Slurm accepted it (it may wait in the queue).

        A controller that stops answering after this session reached it (a restart,
        a failover) is waited for, as ``wait`` does, and the submission is tried
        again (``_submit``). ``cancel`` (Ctrl-C) ends that wait: ``NotStarted``, the
        job never submitted.
        """
        trial_dir = request.trial_dir
        trial_dir.mkdir(parents=True, exist_ok=True)
        path = trial_dir / REQUEST_FILE
        temporary = path.with_name(f".{REQUEST_FILE}.{os.getpid()}")
        with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
            pickle.dump(request, handle)  # the environment may hold secrets: 0600
        os.replace(temporary, path)
        script = trial_dir / SCRIPT_FILE
        script.write_text(job_script(request, self.job_name(request), self.settings, self._proof()), encoding="utf-8")
        job_id = self._submit(request, script, cancel)
        if job_id is None:
            raise NotStarted(f"trial {request.spec.trial_id} was never submitted: cancelled while Slurm did not answer")
        with self._lock:
            self._jobs.add(job_id)
        write_json_atomic(trial_dir / JOB_FILE, {"job_id": job_id, "name": self.job_name(request), "time": time.time()})
        return SlurmHandle(self, request, job_id)

    def _submit(self, request: TrialRequest, script: Path, cancel: threading.Event | None) -> str | None:
        """sbatch the job script: its job id, or None when ``cancel`` was set while Slurm did not answer.

        A controller that never answered this session is a setup to fix, not an
        outage to sit out: one line, at once. One that answered before is waited for,
        said every half minute; before each new try the queue is asked for a job of
        the trial's name, since an sbatch that timed out may have been taken after all
        (a second job would find the trial claimed, but would hold a device meanwhile).
        A refusal names ``train.slurm`` and the script.
        """
        trial = request.spec.trial_id
        waiting_since: float | None = None
        while True:
            try:
                if waiting_since is not None:
                    queued = slurm.jobs_named(self.job_name(request))
                    if queued:
                        return queued[0]
                job_id = slurm.submit(str(script), str(request.trial_dir))
                self._answered = True
                return job_id
            except slurm.SlurmUnavailable as exc:
                if not self._answered:
                    raise UsageError(
                        f"train.launcher slurm: Slurm does not answer ({exc}); start the search once squeue "
                        "and sbatch work on this host"
                    ) from None
                waiting_since = waiting_since or time.monotonic()
                self.note_unavailable(exc, time.monotonic() - waiting_since, f"to submit trial {trial}")
            except slurm.SubmissionRefused as refused:
                raise slurm.SubmissionRefused(
                    f"train.slurm: {refused} (trial {trial}); fix what the job asks for in train.slurm (partition, "
                    f"account, qos, gres, mem, time, extra), see trials/{trial}/{SCRIPT_FILE}; then run the search again"
                ) from None
            if cancel is not None:
                if cancel.wait(POLL_SECONDS):
                    return None
            else:
                time.sleep(POLL_SECONDS)

    def _recorded_job(self, request: TrialRequest, placement: Mapping[str, Any] | None) -> str | None:
        """The trial's job id: journaled, else in its directory, else the queued job of its name."""
        job_id = (placement or {}).get("job_id") or (read_json(request.trial_dir / JOB_FILE) or {}).get("job_id")
        if job_id:
            return str(job_id)
        with contextlib.suppress(slurm.SlurmUnavailable):
            found = slurm.jobs_named(self.job_name(request))
            if found:
                return found[0]
        return None

    def adopt(self, request: TrialRequest, placement: Mapping[str, Any] | None) -> Any:
        """Re-attach to a trial's job an earlier coordinator submitted: still queued or running, it is
        followed again; ended, its kept result counts; gone without one, None (lost)."""
        if placement and placement.get("launcher") == "local":
            from .launcher import LocalLauncher

            return LocalLauncher().adopt(request, placement)
        if placement and placement.get("launcher") not in (None, "slurm"):
            raise UsageError(
                f"trial {request.spec.trial_id} was started by the {placement.get('launcher')} launcher and has not "
                f"been collected: resume with that launcher (--launcher {placement.get('launcher')})"
            )
        job_id = self._recorded_job(request, placement)
        kept = loaded_result(request.trial_dir)
        if kept is not None:
            return FinishedHandle(kept, SlurmPlacement("slurm", "", None, job_id, ()))
        if job_id is None:
            return None
        try:
            state = self.state_of(job_id)
        except slurm.SlurmUnavailable as exc:
            raise UsageError(f"resume: Slurm does not answer ({exc}); try again when squeue works") from None
        if state is not None and state in slurm.ACTIVE_STATES:
            return SlurmHandle(self, request, job_id)
        kept = loaded_result(request.trial_dir)
        if kept is not None:
            return FinishedHandle(kept, SlurmPlacement("slurm", "", None, job_id, ()))
        return None

    def ever_started(self, request: TrialRequest) -> bool:
        directory = request.trial_dir
        return any((directory / name).exists() for name in (JOB_FILE, CLAIM_FILE, SUPERVISOR_FILE, STATUS_FILE))

    def close(self) -> None:
        """scancel every job of this coordinator still queued (Ctrl-C, SIGTERM, an error)."""
        with self._lock:
            left = sorted(self._jobs)
            self._jobs.clear()
        if left:
            with contextlib.suppress(slurm.SlurmUnavailable):
                slurm.cancel(left)


def slurm_launcher_for(config: Any) -> SlurmLauncher:
    """The Slurm launcher of a search's configuration (``train.slurm``)."""
    return SlurmLauncher(config.train.slurm, config.state_dir)


__all__ = [
    "JOB_FILE", "resource_options", "SlurmHandle", "SlurmLauncher", "job_script", "slurm_launcher_for", "time_limit",
    "would_take",
]
