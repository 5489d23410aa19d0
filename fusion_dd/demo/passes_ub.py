"""UBFusion passes: kernels fused in the unified buffer, after graph fusion.

A UB-fused kernel runs several ops back to back on the on-chip buffer, so the
intermediate tensors are never written to fp16 global memory (the executor keeps
them fp32). Names are real CANN UB pass names (fusion_dd/data/ub_fusion.txt).
The ``Matmul*UbFusion`` passes fuse backward kernels, so they act on the
gradient computation of the matmuls and GELU they name.
"""

from __future__ import annotations

from fusion_dd.core.rules import Section

from .dtypes import FP16
from .graph import Graph, Node
from .passes_base import (
    ELEMENTWISE,
    Faults,
    Registry,
    fuse_kernel,
    is_op,
    mark,
    nodes_of,
    sole,
)

UB_PASSES = Registry()
_UB = Section.UB


@UB_PASSES.add(
    "ATbeMatmulElemwiseFusionPass",
    _UB,
    "MatMulV2 and the Add after it in one kernel: the matmul result is not rounded "
    "to fp16 before the add",
)
def _matmul_elemwise(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for matmul in nodes_of(graph, "MatMulV2"):
        add = sole(graph, matmul)
        if not is_op(add, "Add") or len(add.inputs) != 2:
            continue
        fuse_kernel(graph, [matmul, add], "ATbeMatmulElemwiseFusionPass", ub=True)
        matched += 1
    return matched, matched


@UB_PASSES.add(
    "TbeEltwiseCastFusionPass",
    _UB,
    "an elementwise op and its Cast to fp16 in one kernel: computed in fp32, converted "
    "once, truncating",
)
def _eltwise_cast(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for node in nodes_of(graph, *ELEMENTWISE):
        cast = sole(graph, node)
        if not is_op(cast, "Cast") or cast.attrs["to"] != FP16:
            continue
        fuse_kernel(graph, [node, cast], "TbeEltwiseCastFusionPass", ub=True, round="rtz")
        matched += 1
    return matched, matched


@UB_PASSES.add(
    "TbeReduceElemwiseFusionPass",
    _UB,
    "a static-axis reduction and its elementwise consumer in one kernel: the reduction "
    "accumulates in fp32 and is not rounded to fp16 in between",
)
def _reduce_elemwise(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for reduce in nodes_of(graph, "ReduceMeanD", "ReduceSumD"):
        user = sole(graph, reduce)
        if user is None or user.op not in ELEMENTWISE:
            continue
        fused = fuse_kernel(graph, [reduce, user], "TbeReduceElemwiseFusionPass", ub=True)
        fused.inner[0].attrs["acc_fp32"] = True
        matched += 1
    return matched, matched


@UB_PASSES.add(
    "TbeEltwiseFusionPass",
    _UB,
    "chains of elementwise ops in one kernel: no fp16 round trips, rsqrt by the "
    "vector unit's estimate plus one Newton step",
)
def _eltwise(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for head in nodes_of(graph, *ELEMENTWISE):
        chain = [head]
        user = sole(graph, head)
        while user is not None and user.op in ELEMENTWISE:
            chain.append(user)
            user = sole(graph, user)
        if len(chain) < 2:
            continue
        fused = fuse_kernel(graph, chain, "TbeEltwiseFusionPass", ub=True)
        for inner in fused.inner:
            if inner.op == "Rsqrt":
                inner.attrs["fast"] = True
        matched += 1
    return matched, matched


_VECTOR_PRODUCERS = ELEMENTWISE | {"ReduceMeanVariance", "ReduceMeanD", "ReduceSumD"}


@UB_PASSES.add(
    "AutomaticUbFusion",
    _UB,
    "a leftover vector op is pulled into the UB kernel that consumes it, so its "
    "result is not rounded to fp16",
)
def _automatic(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for node in nodes_of(graph, *_VECTOR_PRODUCERS):
        user = sole(graph, node)
        if not is_op(user, "FusedKernel") or user.pass_name_ub is None:
            continue
        if any(inner.op not in _VECTOR_PRODUCERS | {"Cast"} for inner in user.inner):
            continue
        fuse_kernel(graph, [node, user], "AutomaticUbFusion", ub=True, **_kernel_attrs(user))
        matched += 1
    return matched, matched


def _kernel_attrs(node: Node) -> dict[str, object]:
    return {k: v for k, v in node.attrs.items() if not k.startswith("_") and k != "out_dtype"}


def _first_matmul_input(graph: Graph, user: Node, source: str) -> bool:
    if is_op(user, "MatMulV2", "MatMul"):
        return user.inputs[0] == source
    if is_op(user, "FusedKernel") and user.inner and user.inner[0].op in ("MatMulV2", "MatMul"):
        return user.inner[0].inputs[0] == source
    return False


@UB_PASSES.add(
    "MatmulGelugradUbFusion",
    _UB,
    "the next matmul's input gradient and GELU's gradient in one kernel: no fp16 "
    "rounding in between",
    training_only=True,
)
def _matmul_gelugrad(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for gelu in nodes_of(graph, "Gelu"):
        user = sole(graph, gelu)
        if user is None or not _first_matmul_input(graph, user, gelu.name):
            continue
        gelu.attrs["grad_fp32"] = True
        mark(gelu, "MatmulGelugradUbFusion")
        matched += 1
    return matched, matched


@UB_PASSES.add(
    "MatmulReduceSumUbFusion",
    _UB,
    "a biased matmul's bias gradient computed on the cube with its weight gradient, "
    "16 rows per fractal, partial sums in fp16",
    training_only=True,
)
def _matmul_reduce_sum(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for node in list(graph.walk()):
        if node.op == "MatMulV2" and len(node.inputs) == 3:
            node.attrs["bias_grad_on_cube"] = True
            mark(node, "MatmulReduceSumUbFusion")
            matched += 1
    return matched, matched


@UB_PASSES.add(
    "MatmulAtomicAddUbFusion",
    _UB,
    "weight gradients split over two cores along the batch and atomically added",
    training_only=True,
)
def _matmul_atomic_add(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for node in list(graph.walk()):
        if node.op in ("MatMul", "MatMulV2"):
            node.attrs["dw_split"] = 2
            mark(node, "MatmulAtomicAddUbFusion")
            matched += 1
    return matched, matched
