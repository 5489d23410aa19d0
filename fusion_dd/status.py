"""``fusion-dd status``: a search's state read from its journal, without taking its lock.

Safe while a coordinator is running: the journal is only appended to, and a torn
last line is ignored by the reader.
"""

from __future__ import annotations

import fcntl
import time
from pathlib import Path

from .errors import UsageError
from .journal import JOURNAL_NAME, LOCK_NAME, read_records
from .report import summary_lines
from .state import SearchState, replay


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
    open_trials = state.open_trials()
    lines.append(
        f"  trainings launched: {state.launched}" + (f" of budget {budget}" if budget is not None else "")
        + f"; finished {len(finished)}, cancelled or lost {len(cancelled)}, running {len(open_trials)}"
    )
    if state.finished is not None:
        lines.append("  state: finished")
        lines.append("")
        lines.extend(summary_lines(state.finished["report"], state_dir))
        return lines
    if pid is not None:
        lines.append(f"  state: running (coordinator pid {pid}), {len(state.sessions)} session(s)")
    else:
        last_stop = state.stops[-1]["reason"] if state.stops else "coordinator gone"
        lines.append(f"  state: stopped ({last_stop}); continue with 'fusion-dd resume --state-dir {state_dir}'")
    now = time.time()
    for trial in open_trials:
        lines.append(
            f"  running #{trial.trial_id} on device {','.join(trial.device)} for {int(now - trial.started_at)}s "
            f"({len(trial.config)} rules on, {trial.role})"
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


__all__ = ["status_lines", "coordinator_pid", "SearchState"]
