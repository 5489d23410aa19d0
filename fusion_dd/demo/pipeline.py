"""The fusion pipeline: which passes run on a graph, and what they report.

``compile_graph`` is the simulated graph compiler. It runs every pass the switch
decision allows, in pipeline order (the GraphFusion passes of the model, AutoFuse
when ``AUTOFUSE_FLAGS`` switches it on (passes_autofuse.py), the GraphFusion passes
of the optimizer, then all UBFusion passes), and counts ``match_times`` and
``effect_times`` per pass the way CANN's ``fusion_result.json`` does. Passes
that are switched off do not run and are absent from the statistics, as in CANN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fusion_dd.core.rules import Rule, Section

from .graph import Graph
from .passes_base import (
    FAULT_LAYERNORM_ONE_PASS_FP16,
    FAULT_SOFTMAX_CE_FP16_NO_MAX,
    FAULT_VARIANCE_IN_INPUT_DTYPE,
    Faults,
    FusionPass,
)
from .passes_autofuse import AUTOFUSE_OFF, AutoFuseSwitch, run_autofuse
from .passes_graph import GRAPH_PASSES
from .passes_optimizer import OPTIMIZER_PASSES
from .passes_ub import UB_PASSES

__all__ = [
    "ALL_PASSES",
    "FAULT_LAYERNORM_ONE_PASS_FP16",
    "FAULT_SOFTMAX_CE_FP16_NO_MAX",
    "FAULT_VARIANCE_IN_INPUT_DTYPE",
    "Faults",
    "FusionStats",
    "PassCount",
    "RuleDecision",
    "compile_graph",
    "known_rules",
]

#: Every pass, in the order the compiler runs them.
ALL_PASSES: tuple[FusionPass, ...] = tuple(
    GRAPH_PASSES.passes + OPTIMIZER_PASSES.passes + UB_PASSES.passes
)

#: AutoFuse runs after the model's GraphFusion passes, before this one (the optimizer's first).
_AUTOFUSE_BEFORE = OPTIMIZER_PASSES.passes[0]

#: Decides whether a rule is switched on for this compilation.
RuleDecision = Callable[[Rule], bool]


@dataclass(frozen=True)
class PassCount:
    section: Section
    match_times: int
    effect_times: int


@dataclass
class FusionStats:
    """Per-pass counts for one compiled graph, in pipeline order."""

    graph: str
    counts: dict[str, PassCount] = field(default_factory=dict)
    #: Kernels AutoFuse fused per switch point (not in fusion_result.json, as in CANN).
    autofuse: dict[str, int] = field(default_factory=dict)

    def effective(self) -> list[Rule]:
        fired = [
            Rule(name, count.section)
            for name, count in self.counts.items()
            if count.effect_times > 0
        ]
        return fired + [Rule(name, Section.AUTOFUSE) for name, count in self.autofuse.items() if count > 0]


def known_rules() -> list[Rule]:
    """Every rule the simulated compiler implements (fired or not)."""
    return [p.rule for p in ALL_PASSES]


def compile_graph(
    graph: Graph,
    decide: RuleDecision,
    faults: Faults = frozenset(),
    autofuse: AutoFuseSwitch = AUTOFUSE_OFF,
) -> tuple[Graph, FusionStats]:
    """Run the enabled passes over ``graph`` (in place) and count what they did.

    ``autofuse`` is what ``AUTOFUSE_FLAGS`` switches on (off by default, as in CANN).
    """
    stats = FusionStats(graph.name)
    graph.infer_dtypes()
    for fusion_pass in ALL_PASSES:
        if fusion_pass is _AUTOFUSE_BEFORE:
            stats.autofuse = run_autofuse(graph, autofuse, faults)
        if fusion_pass.training_only and not graph.training:
            continue
        if not decide(fusion_pass.rule):
            continue
        matched, effective = fusion_pass.run(graph, faults)
        graph.infer_dtypes()
        if matched:
            stats.counts[fusion_pass.name] = PassCount(fusion_pass.section, matched, effective)
    return graph, stats
