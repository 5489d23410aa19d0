"""Forward and backward kernels of every op, primitive and fused.

A kernel is a pair of functions ``forward(node, xs) -> (y, saved)`` and
``backward(node, gy, saved) -> [grad per input or None]``. They compute in float32;
the executor rounds results to fp16 where the graph stores fp16 (numerics.py).
A fused kernel differs from the op sequence it replaces the way an NPU kernel does:
it keeps intermediates in the unified buffer instead of fp16 global memory, it
accumulates in another order or dtype, or it uses a cheaper approximation. Those
choices are node attributes, set by the fusion pass that created the node (and
by the scenario's planted faults), never by global state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .graph import Node
from .numerics import (
    FP16,
    erf,
    exact_rsqrt,
    fast_rsqrt,
    half_cumsum_last,
    round16,
    to_half,
    unbroadcast,
)

Forward = Callable[[Node, list[np.ndarray]], tuple[np.ndarray, Any]]
Backward = Callable[[Node, np.ndarray, Any], list["np.ndarray | None"]]

FORWARD: dict[str, Forward] = {}
BACKWARD: dict[str, Backward] = {}

_F = np.float32
_TWO_OVER_SQRT_PI = _F(2.0 / np.sqrt(np.pi))


def kernel(op: str) -> Callable[[Forward], Forward]:
    def register(function: Forward) -> Forward:
        FORWARD[op] = function
        return function

    return register


def grad(op: str) -> Callable[[Backward], Backward]:
    def register(function: Backward) -> Backward:
        BACKWARD[op] = function
        return function

    return register


def _in_dtype(node: Node, index: int = 0) -> str:
    return node.attrs["_in_dtypes"][index]


def _operands(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if len(xs) == 2:
        return xs[0], xs[1]
    return xs[0], _F(node.attrs["const"])


def _two_grads(
    node: Node, ga: np.ndarray, gb: np.ndarray, a: np.ndarray, b: np.ndarray
) -> list[np.ndarray | None]:
    if len(node.inputs) == 1:
        return [unbroadcast(ga, a.shape)]
    return [unbroadcast(ga, a.shape), unbroadcast(gb, np.shape(b))]


# -- sources and casts -------------------------------------------------------------


@kernel("Cast")
def _cast(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    return xs[0], None


@grad("Cast")
def _cast_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy]


# -- elementwise -------------------------------------------------------------------


@kernel("Add")
def _add(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    a, b = _operands(node, xs)
    return a + b, (a, b)


@grad("Add")
def _add_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    a, b = saved
    return _two_grads(node, gy, gy, a, b)


FORWARD["BiasAdd"] = FORWARD["Add"]
BACKWARD["BiasAdd"] = BACKWARD["Add"]


@kernel("Sub")
def _sub(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    a, b = _operands(node, xs)
    return a - b, (a, b)


@grad("Sub")
def _sub_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    a, b = saved
    return _two_grads(node, gy, -gy, a, b)


@kernel("Mul")
def _mul(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    a, b = _operands(node, xs)
    return a * b, (a, b)


@grad("Mul")
def _mul_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    a, b = saved
    return _two_grads(node, gy * b, gy * a, a, b)


@kernel("RealDiv")
def _div(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    a, b = _operands(node, xs)
    return a / b, (a, b)


@grad("RealDiv")
def _div_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    a, b = saved
    ga = gy / b
    return _two_grads(node, ga, -ga * a / b, a, b)


@kernel("Maximum")
def _maximum(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    a, b = _operands(node, xs)
    return np.maximum(a, b), (a, b)


@grad("Maximum")
def _maximum_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    a, b = saved
    mask = (a >= b).astype(np.float32)
    return _two_grads(node, gy * mask, gy * (1 - mask), a, b)


@kernel("Neg")
def _neg(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    return -xs[0], None


@grad("Neg")
def _neg_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [-gy]


@kernel("Square")
def _square(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    return xs[0] * xs[0], xs[0]


@grad("Square")
def _square_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [_F(2.0) * saved * gy]


@kernel("Pow")
def _pow(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """A generic power runs as exp(p*ln|x|) on the vector unit: not exact for p=2."""
    x = xs[0]
    p = _F(node.attrs["exponent"])
    with np.errstate(divide="ignore"):
        y = np.exp(p * np.log(np.abs(x)))
    if float(p) % 2 == 1:
        y = y * np.sign(x)
    return y, x


@grad("Pow")
def _pow_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    p = _F(node.attrs["exponent"])
    return [p * saved ** (p - 1) * gy]


@kernel("Sqrt")
def _sqrt(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    y = np.sqrt(xs[0])
    return y, y


@grad("Sqrt")
def _sqrt_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy * _F(0.5) / saved]


@kernel("Rsqrt")
def _rsqrt(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    y = fast_rsqrt(xs[0]) if node.attrs.get("fast") else exact_rsqrt(xs[0])
    return y, y


@grad("Rsqrt")
def _rsqrt_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [_F(-0.5) * saved * saved * saved * gy]


@kernel("Exp")
def _exp(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    y = np.exp(xs[0])
    return y, y


@grad("Exp")
def _exp_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy * saved]


@kernel("Log")
def _log(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    return np.log(xs[0]), xs[0]


@grad("Log")
def _log_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy / saved]


@kernel("Erf")
def _erf(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    return erf(xs[0]), xs[0]


@grad("Erf")
def _erf_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy * _TWO_OVER_SQRT_PI * np.exp(-saved * saved)]


@kernel("Tanh")
def _tanh(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    y = np.tanh(xs[0])
    return y, y


@grad("Tanh")
def _tanh_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy * (_F(1.0) - saved * saved)]


@kernel("Softplus")
def _softplus(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    return np.logaddexp(_F(0.0), xs[0]).astype(np.float32), xs[0]


@grad("Softplus")
def _softplus_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy / (_F(1.0) + np.exp(-saved))]


# -- reductions ----------------------------------------------------------------------


def _reduce_axis(node: Node) -> int:
    return int(node.attrs.get("axis", -1))


@kernel("ReduceMean")
def _reduce_mean(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    axis = _reduce_axis(node)
    x = xs[0]
    y = x.sum(axis=axis, keepdims=node.attrs.get("keepdims", False)) / _F(x.shape[axis])
    return y, x.shape


def _mean_grad(node: Node, gy: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    axis = _reduce_axis(node)
    if not node.attrs.get("keepdims", False):
        gy = np.expand_dims(gy, axis)
    count = shape[axis]
    if node.attrs.get("grad_mul_reciprocal"):
        # MeanGradFusion: one multiply by a precomputed 1/N held in the dtype of the
        # gradient it produces (the mean's input dtype).
        scale = np.array(1.0 / count, dtype=np.float32)
        if _in_dtype(node) == FP16:
            scale = round16(scale)
        return np.broadcast_to(gy * scale, shape)
    return np.broadcast_to(gy / _F(count), shape)


@grad("ReduceMean")
def _reduce_mean_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [_mean_grad(node, gy, saved)]


@kernel("ReduceMeanD")
def _reduce_mean_d(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Static-axis mean: scales by 1/N first, accumulates in the input dtype (in fp32
    when a UB fusion template widened it, ``acc_fp32``)."""
    axis = _reduce_axis(node)
    x = xs[0]
    scaled = x * _F(1.0 / x.shape[axis])
    if _in_dtype(node) == FP16 and not node.attrs.get("acc_fp32"):
        y = half_cumsum_last(to_half(scaled), axis=axis)
        if node.attrs.get("keepdims", False):
            y = np.expand_dims(y, axis)
    else:
        y = scaled.sum(axis=axis, keepdims=node.attrs.get("keepdims", False))
    return y, x.shape


BACKWARD["ReduceMeanD"] = BACKWARD["ReduceMean"]


@kernel("ReduceSum")
def _reduce_sum(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    axis = node.attrs.get("axis")
    return xs[0].sum(axis=axis, keepdims=node.attrs.get("keepdims", False)), xs[0].shape


@grad("ReduceSum")
def _reduce_sum_grad(node: Node, gy: np.ndarray, shape: Any) -> list[np.ndarray | None]:
    axis = node.attrs.get("axis")
    if axis is None:
        return [np.broadcast_to(gy, shape)]
    if not node.attrs.get("keepdims", False):
        gy = np.expand_dims(gy, axis)
    return [np.broadcast_to(gy, shape)]


@kernel("ReduceMax")
def _reduce_max(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Used for the max-subtraction of a stable softmax: gradient stopped."""
    return xs[0].max(axis=_reduce_axis(node), keepdims=node.attrs.get("keepdims", False)), None


@grad("ReduceMax")
def _reduce_max_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [None]


@kernel("AddN")
def _addn(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    group = node.attrs.get("tree_group")
    if not group:
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return total, len(xs)
    # AddNFusionPass: at most `group` inputs per AddN kernel, partial sums added last.
    partials = []
    for start in range(0, len(xs), group):
        part = xs[start]
        for x in xs[start + 1 : start + group]:
            part = part + x
        partials.append(part)
    total = partials[-1]
    for part in reversed(partials[:-1]):
        total = part + total
    return total, len(xs)


@grad("AddN")
def _addn_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy] * saved


# -- cube ops --------------------------------------------------------------------------


def _matmul(x: np.ndarray, w: np.ndarray, k_block: int | None) -> np.ndarray:
    if not k_block or x.shape[-1] <= k_block:
        return x @ w
    total = None
    for start in range(0, x.shape[-1], k_block):
        part = x[..., start : start + k_block] @ w[start : start + k_block]
        total = part if total is None else total + part
    return total


@kernel("MatMul")
def _matmul_fwd(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    x, w = xs[0], xs[1]
    wt = w.T if node.attrs.get("transpose_b") else w
    y = _matmul(x, wt, node.attrs.get("k_block"))
    if len(xs) > 2:
        y = y + xs[2]
    return y, (x, wt, len(xs) > 2)


@grad("MatMul")
def _matmul_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    x, wt, has_bias = saved
    k, n = wt.shape
    g2 = gy.reshape(-1, n)
    x2 = x.reshape(-1, k)
    gx = (gy @ wt.T).reshape(x.shape) if node.attrs.get("_needs", (True,))[0] else None
    split = node.attrs.get("dw_split")
    if split:
        # MatmulAtomicAddUbFusion: the batch is split across cores, partial dW are
        # atomically added in fp32.
        rows = g2.shape[0]
        step = -(-rows // split)
        gw = None
        for start in range(0, rows, step):
            part = x2[start : start + step].T @ g2[start : start + step]
            gw = part if gw is None else gw + part
    else:
        gw = x2.T @ g2
    if node.attrs.get("transpose_b"):
        gw = gw.T
    grads: list[np.ndarray | None] = [gx, gw]
    if has_bias:
        if node.attrs.get("bias_grad_on_cube"):
            # MatmulReduceSumUbFusion: the bias gradient is a ones-vector matmul on
            # the cube, 16 rows per fractal, each fractal's result written in fp16.
            rows = g2.shape[0]
            pad = (-rows) % 16
            blocks = np.concatenate([g2, np.zeros((pad, n), np.float32)]) if pad else g2
            grads.append(round16(blocks.reshape(-1, 16, n).sum(axis=1)).sum(axis=0))
        else:
            grads.append(g2.sum(axis=0))
    return grads


FORWARD["MatMulV2"] = FORWARD["MatMul"]
BACKWARD["MatMulV2"] = BACKWARD["MatMul"]


@kernel("BatchMatMul")
def _bmm(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    a, b = xs
    bt = np.swapaxes(b, -1, -2) if node.attrs.get("adj_y") else b
    k_block = node.attrs.get("k_block")
    if k_block and a.shape[-1] > k_block:
        y = None
        for start in range(0, a.shape[-1], k_block):
            part = a[..., start : start + k_block] @ bt[..., start : start + k_block, :]
            y = part if y is None else y + part
    else:
        y = a @ bt
    return y, (a, bt)


@grad("BatchMatMul")
def _bmm_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    a, bt = saved
    ga = gy @ np.swapaxes(bt, -1, -2)
    gbt = np.swapaxes(a, -1, -2) @ gy
    gb = np.swapaxes(gbt, -1, -2) if node.attrs.get("adj_y") else gbt
    return [ga, gb]


@kernel("Transpose")
def _transpose(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    return np.transpose(xs[0], node.attrs["perm"]), None


@grad("Transpose")
def _transpose_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [np.transpose(gy, np.argsort(node.attrs["perm"]))]


@kernel("Gemm")
def _gemm(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """ONNX Gemm left on the AI CPU: float32 throughout, inputs not rounded."""
    a, b, c = xs
    return a @ b.T + c, (a, b)


@grad("Gemm")
def _gemm_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    a, b = saved
    return [gy @ b, gy.T @ a, gy.sum(axis=0)]


@kernel("GatherV2")
def _gather(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    ids = np.asarray(node.attrs["ids"])
    return xs[0][ids], (xs[0].shape, ids)


@grad("GatherV2")
def _gather_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    shape, ids = saved
    if node.attrs.get("sorted_segments"):
        # UnsortedSegmentSumFusionPass: rows sorted by segment, each segment summed
        # in one pass in the dtype of the updates (fp16 here), last row first.
        table = np.zeros(shape, np.float32)
        for segment in range(shape[0]):
            rows = np.nonzero(ids == segment)[0][::-1]
            if len(rows):
                table[segment] = half_cumsum_last(to_half(gy[rows]), axis=0)
        return [table]
    table = np.zeros(shape, np.float32)
    np.add.at(table, ids, gy)
    return [table]


@kernel("OneHot")
def _one_hot(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    labels = xs[0].astype(np.int64)
    depth = int(node.attrs["depth"])
    on, off = node.attrs["on"], node.attrs["off"]
    if node.attrs.get("values_fp16"):
        # OneHotD materialises on/off values in fp16, like the logits it meets.
        on, off = float(np.float16(on)), float(np.float16(off))
    out = np.full((labels.shape[0], depth), off, np.float32)
    out[np.arange(labels.shape[0]), labels] = on
    return out, None


@grad("OneHot")
def _one_hot_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [None]


@kernel("Reshape")
def _reshape(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    return xs[0].reshape(node.attrs["shape"]), xs[0].shape


@grad("Reshape")
def _reshape_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy.reshape(saved)]


@kernel("ReduceSumD")
def _reduce_sum_d(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Static-axis sum on the vector unit.

    fp32: two interleaved lane accumulators, added at the end (the primitive
    ReduceSum adds sequentially or pairwise); fp16: one fp16 accumulator.
    """
    x = xs[0]
    axis = node.attrs.get("axis")
    keepdims = node.attrs.get("keepdims", False)
    work = x.reshape(-1) if axis is None else np.moveaxis(x, axis, -1)
    if _in_dtype(node) == FP16 and not node.attrs.get("acc_fp32"):
        y = half_cumsum_last(to_half(work))
    else:
        y = work[..., 0::2].sum(axis=-1) + work[..., 1::2].sum(axis=-1)
    if axis is not None and keepdims:
        y = np.expand_dims(y, axis)
    return np.asarray(y, dtype=np.float32), x.shape


BACKWARD["ReduceSumD"] = BACKWARD["ReduceSum"]


@kernel("LogSoftmaxV2")
def _log_softmax(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Fused log-softmax: exponentials through the vector unit's exp2."""
    x = xs[0]
    shifted = x - x.max(axis=-1, keepdims=True)
    total = np.exp2(shifted * _F(1.4426950408889634)).sum(axis=-1, keepdims=True)
    y = shifted - np.log(total)
    return y, y


@grad("LogSoftmaxV2")
def _log_softmax_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy - np.exp(saved) * gy.sum(axis=-1, keepdims=True)]
