"""Whole searches with the in-process launcher: the engine, its journal and replay, no processes.

The training is a function that reads its own switch file the way CANN does (an
exact entry beats ``ALL``; a rule with neither is on), so these searches exercise
everything the engine does between a question and a journaled answer, in
milliseconds per training.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import yaml

from fusion_dd.config.settings import load_config
from fusion_dd.coordinator.engine import Engine
from fusion_dd.core.rules import Section, catalog
from fusion_dd.runner.inprocess import InProcessLauncher, TrialContext
from fusion_dd.store.journal import JOURNAL_NAME, read_records
from fusion_dd.store.state import replay

GRAPH = [name for name, section in catalog().items() if section is Section.GRAPH][:16]
ALONE = GRAPH[3]
PAIR = {GRAPH[7], GRAPH[12]}


def switched_on(context: TrialContext) -> set[str]:
    """The candidates the trial's fusion_switch.cfg leaves on, read as CANN reads it."""
    section = json.loads(context.switch_file.read_text())["Switch"]["GraphFusion"]
    default = section.get("ALL", "on")
    return {name for name in GRAPH if section.get(name, default) == "on"}


class Training:
    """Fails when ALONE is on, or when both rules of PAIR are; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[frozenset[str]] = []
        self._lock = threading.Lock()

    def __call__(self, context: TrialContext) -> None:
        on = switched_on(context)
        with self._lock:
            self.calls.append(frozenset(on))
        broken = ALONE in on or PAIR <= on
        context.print(f"accuracy: {0.4 if broken else 0.9}")


def write_config(tmp_path: Path) -> Path:
    document = {
        "rules": {"GraphFusion": GRAPH},
        "train": {"command": [sys.executable, "-c", "pass"], "devices": [0, 1]},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 60},
    }
    path = tmp_path / "fusion-dd.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_search_finds_an_independent_culprit_and_an_interacting_pair(tmp_path: Path) -> None:
    training = Training()
    result = Engine(load_config(write_config(tmp_path)), launcher=InProcessLauncher(training)).run()
    assert (result.status, result.exit_code) == ("found", 0)
    found = sorted(sorted(rule["name"] for rule in culprit["rules"]) for culprit in result.report["culprits"])
    assert found == sorted([[ALONE], sorted(PAIR)])
    assert result.report["fix_verified"] is True
    assert result.report["trainings"] == len(training.calls)
    state = replay(read_records(tmp_path / ".fusion-dd" / JOURNAL_NAME))
    assert state.finished is not None and state.finished["report"]["culprits"] == result.report["culprits"]


def test_a_finished_search_run_again_calls_no_training(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    first = Engine(load_config(config), launcher=InProcessLauncher(Training())).run()
    training = Training()
    again = Engine(load_config(config), launcher=InProcessLauncher(training)).run()
    assert training.calls == []
    assert again.report["culprits"] == first.report["culprits"]
