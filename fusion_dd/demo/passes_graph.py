"""GraphFusion passes: graph rewrites, in pipeline order.

Names are real CANN pass names (fusion_dd/data/graph_fusion.txt). CANN runs
passes prefixed ``A``/``AA`` early and ``Z`` late, and so does this pipeline.
Each pass's summary says how its kernel's numerics differ from the unfused ops.
"""

from __future__ import annotations

import math
import struct

from fusion_dd.core.rules import Section

from .dtypes import FP16, FP32
from .graph import Graph, Node
from .passes_base import (
    FAULT_LAYERNORM_ONE_PASS_FP16,
    FAULT_SOFTMAX_CE_FP16_NO_MAX,
    FAULT_VARIANCE_IN_INPUT_DTYPE,
    MEANS,
    SUMS,
    Faults,
    Registry,
    const_of,
    consumed_only_by,
    fuse_kernel,
    is_op,
    mark,
    nodes_of,
    replace,
    sole,
)

GRAPH_PASSES = Registry()
_G = Section.GRAPH


def _retype(graph: Graph, ops: tuple[str, ...], new_op: str, pass_name: str) -> tuple[int, int]:
    hits = list(nodes_of(graph, *ops))
    for node in hits:
        node.op = new_op
        mark(node, pass_name)
    return len(hits), len(hits)


@GRAPH_PASSES.add(
    "AReduceMeanFusionPass",
    _G,
    "ReduceMean becomes ReduceMeanD: scales by 1/N before summing and keeps an "
    "fp16 accumulator for fp16 inputs",
)
def _a_reduce_mean(graph: Graph, faults: Faults) -> tuple[int, int]:
    return _retype(graph, ("ReduceMean",), "ReduceMeanD", "AReduceMeanFusionPass")


@GRAPH_PASSES.add(
    "AReduceSumFusionPass",
    _G,
    "ReduceSum becomes ReduceSumD: two interleaved lane accumulators (fp32) or one "
    "fp16 accumulator (fp16 inputs)",
)
def _a_reduce_sum(graph: Graph, faults: Faults) -> tuple[int, int]:
    return _retype(graph, ("ReduceSum",), "ReduceSumD", "AReduceSumFusionPass")


@GRAPH_PASSES.add(
    "ARefreshCubeC0FusionPass",
    _G,
    "MatMul with K not a multiple of 16 gets C0=4: K accumulated in blocks of four",
)
def _refresh_cube_c0(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for node in nodes_of(graph, "MatMul"):
        if node.attrs.get("k", 16) % 16:
            node.attrs["k_block"] = 4
            mark(node, "ARefreshCubeC0FusionPass")
            matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "Pow2SquareFusionPass",
    _G,
    "Pow(x, 2), computed as exp(2 ln|x|) on the vector unit, becomes an exact Square",
)
def _pow2square(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for node in nodes_of(graph, "Pow"):
        if node.attrs.get("exponent") == 2.0:
            node.op = "Square"
            mark(node, "Pow2SquareFusionPass")
            matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "RealDiv2MulsFusionPass",
    _G,
    "division by a constant becomes a multiplication by its reciprocal, rounded to "
    "the tensor's dtype",
)
def _realdiv_to_mul(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = effective = 0
    for node in nodes_of(graph, "RealDiv"):
        matched += 1
        divisor = const_of(node)
        if divisor is None:
            continue  # a tensor divisor: matched, rejected
        reciprocal = 1.0 / divisor
        if node.dtype == FP16:
            reciprocal = _to_fp16_value(reciprocal)
        node.op = "Mul"
        node.attrs["const"] = reciprocal
        mark(node, "RealDiv2MulsFusionPass")
        effective += 1
    return matched, effective


def _to_fp16_value(value: float) -> float:
    """The nearest fp16 value, without numpy (the compiler stays numpy-free)."""
    return struct.unpack("<e", struct.pack("<e", value))[0]


def _layer_norm_core(graph: Graph, xhat: Node, style: str) -> list[Node] | None:
    """The statistics part of a primitive LayerNorm ending in ``xhat``.

    TF style: Mul(xc, Rsqrt(Add(var, eps))); ONNX style: RealDiv(xc, Sqrt(...)).
    Returns [mean, xc, sq, var, ve, scale, xhat] or None.
    """
    if style == "tf":
        if not is_op(xhat, "Mul") or len(xhat.inputs) != 2:
            return None
        xc, scale = graph[xhat.inputs[0]], graph[xhat.inputs[1]]
        if not is_op(scale, "Rsqrt"):
            return None
    else:
        if not is_op(xhat, "RealDiv") or len(xhat.inputs) != 2:
            return None
        xc, scale = graph[xhat.inputs[0]], graph[xhat.inputs[1]]
        if not is_op(scale, "Sqrt"):
            return None
    ve = graph[scale.inputs[0]]
    if not is_op(ve, "Add") or const_of(ve) is None:
        return None
    var = graph[ve.inputs[0]]
    if not is_op(var, *MEANS) or var.attrs.get("axis") != -1:
        return None
    sq = graph[var.inputs[0]]
    if not is_op(sq, "Square", "Pow") or sq.inputs[0] != xc.name:
        return None
    if not is_op(xc, "Sub") or len(xc.inputs) != 2:
        return None
    mean = graph[xc.inputs[1]]
    if not is_op(mean, *MEANS) or mean.inputs[0] != xc.inputs[0] or mean.attrs.get("axis") != -1:
        return None
    chain = [mean, xc, sq, var, ve, scale, xhat]
    if not consumed_only_by(graph, xc, [sq, xhat]):
        return None
    for node, user in zip([mean, sq, var, ve, scale], [xc, var, ve, scale, xhat]):
        if sole(graph, node) is not user:
            return None
    return chain


def _affine_tail(graph: Graph, xhat: Node) -> tuple[Node, Node] | None:
    scaled = sole(graph, xhat)
    if not is_op(scaled, "Mul") or len(scaled.inputs) != 2:
        return None
    out = sole(graph, scaled)
    if not is_op(out, "Add") or len(out.inputs) != 2 or out.inputs[0] != scaled.name:
        return None
    if not is_op(graph[scaled.inputs[1]], "Variable") or not is_op(
        graph[out.inputs[1]], "Variable"
    ):
        return None
    return scaled, out


def _fuse_layer_norms(graph: Graph, style: str, pass_name: str, variance: str) -> tuple[int, int]:
    matched = 0
    for xhat in nodes_of(graph, "Mul" if style == "tf" else "RealDiv"):
        core = _layer_norm_core(graph, xhat, style)
        tail = _affine_tail(graph, xhat) if core else None
        if core is None or tail is None:
            continue
        scaled, out = tail
        mean = core[0]
        replace(
            graph,
            core + [scaled, out],
            "LayerNorm",
            [mean.inputs[0], scaled.inputs[1], out.inputs[1]],
            pass_name,
            eps=const_of(core[4]),
            variance=variance,
            style=style,
            square_via_pow=core[2].op == "Pow",
        )
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "LayerNormFusionPass",
    _G,
    "the TF-pattern LayerNorm becomes one kernel: xc*(rstd*gamma)+beta in one "
    "expression (planted fault: variance as E[x^2]-E[x]^2 with fp16 accumulators)",
)
def _layer_norm_tf(graph: Graph, faults: Faults) -> tuple[int, int]:
    variance = "one_pass_fp16" if FAULT_LAYERNORM_ONE_PASS_FP16 in faults else "two_pass"
    return _fuse_layer_norms(graph, "tf", "LayerNormFusionPass", variance)


@GRAPH_PASSES.add(
    "LayerNormONNXFusionPass",
    _G,
    "the ONNX-pattern LayerNorm (Pow/Sqrt/RealDiv) becomes the same fused kernel",
)
def _layer_norm_onnx(graph: Graph, faults: Faults) -> tuple[int, int]:
    return _fuse_layer_norms(graph, "onnx", "LayerNormONNXFusionPass", "two_pass")


@GRAPH_PASSES.add(
    "LayerNormTrainingFusionPass",
    _G,
    "a training LayerNorm is split into LNTrainingReduce (sum x, sum x^2 in fp32, "
    "one pass) and LNTrainingUpdate",
    training_only=True,
)
def _layer_norm_training(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = effective = 0
    for node in nodes_of(graph, "LayerNorm"):
        matched += 1
        if node.attrs.get("variance") != "two_pass":
            continue  # no split implementation for this kernel variant
        node.attrs["variance"] = "one_pass_fp32"
        mark(node, "LayerNormTrainingFusionPass")
        effective += 1
    return matched, effective


def _annotate(
    graph: Graph, ops: tuple[str, ...], pass_name: str, **attrs: object
) -> tuple[int, int]:
    matched = 0
    for node in list(graph.walk()):
        if node.op in ops:
            node.attrs.update(attrs)
            mark(node, pass_name)
            matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "LayerNormGradFusionPass",
    _G,
    "LayerNorm's input gradient as one LayerNormGrad kernel (the N*dy - sum form)",
    training_only=True,
)
def _layer_norm_grad(graph: Graph, faults: Faults) -> tuple[int, int]:
    return _annotate(graph, ("LayerNorm",), "LayerNormGradFusionPass", grad="fused")


@GRAPH_PASSES.add(
    "LayerNormGradFusionPassBetaGamma",
    _G,
    "gamma/beta gradients reduced in blocks of 64 rows, one block per core, partial "
    "sums written in fp16",
    training_only=True,
)
def _layer_norm_beta_gamma(graph: Graph, faults: Faults) -> tuple[int, int]:
    return _annotate(
        graph, ("LayerNorm",), "LayerNormGradFusionPassBetaGamma", beta_gamma="blocked"
    )


@GRAPH_PASSES.add(
    "CastRemoveFusionPass",
    _G,
    "drops an fp16->fp32 Cast in front of mean/sub ops that accept fp16, so they compute in fp16",
)
def _cast_remove(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for cast in nodes_of(graph, "Cast"):
        if cast.attrs["to"] != FP32 or graph[cast.inputs[0]].dtype != FP16:
            continue
        users = graph.consumers(cast.name)
        if not users or cast.name in graph.outputs:
            continue
        if not all(user.op in ("ReduceMean", "ReduceMeanD", "Sub") for user in users):
            continue
        for user in users:
            mark(user, "CastRemoveFusionPass")
        graph.bypass(cast)
        graph.infer_dtypes()
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "BatchMatMulFusionPass",
    _G,
    "Transpose + BatchMatMul becomes BatchMatMul(adj_y): the transposed operand is "
    "read in fractal blocks, K accumulated 8 at a time",
)
def _batch_matmul(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for bmm in nodes_of(graph, "BatchMatMul"):
        trans = graph[bmm.inputs[1]]
        if not is_op(trans, "Transpose") or sole(graph, trans) is not bmm:
            continue
        if tuple(trans.attrs["perm"])[-2:] != (2, 1):
            continue
        attrs = {k: v for k, v in bmm.attrs.items() if not k.startswith("_")}
        attrs.update(adj_y=True, k_block=8)
        replace(
            graph,
            [trans, bmm],
            "BatchMatMul",
            [bmm.inputs[0], trans.inputs[0]],
            "BatchMatMulFusionPass",
            **attrs,
        )
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "SoftmaxFusionPass",
    _G,
    "the primitive softmax becomes SoftmaxV2, which multiplies by 1/sum",
)
def _softmax(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for out in nodes_of(graph, "RealDiv"):
        if len(out.inputs) != 2:
            continue
        ex, total = graph[out.inputs[0]], graph[out.inputs[1]]
        if not (is_op(ex, "Exp") and is_op(total, *SUMS) and total.inputs[0] == ex.name):
            continue
        shifted = graph[ex.inputs[0]]
        if not is_op(shifted, "Sub") or len(shifted.inputs) != 2:
            continue
        top = graph[shifted.inputs[1]]
        if not is_op(top, "ReduceMax") or top.inputs[0] != shifted.inputs[0]:
            continue
        if not (
            consumed_only_by(graph, ex, [total, out])
            and sole(graph, total) is out
            and sole(graph, shifted) is ex
            and sole(graph, top) is shifted
        ):
            continue
        replace(
            graph,
            [top, shifted, ex, total, out],
            "SoftmaxV2",
            [top.inputs[0]],
            "SoftmaxFusionPass",
            sum_lanes=total.op == "ReduceSumD",
        )
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "SoftmaxGradFusionPass",
    _G,
    "SoftmaxV2's gradient as one SoftmaxGrad kernel: y*dy - y*sum(y*dy)",
    training_only=True,
)
def _softmax_grad(graph: Graph, faults: Faults) -> tuple[int, int]:
    return _annotate(graph, ("SoftmaxV2",), "SoftmaxGradFusionPass", grad="fused")


@GRAPH_PASSES.add(
    "GeluFusionPass",
    _G,
    "the erf GELU (x/2 * (1 + erf(x/sqrt2))) becomes the Gelu kernel's tanh approximation",
)
def _gelu(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for out in nodes_of(graph, "Mul"):
        if len(out.inputs) != 2:
            continue
        half, one_plus = graph[out.inputs[0]], graph[out.inputs[1]]
        if not (is_op(half, "Mul") and const_of(half) == 0.5):
            continue
        if not (is_op(one_plus, "Add") and const_of(one_plus) == 1.0):
            continue
        erf = graph[one_plus.inputs[0]]
        if not is_op(erf, "Erf"):
            continue
        scaled = graph[erf.inputs[0]]
        value = const_of(scaled) if is_op(scaled, "Mul", "RealDiv") else None
        if value is None:
            continue
        factor = value if scaled.op == "Mul" else 1.0 / value
        if abs(factor - 1.0 / math.sqrt(2.0)) > 1e-3 or scaled.inputs[0] != half.inputs[0]:
            continue
        members = [half, scaled, erf, one_plus, out]
        if any(sole(graph, n) is None for n in members[:-1]):
            continue
        replace(graph, members, "Gelu", [half.inputs[0]], "GeluFusionPass")
        matched += 1
    return matched, matched


def _matmul_attrs(matmul: Node) -> dict[str, object]:
    return {k: v for k, v in matmul.attrs.items() if not k.startswith("_")}


@GRAPH_PASSES.add(
    "MatMulReshapeBiasAddFusionPass",
    _G,
    "Reshape-MatMul-Reshape-BiasAdd becomes one MatMulV2 adding the bias to the fp32 "
    "accumulator before the fp16 output is written",
)
def _matmul_reshape_bias(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for bias in nodes_of(graph, "BiasAdd"):
        r_out = graph[bias.inputs[0]]
        if not is_op(r_out, "Reshape") or sole(graph, r_out) is not bias:
            continue
        matmul = graph[r_out.inputs[0]]
        if not is_op(matmul, "MatMul") or sole(graph, matmul) is not r_out:
            continue
        r_in = graph[matmul.inputs[0]]
        if not is_op(r_in, "Reshape") or sole(graph, r_in) is not matmul:
            continue
        replace(
            graph,
            [r_in, matmul, r_out, bias],
            "MatMulV2",
            [r_in.inputs[0], matmul.inputs[1], bias.inputs[1]],
            "MatMulReshapeBiasAddFusionPass",
            **_matmul_attrs(matmul),
        )
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "MatMulBiasAddFusionPass",
    _G,
    "MatMul + BiasAdd becomes MatMulV2 adding the bias before the fp16 rounding",
)
def _matmul_bias(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for bias in nodes_of(graph, "BiasAdd"):
        matmul = graph[bias.inputs[0]]
        if not is_op(matmul, "MatMul") or sole(graph, matmul) is not bias:
            continue
        replace(
            graph,
            [matmul, bias],
            "MatMulV2",
            [*matmul.inputs, bias.inputs[1]],
            "MatMulBiasAddFusionPass",
            **_matmul_attrs(matmul),
        )
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "SoftplusTanhMulPass",
    _G,
    "x*tanh(softplus(x)) becomes the Mish kernel, tanh through 1-2/(e^2s+1)",
)
def _mish(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for out in nodes_of(graph, "Mul"):
        if len(out.inputs) != 2:
            continue
        tanh = graph[out.inputs[1]]
        if not is_op(tanh, "Tanh") or sole(graph, tanh) is not out:
            continue
        softplus = graph[tanh.inputs[0]]
        if not is_op(softplus, "Softplus") or sole(graph, softplus) is not tanh:
            continue
        if softplus.inputs[0] != out.inputs[0]:
            continue
        replace(graph, [softplus, tanh, out], "Mish", [out.inputs[0]], "SoftplusTanhMulPass")
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "GemmToMatmulFusionPass",
    _G,
    "the ONNX Gemm leaves the AI CPU (fp32) for the cube: fp16 weights, fp16 output",
)
def _gemm_to_matmul(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for gemm in nodes_of(graph, "Gemm"):
        a, w, c = gemm.inputs
        casts = []
        for source in (w, c):
            cast = Node(
                name=f"{gemm.name}/{source.split('/')[-1]}_fp16",
                op="Cast",
                inputs=[source],
                attrs={"to": FP16},
                pass_name=["GemmToMatmulFusionPass"],
            )
            graph.insert_before(gemm.name, cast)
            casts.append(cast.name)
        matmul = Node(
            name=f"{gemm.name}/matmul",
            op="MatMulV2",
            inputs=[a, casts[0], casts[1]],
            attrs={"transpose_b": bool(gemm.attrs.get("transB"))},
            pass_name=["GemmToMatmulFusionPass"],
        )
        graph.insert_before(gemm.name, matmul)
        replace(graph, [gemm], "Cast", [matmul.name], "GemmToMatmulFusionPass", to=FP32)
        graph.infer_dtypes()
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "MatmulCastFusionPass",
    _G,
    "MatMulV2 followed by a Cast to fp32 writes its fp32 accumulator directly",
)
def _matmul_cast(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for cast in nodes_of(graph, "Cast"):
        matmul = graph[cast.inputs[0]]
        if cast.attrs["to"] != FP32 or not is_op(matmul, "MatMulV2") or matmul.dtype != FP16:
            continue
        if sole(graph, matmul) is not cast:
            continue
        replace(
            graph,
            [matmul, cast],
            "MatMulV2",
            list(matmul.inputs),
            "MatmulCastFusionPass",
            **_matmul_attrs(matmul),
            out_dtype=FP32,
        )
        matched += 1
    return matched, matched


def _log_softmax_chain(graph: Graph, out: Node) -> list[Node] | None:
    """[max, shifted, exp, sum, log, out] for out = Sub(shifted, Log(Sum(Exp(shifted))))."""
    if not is_op(out, "Sub") or len(out.inputs) != 2:
        return None
    shifted, lse = graph[out.inputs[0]], graph[out.inputs[1]]
    if not (is_op(lse, "Log") and is_op(shifted, "Sub") and len(shifted.inputs) == 2):
        return None
    total = graph[lse.inputs[0]]
    if not is_op(total, *SUMS):
        return None
    ex = graph[total.inputs[0]]
    if not is_op(ex, "Exp") or ex.inputs[0] != shifted.name:
        return None
    top = graph[shifted.inputs[1]]
    if not is_op(top, "ReduceMax") or top.inputs[0] != shifted.inputs[0]:
        return None
    if not consumed_only_by(graph, shifted, [ex, out]):
        return None
    for node, user in ((top, shifted), (ex, total), (total, lse), (lse, out)):
        if sole(graph, node) is not user:
            return None
    return [top, shifted, ex, total, lse, out]


@GRAPH_PASSES.add(
    "SoftmaxCrossEntropyWithLogitsPass",
    _G,
    "the primitive cross-entropy becomes one kernel writing its backprop in fp16 "
    "(planted fault: exp of raw logits in fp16, no max subtraction: Inf/NaN)",
    training_only=True,
)
def _softmax_cross_entropy(graph: Graph, faults: Faults) -> tuple[int, int]:
    mode = "fp16_no_max" if FAULT_SOFTMAX_CE_FP16_NO_MAX in faults else "stable"
    matched = 0
    for neg in nodes_of(graph, "Neg"):
        total = graph[neg.inputs[0]]
        if not is_op(total, *SUMS) or sole(graph, total) is not neg:
            continue
        picked = graph[total.inputs[0]]
        if not is_op(picked, "Mul") or len(picked.inputs) != 2 or sole(graph, picked) is not total:
            continue
        logp, labels = graph[picked.inputs[0]], graph[picked.inputs[1]]
        if not is_op(labels, "OneHot") or sole(graph, logp) is not picked:
            continue
        chain = _log_softmax_chain(graph, logp)
        if chain is None:
            continue
        replace(
            graph,
            chain + [picked, total, neg],
            "SoftmaxCrossEntropyWithLogits",
            [chain[0].inputs[0], labels.name],
            "SoftmaxCrossEntropyWithLogitsPass",
            mode=mode,
        )
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "LogSoftmaxFusionPass",
    _G,
    "the primitive log-softmax becomes LogSoftmaxV2, exponentials through exp2",
)
def _log_softmax(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for out in nodes_of(graph, "Sub"):
        chain = _log_softmax_chain(graph, out)
        if chain is None:
            continue
        replace(graph, chain, "LogSoftmaxV2", [chain[0].inputs[0]], "LogSoftmaxFusionPass")
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "MeanGradFusion",
    _G,
    "the gradient of a mean multiplies by a precomputed 1/N instead of dividing by N",
    training_only=True,
)
def _mean_grad(graph: Graph, faults: Faults) -> tuple[int, int]:
    return _annotate(graph, MEANS, "MeanGradFusion", grad_mul_reciprocal=True)


@GRAPH_PASSES.add(
    "UnsortedSegmentSumFusionPass",
    _G,
    "the Gather gradient sums each segment's rows in sorted order in fp16 instead of "
    "scattered fp32 atomic adds",
    training_only=True,
)
def _unsorted_segment_sum(graph: Graph, faults: Faults) -> tuple[int, int]:
    return _annotate(graph, ("GatherV2",), "UnsortedSegmentSumFusionPass", sorted_segments=True)


@GRAPH_PASSES.add(
    "ZAttentionQKVGradXFusionPass",
    _G,
    "the input gradients of matmuls sharing one input (Q, K, V) are summed in one "
    "fp32 kernel instead of three fp16 writes and an AddN",
    training_only=True,
)
def _attention_qkv_grad_x(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for node in list(graph.nodes):
        users = [
            user
            for user in graph.consumers(node.name)
            if user.op in ("MatMulV2", "MatMul") and user.inputs[0] == node.name
        ]
        if len(users) < 3:
            continue
        for user in users:
            user.attrs["grad_out_fp32"] = True
            mark(user, "ZAttentionQKVGradXFusionPass")
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "ZReduceMeanVarianceFusionPass",
    _G,
    "the variance after a mean becomes ReduceMeanVariance, one pass E[x^2]-E[x]^2 "
    "(planted fault: accumulators in the input dtype)",
)
def _reduce_mean_variance(graph: Graph, faults: Faults) -> tuple[int, int]:
    accumulate = "input" if FAULT_VARIANCE_IN_INPUT_DTYPE in faults else "fp32"
    matched = 0
    for var in nodes_of(graph, *MEANS):
        sq = graph[var.inputs[0]]
        if var.attrs.get("axis") != -1 or not is_op(sq, "Square", "Pow"):
            continue
        xc = graph[sq.inputs[0]]
        if not is_op(xc, "Sub") or len(xc.inputs) != 2 or sole(graph, sq) is not var:
            continue
        mean = graph[xc.inputs[1]]
        if not is_op(mean, *MEANS) or mean.inputs[0] != xc.inputs[0]:
            continue
        replace(
            graph,
            [sq, var],
            "ReduceMeanVariance",
            [xc.inputs[0]],
            "ZReduceMeanVarianceFusionPass",
            keepdims=var.attrs.get("keepdims", False),
            accumulate=accumulate,
        )
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "ZAttentionScoreFusionPass",
    _G,
    "scores, scale, softmax and the context BatchMatMul in one kernel: scores and "
    "probabilities stay fp32 instead of round-tripping through fp16",
)
def _attention_score(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for context in nodes_of(graph, "BatchMatMul"):
        p16 = graph[context.inputs[0]]
        if not is_op(p16, "Cast") or sole(graph, p16) is not context:
            continue
        softmax = graph[p16.inputs[0]]
        if not is_op(softmax, "SoftmaxV2") or sole(graph, softmax) is not p16:
            continue
        s32 = graph[softmax.inputs[0]]
        if not is_op(s32, "Cast") or sole(graph, s32) is not softmax:
            continue
        scale = graph[s32.inputs[0]]
        if not is_op(scale, "Mul") or const_of(scale) is None or sole(graph, scale) is not s32:
            continue
        scores = graph[scale.inputs[0]]
        if not is_op(scores, "BatchMatMul") or sole(graph, scores) is not scale:
            continue
        members = [scores, scale, s32, softmax, p16, context]
        trans = graph[scores.inputs[1]]
        if is_op(trans, "Transpose") and sole(graph, trans) is scores:
            members.insert(0, trans)
        fuse_kernel(graph, members, "ZAttentionScoreFusionPass", ub=False)
        matched += 1
    return matched, matched


@GRAPH_PASSES.add(
    "ZAttentionScoreGradFusionPass",
    _G,
    "the fused attention's backward recomputes the probabilities in fp16 instead of "
    "keeping the fp32 ones",
    training_only=True,
)
def _attention_score_grad(graph: Graph, faults: Faults) -> tuple[int, int]:
    matched = 0
    for node in nodes_of(graph, "FusedKernel"):
        if "ZAttentionScoreFusionPass" not in node.pass_name:
            continue
        for inner in node.inner:
            if inner.op == "SoftmaxV2":
                inner.attrs["saved_fp16"] = True
        mark(node, "ZAttentionScoreGradFusionPass")
        matched += 1
    return matched, matched
