"""Where each fusion rule acted: the fused ops and the network layers behind them.

A culprit rule name alone does not tell a user what to look at; the fused ops it
produced and their ``_datadump_original_op_names`` do (those are the layers of
the user's network). UB fusion fuses several ops into one kernel, so its ops are
grouped by ``fusion_scope``: one group is one kernel.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ....core.rules import Rule, Section
from .common import sort_rules
from .graph import GraphModel, GraphOp


@dataclass(frozen=True)
class FusedOp:
    """One op that a rule produced, with the original ops it replaced."""

    rule: Rule
    op: str
    op_type: str
    graph: str
    source: str
    pass_chain: tuple[str, ...]
    fusion_scope: int | None
    original_names: tuple[str, ...]
    original_types: tuple[str, ...]

    def layers(self) -> list[str]:
        """The original op names without repeats (the op itself when it has none)."""
        return list(dict.fromkeys(self.original_names)) or [self.op]

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule.to_json(),
            "op": self.op,
            "op_type": self.op_type,
            "graph": self.graph,
            "source": self.source,
            "pass_chain": list(self.pass_chain),
            "fusion_scope": self.fusion_scope,
            "original_names": list(self.original_names),
            "original_types": list(self.original_types),
        }


GraphsArg = GraphModel | Iterable[GraphModel]


def rule_locations(graphs: GraphsArg) -> dict[Rule, list[FusedOp]]:
    """Every rule that acted in the graphs, with the fused ops it produced."""
    models = _as_list(graphs)
    ub = _ub_names(models)
    locations: dict[Rule, list[FusedOp]] = {}
    for model in models:
        for op in model.ops:
            for name in op.passes():
                rule = Rule(name, Section.UB if name in ub else Section.GRAPH)
                locations.setdefault(rule, []).append(_fused(rule, op, model))
    return {rule: locations[rule] for rule in sort_rules(locations)}


def where(graphs: GraphsArg, rule_name: str) -> list[FusedOp]:
    """The fused ops one rule produced; empty when it did not act in these graphs."""
    models = _as_list(graphs)
    section = Section.UB if rule_name in _ub_names(models) else Section.GRAPH
    rule = Rule(rule_name, section)
    return [
        _fused(rule, op, model)
        for model in models
        for op in model.ops
        if rule_name in op.passes()
    ]


def ub_kernels(fused_ops: Iterable[FusedOp]) -> dict[tuple[str, str, int | None], list[FusedOp]]:
    """Ops grouped into UB kernels by (dump file, graph, ``fusion_scope``)."""
    kernels: dict[tuple[str, str, int | None], list[FusedOp]] = {}
    for fused in fused_ops:
        kernels.setdefault((fused.source, fused.graph, fused.fusion_scope), []).append(fused)
    return kernels


def layers(fused_ops: Iterable[FusedOp]) -> list[str]:
    """The network layers behind some fused ops, in graph order, without repeats."""
    names: dict[str, None] = {}
    for fused in fused_ops:
        names.update(dict.fromkeys(fused.layers()))
    return list(names)


def format_locations(locations: Mapping[Rule, list[FusedOp]]) -> str:
    """Plain text for ``fusion-dd rules --where``: one block per rule."""
    blocks = []
    for rule, fused_ops in locations.items():
        if not fused_ops:
            blocks.append(f"{rule.name} ({rule.section}): did not act in these graphs")
            continue
        if rule.section is Section.UB:
            kernels = ub_kernels(fused_ops)
            lines = [
                f"{rule.name} ({rule.section}): {_plural(len(kernels), 'UB kernel')}, "
                f"{_plural(len(fused_ops), 'op')}"
            ]
            for (source, graph, scope), members in kernels.items():
                scope_text = "no fusion_scope" if scope is None else f"fusion_scope {scope}"
                lines.append(f"  kernel {scope_text} in {source} (graph {graph}):")
                lines.extend(f"    {_describe(fused)}" for fused in members)
                if len(members) > 1:
                    lines.append(f"    layers: {', '.join(layers(members))}")
        else:
            lines = [f"{rule.name} ({rule.section}): {_plural(len(fused_ops), 'op')}"]
            lines.extend(f"  {_describe(fused)}" for fused in fused_ops)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def _describe(fused: FusedOp) -> str:
    text = f"{fused.op} ({fused.op_type})"
    if fused.original_names:
        text += " <- " + ", ".join(_originals(fused))
    if len(fused.pass_chain) > 1:
        text += f"  [passes: {' > '.join(fused.pass_chain)}]"
    return text


def _originals(fused: FusedOp) -> list[str]:
    """``name (type)`` pairs when the types line up with the names, names otherwise."""
    names, types = fused.original_names, fused.original_types
    pairs = zip(names, types) if len(types) == len(names) else ((n, "") for n in names)
    seen: dict[str, None] = {}
    for name, op_type in pairs:
        seen.setdefault(f"{name} ({op_type})" if op_type else name, None)
    return list(seen)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _fused(rule: Rule, op: GraphOp, model: GraphModel) -> FusedOp:
    return FusedOp(
        rule=rule,
        op=op.name,
        op_type=op.type,
        graph=op.graph,
        source=model.source,
        pass_chain=op.passes(),
        fusion_scope=op.fusion_scope,
        original_names=op.original_names,
        original_types=op.original_types,
    )


def _as_list(graphs: GraphsArg) -> list[GraphModel]:
    return [graphs] if isinstance(graphs, GraphModel) else list(graphs)


def _ub_names(models: Iterable[GraphModel]) -> set[str]:
    names: set[str] = set()
    for model in models:
        names |= model.ub_names()
    return names
