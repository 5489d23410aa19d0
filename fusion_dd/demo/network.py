"""The demo network, written as the unfused op graph a framework would hand to GE.

A sensor classifier in mixed precision (fp16 activations, fp32 master weights,
LayerNorm/softmax/loss in fp32 behind explicit Casts):

* six sensor tokens of eight raw readings each, normalised by a LayerNorm written
  TF-style (``ln_a``), embedded, plus a learned sensor-type embedding (Gather);
* one self-attention block (primitive softmax) and one FFN block behind an
  ONNX-style LayerNorm (``ln2``) with an erf-GELU, both residual;
* a mean over tokens, plus a global-feature branch normalised by a LayerNorm
  without affine parameters (``ln_b``) and a Mish activation;
* an ONNX ``Gemm`` classifier head and a primitive softmax cross-entropy.

The raw readings carry a large per-sample offset (sensor drift), which is what
makes one-pass variance formulas in fp16 fail on ``ln_a`` and ``ln_b``.

The optimizer is a second graph: global-norm gradient clipping on per-tensor sums
of squares, weight decay, loss-scale removal and momentum, in the op form TF emits.
Nothing here imports numpy; shapes and initial scales are plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .dtypes import FP16, FP32, INT32
from .graph import Graph

EPS = 1e-5


@dataclass(frozen=True)
class NetSpec:
    """Sizes and fixed hyper-parameters of the network."""

    tokens: int = 6
    readings: int = 8
    dim: int = 12
    ffn: int = 24
    global_features: int = 16
    classes: int = 6
    sensor_types: int = 2
    loss_scale: float = 256.0
    clip_norm: float = 0.5
    weight_decay: float = 1e-4
    momentum: float = 0.9
    label_smoothing: float = 0.0

    def sensor_ids(self) -> list[int]:
        return [t % self.sensor_types for t in range(self.tokens)]


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    init: str  # "ones", "zeros" or "normal:<std>"


def param_specs(spec: NetSpec) -> list[ParamSpec]:
    d, f, h, g, k = spec.dim, spec.readings, spec.ffn, spec.global_features, spec.classes

    def w(name: str, fan_in: int, *shape: int) -> ParamSpec:
        return ParamSpec(name, tuple(shape), f"normal:{1.0 / math.sqrt(fan_in):.6f}")

    return [
        ParamSpec("ln_a/gamma", (f,), "ones"),
        ParamSpec("ln_a/beta", (f,), "zeros"),
        w("embed/w", f, f, d),
        ParamSpec("embed/b", (d,), "zeros"),
        ParamSpec("sensor/table", (spec.sensor_types, d), "normal:0.5"),
        w("attn/wq", d, d, d),
        ParamSpec("attn/bq", (d,), "zeros"),
        w("attn/wk", d, d, d),
        ParamSpec("attn/bk", (d,), "zeros"),
        w("attn/wv", d, d, d),
        ParamSpec("attn/bv", (d,), "zeros"),
        w("attn/wo", d, d, d),
        ParamSpec("attn/bo", (d,), "zeros"),
        ParamSpec("ln2/gamma", (d,), "ones"),
        ParamSpec("ln2/beta", (d,), "zeros"),
        w("ffn/w1", d, d, h),
        ParamSpec("ffn/b1", (h,), "zeros"),
        w("ffn/w2", h, h, d),
        ParamSpec("ffn/b2", (d,), "zeros"),
        w("global/w", g, g, d),
        ParamSpec("global/b", (d,), "zeros"),
        w("head/w", d, k, d),
        ParamSpec("head/b", (k,), "zeros"),
    ]


class _Builder:
    """Small helpers so the network reads like framework code."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph

    def op(self, op: str, *inputs: str, name: str, **attrs: object) -> str:
        return self.g.add(op, inputs, name=name, **attrs)

    def half(self, param: str) -> str:
        """An fp16 copy of an fp32 master weight, as AMP inserts before the cube."""
        return self.op("Cast", param, name=f"{param}/fp16", to=FP16)

    def linear(self, x: str, w: str, b: str, scope: str, k: int) -> str:
        """A dense layer on a 2-D input: MatMul then BiasAdd."""
        y = self.op("MatMul", x, self.half(w), name=f"{scope}/matmul", k=k)
        return self.op("BiasAdd", y, self.half(b), name=f"{scope}/bias")

    def dense_3d(self, x: str, w: str, b: str, scope: str, k: int, n: int, tokens: int) -> str:
        """A dense layer on (batch, tokens, k) as TF's tensordot emits it."""
        flat = self.op("Reshape", x, name=f"{scope}/reshape_in", shape=(-1, k))
        y = self.op("MatMul", flat, self.half(w), name=f"{scope}/matmul", k=k)
        y = self.op("Reshape", y, name=f"{scope}/reshape_out", shape=(-1, tokens, n))
        return self.op("BiasAdd", y, self.half(b), name=f"{scope}/bias")

    def layer_norm_tf(self, x: str, scope: str, gamma: str | None, beta: str | None) -> str:
        mean = self.op("ReduceMean", x, name=f"{scope}/mean", axis=-1, keepdims=True)
        xc = self.op("Sub", x, mean, name=f"{scope}/sub")
        sq = self.op("Square", xc, name=f"{scope}/square")
        var = self.op("ReduceMean", sq, name=f"{scope}/variance", axis=-1, keepdims=True)
        ve = self.op("Add", var, name=f"{scope}/add_eps", const=EPS)
        rstd = self.op("Rsqrt", ve, name=f"{scope}/rsqrt")
        xhat = self.op("Mul", xc, rstd, name=f"{scope}/normalize")
        if gamma is None or beta is None:
            return xhat
        scaled = self.op("Mul", xhat, gamma, name=f"{scope}/mul_gamma")
        return self.op("Add", scaled, beta, name=f"{scope}/add_beta")

    def layer_norm_onnx(self, x: str, scope: str, gamma: str, beta: str) -> str:
        mean = self.op("ReduceMean", x, name=f"{scope}/mean", axis=-1, keepdims=True)
        xc = self.op("Sub", x, mean, name=f"{scope}/sub")
        sq = self.op("Pow", xc, name=f"{scope}/pow", exponent=2.0)
        var = self.op("ReduceMean", sq, name=f"{scope}/variance", axis=-1, keepdims=True)
        ve = self.op("Add", var, name=f"{scope}/add_eps", const=EPS)
        sd = self.op("Sqrt", ve, name=f"{scope}/sqrt")
        xhat = self.op("RealDiv", xc, sd, name=f"{scope}/div")
        scaled = self.op("Mul", xhat, gamma, name=f"{scope}/mul_gamma")
        return self.op("Add", scaled, beta, name=f"{scope}/add_beta")


def _forward(graph: Graph, spec: NetSpec) -> str:
    """Add the forward pass; returns the logits node."""
    b = _Builder(graph)
    d, t = spec.dim, spec.tokens
    for p in param_specs(spec):
        graph.add("Variable", name=p.name, dtype=FP32, shape=p.shape)
    xa = graph.add("Data", name="readings", dtype=FP16)
    xb = graph.add("Data", name="global", dtype=FP16)

    def dense(x: str, w: str, bias: str, scope: str, k: int, n: int) -> str:
        return b.dense_3d(x, w, bias, scope, k, n, t)

    # Sensor tokens: normalise the raw readings, embed, add the sensor-type embedding.
    a = b.op("Cast", xa, name="ln_a/cast", to=FP32)
    a = b.layer_norm_tf(a, "ln_a", "ln_a/gamma", "ln_a/beta")
    a = b.op("Cast", a, name="ln_a/fp16", to=FP16)
    e = dense(a, "embed/w", "embed/b", "embed", spec.readings, d)
    table = b.half("sensor/table")
    sensor = b.op("GatherV2", table, name="sensor/gather", ids=spec.sensor_ids())
    h0 = b.op("Add", e, sensor, name="embed/add_sensor")

    # Self-attention, single head, primitive softmax in fp32.
    q = dense(h0, "attn/wq", "attn/bq", "attn/q", d, d)
    k = dense(h0, "attn/wk", "attn/bk", "attn/k", d, d)
    v = dense(h0, "attn/wv", "attn/bv", "attn/v", d, d)
    kt = b.op("Transpose", k, name="attn/k_t", perm=(0, 2, 1))
    scores = b.op("BatchMatMul", q, kt, name="attn/scores", k=d)
    scaled = b.op("RealDiv", scores, name="attn/scale", const=math.sqrt(d))
    s32 = b.op("Cast", scaled, name="attn/scores_fp32", to=FP32)
    smax = b.op("ReduceMax", s32, name="attn/softmax/max", axis=-1, keepdims=True)
    shifted = b.op("Sub", s32, smax, name="attn/softmax/sub")
    ex = b.op("Exp", shifted, name="attn/softmax/exp")
    total = b.op("ReduceSum", ex, name="attn/softmax/sum", axis=-1, keepdims=True)
    probs = b.op("RealDiv", ex, total, name="attn/softmax/div")
    p16 = b.op("Cast", probs, name="attn/probs_fp16", to=FP16)
    ctx = b.op("BatchMatMul", p16, v, name="attn/context", k=t)
    o = dense(ctx, "attn/wo", "attn/bo", "attn/out", d, d)
    h1 = b.op("Add", h0, o, name="attn/residual")

    # FFN behind an ONNX-exported LayerNorm, erf-GELU.
    f = b.op("Cast", h1, name="ln2/cast", to=FP32)
    f = b.layer_norm_onnx(f, "ln2", "ln2/gamma", "ln2/beta")
    f = b.op("Cast", f, name="ln2/fp16", to=FP16)
    f = dense(f, "ffn/w1", "ffn/b1", "ffn/up", d, spec.ffn)
    half_x = b.op("Mul", f, name="ffn/gelu/half", const=0.5)
    scaled_x = b.op("RealDiv", f, name="ffn/gelu/div_sqrt2", const=math.sqrt(2.0))
    erf = b.op("Erf", scaled_x, name="ffn/gelu/erf")
    one_plus = b.op("Add", erf, name="ffn/gelu/add_one", const=1.0)
    gelu = b.op("Mul", half_x, one_plus, name="ffn/gelu/mul")
    f = dense(gelu, "ffn/w2", "ffn/b2", "ffn/down", spec.ffn, d)
    h2 = b.op("Add", h1, f, name="ffn/residual")
    pooled = b.op("ReduceMean", h2, name="pool/mean", axis=1, keepdims=False)

    # Global features: LayerNorm without affine parameters, linear, Mish.
    gx = b.op("Cast", xb, name="ln_b/cast", to=FP32)
    gx = b.layer_norm_tf(gx, "ln_b", None, None)
    gx = b.op("Cast", gx, name="ln_b/fp16", to=FP16)
    gx = b.linear(gx, "global/w", "global/b", "global", spec.global_features)
    sp = b.op("Softplus", gx, name="global/mish/softplus")
    th = b.op("Tanh", sp, name="global/mish/tanh")
    mish = b.op("Mul", gx, th, name="global/mish/mul")

    z = b.op("Add", pooled, mish, name="head/add_global")
    return b.op("Gemm", z, "head/w", "head/b", name="head/gemm", transB=1, out_dtype=FP32)


def build_train_graph(spec: NetSpec) -> Graph:
    """Forward, softmax cross-entropy, loss scaling; backward comes from autodiff."""
    graph = Graph("train", training=True)
    logits = _forward(graph, spec)
    b = _Builder(graph)
    labels = graph.add("Data", name="labels", dtype=INT32)
    smooth = spec.label_smoothing
    onehot = b.op(
        "OneHot",
        labels,
        name="loss/one_hot",
        depth=spec.classes,
        on=1.0 - smooth + smooth / spec.classes,
        off=smooth / spec.classes,
        out_dtype=FP32,
    )
    m = b.op("ReduceMax", logits, name="loss/max", axis=-1, keepdims=True)
    shifted = b.op("Sub", logits, m, name="loss/sub")
    ex = b.op("Exp", shifted, name="loss/exp")
    total = b.op("ReduceSum", ex, name="loss/sum", axis=-1, keepdims=True)
    lse = b.op("Log", total, name="loss/log")
    logp = b.op("Sub", shifted, lse, name="loss/log_softmax")
    picked = b.op("Mul", logp, onehot, name="loss/mul_labels")
    per_sample = b.op("ReduceSum", picked, name="loss/sum_classes", axis=-1, keepdims=False)
    nll = b.op("Neg", per_sample, name="loss/neg")
    loss = b.op("ReduceMean", nll, name="loss/mean", axis=0, keepdims=False)
    scaled = b.op("Mul", loss, name="loss/scale", const=spec.loss_scale)
    graph.outputs = [logits, loss, scaled]
    return graph


def build_eval_graph(spec: NetSpec) -> Graph:
    """The exported inference graph: log-probabilities, as a primitive log-softmax."""
    graph = Graph("eval")
    b = _Builder(graph)
    logits = _forward(graph, spec)
    m = b.op("ReduceMax", logits, name="log_softmax/max", axis=-1, keepdims=True)
    shifted = b.op("Sub", logits, m, name="log_softmax/sub")
    ex = b.op("Exp", shifted, name="log_softmax/exp")
    total = b.op("ReduceSum", ex, name="log_softmax/sum", axis=-1, keepdims=True)
    lse = b.op("Log", total, name="log_softmax/log")
    graph.outputs = [b.op("Sub", shifted, lse, name="log_softmax/out")]
    return graph


def build_optimizer_graph(spec: NetSpec) -> Graph:
    """Clip by global norm, weight decay, unscale, momentum; all on loss-scaled grads.

    ``grad/<param>`` are the per-tensor gradients (views into ``grads``, the flat
    buffer), ``weights``/``momentum`` the flat fp32 state the update edits in place.
    """
    graph = Graph("optimizer")
    b = _Builder(graph)
    sums = []
    for p in param_specs(spec):
        g = graph.add("Data", name=f"grad/{p.name}", dtype=FP32)
        sq = b.op("Square", g, name=f"clip/{p.name}/square")
        sums.append(b.op("ReduceSum", sq, name=f"clip/{p.name}/sum", axis=None))
    total = b.op("AddN", *sums, name="clip/global_sum")
    limit = spec.clip_norm * spec.loss_scale
    floor = b.op("Maximum", total, name="clip/maximum", const=limit * limit)
    inv = b.op("Rsqrt", floor, name="clip/rsqrt")
    factor = b.op("Mul", inv, name="clip/factor", const=limit)
    grads = graph.add("Data", name="grads", dtype=FP32)
    weights = graph.add("Data", name="weights", dtype=FP32)
    momentum = graph.add("Data", name="momentum", dtype=FP32)
    clipped = b.op("Mul", grads, factor, name="clip/apply")
    decay = b.op("Mul", weights, name="decay/mul", const=spec.weight_decay * spec.loss_scale)
    decayed = b.op("AddN", clipped, decay, name="decay/addn")
    unscaled = b.op("Mul", decayed, name="unscale", const=1.0 / spec.loss_scale)
    update = b.op(
        "ApplyMomentum",
        weights,
        momentum,
        unscaled,
        name="apply_momentum",
        lr=0.0,
        momentum=spec.momentum,
    )
    graph.outputs = [update]
    return graph
