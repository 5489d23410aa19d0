"""The demo's simulated NPU dumps tensors and its graph the way CANN does.

With a dump directory (``--dump-dir`` or ``FUSION_DD_DUMP_DIR``), the demo
training writes, for one step of the training graph's forward pass:

* one Ascend dump file per executed op under
  ``{dump_dir}/{YYYYMMDDhhmmss}/0/{model}/1/{step}/``, in the runtime's binary
  layout (``fusion_dd/backends/cann/artifacts/dump.py``), matmul outputs in ``FRACTAL_NZ`` and
  other 2-D fp16 outputs in ``NC1HWC0``, both padded, the way the device stores them;
* the compiled graph as ``ge_proto_00000001_graph_1_Build.txt`` with
  ``pass_name``, ``pass_name_ub``, ``_datadump_original_op_names`` and output
  origins, which is what maps a diverging op back to rules and layers.

So ``fusion-dd compare`` localizes a demo culprit by the same code path as a
real one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format

from fusion_dd.backends.cann.artifacts.dump import TensorToWrite, dump_file_name, write_dump_file
from fusion_dd.backends.cann.artifacts.ge_schema import message_class
from fusion_dd.backends.cann.artifacts.layout import FRACTAL_NZ, NC1HWC0, ND, to_device

from .graph import Graph, Node

MODEL_NAME = "demo_train"
GRAPH_FILE = "ge_proto_00000001_graph_1_Build.txt"
_SOURCES = {"Data", "Variable"}
_MATMULS = {"MatMul", "BatchMatMul", "MatMulV2", "BatchMatMulV2"}


class DemoDumper:
    """Writes the dump of step ``step`` (1-based, like the demo's step counter)."""

    def __init__(self, dump_dir: Path, step: int = 1) -> None:
        self.dump_dir = Path(dump_dir)
        self.step = step
        self.written = False

    def __call__(self, step: int, graph: Graph, values: list[Any]) -> None:
        if step != self.step or self.written:
            return
        self.written = True
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        folder = self.dump_dir / stamp / "0" / MODEL_NAME / "1" / str(step)
        folder.mkdir(parents=True, exist_ok=True)
        timestamp = int(time.time() * 1e6)
        for task, (node, value) in enumerate(zip(graph.nodes, values)):
            if node.op in _SOURCES or value is None:
                continue
            tensor = _device_tensor(node, np.asarray(value))
            name = dump_file_name(_op_type(node), node.name, task, 0, timestamp + task)
            write_dump_file(folder / name, node.name, [tensor], dump_time=timestamp + task)
        (self.dump_dir / GRAPH_FILE).write_text(graph_text(graph), encoding="utf-8")


def _op_type(node: Node) -> str:
    if node.op == "FusedKernel":
        return node.attrs.get("kernel_type") or "FusedKernel"
    return node.op


def _device_tensor(node: Node, value: np.ndarray) -> TensorToWrite:
    """The output as the device would store it: fp16 as FLOAT16, some in blocked formats."""
    if value.dtype == np.float64:
        value = value.astype(np.float32)
    if node.dtype == "float16" and value.dtype == np.float32:
        value = value.astype(np.float16)  # already rounded to fp16 by the executor: exact
    origin = (node.name, 0)
    shape = value.shape
    if node.op in _MATMULS and value.ndim >= 2:
        return TensorToWrite(to_device(value, FRACTAL_NZ), FRACTAL_NZ, shape, origin)
    if value.ndim == 2 and value.dtype == np.float16:  # (batch, features) as a 1x1 feature map
        as_nchw = value.reshape(*shape, 1, 1)
        return TensorToWrite(to_device(as_nchw, NC1HWC0), NC1HWC0, (*shape, 1, 1), origin)
    return TensorToWrite(np.ascontiguousarray(value), ND, shape, origin)


def graph_text(graph: Graph) -> str:
    """The compiled graph as a GE ``ModelDef`` in protobuf text format."""
    model = message_class("ModelDef")()
    model.name = MODEL_NAME
    out = model.graph.add()
    out.name = graph.name
    for node in graph.nodes:
        op = out.op.add()
        op.name = node.name
        op.type = _op_type(node)
        op.input.extend(f"{name}:0" for name in node.inputs)
        if node.pass_name:
            op.attr["pass_name"].list.s.extend(name.encode() for name in node.pass_name)
        if node.pass_name_ub:
            op.attr["pass_name_ub"].s = node.pass_name_ub.encode()
        if node.original_names:
            op.attr["_datadump_original_op_names"].list.s.extend(n.encode() for n in node.original_names)
        desc = op.output_desc.add()
        desc.name = "y"
        desc.attr["_datadump_origin_name"].s = node.name.encode()
        desc.attr["_datadump_origin_output_index"].i = 0
    return text_format.MessageToString(model)
