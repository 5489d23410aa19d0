"""A culprit inside a container: ONNX Runtime's Level1_RuleBasedTransformer rewrites 1/x*w.

The model computes ``Mul(Div(1, Identity(x)), w)``. The rewrite rule
``DivMulFusion`` of ``Level1_RuleBasedTransformer`` turns it into ``Div(w, x)``,
which rounds differently in float32; ``EliminateIdentity`` (in the same
container) removes the Identity and changes nothing. The log names only the
container (``GraphTransformer Level1_RuleBasedTransformer modified: 1``);
fusion-dd searches inside it and names the rule. Prints how far the optimized
session is from the unoptimized one:

    maxdiff 1.52587890625e-05
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
    initializers = [
        numpy_helper.from_array(np.asarray(1.0, dtype=np.float32), "one"),
        numpy_helper.from_array((rng.normal(size=(WIDTH,)) * 3).astype(np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Identity", ["X"], ["x"]),
        helper.make_node("Div", ["one", "x"], ["inverse"]),
        helper.make_node("Mul", ["inverse", "w"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "level1",
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
    so.intra_op_num_threads = 1
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
