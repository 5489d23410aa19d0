"""Pairing the tensors of a fusion-on run with those of a fusion-off run.

Framework-level original names are the join key (docs/architecture.md 2.4): a fused op's
output carries ``_datadump_origin_name``/``_datadump_origin_output_index`` in the
graph and ``OpOutput.original_op`` in the dump, naming the original op output it
stands for. Relations between fused and original ops:

* one-to-one: a fused op replaced one original op;
* many-to-one: a fused op replaced several; its output is compared with the
  original output its origin attributes name;
* one-to-many / many-to-many: several fused ops share originals; each output is
  compared where its origin matches, and inner ops without origins are skipped
  (their values never exist in the fusion-off run).

Without graphs and without origins in the dump, tensors pair by op name.
Inputs pair by op name and input index only: a fused op's inputs have no op of
that name in the fusion-off run, and are counted, not compared. An op's inputs
come before its outputs in the order, so that an input that already differs
is seen before the output it feeds.
This module is pure: it works on scanned tensors and loaded graph models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..backends.cann.artifacts.graph import GraphModel, GraphOp
from .sources import DumpedTensor, FileProblem


@dataclass(frozen=True)
class Pair:
    """One fusion-on tensor and its fusion-off counterpart, with the on op's provenance."""

    position: int
    on: DumpedTensor
    off: DumpedTensor
    relation: str
    rules: tuple[str, ...]
    layers: tuple[str, ...]
    op_type: str


@dataclass
class Pairing:
    """The pairs in topological order of the fusion-on graph, and what could not be paired."""

    pairs: list[Pair] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)
    skipped_inner: int = 0
    unpaired_off: list[str] = field(default_factory=list)
    unpaired_inputs: int = 0


def pair_tensors(
    on: Sequence[DumpedTensor],
    off: Sequence[DumpedTensor],
    graph_on: GraphModel | None = None,
    graph_off: GraphModel | None = None,
) -> Pairing:
    """Pair every comparable fusion-on tensor with its fusion-off counterpart."""
    result = Pairing()
    ops_on = _ops_by_name(graph_on)
    ops_off = _ops_by_name(graph_off)
    on = _unique(_graph_names(on, ops_on), result.problems, "fusion-on")
    off = _unique(_graph_names(off, ops_off), result.problems, "fusion-off")
    _check_graph(graph_on, on, ops_on, result.problems)
    _check_graph(graph_off, off, ops_off, result.problems)

    by_name = {tensor.key: tensor for tensor in off}
    by_origin: dict[tuple[str, str, int], DumpedTensor] = {}
    for tensor in off:
        origin = _origin(tensor, ops_off)
        if origin is not None:
            by_origin.setdefault((origin[0], "output", origin[1]), tensor)

    sharing: dict[str, set[str]] = {}
    for op in ops_on.values():
        for original in op.original_names:
            sharing.setdefault(original, set()).add(op.name)

    used: set[tuple[str, int]] = set()
    position = 0
    for tensor in _topological(on, graph_on, ops_on):
        graph_op = ops_on.get(tensor.op)
        if tensor.kind == "input":
            counterpart = by_name.get(tensor.key)
            if counterpart is None:
                result.unpaired_inputs += 1
                continue
            used.add(counterpart.key)
            # no rules: an input holds what its producer computed, not what this op's fusion did
            result.pairs.append(
                Pair(position, tensor, counterpart, "input by name", (), _layers(tensor, graph_op, on),
                     graph_op.type if graph_op is not None and graph_op.type else tensor.op_type)
            )  # fmt: skip
            position += 1
            continue
        origin = _origin(tensor, ops_on)
        if origin is None and graph_op is not None and graph_op.fused and graph_op.original_names:
            result.skipped_inner += 1
            continue
        key = (origin[0], "output", origin[1]) if origin else tensor.key
        counterpart = by_name.get(key) or by_origin.get(key)
        if counterpart is None and origin is not None:
            counterpart = by_name.get(tensor.key)
        if counterpart is None:
            wanted = f"{key[0]}:{key[2]}"
            result.problems.append(
                FileProblem(tensor.source, f"no counterpart in the fusion-off dump (looked for {wanted})", op=tensor.op,
                            order=tensor.order)  # fmt: skip
            )
            continue
        used.add(counterpart.key)
        result.pairs.append(
            Pair(
                position=position,
                on=tensor,
                off=counterpart,
                relation=_relation(graph_op, sharing, graph_on is not None, origin is not None),
                rules=graph_op.passes() if graph_op is not None else (),
                layers=_layers(tensor, graph_op, on),
                op_type=(graph_op.type if graph_op is not None and graph_op.type else tensor.op_type),
            )
        )
        position += 1
    result.unpaired_off = [t.label for t in off if t.key not in used and t.kind == "output"]
    return result


def _unique(tensors: Sequence[DumpedTensor], problems: list[FileProblem], side: str) -> list[DumpedTensor]:
    seen: dict[tuple[str, str, int], DumpedTensor] = {}
    for tensor in sorted(tensors, key=lambda t: t.order):
        if tensor.key in seen:
            problems.append(
                FileProblem(
                    tensor.source,
                    f"{side} {tensor.kind} {tensor.index} of this op dumped twice; the first ({seen[tensor.key].source}) is used",
                    op=tensor.op,
                )
            )
            continue
        seen[tensor.key] = tensor
    return list(seen.values())


def _graph_names(tensors: Sequence[DumpedTensor], ops: dict[str, GraphOp]) -> list[DumpedTensor]:
    """Tensors named by the file name only (nano dumps carry no op name, and file names
    turn ``/`` and ``.`` into ``_``) get the graph's real op name when exactly one op
    of the graph has that file-name form."""
    if not ops:
        return list(tensors)
    from ..backends.cann.artifacts.dump import sanitize

    forms: dict[str, list[str]] = {}
    for name in ops:
        forms.setdefault(sanitize(name), []).append(name)
    renamed = []
    for tensor in tensors:
        real = forms.get(tensor.op, [])
        if tensor.op not in ops and len(real) == 1:
            tensor = replace(tensor, op=real[0])
        renamed.append(tensor)
    return renamed


def _ops_by_name(graph: GraphModel | None) -> dict[str, GraphOp]:
    if graph is None:
        return {}
    ops: dict[str, GraphOp] = {}
    for op in graph.ops:
        ops.setdefault(op.name, op)
    return ops


def _check_graph(
    graph: GraphModel | None, tensors: Sequence[DumpedTensor], ops: dict[str, GraphOp], problems: list[FileProblem]
) -> None:
    """A graph of another model (or run) than the dump: say so, once."""
    if graph is None or not tensors:
        return
    names = {tensor.op for tensor in tensors}
    missing = sorted(name for name in names if name not in ops)
    if missing:
        problems.append(
            FileProblem(
                graph.source,
                f"graph does not match the dump: {len(missing)} of {len(names)} dumped ops are not in it "
                f"(e.g. {', '.join(missing[:3])}); they are compared by name, in dump order, without rules",
            )
        )


def _origin(tensor: DumpedTensor, ops: dict[str, GraphOp]) -> tuple[str, int] | None:
    if tensor.origin is not None:
        return tensor.origin
    op = ops.get(tensor.op)
    if op is not None and tensor.index < len(op.output_origins):
        return op.output_origins[tensor.index]
    return None


def _topological(tensors: Sequence[DumpedTensor], graph: GraphModel | None, ops: dict[str, GraphOp]) -> list[DumpedTensor]:
    """Tensors in topological order of the graph (stable by graph position), then dump order."""
    first = lambda t: t.kind != "input"  # noqa: E731 - an op's inputs before its outputs
    if graph is None:
        return sorted(tensors, key=lambda t: (t.order, first(t), t.index))
    rank = _topological_rank(graph)
    unknown = len(rank)
    return sorted(tensors, key=lambda t: (rank.get(t.op, unknown), t.order if t.op not in rank else (0, ""), first(t), t.index))


def _topological_rank(graph: GraphModel) -> dict[str, int]:
    """Kahn's algorithm over data edges, ties broken by position in the dump file.

    GE writes Build graphs mostly in execution order already; the sort repairs the
    rest. Control edges (index -1) and inputs naming no op of the graph are ignored;
    ops left in a cycle keep their file order at the end.
    """
    import heapq

    position: dict[str, int] = {}
    for index, op in enumerate(graph.ops):
        position.setdefault(op.name, index)
    preds: dict[str, set[str]] = {name: set() for name in position}
    succs: dict[str, set[str]] = {name: set() for name in position}
    for op in graph.ops:
        for text in op.inputs:
            producer, _, index = text.rpartition(":")
            if not producer:
                producer, index = text, "0"
            if index == "-1" or producer not in position or producer == op.name:
                continue
            preds[op.name].add(producer)
            succs[producer].add(op.name)
    waiting = {name: len(p) for name, p in preds.items()}
    ready = [(position[name], name) for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    rank: dict[str, int] = {}
    while ready:
        _, name = heapq.heappop(ready)
        rank[name] = len(rank)
        for succ in succs[name]:
            waiting[succ] -= 1
            if waiting[succ] == 0:
                heapq.heappush(ready, (position[succ], succ))
    for name in sorted(position, key=position.get):  # type: ignore[arg-type]
        rank.setdefault(name, len(rank))
    return rank


def _relation(op: GraphOp | None, sharing: dict[str, set[str]], has_graph: bool, has_origin: bool) -> str:
    if op is None:
        if has_graph:
            return "not in graph"
        return "by origin" if has_origin else "by name"
    originals = set(op.original_names)
    shared = any(len(sharing.get(name, ())) > 1 for name in originals)
    many = len(originals) > 1
    if many and shared:
        return "many-to-many"
    if shared:
        return "one-to-many"
    if many:
        return "many-to-one"
    return "one-to-one"


def _layers(tensor: DumpedTensor, op: GraphOp | None, on: Sequence[DumpedTensor]) -> tuple[str, ...]:
    """The original layers behind an op: graph originals, else dump origins, else the op."""
    if op is not None and op.original_names:
        return tuple(dict.fromkeys(op.original_names))
    if tensor.origin is not None and tensor.origin[0] != tensor.op:
        return (tensor.origin[0],)
    return (tensor.op,)
