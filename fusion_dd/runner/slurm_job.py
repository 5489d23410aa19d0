"""The body of one trial's Slurm job: ``python -m fusion_dd.runner.slurm_job TRIAL_DIR TOKEN_FILE TOKEN``.

Runs on the node Slurm chose, inside the allocation, and:

1. proves the state directory is shared (the coordinator's token reads back here),
   else exits with ``NOT_SHARED`` before anything is written;
2. does not train when the coordinator asked to cancel before the job started;
3. claims the trial (``fusion_dd.runner.cluster``): a job with another id for the
   same trial refuses (``CLAIM_TAKEN``); the same job after a requeue (a higher
   ``SLURM_RESTART_COUNT``) takes its claim over: the same trial continues;
4. runs the ordinary supervisor with the device *as Slurm granted it*: the value
   of ``train.device_env`` in the job's environment (e.g. ``CUDA_VISIBLE_DEVICES``
   that Slurm sets for ``--gres=gpu:1``), or no device variable at all when the
   job has none, never an id of fusion-dd's own;
5. keeps the result next to the trial for the coordinator.

When Slurm stops the job (scancel from outside, walltime, preemption) the
training is stopped and *no* result is kept: only Slurm knows whether the job
ends (a crash, which the coordinator reads from the job's final state) or is
requeued (the same trial runs again in this job).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from .cluster import (
    CLAIM_FILE,
    cancel_requested,
    claim,
    keep_result,
    read_json,
    read_token,
    wait_with_watchers,
)
from .launcher import TrialResult, this_host
from .supervisor import write_json_atomic

REQUEST_FILE = "slurm_request.pickle"
STOPPED_FILE = "slurm_stopped.json"
NOT_SHARED = 3
CLAIM_TAKEN = 4
STOPPED_BY_SLURM = 143


def _say(message: str) -> None:
    print(f"fusion-dd slurm job: {message}", file=sys.stderr, flush=True)


def _take_claim(trial_dir: Path, record: dict) -> bool:
    if claim(trial_dir, record):
        return True
    held = read_json(trial_dir / CLAIM_FILE) or {}
    if str(held.get("job_id")) == record["job_id"] and int(held.get("restarts", 0)) < record["restarts"]:
        # Requeued by Slurm (preemption, a node failure, scontrol requeue): the same job, the same trial.
        write_json_atomic(trial_dir / CLAIM_FILE, record)
        return True
    _say(
        f"trial {record['trial_id']} was already claimed by Slurm job {held.get('job_id')} on {held.get('host')}: "
        "not trained again in its directory"
    )
    return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        _say("usage: python -m fusion_dd.runner.slurm_job TRIAL_DIR TOKEN_FILE TOKEN")
        return 2
    trial_dir, token_file, token = Path(args[0]), args[1], args[2]
    host, boot_id = this_host()
    if read_token(token_file) != token:
        _say(f"the state directory is not shared with node {host} (token {token_file} unreadable or different)")
        return NOT_SHARED
    stop = threading.Event()

    def stopped(signum: int, frame: object) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, stopped)
    if cancel_requested(trial_dir):
        _say("cancelled by fusion-dd before it started: nothing trained")
        return 0
    with open(trial_dir / REQUEST_FILE, "rb") as handle:
        request = pickle.load(handle)  # written by this search's coordinator (SlurmLauncher.start)
    device_env = request.spec.device_env
    device = os.environ.get(device_env) if device_env else None
    record = {
        "job_id": os.environ.get("SLURM_JOB_ID", ""),
        "restarts": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
        "trial_id": request.spec.trial_id,
        "host": host,
        "boot_id": boot_id,
        "device": device or "",
        "device_env": device_env if device else "",
        "time": time.time(),
    }
    if not _take_claim(trial_dir, record):
        return CLAIM_TAKEN
    if cancel_requested(trial_dir):  # the cancel raced the claim: the claim refuses to run
        _say("cancelled by fusion-dd as it started: nothing trained")
        return 0
    # The device as Slurm granted it; none in the environment: the training inherits the job's as it is.
    spec = replace(request.spec, device=(device,) if device else (), device_env=device_env if device else "")
    request = replace(request, spec=spec)
    from .trial import start_trial

    running = start_trial(spec)
    result = wait_with_watchers(request, running, stop)
    if (stop.is_set() or result.cancelled) and not cancel_requested(trial_dir):
        write_json_atomic(trial_dir / STOPPED_FILE, {"job_id": record["job_id"], "restarts": record["restarts"],
                                                     "time": time.time()})
        _say("stopped by Slurm (scancel, time limit or preemption): no result kept")
        return STOPPED_BY_SLURM
    if cancel_requested(trial_dir) and not result.cancelled and result.kind != "metric":
        # scancel signals every process of the job, the training too, so it may die of the SIGTERM
        # before its supervisor cancels it: what fusion-dd asked for is a cancel, not a crash.
        result = TrialResult(cancelled=True, duration=result.duration)
    keep_result(trial_dir, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
