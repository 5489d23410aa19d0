"""The kernels of the reductions that AutoFuse fuses (passes_autofuse.py).

Inside an AutoFuse kernel a reduce op becomes ``AscReduce``: a sum or mean
(``kind``) over ``axis`` (None: every element); an AddN that adds reduced values
becomes ``AscAddN``, which goes on accumulating them. ``accumulate`` says how
both add: ``fp32`` (the correct kernel) or ``fp16`` (the planted fault), where
every partial sum is rounded to fp16 and overflows to Inf past 65504, whatever
the input dtype. Their gradients are those of the primitive ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph import Node
from .kernels import BACKWARD, grad, kernel
from .numerics import half_cumsum_last, to_half

_F = np.float32


@kernel("AscReduce")
def _asc_reduce(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    x = xs[0]
    axis = node.attrs.get("axis")
    keepdims = node.attrs.get("keepdims", False)
    work = x.reshape(-1) if axis is None else np.moveaxis(x, axis, -1)
    if node.attrs.get("accumulate") == "fp16":
        y = half_cumsum_last(to_half(work))
    else:
        y = work.sum(axis=-1)
    if node.attrs.get("kind") == "mean":
        y = y / _F(work.shape[-1])
    if axis is not None and keepdims:
        y = np.expand_dims(y, axis)
    return np.asarray(y, dtype=np.float32), x.shape


@grad("AscReduce")
def _asc_reduce_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    primitive = "ReduceMean" if node.attrs.get("kind") == "mean" else "ReduceSum"
    return BACKWARD[primitive](node, gy, saved)


@kernel("AscAddN")
def _asc_addn(node: Node, xs: list[np.ndarray]) -> tuple[np.ndarray, Any]:
    """An AddN adding reduced values inside the reduce's kernel: it keeps their accumulator."""
    stacked = np.stack(np.broadcast_arrays(*xs)).astype(np.float32)
    if node.attrs.get("accumulate") == "fp16":
        y = half_cumsum_last(to_half(stacked), axis=0)
    else:
        y = stacked.sum(axis=0)
    return np.asarray(y, dtype=np.float32), len(xs)


@grad("AscAddN")
def _asc_addn_grad(node: Node, gy: np.ndarray, saved: Any) -> list[np.ndarray | None]:
    return [gy] * saved
