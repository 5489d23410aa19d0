"""GraphFusion passes that act on the optimizer graph (clipping, decay, momentum).

They are GraphFusion rules like the model's (fusion_dd/data/graph_fusion.txt); they
live apart because they only ever match the update step that TF-style optimizers
emit: per-tensor sums of squares for global-norm clipping, weight decay, the
loss-scale division and ApplyMomentum. They run after the model's graph passes.
"""

from __future__ import annotations

from fusion_dd.core.rules import Section

from .graph import Graph
from .passes_base import (
    SUMS,
    Faults,
    Registry,
    const_of,
    is_op,
    mark,
    nodes_of,
    replace,
    sole,
)

OPTIMIZER_PASSES = Registry()
_G = Section.GRAPH


@OPTIMIZER_PASSES.add(
    "AASquareSumMaximumRsqrtMulFusionPass",
    _G,
    "the clip factor scale*rsqrt(max(s, floor)) in one kernel: rsqrt estimate plus "
    "two Newton steps",
)
def _square_sum_max_rsqrt_mul(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for top in nodes_of(graph, "Maximum"):
        rsqrt = sole(graph, top)
        mul = sole(graph, rsqrt) if is_op(rsqrt, "Rsqrt") else None
        if const_of(top) is None or not is_op(mul, "Mul") or const_of(mul) is None:
            continue
        replace(
            graph,
            [top, rsqrt, mul],
            "ClipByNormFactor",
            [top.inputs[0]],
            "AASquareSumMaximumRsqrtMulFusionPass",
            floor=const_of(top),
            scale=const_of(mul),
        )
        matched += 1
    return matched, matched


@OPTIMIZER_PASSES.add(
    "A_MomentumLossscaleFusionPass",
    _G,
    "the loss-scale division is folded into ApplyMomentum and rounded once",
)
def _momentum_lossscale(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for apply in nodes_of(graph, "ApplyMomentum"):
        scale = graph[apply.inputs[2]]
        if not is_op(scale, "Mul") or const_of(scale) is None or sole(graph, scale) is not apply:
            continue
        replace(
            graph,
            [scale, apply],
            "ApplyMomentum",
            [apply.inputs[0], apply.inputs[1], scale.inputs[0]],
            "A_MomentumLossscaleFusionPass",
            **{k: v for k, v in apply.attrs.items() if not k.startswith("_")},
            grad_scale=const_of(scale),
        )
        matched += 1
    return matched, matched


@OPTIMIZER_PASSES.add(
    "SquareSumV2",
    _G,
    "Square + ReduceSum becomes SquareSumV2: reads the tensor as fp16, squares never "
    "written out, 64 lane accumulators",
)
def _square_sum_v2(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for total in nodes_of(graph, *SUMS):
        square = graph[total.inputs[0]]
        if total.attrs.get("axis") is not None or not is_op(square, "Square"):
            continue
        if sole(graph, square) is not total:
            continue
        replace(graph, [square, total], "SquareSumV2", [square.inputs[0]], "SquareSumV2")
        matched += 1
    return matched, matched


@OPTIMIZER_PASSES.add(
    "AddNFusionPass",
    _G,
    "an AddN of more than 8 tensors is split into AddN kernels of at most 8 inputs",
)
def _addn(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for node in nodes_of(graph, "AddN"):
        if len(node.inputs) > 8:
            node.attrs["tree_group"] = 8
            mark(node, "AddNFusionPass")
            matched += 1
    return matched, matched


@OPTIMIZER_PASSES.add(
    "MulAddNL2LossFusionPass",
    _G,
    "weight decay (Mul) and the gradient AddN in one kernel that writes fp16",
)
def _mul_addn_l2loss(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for addn in nodes_of(graph, "AddN"):
        if len(addn.inputs) != 2:
            continue
        decay = graph[addn.inputs[1]]
        if not is_op(decay, "Mul") or const_of(decay) is None or sole(graph, decay) is not addn:
            continue
        replace(
            graph,
            [decay, addn],
            "MulAddN",
            [addn.inputs[0], decay.inputs[0]],
            "MulAddNL2LossFusionPass",
            const=const_of(decay),
        )
        matched += 1
    return matched, matched
