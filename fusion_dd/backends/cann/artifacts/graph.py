"""GE graph dumps reduced to what fusion-dd needs: which passes made which op.

Two forms of the same ``ge.proto.ModelDef`` reach users (docs/architecture.md 2.4): the
protobuf text dumps GE writes (``ge_proto_*.txt``) and the JSON that ``atc
--mode=5`` writes. Both are read into one small model of ops and their fusion
provenance (``pass_name``, ``pass_name_ub``, ``fusion_scope`` and the original
op names and types), so that everything downstream ignores the file form.

The mode-5 JSON is read directly rather than through protobuf's JSON mapping,
because atc writes ``attr`` as an array of key/value pairs, ``val_type`` as an
enum name and ``s`` as plain strings, none of which that mapping accepts.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from ....core.errors import UsageError
from ....core.rules import Rule, Section
from ....core.safe_read import GRAPH_DUMP_BYTES, MAX_JSON_DEPTH, loads_json, too_deep
from .common import read_text, sort_rules
from .ge_schema import message_class

PASS_NAME = "pass_name"
PASS_NAME_UB = "pass_name_ub"
FUSION_SCOPE = "fusion_scope"
ORIGINAL_NAMES = "_datadump_original_op_names"
ORIGINAL_TYPES = "_datadump_original_op_types"
ORIGIN_NAME = "_datadump_origin_name"
ORIGIN_OUTPUT_INDEX = "_datadump_origin_output_index"


@dataclass(frozen=True)
class GraphOp:
    """One op of a dumped graph with its fusion provenance.

    ``pass_name`` is the whole chain of passes that produced the op (a pass
    appends itself to the lists of the ops it replaced); ``pass_name_ub`` names
    the UB pass of a UB-fused op, whose ``fusion_scope`` groups the ops fused into
    one kernel.
    """

    name: str
    type: str
    graph: str
    pass_name: tuple[str, ...] = ()
    pass_name_ub: str | None = None
    fusion_scope: int | None = None
    original_names: tuple[str, ...] = ()
    original_types: tuple[str, ...] = ()
    #: The op's inputs as GE writes them (``"producer:index"``; ``-1`` marks a control edge).
    inputs: tuple[str, ...] = ()
    #: Per output: the original (pre-fusion) op output it stands for, from
    #: ``_datadump_origin_name`` / ``_datadump_origin_output_index``; None when absent.
    output_origins: tuple[tuple[str, int] | None, ...] = ()

    @property
    def fused(self) -> bool:
        """Fusion made this op; an empty original-names list alone does not count."""
        return bool(self.pass_name) or bool(self.pass_name_ub)

    def passes(self) -> tuple[str, ...]:
        """Every pass that acted on this op, the UB pass included, without repeats."""
        names = list(dict.fromkeys(self.pass_name))
        if self.pass_name_ub and self.pass_name_ub not in names:
            names.append(self.pass_name_ub)
        return tuple(names)


@dataclass(frozen=True)
class GraphModel:
    """The ops of every graph in one dump file (``graph[0]`` is the main graph)."""

    source: str
    name: str
    graphs: tuple[str, ...]
    ops: tuple[GraphOp, ...]

    def fused_ops(self) -> list[GraphOp]:
        return [op for op in self.ops if op.fused]

    @property
    def has_provenance(self) -> bool:
        """False for dumps without ``pass_name``/``pass_name_ub`` (nothing to learn)."""
        return any(op.fused for op in self.ops)

    def ub_names(self) -> set[str]:
        return {op.pass_name_ub for op in self.ops if op.pass_name_ub}

    def rules(self) -> list[Rule]:
        """The passes that acted on this graph, with their sections.

        A UB-fused op lists its UB pass in ``pass_name`` too, so a name seen as
        ``pass_name_ub`` anywhere is UBFusion and only the others are GraphFusion.
        """
        return rules_of([self])


def rules_of(graphs: Iterable[GraphModel]) -> list[Rule]:
    """The rules of several dumps together, sections decided across all of them."""
    graphs = list(graphs)
    ub: set[str] = set()
    for graph in graphs:
        ub |= graph.ub_names()
    found: set[Rule] = {Rule(name, Section.UB) for name in ub}
    for graph in graphs:
        for op in graph.ops:
            for name in op.pass_name:
                if name not in ub:
                    found.add(Rule(name, Section.GRAPH))
    return sort_rules(found)


def load_graph(path: str | Path) -> GraphModel:
    """Read one graph dump, text or mode-5 JSON, told apart by content."""
    path = Path(path)
    text = read_text(path, "graph dump", GRAPH_DUMP_BYTES)
    if text.lstrip().startswith("{"):
        return graph_from_json_text(text, str(path))
    return graph_from_proto_text(text, str(path))


# --- protobuf text dumps -----------------------------------------------------------


def graph_from_proto_text(text: str, source: str) -> GraphModel:
    """Parse a ``ModelDef`` in protobuf text format; unknown fields are skipped.

    ``Merge`` rather than ``Parse`` so that a field repeated by a newer writer
    never fails the whole dump; syntax errors keep their line number.
    """
    model = message_class("ModelDef")()
    try:
        text_format.Merge(text, model, allow_unknown_field=True, **_DEPTH_OPTION)
    except text_format.ParseError as exc:
        raise UsageError(_parse_error_line(exc, source)) from None
    except RecursionError:
        # Fields our schema does not declare are skipped by recursion that
        # max_recursion_depth does not bound; a dump nested that deep is hostile.
        raise too_deep(source, "GE graph dump") from None
    graphs = []
    ops: list[GraphOp] = []
    for index, graph in enumerate(model.graph):
        graph_name = graph.name or f"graph[{index}]"
        graphs.append(graph_name)
        ops.extend(_op_from_proto(op, graph_name) for op in graph.op)
    return GraphModel(source=source, name=model.name, graphs=tuple(graphs), ops=tuple(ops))


# protobuf >= 4.25 bounds the nesting of declared messages itself; older ones
# only through Python's recursion limit (caught above).
_DEPTH_OPTION = (
    {"max_recursion_depth": MAX_JSON_DEPTH}
    if "max_recursion_depth" in inspect.signature(text_format.Merge).parameters
    else {}
)


def _parse_error_line(exc: text_format.ParseError, source: str) -> str:
    message = str(exc)
    line = exc.GetLine() if hasattr(exc, "GetLine") else None
    column = exc.GetColumn() if hasattr(exc, "GetColumn") else None
    prefix = f"{line}:{column} : "
    if message.startswith(prefix):
        message = message[len(prefix) :]
    where = f"{source}:{line}" if line is not None else source
    return (
        f"{where}: {message} (expected a GE graph dump: ge.proto.ModelDef in "
        "protobuf text format)"
    )


def _op_from_proto(op: Any, graph_name: str) -> GraphOp:
    attrs = op.attr
    return GraphOp(
        name=op.name,
        type=op.type,
        graph=graph_name,
        pass_name=_proto_strings(attrs, PASS_NAME),
        pass_name_ub=_proto_string(attrs, PASS_NAME_UB),
        fusion_scope=_proto_int(attrs, FUSION_SCOPE),
        original_names=_proto_strings(attrs, ORIGINAL_NAMES),
        original_types=_proto_strings(attrs, ORIGINAL_TYPES),
        inputs=tuple(op.input),
        output_origins=tuple(_proto_origin(desc.attr) for desc in op.output_desc),
    )


def _proto_origin(attrs: Any) -> tuple[str, int] | None:
    name = _proto_string(attrs, ORIGIN_NAME)
    if name is None:
        return None
    return (name, _proto_int(attrs, ORIGIN_OUTPUT_INDEX) or 0)


def _proto_strings(attrs: Any, key: str) -> tuple[str, ...]:
    # ``key in attrs`` first: reading a missing key of a message map inserts it.
    if key not in attrs:
        return ()
    value = attrs[key]
    kind = value.WhichOneof("value")
    if kind == "list":
        return tuple(_decode(item) for item in value.list.s)
    if kind == "s":
        return (_decode(value.s),) if value.s else ()
    return ()


def _proto_string(attrs: Any, key: str) -> str | None:
    strings = _proto_strings(attrs, key)
    return strings[0] if strings and strings[0] else None


def _proto_int(attrs: Any, key: str) -> int | None:
    if key not in attrs:
        return None
    value = attrs[key]
    if value.WhichOneof("value") == "i":
        return int(value.i)
    if value.WhichOneof("value") == "list" and len(value.list.i) == 1:
        return int(value.list.i[0])
    return None


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


# --- atc --mode=5 JSON ---------------------------------------------------------------


def graph_from_json_text(text: str, source: str) -> GraphModel:
    """Parse the JSON written by ``atc --mode=5`` (or ``atc --json`` for an om)."""
    try:
        document = loads_json(text, source, "atc --mode=5 JSON")
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{source}:{exc.lineno}: not valid JSON ({exc.msg}); "
            "expected the JSON of atc --mode=5"
        ) from None
    return graph_from_json(document, source)


def graph_from_json(document: Any, source: str) -> GraphModel:
    """Build the model from an already-decoded mode-5 document.

    A bare ``GraphDef`` (an object with ``op``) is accepted as well as the
    ``ModelDef`` atc writes, so that a graph cut out of a model still reads.
    """
    if not isinstance(document, dict):
        raise UsageError(f"{source}: the top level must be a JSON object (a ModelDef)")
    if "graph" in document:
        raw_graphs = _expect_list(document["graph"], source, "graph")
        prefix = "graph"
    elif "op" in document:
        raw_graphs = [document]
        prefix = ""
    else:
        raise UsageError(
            f"{source}: no 'graph' key; expected the JSON of atc --mode=5 "
            "(a ModelDef with graph[].op[])"
        )
    graphs: list[str] = []
    ops: list[GraphOp] = []
    for index, raw_graph in enumerate(raw_graphs):
        where = f"{prefix}[{index}]" if prefix else "(graph)"
        if not isinstance(raw_graph, dict):
            raise UsageError(f"{source}: {where} must be an object")
        graph_name = _optional_str(raw_graph.get("name"), source, f"{where}.name")
        graph_name = graph_name or f"graph[{index}]"
        graphs.append(graph_name)
        raw_ops = _expect_list(raw_graph.get("op", []), source, f"{where}.op")
        for op_index, raw_op in enumerate(raw_ops):
            ops.append(_op_from_json(raw_op, graph_name, source, f"{where}.op[{op_index}]"))
    name = document.get("name") if isinstance(document.get("name"), str) else ""
    return GraphModel(source=source, name=name, graphs=tuple(graphs), ops=tuple(ops))


def _op_from_json(raw: Any, graph_name: str, source: str, where: str) -> GraphOp:
    if not isinstance(raw, dict):
        raise UsageError(f"{source}: {where} must be an object")
    attrs = _json_attrs(raw.get("attr", []), source, f"{where}.attr")
    name = _optional_str(raw.get("name"), source, f"{where}.name")
    op_type = _optional_str(raw.get("type"), source, f"{where}.type")
    return GraphOp(
        name=name,
        type=op_type,
        graph=graph_name,
        pass_name=_json_strings(attrs, PASS_NAME, source, where),
        pass_name_ub=_json_string(attrs, PASS_NAME_UB, source, where),
        fusion_scope=_json_int(attrs, FUSION_SCOPE, source, where),
        original_names=_json_strings(attrs, ORIGINAL_NAMES, source, where),
        original_types=_json_strings(attrs, ORIGINAL_TYPES, source, where),
        inputs=_json_inputs(raw.get("input", []), source, f"{where}.input"),
        output_origins=_json_origins(raw.get("output_desc", []), source, f"{where}.output_desc"),
    )


def _json_inputs(raw: Any, source: str, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise UsageError(f"{source}: {where} must be an array of strings")
    return tuple(raw)


def _json_origins(raw: Any, source: str, where: str) -> tuple[tuple[str, int] | None, ...]:
    """Each output's ``_datadump_origin_name``/``_output_index``; descs without them give None."""
    descs = _expect_list(raw, source, where)
    origins: list[tuple[str, int] | None] = []
    for index, desc in enumerate(descs):
        if not isinstance(desc, dict):
            raise UsageError(f"{source}: {where}[{index}] must be an object")
        attrs = _json_attrs(desc.get("attr", []), source, f"{where}[{index}].attr")
        name = _json_string(attrs, ORIGIN_NAME, source, f"{where}[{index}]")
        position = _json_int(attrs, ORIGIN_OUTPUT_INDEX, source, f"{where}[{index}]")
        origins.append(None if name is None else (name, position or 0))
    return tuple(origins)


def _json_attrs(raw: Any, source: str, where: str) -> dict[str, Any]:
    """``attr`` as a dict; atc writes an array of ``{key, value}``, proto JSON a map."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, list):
        raise UsageError(f"{source}: {where} must be an array of {{key, value}} objects")
    attrs: dict[str, Any] = {}
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise UsageError(
                f"{source}: {where}[{index}] must be an object with a string 'key' "
                "and a 'value'"
            )
        attrs[item["key"]] = item.get("value")
    return attrs


def _json_strings(attrs: Mapping[str, Any], key: str, source: str, where: str) -> tuple[str, ...]:
    value = attrs.get(key)
    if value is None:
        return ()
    path = f"{where}.attr[{key}]"
    if not isinstance(value, dict):
        raise UsageError(f"{source}: {path} must be an object")
    if "list" in value:
        listed = value["list"] if value["list"] is not None else {}
        if not isinstance(listed, dict):
            raise UsageError(f"{source}: {path}.list must be an object")
        items = listed.get("s", [])
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise UsageError(f"{source}: {path}.list.s must be an array of strings")
        return tuple(items)
    if "s" in value:
        if not isinstance(value["s"], str):
            raise UsageError(f"{source}: {path}.s must be a string")
        return (value["s"],) if value["s"] else ()
    return ()


def _json_string(attrs: Mapping[str, Any], key: str, source: str, where: str) -> str | None:
    strings = _json_strings(attrs, key, source, where)
    return strings[0] if strings and strings[0] else None


def _json_int(attrs: Mapping[str, Any], key: str, source: str, where: str) -> int | None:
    value = attrs.get(key)
    if not isinstance(value, dict) or "i" not in value:
        return None
    raw = value["i"]
    # protobuf's JSON mapping writes int64 as a string; atc writes a number.
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise UsageError(f"{source}: {where}.attr[{key}].i must be an integer")
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{source}: {where}.attr[{key}].i must be an integer") from None


def _expect_list(value: Any, source: str, where: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise UsageError(f"{source}: {where} must be an array")
    return value


def _optional_str(value: Any, source: str, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UsageError(f"{source}: {where} must be a string")
    return value
