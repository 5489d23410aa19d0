"""Writing ``fusion_result.json`` the way CANN's compiler does (docs/architecture.md 2.3).

One top-level key per compiled graph, ``graph_fusion``/``ub_fusion`` sections,
counts as strings, ``repository_hit_times`` only for UB passes. Passes that were
switched off never ran, so they are absent; so are passes that found nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fusion_dd.core.rules import Section

from .pipeline import FusionStats

FILE_NAME = "fusion_result.json"


def fusion_result(stats: Iterable[FusionStats]) -> dict[str, Any]:
    """The JSON document for the graphs of one run, in compilation order."""
    document: dict[str, Any] = {}
    for graph_id, graph_stats in enumerate(stats):
        graph_fusion: dict[str, dict[str, str]] = {}
        ub_fusion: dict[str, dict[str, str]] = {}
        for name, count in graph_stats.counts.items():
            if count.section is Section.UB:
                ub_fusion[name] = {
                    "match_times": str(count.match_times),
                    "repository_hit_times": "0",
                    "effect_times": str(count.effect_times),
                }
            else:
                graph_fusion[name] = {
                    "match_times": str(count.match_times),
                    "effect_times": str(count.effect_times),
                }
        entry: dict[str, Any] = {}
        if graph_fusion:
            entry["graph_fusion"] = graph_fusion
        if ub_fusion:
            entry["ub_fusion"] = ub_fusion
        document[f"session_and_graph_id_0_{graph_id}"] = entry
    return document


def write_fusion_result(directory: Path, stats: Iterable[FusionStats]) -> Path:
    path = directory / FILE_NAME
    path.write_text(json.dumps(fusion_result(stats), indent=4) + "\n", encoding="utf-8")
    return path
