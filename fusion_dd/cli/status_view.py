"""``fusion-dd status``: a search's state read from its journal, without taking its lock.

Safe while a coordinator is running: the journal is only appended to, and a torn
last line is ignored by the reader.
"""

from __future__ import annotations

import fcntl
import time
from pathlib import Path

from ..core.errors import UsageError
from ..store.journal import JOURNAL_NAME, LOCK_NAME, TRIALS_DIR, read_records
from ..report.build import display_path, larger_budget, summary_lines
from ..store.state import SearchState, TrialState, replay
from ..runner.trial import supervised_state


def coordinator_pid(state_dir: Path) -> int | None:
    """The pid of the coordinator holding the lock, or None when nobody runs the search."""
    lock_path = state_dir / LOCK_NAME
    try:
        handle = open(lock_path, "r")
    except FileNotFoundError:
        return None
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = handle.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return None


def status_lines(state_dir: Path) -> list[str]:
    journal = state_dir / JOURNAL_NAME
    if not journal.exists():
        trials = state_dir / TRIALS_DIR
        if trials.is_dir() and any(trials.iterdir()):
            # A search would refuse these trials: point where it points, not at a plain 'fusion-dd search'.
            raise UsageError(
                f"{state_dir}: no {JOURNAL_NAME}, but trial directories under {TRIALS_DIR}/ (was the journal "
                f"deleted?); restore it, or start over with 'fusion-dd search --restart --state-dir {state_dir}'"
            )
        raise UsageError(f"{state_dir}: no search here (no {JOURNAL_NAME}); start one with 'fusion-dd search'")
    state = replay(read_records(journal))
    if state.definition is None:
        raise UsageError(f"{journal}: the journal holds no search_started record")
    pid = coordinator_pid(state_dir)
    lines = [f"search in {state_dir}"]
    definition = state.definition
    lines.append(
        f"  {len(definition['rules'])} candidate rules, strategy {definition['strategy']}, "
        f"command: {' '.join(definition['command'])}"
    )
    budget = state.sessions[-1]["budget"] if state.sessions else None
    finished = [t for t in state.trials.values() if t.finished is not None]
    cancelled = [t for t in state.trials.values() if t.cancelled is not None]
    # The journal calls a trial open until a coordinator collects it; after a
    # SIGKILL of the coordinator its supervisor may well have finished it since.
    open_trials = [(trial, *_trial_state(state_dir, trial)) for trial in state.open_trials()]
    running = [entry for entry in open_trials if entry[1] == "running" or (entry[1] == "gone" and pid is not None)]
    ended = [entry for entry in open_trials if entry[1] == "ended"]
    gone = [entry for entry in open_trials if entry[1] == "gone" and pid is None]
    sessions = sum(1 for session in state.sessions if session.get("purpose") != "localize")
    scope = f" in all ({sessions} sessions)" if sessions > 1 else ""  # the counts are over every session
    lines.append(
        f"  trainings launched{scope}: {state.launched}" + (f" of budget {budget}" if budget is not None else "")
        + f"; finished {len(finished) + len(ended)}, cancelled or lost {len(cancelled) + len(gone)}, "
        f"running {len(running)}"
    )
    if state.finished is not None:
        lines.append("  state: finished")
        lines.append("")
        from ..coordinator.replay import finished_answer  # the engine's modules, only for a finished search

        lines.extend(summary_lines(finished_answer(state, state_dir), state_dir))
        return lines
    if pid is not None:
        lines.append(f"  state: running (coordinator pid {pid}), {len(state.sessions)} session(s)")
    else:
        last_stop = state.last_stop["reason"] if state.last_stop is not None else "coordinator gone"
        # A spent budget stops a resume at once: the hint offers a larger one, as the search's own did.
        more = f" --budget {larger_budget(budget, state.launched)}" if last_stop == "budget_exhausted" and budget is not None else ""
        lines.append(
            f"  state: stopped ({last_stop}); continue with "
            f"'fusion-dd resume --state-dir {display_path(state_dir)}{more}{_where_flags(state, budget=not more)}'"
        )
    lines.append("  " + _estimate_text(state_dir, stopped=pid is None))
    now = time.time()
    for trial, _, _ in running:
        lines.append(
            f"  running #{trial.trial_id} on {_where(trial)} for {int(now - trial.started_at)}s "
            f"({len(trial.config)} rules on, {trial.role})"
        )
    pool = [",".join(str(part) for part in device) for device in (state.sessions[-1].get("devices") or [])] if state.sessions else []
    busy = {",".join(trial.device) for trial, _, _ in running}
    idle = [device for device in pool if device not in busy]
    if idle and pid is not None:
        lines.append(f"  idle: device {', '.join(idle)}")
    occupied = _occupancy([trial for trial, _, _ in running])
    if occupied:
        lines.append("  devices in use, per host:")
        lines.extend(occupied)
    collect = "being collected" if pid is not None else "'fusion-dd resume' records its result"
    for trial, _, status in ended:
        assert status is not None
        lines.append(f"  ended   #{trial.trial_id} on device {','.join(trial.device)} {_how(status)}; {collect}")
    for trial, _, _ in gone:
        lines.append(
            f"  lost    #{trial.trial_id} on device {','.join(trial.device)}: its supervisor is gone without a "
            "result; 'fusion-dd resume' trains it again"
        )
    recent = finished[-8:]
    if recent:
        lines.append("  last finished trainings:")
        for trial in recent:
            measurement = trial.measurement
            assert measurement is not None
            value = f"{measurement.value:.6g}" if measurement.value is not None else "-"
            lines.append(
                f"    #{trial.trial_id} {trial.role:<9} {len(trial.config):>4} rules on  {measurement.kind:<10} {value}"
            )
    return lines


def _remote(trial: TrialState) -> dict:
    """The placement of a trial a cluster launcher runs (empty for a local one)."""
    placement = (trial.launch or {}).get("placement") or {}
    return placement if placement.get("launcher") not in (None, "local") else {}


def _trial_state(state_dir: Path, trial: TrialState) -> tuple[str, dict | None]:
    """Like ``supervised_state``; a trial on another host is running until its status.json says
    it ended (its pids mean nothing here, and status must not connect to a cluster)."""
    if not _remote(trial):
        return supervised_state(state_dir / trial.trial_dir)
    from ..runner.trial import STATUS_FILE, _read_json

    status = _read_json(state_dir / trial.trial_dir / STATUS_FILE)
    return ("ended", status) if status is not None else ("running", None)


def _where(trial: TrialState) -> str:
    placement = _remote(trial)
    if not placement:
        return f"device {','.join(trial.device)}"
    if placement.get("slurm_job_id"):
        return f"Slurm job {placement['slurm_job_id']} (slot {','.join(trial.device)})"
    device = ",".join(placement.get("device") or ()) or "?"
    return f"{placement.get('host', '?')} device {device} (worker {placement.get('worker_name') or placement.get('worker')})"


def _occupancy(running: list[TrialState]) -> list[str]:
    """Per host and device, the trainings of this search running there (``host: device 0 #0004, ...``)."""
    hosts: dict[str, list[str]] = {}
    for trial in running:
        placement = _remote(trial)
        if placement.get("slurm_job_id"):
            hosts.setdefault("Slurm", []).append(f"job {placement['slurm_job_id']} #{trial.trial_id}")
            continue
        host = str(placement.get("host", "this host")) if placement else "this host"
        device = ",".join(placement.get("device") or ()) if placement else ",".join(trial.device)
        hosts.setdefault(host, []).append(f"device {device or '?'} #{trial.trial_id}")
    return [f"    {host}: {', '.join(sorted(entries))}" for host, entries in sorted(hosts.items())]


def _estimate_text(state_dir: Path, stopped: bool = False) -> str:
    """The trainings probably left and the finishing time (fusion_dd.coordinator.estimate), or why there is none;
    ``stopped``: the time they would take once resumed, since nothing is finishing."""
    from ..coordinator.estimate import estimate_from_dir

    try:
        found = estimate_from_dir(state_dir)
    except Exception as exc:  # noqa: BLE001 - status must show the rest even when the estimate fails
        return f"estimate: none ({type(exc).__name__}: {exc})"
    return found.text(stopped) if found is not None else "estimate: none (the training does not run)"


def _how(status: dict) -> str:
    """How a training ended, from its status.json (written by its supervisor)."""
    duration = status.get("duration")
    after = f" after {float(duration):.0f}s" if isinstance(duration, (int, float)) else ""
    if status.get("error"):
        how = f"could not run: {status['error']}"
    elif status.get("cancelled"):
        how = "cancelled"
    elif status.get("timed_out"):
        how = "timed out"
    elif status.get("signal") is not None:
        how = f"killed by signal {status['signal']}"
    else:
        how = f"exit code {status.get('exit_code')}"
    return f"({how}){after}"


__all__ = ["status_lines", "coordinator_pid", "SearchState", "TrialState"]


def _where_flags(state: SearchState, budget: bool = True) -> str:
    """The last session's devices, launcher and (``budget``) budget as the hint's flags (fusion_dd.config.session)."""
    from ..config.session import flags_text, hint_flags, journaled_budget, journaled_context

    context, _ = journaled_context(state.sessions)
    start = state.start_record or {}
    cap = journaled_budget(state.sessions) if budget else None
    return flags_text(hint_flags(context, start.get("config_document"), cap))
