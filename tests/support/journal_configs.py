"""Journal records with the configurations of ``trial_started`` spelled out as sorted rule names.

The engine journals a configuration as a bit mask of the rule list in
``search_started`` (``fusion_dd.store.state.RuleIndex``); tests that look at which
rules a trial had on read them through here, whatever the journal's encoding.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fusion_dd.store.state import RuleIndex, rule_names_of


def decoded(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records, each ``trial_started`` with ``config``: its rules on, sorted by name."""
    index = RuleIndex(())
    out: list[dict[str, Any]] = []
    for record in records:
        if record.get("type") == "search_started" and not index.names:
            index = RuleIndex(rule_names_of(record.get("definition")))
        if record.get("type") == "trial_started" and "on" in record:
            record = {**record, "config": sorted(index.decode(record["on"]))}
        out.append(record)
    return out
