"""What a fusion pass is, and the pattern-matching helpers the passes share.

A pass is a function over the graph that finds its pattern (``match_times``) and
rewrites the matches it accepts (``effect_times``), exactly the two numbers CANN
reports per pass in ``fusion_result.json``. Passes run in a fixed order, graph
fusion before UB fusion, so a pass may only match what an earlier pass produced
(a chain) or may lose a pattern to an earlier pass.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from fusion_dd.core.rules import Rule, Section

from .graph import Graph, Node

Faults = frozenset[str]
PassFunction = Callable[[Graph, Faults], tuple[int, int]]

#: Planted faults: kernel variants a scenario switches on (see scenarios.py).
FAULT_LAYERNORM_ONE_PASS_FP16 = "layernorm_one_pass_fp16"
FAULT_VARIANCE_IN_INPUT_DTYPE = "variance_accumulates_in_input_dtype"
FAULT_SOFTMAX_CE_FP16_NO_MAX = "softmax_ce_fp16_without_max"

#: Ops a vector (UB) kernel can chain without leaving the unified buffer.
ELEMENTWISE = frozenset(
    {
        "Add",
        "BiasAdd",
        "Sub",
        "Mul",
        "RealDiv",
        "Maximum",
        "Neg",
        "Square",
        "Sqrt",
        "Rsqrt",
        "Exp",
        "Log",
        "Tanh",
        "Softplus",
        "Erf",
        "Gelu",
        "Mish",
    }
)
MEANS = ("ReduceMean", "ReduceMeanD")
SUMS = ("ReduceSum", "ReduceSumD")


@dataclass(frozen=True)
class FusionPass:
    """One switchable rule: its CANN name and section, and what its kernel changes."""

    name: str
    section: Section
    run: PassFunction
    summary: str
    training_only: bool = False

    @property
    def rule(self) -> Rule:
        return Rule(self.name, self.section)


class Registry:
    """Passes in pipeline order (the order of registration)."""

    def __init__(self) -> None:
        self.passes: list[FusionPass] = []

    def add(
        self, name: str, section: Section, summary: str, *, training_only: bool = False
    ) -> Callable[[PassFunction], PassFunction]:
        def register(function: PassFunction) -> PassFunction:
            if any(p.name == name for p in self.passes):
                raise ValueError(f"pass {name} registered twice")
            self.passes.append(FusionPass(name, section, function, summary, training_only))
            return function

        return register


# -- matching helpers -------------------------------------------------------------------


def is_op(node: Node | None, *ops: str) -> bool:
    return node is not None and node.op in ops


def const_of(node: Node) -> float | None:
    """The scalar constant operand of a binary op, if it has one."""
    if len(node.inputs) == 1 and "const" in node.attrs:
        return float(node.attrs["const"])
    return None


def sole(graph: Graph, node: Node) -> Node | None:
    return graph.sole_consumer(node.name)


def consumed_only_by(graph: Graph, node: Node, users: Iterable[Node]) -> bool:
    allowed = {user.name for user in users}
    return node.name not in graph.outputs and all(
        user.name in allowed for user in graph.consumers(node.name)
    )


def mark(node: Node, pass_name: str) -> None:
    if pass_name not in node.pass_name:
        node.pass_name.append(pass_name)


def replace(
    graph: Graph,
    members: list[Node],
    op: str,
    inputs: list[str],
    pass_name: str,
    **attrs: object,
) -> Node:
    """Collapse ``members`` into one new op (a graph-fusion result)."""
    fused = Node(name="", op=op, inputs=list(inputs), attrs=dict(attrs), pass_name=[pass_name])
    graph.fuse(members, fused)
    return fused


def fuse_kernel(
    graph: Graph,
    members: list[Node],
    pass_name: str,
    *,
    ub: bool,
    **attrs: object,
) -> Node:
    """Collapse ``members`` into a ``FusedKernel`` that runs them without rounding.

    Members that are fused kernels already are flattened, so one kernel never
    nests another. The output dtype stays what the last member produced.
    """
    inner: list[Node] = []
    for member in members:
        if member.op == "FusedKernel":
            inner.extend(copy.deepcopy(member.inner))
        else:
            inner.append(copy.deepcopy(member))
    names = {node.name for node in inner}
    external: list[str] = []
    for node in inner:
        for source in node.inputs:
            if source not in names and source not in external:
                external.append(source)
    fused = Node(
        name="",
        op="FusedKernel",
        inputs=external,
        attrs={"out_dtype": members[-1].dtype, **attrs},
        inner=inner,
    )
    if ub:
        fused.pass_name_ub = pass_name
    fused.pass_name = [pass_name]
    for member in members:
        if member.pass_name_ub and member.pass_name_ub not in fused.pass_name:
            fused.pass_name.insert(0, member.pass_name_ub)
    graph.fuse(members, fused)
    return fused


def nodes_of(graph: Graph, *ops: str) -> Iterator[Node]:
    """Nodes of the given ops, skipping any that an earlier rewrite in the same pass removed."""
    for node in [node for node in graph.nodes if node.op in ops]:
        if node.name in graph and graph[node.name] is node:
            yield node
