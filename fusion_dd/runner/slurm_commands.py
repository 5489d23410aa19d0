"""The Slurm command-line tools as fusion-dd uses them: argv lists in, parsed facts out.

Why the tools and not a library: ``sbatch``/``squeue``/``scontrol``/``scancel`` are
what every Slurm site has, at every version, with the user's own configuration
and credentials; a job is re-found by its id alone, which is what a resumed
search has. No accounting database is assumed (``sacct`` does not answer on many
small clusters): a job's state comes from ``squeue`` while the controller lists
it and from ``scontrol show job`` for a while after it ended (``MinJobAge``).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence

from ..core.errors import UsageError

#: Job states in which the job may still run (Slurm's long names, as squeue %T prints them).
ACTIVE_STATES = frozenset(
    {
        "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
        "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "SPECIAL_EXIT",
    }
)
#: How each final state is told to the user.
ENDED_HOW = {
    "COMPLETED": "completed",
    "CANCELLED": "was cancelled (scancel, or an administrator)",
    "FAILED": "failed",
    "TIMEOUT": "was killed at its time limit (train.slurm.time)",
    "NODE_FAIL": "lost its node",
    "OUT_OF_MEMORY": "ran out of memory (train.slurm.mem)",
    "PREEMPTED": "was preempted and not requeued",
    "BOOT_FAIL": "could not boot its node",
    "DEADLINE": "missed its deadline",
}
TOOLS = ("sbatch", "squeue", "scontrol", "scancel")
COMMAND_TIMEOUT = 30.0


class SlurmUnavailable(RuntimeError):
    """The controller did not answer (a moment without it is not a lost job)."""


def require_tools() -> None:
    """Every Slurm tool on PATH, or one line saying which is missing."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise UsageError(
            f"train.launcher slurm: {', '.join(missing)} not found on PATH; run fusion-dd on a host where the "
            "Slurm client tools work (a login node), or try it locally with scripts/start-slurm"
        )


def _run(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmUnavailable(f"{argv[0]}: {exc}") from None


#: How sbatch says that it could not talk to the controller (Slurm's slurm_errno.c): a
#: restart or a failover under way, not a verdict on the job. After a timeout the job may
#: have been taken all the same.
UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out on send/recv operation",
    "Zero Bytes were transmitted or received",
    "Communication connection failure",
    "Message send failure",
    "Message receive failure",
    "Connection timed out",
    "Rate limit exceeded",
    "backup controller in standby mode",
    "Process is shutting down",
)


class SubmissionRefused(UsageError):
    """sbatch answered and refused the job (a partition, account, QOS, gres or limit it will not grant)."""


def _failure(done: subprocess.CompletedProcess[str]) -> Exception:
    """What a failed sbatch means: the controller out of reach, or its refusal, with sbatch's last line."""
    message = (done.stderr or done.stdout).strip().splitlines()
    said = message[-1].strip().removeprefix("sbatch: error: ") if message else f"exit code {done.returncode}"
    if any(phrase in (done.stderr or "") + (done.stdout or "") for phrase in UNREACHABLE):
        return SlurmUnavailable(f"sbatch: {said}")
    return SubmissionRefused(f"sbatch refused the job: {said}")


def test_only(script: str) -> str:
    """``sbatch --test-only SCRIPT``: whether Slurm would take the job and when it would start, nothing
    submitted; sbatch's answer (raises as ``submit`` does)."""
    done = _run(["sbatch", "--test-only", script], timeout=60.0)
    if done.returncode != 0:
        raise _failure(done)
    said = (done.stderr or done.stdout).strip().splitlines()
    return said[-1].strip() if said else "accepted"


def submit(script: str, cwd: str) -> str:
    """``sbatch --parsable SCRIPT``: the new job's id.

    Raises ``SlurmUnavailable`` when sbatch could not reach the controller and
    ``SubmissionRefused`` with sbatch's own last line when the controller refused the job.
    """
    done = _run(["sbatch", "--parsable", script], timeout=60.0)
    if done.returncode != 0:
        raise _failure(done)
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise RuntimeError(f"sbatch printed no job id: {done.stdout.strip()!r}")
    return job_id


def cancel(job_ids: Iterable[str]) -> None:
    """``scancel`` these jobs, pending and running alike (a job already gone is no error)."""
    ids = sorted(set(job_ids))
    if ids:
        _run(["scancel", *ids])


def queued(job_ids: Iterable[str]) -> dict[str, str]:
    """State of each job the controller still lists (``squeue``); jobs it does not list are left out."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    done = _run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T", "--states=all"])
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            # squeue refuses the whole list when one id is unknown: ask one by one.
            found: dict[str, str] = {}
            for job_id in ids:
                found.update(_queued_one(job_id))
            return found
        raise SlurmUnavailable(f"squeue: {done.stderr.strip() or done.returncode}")
    return _parse_states(done.stdout)


def still_listed(job_id: str) -> bool:
    """Whether squeue still lists the job among the active ones (a cancelled job stays listed,
    COMPLETING, until its processes are gone)."""
    done = _run(["squeue", "-h", "-j", job_id, "-o", "%T"])
    return done.returncode == 0 and bool(done.stdout.strip())


def _queued_one(job_id: str) -> dict[str, str]:
    done = _run(["squeue", "-h", "-j", job_id, "-o", "%i %T", "--states=all"])
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return {}
        raise SlurmUnavailable(f"squeue: {done.stderr.strip() or done.returncode}")
    return _parse_states(done.stdout)


def _parse_states(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            found[parts[0].split("_")[0]] = parts[1].split("+")[0]
    return found


def job_facts(job_id: str) -> dict[str, str] | None:
    """``scontrol show job -o ID`` as a mapping (JobState, ExitCode, Reason, NodeList, Restarts...);
    None when the controller has forgotten the job."""
    done = _run(["scontrol", "show", "job", "-o", job_id])
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return None
        raise SlurmUnavailable(f"scontrol: {done.stderr.strip() or done.returncode}")
    return parse_scontrol(done.stdout)


def parse_scontrol(text: str) -> dict[str, str]:
    """``Key=Value Key=Value ...`` of one ``scontrol -o`` line (values without spaces suffice here)."""
    facts: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key and key not in facts:
            facts[key] = value
    return facts


def jobs_named(name: str) -> list[str]:
    """Ids of the queued jobs of this user with this job name."""
    done = _run(["squeue", "-h", "--me", "-n", name, "-o", "%i"])
    if done.returncode != 0:
        raise SlurmUnavailable(f"squeue: {done.stderr.strip() or done.returncode}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def sbatch_options(options: Mapping[str, str | int | None], extra: Sequence[str]) -> list[str]:
    """``#SBATCH`` lines for the set options (``--name=value``) and the user's extra ones, in order."""
    lines = [f"#SBATCH --{name}={value}" for name, value in options.items() if value is not None]
    lines.extend(f"#SBATCH {option}" for option in extra)
    return lines


__all__ = [
    "ACTIVE_STATES",
    "ENDED_HOW",
    "SlurmUnavailable",
    "SubmissionRefused",
    "cancel",
    "job_facts",
    "jobs_named",
    "parse_scontrol",
    "queued",
    "require_tools",
    "sbatch_options",
    "still_listed",
    "submit",
    "test_only",
]
