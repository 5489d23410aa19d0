"""``fusion_result.json``: which fusion passes changed a compiled graph.

CANN writes the same statistics in three shapes, depending on release and tool
(docs/architecture.md 2.3), and all three are read:

* keyed: ``{"session_and_graph_id_0_0": {"graph_fusion": {...}, "ub_fusion": {...}}}``,
  one top-level key per compiled graph;
* list: ``[{"graph_fusion": {...}, "session_and_graph_id": "10_10"}, ...]``, one
  object per graph (trainings that compile many graphs);
* flat: ``{"graph_fusion": {...}, "ub_fusion": {...}, "session_and_graph_id": "0_0"}``,
  a single graph at the top level (``atc`` conversions).

A graph may report ``graph_fusion``, ``ub_fusion``, both or neither; UB counters
may carry ``repository_hit_times``; counts are strings or numbers. A pass with
``effect_times > 0`` in any graph actually rewrote the network, which makes this
file the authoritative list of candidates and the evidence that a trial's switch
file was applied.

The reader is deliberately tolerant of what it does not need (unknown sections
and counters are ignored, duplicate keys and concatenated documents are merged
so that no graph is lost) and strict about what it does (a count that is not an
integer is an error naming its key). ``looks_like_fusion_result`` tells the file
by its content, whatever it is called.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ....core.errors import UsageError
from ....core.rules import Rule, Section
from ....core.safe_read import FUSION_RESULT_BYTES, check_depth, too_deep
from .common import read_text, sort_rules

FILE_NAME = "fusion_result.json"
_SECTIONS = {"graph_fusion": Section.GRAPH, "ub_fusion": Section.UB}


@dataclass(frozen=True)
class PassStats:
    """The counters of one pass in one graph."""

    match_times: int
    effect_times: int


@dataclass(frozen=True)
class FusionResult:
    """Per graph, per rule statistics of one ``fusion_result.json``."""

    source: str
    graphs: dict[str, dict[Rule, PassStats]] = field(default_factory=dict)
    reported_sections: frozenset[Section] = frozenset()

    def rules(self) -> list[Rule]:
        """Every pass the compiler reported, whether or not it changed anything."""
        return sort_rules(rule for stats in self.graphs.values() for rule in stats)

    def fired(self) -> list[Rule]:
        """Passes with ``effect_times > 0`` in any graph: the ones worth searching."""
        return sort_rules(
            rule
            for stats in self.graphs.values()
            for rule, counts in stats.items()
            if counts.effect_times > 0
        )

    def fired_names(self) -> set[str]:
        return {rule.name for rule in self.fired()}

    def sections(self) -> set[Section]:
        """The sections the compiler reported on; silence about a section proves nothing."""
        return set(self.reported_sections)


def read_fusion_result(path: str | Path) -> FusionResult:
    """Read one ``fusion_result.json``; a malformed file is a UsageError naming it."""
    path = Path(path)
    return parse_fusion_result(read_text(path, FILE_NAME, FUSION_RESULT_BYTES), str(path))


def parse_fusion_result(text: str, source: str) -> FusionResult:
    """Parse the text of a ``fusion_result.json`` in any of CANN's shapes."""
    graphs: dict[str, dict[Rule, PassStats]] = {}
    reported: set[Section] = set()
    for document in _json_documents(text, source):
        for graph_key, graph_value in _graphs_of(document):
            key = _unique_key(graph_key, graphs)
            graphs[key] = _graph_stats(graph_value, source, graph_key)
            reported |= {_SECTIONS[k] for k, _ in graph_value if k in _SECTIONS}
    return FusionResult(source=source, graphs=graphs, reported_sections=frozenset(reported))


def looks_like_fusion_result(document: Any) -> bool:
    """True for decoded JSON shaped like ``fusion_result.json`` (keyed, list or flat)."""
    if isinstance(document, list):
        return bool(document) and all(_is_graph_object(item) for item in document)
    if not isinstance(document, dict) or not document:
        return False
    if _is_graph_object(document):
        return True  # flat: one graph at the top level
    return all(
        isinstance(value, dict) and (_is_graph_object(value) or key.startswith(GRAPH_KEY))
        for key, value in document.items()
    )


#: The key naming a graph: a top-level key prefix (keyed shape) or a field (list and flat shapes).
GRAPH_KEY = "session_and_graph_id"
_GRAPH_FIELDS = frozenset(_SECTIONS) | {GRAPH_KEY}


def _is_graph_object(value: Any) -> bool:
    """One graph's statistics: an object with a fusion section or its ``session_and_graph_id`` field."""
    return isinstance(value, dict) and any(key in _GRAPH_FIELDS for key in value)


def _graphs_of(document: Any) -> list[tuple[str, Any]]:
    """The (graph key, graph object) pairs of one top-level JSON value, whatever its shape."""
    if not isinstance(document, _Pairs):  # a JSON list (_Pairs is a list too)
        return [(_graph_name(item, f"[{index}]"), item) for index, item in enumerate(document)]
    if any(key in _GRAPH_FIELDS for key, _ in document):
        return [(_graph_name(document, GRAPH_KEY), document)]
    return list(document)


def _graph_name(graph: Any, fallback: str) -> str:
    """``session_and_graph_id_<id>`` as the keyed shape spells it, else ``fallback``."""
    if isinstance(graph, _Pairs):
        ids = [value for key, value in graph if key == GRAPH_KEY and isinstance(value, (str, int))]
        if ids:
            return f"{GRAPH_KEY}_{ids[0]}"
    return fallback


class _Pairs(list):  # type: ignore[type-arg]
    """A JSON object kept as its key/value pairs, so duplicate keys survive."""


def _json_documents(text: str, source: str) -> list[Any]:
    """Every top-level object or list in the file, objects as key/value pairs (duplicates kept)."""
    decoder = json.JSONDecoder(object_pairs_hook=_Pairs)
    objects = []
    position = _skip_space(text, 0)
    if position == len(text):
        raise UsageError(f"{source}: empty file; expected {FILE_NAME} (a JSON object or list)")
    while position < len(text):
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{source}:{exc.lineno}: not valid JSON ({exc.msg}); expected "
                f"{FILE_NAME} as the compiler writes it"
            ) from None
        except RecursionError:
            raise too_deep(source, FILE_NAME) from None
        check_depth(value, source, FILE_NAME)
        if not isinstance(value, (_Pairs, list)):
            raise UsageError(
                f"{source}: the top level must be a JSON object (one key per graph, or one graph) "
                "or a list of graph objects"
            )
        objects.append(value)
        position = _skip_space(text, position)
    return objects


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _unique_key(key: str, existing: dict[str, Any]) -> str:
    """A graph compiled twice keeps both entries rather than losing the first."""
    candidate, number = key, 2
    while candidate in existing:
        candidate, number = f"{key}#{number}", number + 1
    return candidate


def _graph_stats(value: Any, source: str, graph_key: str) -> dict[Rule, PassStats]:
    if not isinstance(value, _Pairs):
        raise UsageError(
            f"{source}: '{graph_key}' must be an object with graph_fusion/ub_fusion"
        )
    stats: dict[Rule, PassStats] = {}
    for section_key, passes in value:
        section = _SECTIONS.get(section_key)
        if section is None:
            continue  # statistics fusion-dd does not use
        if not isinstance(passes, _Pairs):
            raise UsageError(f"{source}: '{graph_key}.{section_key}' must be an object")
        for name, counters in passes:
            where = f"{graph_key}.{section_key}.{name}"
            rule = Rule(name, section)
            new = _pass_stats(counters, source, where)
            old = stats.get(rule)
            if old is not None:
                new = PassStats(
                    max(old.match_times, new.match_times),
                    max(old.effect_times, new.effect_times),
                )
            stats[rule] = new
    return stats


def _pass_stats(counters: Any, source: str, where: str) -> PassStats:
    if not isinstance(counters, _Pairs):
        raise UsageError(f"{source}: '{where}' must be an object of counters")
    values = dict(counters)
    return PassStats(
        match_times=_count(values, "match_times", source, where, default=0),
        effect_times=_count(values, "effect_times", source, where, default=None),
    )


def _count(
    values: dict[str, Any], key: str, source: str, where: str, default: int | None
) -> int:
    if key not in values:
        if default is not None:
            return default
        raise UsageError(f"{source}: '{where}' has no '{key}'")
    raw = values[key]
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)  # a writer that emits numbers may emit 1.0
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise UsageError(
            f"{source}: '{where}.{key}' is {raw!r}; expected a count such as \"1\""
        )
    try:
        count = int(raw)
    except ValueError:
        raise UsageError(
            f"{source}: '{where}.{key}' is {raw!r}; expected a count such as \"1\""
        ) from None
    if count < 0:
        raise UsageError(f"{source}: '{where}.{key}' is negative ({count})")
    return count


def fired_in_any(results: Iterable[FusionResult]) -> set[str]:
    """Names that changed a graph in any of several results."""
    names: set[str] = set()
    for result in results:
        names |= result.fired_names()
    return names
