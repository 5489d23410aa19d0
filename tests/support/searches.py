"""What a search over the fake training left behind, read back the same way by every launcher's tests.

``started_trials`` reads ``started.log``, which the tests' wrapped training appends
its trial id to as it starts (one line per training process): a trial id twice
there is a trial directory that saw two trainings.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import CULPRIT, GRAPH
from tests.support.journal_configs import decoded

#: A smaller search (6 candidates, about 6 trainings) for the tests that kill things.
FEW_RULES = {"GraphFusion": GRAPH[10:16], "UBFusion": []}


def journal(search_dir: Path) -> list[dict]:
    """The journal's records, configurations decoded to rule names (they are journaled as bit masks)."""
    lines = (search_dir / ".fusion-dd" / "journal.jsonl").read_text().splitlines()
    return decoded(json.loads(line) for line in lines if line)


def started_trials(search_dir: Path) -> list[str]:
    """The trainings that started, in order (the wrapped training's ``started.log``)."""
    path = search_dir / "started.log"
    return path.read_text().split() if path.exists() else []


def assert_found(search_dir: Path) -> dict:
    """The report says the planted culprit (``CULPRIT``) was found; the report."""
    report = json.loads((search_dir / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found", report.get("message")
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
    return report
