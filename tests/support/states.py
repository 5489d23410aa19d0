"""Hand-made journal records, for tests of the state, the report and ``fusion-dd status``.

Each builder returns one record as the engine journals it (fusion_dd/coordinator/);
``trial`` returns the records of one whole training. Keeping them here means a
change of the journal's format is made once for all these tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Record = dict[str, Any]


def search_started(rules: Iterable[str] = ("A", "B", "C"), **definition: Any) -> Record:
    body = {
        "rules": [{"name": name, "section": "GraphFusion"} for name in rules],
        "strategy": "bisect",
        "command": ["python3", "train.py"],
        "workdir": ".",
        "env": {},
        "base_cfg": None,
        "metric": {"goal": "max", "key": "accuracy"},
        "score": {"tolerance": "auto"},
    }
    body.update(definition)
    return {"type": "search_started", "time": 1000.0, "version": "test", "definition": body}


def session_started(budget: int = 20, devices: Iterable[str] = ("0", "1")) -> Record:
    return {"type": "session_started", "time": 1000.0, "budget": budget, "devices": [[d] for d in devices]}


def started(trial_id: str, on: Iterable[str] = (), repeat: int = 0, *, role: str = "search",
            attempt: int = 1, device: str = "0", time: float = 1001.0) -> Record:
    return {
        "type": "trial_started", "time": time, "trial_id": trial_id, "config": sorted(on), "repeat": repeat,
        "role": role, "attempt": attempt, "device": [device], "trial_dir": f"trials/{trial_id}",
    }


def launched(trial_id: str) -> Record:
    return {"type": "trial_launched", "trial_id": trial_id, "supervisor_pid": 4242}


def finished(trial_id: str, value: float | str | None = 0.9, *, kind: str = "metric", **extra: Any) -> Record:
    return {"type": "trial_finished", "trial_id": trial_id, "kind": kind, "value": value, "reason": "",
            "duration": 2.0, **extra}


def cancelled(trial_id: str, *, was_launched: bool | None = True, reason: str = "not needed") -> Record:
    record: Record = {"type": "trial_cancelled", "trial_id": trial_id, "reason": reason}
    if was_launched is not None:
        record["launched"] = was_launched
    return record


def trial(trial_id: str, on: Iterable[str] = (), value: float | str | None = 0.9, *, repeat: int = 0,
          kind: str = "metric", role: str = "search", attempt: int = 1, device: str = "0", **extra: Any) -> list[Record]:
    """The records of one finished training."""
    return [
        started(trial_id, on, repeat, role=role, attempt=attempt, device=device),
        launched(trial_id),
        finished(trial_id, value, kind=kind, **extra),
    ]
