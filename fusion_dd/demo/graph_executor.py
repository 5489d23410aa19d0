"""Runs a (fused) graph forward and backward.

The executor is where global memory lives: every tensor whose dtype is fp16 is
rounded to fp16 when a kernel writes it, and so is every gradient of an fp16
tensor (mixed-precision training): each backward kernel writes its contribution
in fp16 and the sum of the contributions (an AddN) is rounded again. Inside a
fused kernel (op ``FusedKernel``) the original ops run back to back on the
unified buffer: their intermediate results and intermediate gradients stay
float32, and only the fused op's output is rounded. This is the main numerical
difference between a fused and an unfused graph on an NPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import autofuse_kernels as _autofuse  # noqa: F401  (registers the AutoFuse reduce)
from . import fused_kernels as _fused  # noqa: F401  (registers the fused kernels)
from .graph import Graph, Node
from .kernels import BACKWARD, FORWARD
from .numerics import FP16, FP32, round16, round16_toward_zero

_SOURCES = {"Data", "Variable"}


def _rounder(node: Node) -> Callable[[np.ndarray], np.ndarray] | None:
    if node.dtype != FP16:
        return None
    if node.attrs.get("round") == "rtz":
        return round16_toward_zero
    return round16


class _Step:
    __slots__ = ("node", "forward", "backward", "inputs", "round_out", "round_grad", "needs")

    def __init__(self, node: Node, inputs: list[int]) -> None:
        self.node = node
        self.inputs = inputs
        self.round_out = _rounder(node)
        self.round_grad = node.dtype == FP16 and not node.attrs.get("grad_fp32")
        self.forward = FORWARD.get(node.op)
        self.backward = BACKWARD.get(node.op)
        self.needs = False


class Program:
    """A graph compiled to a flat list of kernel calls."""

    def __init__(self, graph: Graph) -> None:
        graph.infer_dtypes()
        self.graph = graph
        self.index = {node.name: i for i, node in enumerate(graph.nodes)}
        self.steps: list[_Step] = []
        for node in graph.nodes:
            node.attrs["_in_dtypes"] = [graph[name].dtype for name in node.inputs]
            step = _Step(node, [self.index[name] for name in node.inputs])
            if node.op == "FusedKernel":
                step.forward, step.backward = _compile_fused(graph, node)
            elif node.op not in _SOURCES and step.forward is None:
                raise ValueError(f"{graph.name}: no kernel for op {node.op!r} ({node.name})")
            self.steps.append(step)
        # Backward only flows where a Variable is upstream; kernels may skip the
        # gradients of inputs that need none (``_needs``).
        for step in self.steps:
            if step.node.op == "Variable":
                step.needs = True
            elif step.node.op != "Data":
                step.needs = any(self.steps[i].needs for i in step.inputs)
            step.node.attrs["_needs"] = [self.steps[i].needs for i in step.inputs]
        self.variables = [node.name for node in graph.nodes if node.op == "Variable"]

    def forward(self, feeds: Mapping[str, np.ndarray]) -> list[Any]:
        values: list[Any] = [None] * len(self.steps)
        saved: list[Any] = [None] * len(self.steps)
        for i, step in enumerate(self.steps):
            node = step.node
            if node.op in _SOURCES:
                values[i] = feeds[node.name]
                continue
            y, saved[i] = step.forward(node, [values[j] for j in step.inputs])
            if step.round_out is not None:
                y = step.round_out(y)
            values[i] = y
        self._saved = saved
        return values

    def value(self, values: list[Any], name: str) -> Any:
        return values[self.index[name]]

    def backward(self, seed: str, seed_grad: float = 1.0) -> dict[str, np.ndarray]:
        """Gradients of every Variable, from the saved state of the last forward."""
        grads: list[Any] = [None] * len(self.steps)
        grads[self.index[seed]] = np.float32(seed_grad)
        # True while a gradient is a single contribution already rounded to fp16.
        rounded = [False] * len(self.steps)
        saved = self._saved
        for i in range(len(self.steps) - 1, -1, -1):
            step = self.steps[i]
            g = grads[i]
            if g is None or not step.needs or step.node.op in _SOURCES:
                continue
            if step.round_grad and not rounded[i]:
                g = round16(g)  # the AddN of several contributions writes fp16 too
            input_grads = step.backward(step.node, g, saved[i])
            keep_fp32 = step.node.attrs.get("grad_out_fp32", False)
            for j, gj in zip(step.inputs, input_grads):
                target = self.steps[j]
                if gj is None or not target.needs:
                    continue
                if grads[j] is None:
                    if target.round_grad and not keep_fp32:
                        gj = round16(gj)  # each backward kernel writes fp16 gradients
                        rounded[j] = True
                    grads[j] = gj
                else:
                    if target.round_grad and not keep_fp32:
                        gj = round16(gj)
                    grads[j] = grads[j] + gj
                    rounded[j] = False
        return {
            name: np.asarray(grads[self.index[name]], dtype=np.float32)
            for name in self.variables
            if grads[self.index[name]] is not None
        }


def _compile_fused(graph: Graph, fused: Node) -> tuple[Callable, Callable]:
    """Forward/backward closures that run a fused node's inner ops without rounding."""
    external = {name: k for k, name in enumerate(fused.inputs)}
    inner_index = {node.name: k for k, node in enumerate(fused.inner)}
    plan = []
    for node in fused.inner:
        refs = []
        dtypes = []
        for name in node.inputs:
            if name in inner_index:
                refs.append(("inner", inner_index[name]))
                dtypes.append(FP32)
            else:
                refs.append(("ext", external[name]))
                dtypes.append(graph[name].dtype)
        node.attrs["_in_dtypes"] = dtypes
        plan.append((node, FORWARD[node.op], BACKWARD.get(node.op), refs))

    def forward(_: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
        values: list[Any] = []
        saved: list[Any] = []
        for node, fwd, _bwd, refs in plan:
            args = [values[k] if kind == "inner" else xs[k] for kind, k in refs]
            y, s = fwd(node, args)
            if node.attrs.get("saved_fp16"):
                s = round16(s)  # the backward will see a recomputed fp16 copy
            values.append(y)
            saved.append(s)
        return values[-1], saved

    def backward(_: Node, gy: np.ndarray, saved: Any) -> list[Any]:
        inner_grads: list[Any] = [None] * len(plan)
        inner_grads[-1] = gy
        ext_grads: list[Any] = [None] * len(fused.inputs)
        for k in range(len(plan) - 1, -1, -1):
            g = inner_grads[k]
            node, _fwd, bwd, refs = plan[k]
            if g is None or bwd is None:
                continue
            for (kind, j), gj in zip(refs, bwd(node, g, saved[k])):
                if gj is None:
                    continue
                target = inner_grads if kind == "inner" else ext_grads
                target[j] = gj if target[j] is None else target[j] + gj
        return ext_grads

    return forward, backward
