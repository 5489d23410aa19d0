"""A transformer-style block run by ONNX Runtime, judged against its unoptimized self.

The model is built with onnx.helper (MatMul + bias, an erf-based Gelu, a
LayerNorm written out in elementary ops, a second MatMul), so ONNX Runtime's
graph optimizers find fusions in it. The script prints how far the optimized
session's output is from the same model run with every optimization off:

    maxdiff 5.066e-07

Under fusion-dd the only changed line is ``**ort_session_kwargs()``: it hands the
session the optimizers fusion-dd switches off in this trial (and turns on the
info log whose 'GraphTransformer <name> modified' lines prove it). Outside
fusion-dd it is an empty dict and the script runs as before.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from fusion_dd.integrations import ort_session_kwargs

WIDTH = 64


def build_model() -> bytes:
    rng = np.random.default_rng(0)

    def const(name: str, value: np.ndarray | float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)

    initializers = [
        const("W1", rng.normal(size=(WIDTH, WIDTH)) / 8),
        const("B1", rng.normal(size=(WIDTH,))),
        const("sqrt2", np.sqrt(2.0)),
        const("one", 1.0),
        const("half", 0.5),
        const("eps", 1e-5),
        const("two", 2.0),
        const("gamma", rng.normal(size=(WIDTH,))),
        const("beta", rng.normal(size=(WIDTH,))),
        const("W2", rng.normal(size=(WIDTH, WIDTH)) / 8),
    ]
    node = helper.make_node
    nodes = [
        node("MatMul", ["X", "W1"], ["m1"]),
        node("Add", ["m1", "B1"], ["a1"]),
        # Gelu(a1) = a1 * 0.5 * (1 + erf(a1 / sqrt(2)))
        node("Div", ["a1", "sqrt2"], ["g1"]),
        node("Erf", ["g1"], ["g2"]),
        node("Add", ["g2", "one"], ["g3"]),
        node("Mul", ["a1", "g3"], ["g4"]),
        node("Mul", ["g4", "half"], ["g5"]),
        # LayerNorm over the last axis, in elementary ops
        node("ReduceMean", ["g5"], ["mean"], axes=[-1]),
        node("Sub", ["g5", "mean"], ["centered"]),
        node("Pow", ["centered", "two"], ["squared"]),
        node("ReduceMean", ["squared"], ["variance"], axes=[-1]),
        node("Add", ["variance", "eps"], ["variance_eps"]),
        node("Sqrt", ["variance_eps"], ["std"]),
        node("Div", ["centered", "std"], ["normed"]),
        node("Mul", ["normed", "gamma"], ["scaled"]),
        node("Add", ["scaled", "beta"], ["ln"]),
        node("MatMul", ["ln", "W2"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [8, WIDTH])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [8, WIDTH])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def options(level: ort.GraphOptimizationLevel) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 1  # the same summation order in every run
    return so


def main() -> None:
    model = build_model()
    x = np.random.default_rng(1).normal(size=(8, WIDTH)).astype(np.float32)
    providers = ["CPUExecutionProvider"]
    optimized = ort.InferenceSession(
        model, options(ort.GraphOptimizationLevel.ORT_ENABLE_ALL), providers=providers, **ort_session_kwargs()
    )
    reference = ort.InferenceSession(model, options(ort.GraphOptimizationLevel.ORT_DISABLE_ALL), providers=providers)
    got = optimized.run(None, {"X": x})[0]
    want = reference.run(None, {"X": x})[0]
    print(f"maxdiff {float(np.abs(got.astype(np.float64) - want).max()):.9g}", flush=True)


if __name__ == "__main__":
    main()
