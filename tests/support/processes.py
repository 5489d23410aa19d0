"""Waiting on processes in tests: generous bounds, and zombies count as gone.

Orphans reparented to a PID 1 that reaps late stay zombies for a while, and
``kill(-pgid, 0)`` still succeeds on them; a test must not read that as a
training that survived its kill.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path


def eventually(condition: Callable[[], bool], within: float = 20.0, every: float = 0.05) -> bool:
    """Poll ``condition`` every ``every`` seconds until it holds or ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()


def wait_until(condition: Callable[[], bool], within: float, what: str, every: float = 0.05) -> None:
    """``eventually``, failing the test with ``what`` when ``condition`` never held."""
    assert eventually(condition, within, every), what


def _stat_fields(entry: Path) -> list[str] | None:
    try:
        return (entry / "stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def group_gone(pgid: int) -> bool:
    """No live process is left in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return False
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry)
            if fields is not None and int(fields[2]) == pgid and fields[0] != "Z":
                return False
    return True


def pid_gone(pid: int) -> bool:
    """The process has ended (an unreaped zombie has ended too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    fields = _stat_fields(Path(f"/proc/{pid}"))
    return fields is not None and fields[0] == "Z"


def training_pgid(trial_dir: Path) -> int:
    """The process group of the training a supervisor started, from its ``supervisor.json``."""
    return json.loads((trial_dir / "supervisor.json").read_text())["training_pgid"]
