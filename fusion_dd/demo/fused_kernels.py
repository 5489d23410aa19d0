"""Kernels of the fused ops that graph-fusion passes create.

Each docstring says how the fused kernel's numerics differ from the op sequence it
replaces; that difference is the whole point of the demo. Planted faults are
variants selected by node attributes (``variance``, ``accumulate``, ``mode``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph import Node
from .kernels import grad, kernel
from .numerics import (
    FP16,
    exact_rsqrt,
    fast_rsqrt,
    half_cumsum_last,
    round16,
    to_half,
)

_F = np.float32
_GELU_C = _F(np.sqrt(2.0 / np.pi))
_GELU_K = _F(0.044715)


def _blocked_row_sum(x: np.ndarray, block: int) -> np.ndarray:
    """Column sums over rows, one block per core; each core writes its partial sum in
    fp16 (the dtype of the incoming gradient) and the partials are added in fp32."""
    rows, cols = x.shape
    pad = (-rows) % block
    if pad:
        x = np.concatenate([x, np.zeros((pad, cols), np.float32)])
    return round16(x.reshape(-1, block, cols).sum(axis=1)).sum(axis=0)


# -- LayerNorm ------------------------------------------------------------------------


@kernel("LayerNorm")
def _layer_norm(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Fused LayerNorm over the last axis.

    ``two_pass`` (the correct kernel): mean, then the mean of squared deviations,
    both in fp32, and ``xc * (rstd * gamma) + beta`` in one expression.
    ``one_pass_fp16`` (a planted fault): E[x^2] - E[x]^2 with fp16 accumulators.
    On inputs with a large offset both terms are huge and nearly equal, the
    difference is rounding noise, and the clamped variance scales each row by a
    nearly random factor.
    """
    x, gamma, beta = xs
    eps = _F(node.attrs["eps"])
    if node.attrs.get("variance") == "one_pass_fp16":
        n = x.shape[-1]
        x16 = to_half(x)
        mean = round16(half_cumsum_last(x16)[..., None] / _F(n))
        squares = to_half(x16.astype(np.float32) * x16.astype(np.float32))
        ex2 = round16(half_cumsum_last(squares)[..., None] / _F(n))
        var = np.maximum(round16(ex2 - round16(mean * mean)), _F(0.0))
        rstd = round16(exact_rsqrt(var + eps))
        xc = round16(x16.astype(np.float32) - mean)
    elif node.attrs.get("variance") == "one_pass_fp32":
        # LayerNormTrainingFusionPass: LNTrainingReduce sums x and x^2 in one pass.
        mean = x.mean(axis=-1, keepdims=True)
        ex2 = _squares(node, x).mean(axis=-1, keepdims=True)
        var = np.maximum(ex2 - mean * mean, _F(0.0))
        rstd = exact_rsqrt(var + eps)
        xc = x - mean
    else:
        mean = x.mean(axis=-1, keepdims=True)
        xc = x - mean
        var = _squares(node, xc).mean(axis=-1, keepdims=True)
        rstd = exact_rsqrt(var + eps)
    y = xc * (rstd * gamma) + beta
    return y, (xc, rstd, gamma)


def _squares(node: Node, x: np.ndarray) -> np.ndarray:
    """x*x, or exp(2 ln|x|) when the kernel was built from a Pow pattern and so keeps
    the generic power (Pow2SquareFusionPass rewrites it to a Square first)."""
    if node.attrs.get("square_via_pow"):
        return np.exp(_F(2.0) * np.log(np.abs(x)))
    return x * x


@grad("LayerNorm")
def _layer_norm_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    xc, rstd, gamma = saved
    n = _F(xc.shape[-1])
    xhat = xc * rstd
    dxhat = gy * gamma
    if not node.attrs.get("_needs", (True,))[0]:
        gx = None  # a LayerNorm on input data: no input gradient to compute
    elif node.attrs.get("grad") == "fused":
        # LayerNormGradFusionPass: one LayerNormGrad kernel, the classic fused
        # formula rstd/N * (N*dxhat - sum(dxhat) - xhat*sum(dxhat*xhat)).
        s1 = dxhat.sum(axis=-1, keepdims=True)
        s2 = (dxhat * xhat).sum(axis=-1, keepdims=True)
        gx = (rstd / n) * (n * dxhat - s1 - xhat * s2)
    else:
        m1 = dxhat.mean(axis=-1, keepdims=True)
        m2 = (dxhat * xhat).mean(axis=-1, keepdims=True)
        gx = rstd * (dxhat - m1 - xhat * m2)
    rows_gy = gy.reshape(-1, gy.shape[-1])
    rows_prod = (gy * xhat).reshape(-1, gy.shape[-1])
    if node.attrs.get("beta_gamma") == "blocked":
        # LayerNormGradFusionPassBetaGamma: LayerNormBetaGammaBackprop reduces the
        # rows in blocks of 64, one block per core.
        g_gamma = _blocked_row_sum(rows_prod, 64)
        g_beta = _blocked_row_sum(rows_gy, 64)
    else:
        g_gamma = rows_prod.sum(axis=0)
        g_beta = rows_gy.sum(axis=0)
    return [gx, g_gamma, g_beta]


# -- ReduceMeanVariance ------------------------------------------------------------------


@kernel("ReduceMeanVariance")
def _reduce_mean_variance(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Variance in one pass over the data: E[x^2] - E[x]^2.

    Harmless in fp32. With ``accumulate="input"`` (a planted fault) the
    accumulators take the input dtype, so an fp16 input (once an up-cast was
    removed) is summed in fp16: catastrophic cancellation on offset data.
    """
    x = xs[0]
    n = _F(x.shape[-1])
    if node.attrs.get("accumulate") == "input" and node.attrs["_in_dtypes"][0] == FP16:
        x16 = to_half(x)
        mean = round16(half_cumsum_last(x16) / n)
        squares = to_half(x16.astype(np.float32) * x16.astype(np.float32))
        ex2 = round16(half_cumsum_last(squares) / n)
        var = np.maximum(round16(ex2 - round16(mean * mean)), _F(0.0))
    else:
        mean = x.mean(axis=-1)
        var = np.maximum((x * x).mean(axis=-1) - mean * mean, _F(0.0))
    if node.attrs.get("keepdims", False):
        var = var[..., None]
    return var, (x, mean)


@grad("ReduceMeanVariance")
def _reduce_mean_variance_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    x, mean = saved
    n = _F(x.shape[-1])
    if not node.attrs.get("keepdims", False):
        gy = gy[..., None]
    return [gy * _F(2.0) * (x - mean[..., None]) / n]


# -- softmax family -------------------------------------------------------------------


@kernel("SoftmaxV2")
def _softmax(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Softmax with max subtraction; multiplies by 1/sum instead of dividing."""
    x = xs[0]
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    if node.attrs.get("sum_lanes"):
        # Built from a ReduceSumD: the sum keeps its two lane accumulators.
        total = e[..., 0::2].sum(axis=-1, keepdims=True) + e[..., 1::2].sum(axis=-1, keepdims=True)
    else:
        total = e.sum(axis=-1, keepdims=True)
    y = e * (_F(1.0) / total)
    return y, y


@grad("SoftmaxV2")
def _softmax_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    y = saved
    if node.attrs.get("grad") == "fused":
        # SoftmaxGradFusionPass: SoftmaxGrad computes y*gy - y*sum(y*gy).
        yg = y * gy
        return [yg - y * yg.sum(axis=-1, keepdims=True)]
    return [y * (gy - (gy * y).sum(axis=-1, keepdims=True))]


@kernel("SoftmaxCrossEntropyWithLogits")
def _softmax_ce(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Per-sample cross-entropy and its backprop in one kernel.

    ``stable``: log-sum-exp with max subtraction in fp32; the backprop is written
    in fp16. ``fp16_no_max`` (a planted fault): exp of the raw logits in fp16,
    which overflows to Inf as soon as a logit passes 11.09, and Inf/Inf is NaN.
    """
    logits, labels = xs
    if node.attrs.get("mode") == "fp16_no_max":
        x16 = to_half(logits).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            e16 = to_half(np.exp(x16))
            total = half_cumsum_last(e16)[:, None]
            probs = to_half(e16.astype(np.float32) / total).astype(np.float32)
            loss = np.log(total[:, 0]) - (labels * x16).sum(axis=-1)
        backprop = probs - labels
    else:
        shifted = logits - logits.max(axis=-1, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=-1, keepdims=True)
        loss = np.log(total[:, 0]) - (labels * shifted).sum(axis=-1)
        backprop = round16(e / total - labels)
    return loss.astype(np.float32), backprop


@grad("SoftmaxCrossEntropyWithLogits")
def _softmax_ce_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [saved * gy[:, None], None]


# -- activations --------------------------------------------------------------------------


@kernel("Gelu")
def _gelu(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """The tanh approximation of GELU, where the unfused graph used erf."""
    x = xs[0]
    t = np.tanh(_GELU_C * (x + _GELU_K * x * x * x))
    return _F(0.5) * x * (_F(1.0) + t), (x, t)


@grad("Gelu")
def _gelu_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    x, t = saved
    inner = _GELU_C * (_F(1.0) + _F(3.0) * _GELU_K * x * x)
    return [gy * (_F(0.5) * (_F(1.0) + t) + _F(0.5) * x * (_F(1.0) - t * t) * inner)]


@kernel("Mish")
def _mish(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """x*tanh(softplus(x)) with tanh taken as 1 - 2/(e^2s + 1) on the vector unit."""
    x = xs[0]
    sp = np.logaddexp(_F(0.0), x).astype(np.float32)
    t = _F(1.0) - _F(2.0) / (np.exp(_F(2.0) * sp) + _F(1.0))
    return x * t, (x, t)


@grad("Mish")
def _mish_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    x, t = saved
    sigmoid = _F(1.0) / (_F(1.0) + np.exp(-x))
    return [gy * (t + x * (_F(1.0) - t * t) * sigmoid)]


# -- optimizer ---------------------------------------------------------------------------------


@kernel("SquareSumV2")
def _square_sum(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Sum of squares without writing the squares out: reads the gradient as fp16 (its
    storage dtype under mixed precision), 64 lane accumulators, then the lanes."""
    flat = round16(xs[0].reshape(-1))
    pad = (-flat.size) % 64
    if pad:
        flat = np.concatenate([flat, np.zeros(pad, np.float32)])
    lanes = flat.reshape(-1, 64)
    lanes = (lanes * lanes).sum(axis=0)
    return np.asarray(lanes.sum(), dtype=np.float32), xs[0]


@grad("SquareSumV2")
def _square_sum_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [_F(2.0) * saved * gy]


@kernel("ClipByNormFactor")
def _clip_factor(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """scale * rsqrt(max(sum of squares, floor)): the rsqrt estimate refined by two
    Newton steps (the primitive Rsqrt is exact)."""
    total = np.maximum(xs[0], _F(node.attrs["floor"]))
    y = fast_rsqrt(total, newton_steps=2) * _F(node.attrs["scale"])
    return y, None


@kernel("MulAddN")
def _mul_addn(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Gradient plus weight decay in one kernel; the kernel writes fp16, like the
    gradients it was written for, so the sum is rounded to fp16 precision."""
    g, w = xs
    return round16(g + w * np.float32(node.attrs["const"])), None


@kernel("ApplyMomentum")
def _apply_momentum(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """Updates the variable and its accumulator in place, like TF's ApplyMomentum.

    With ``grad_scale`` (A_MomentumLossscaleFusionPass) the loss-scale division is
    folded into the accumulator update and rounded once.
    """
    w, m, g = xs
    mu = node.attrs["momentum"]
    scale = node.attrs.get("grad_scale")
    if scale is None:
        m *= _F(mu)
        m += g
    else:
        m[...] = (m.astype(np.float64) * mu + g.astype(np.float64) * scale).astype(np.float32)
    w -= _F(node.attrs["lr"]) * m
    return w, None


@grad("ApplyMomentum")
def _no_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [None] * len(node.inputs)
