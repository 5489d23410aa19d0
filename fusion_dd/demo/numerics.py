"""Floating-point behaviour of the simulated NPU.

Tensors are held as float32 numpy arrays. A tensor whose graph dtype is fp16 holds
values rounded to fp16's 11 significant bits, which is what an fp16 buffer in global
memory would hold. Rounding masks the float32 mantissa instead of calling
``astype(float16)`` because numpy's half conversion is about eight times slower and
the training must stay under a second: the two agree except on exact ties, and
neither the exponent range nor subnormals are modelled there. Kernels whose failure
mechanism *is* the fp16 range (overflow to Inf, accumulation in fp16) use real
``numpy.float16`` arithmetic through ``to_half``/``half_cumsum``.
"""

from __future__ import annotations

import numpy as np

from .dtypes import FP16, FP32

__all__ = ["FP16", "FP32"]

_HALF_ULP = np.uint32(0x1000)  # half of fp16's last place, in float32 mantissa bits
_KEEP_11_BITS = np.uint32(0xFFFFE000)  # sign, exponent and the top 10 mantissa bits
_MAGIC_RSQRT = np.uint32(0x5F3759DF)


def round16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to fp16 precision (to nearest, ties away from zero)."""
    if type(x) is not np.ndarray or x.dtype != np.float32:
        x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32) + _HALF_ULP
    bits &= _KEEP_11_BITS
    return bits.view(np.float32)


def round16_toward_zero(x: np.ndarray) -> np.ndarray:
    """Round to fp16 precision by truncation, as a fixpipe conversion in RTZ mode does."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def to_half(x: np.ndarray) -> np.ndarray:
    """A real fp16 array: overflows to Inf exactly where the hardware would."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(np.float16)


def half_cumsum_last(x16: np.ndarray, axis: int = -1) -> np.ndarray:
    """Sequential accumulation in fp16 (every partial sum rounded), as float32.

    This is what a vector kernel does when it keeps its accumulator in the input
    dtype instead of widening it: partial sums lose low bits and can overflow.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        acc = np.cumsum(x16, axis=axis, dtype=np.float16)
    return np.take(acc, -1, axis=axis).astype(np.float32)


def fast_rsqrt(x: np.ndarray, newton_steps: int = 1) -> np.ndarray:
    """Vector-unit reciprocal square root: bit-trick estimate plus Newton steps.

    With one step the relative error is up to about 2e-3 (5e-6 with two), against
    6e-8 for the exact ``1/sqrt``.
    """
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (_MAGIC_RSQRT - (x.view(np.uint32) >> np.uint32(1))).view(np.float32)
        for _ in range(newton_steps):
            y = y * (np.float32(1.5) - np.float32(0.5) * x * y * y)
        return y


def exact_rsqrt(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.float32(1.0) / np.sqrt(x)


def erf(x: np.ndarray) -> np.ndarray:
    """Error function (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7); numpy has none."""
    sign = np.sign(x)
    a = np.abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * a)
    poly = t * (
        np.float32(0.254829592)
        + t
        * (
            np.float32(-0.284496736)
            + t
            * (
                np.float32(1.421413741)
                + t * (np.float32(-1.453152027) + t * np.float32(1.061405429))
            )
        )
    )
    return sign * (np.float32(1.0) - poly * np.exp(-a * a))


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast gradient back to the shape of the operand it belongs to."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    if extra:
        grad = grad.reshape((-1,) + grad.shape[extra:]).sum(axis=0)
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad
