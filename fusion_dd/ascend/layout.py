"""Ascend tensor data types and device formats, back to the framework's layout.

A dump holds each tensor as the device stored it: in one of CANN's data types and,
for many ops, in a blocked *device format* (``NC1HWC0``, ``FRACTAL_Z``,
``FRACTAL_NZ``, ``NDC1HWC0``) whose channel and row blocks are padded up to
``C0``/``Ni`` elements. Comparing a fusion-on with a fusion-off run needs both in
the framework's own layout, padding cropped to ``original_shape``: a fused op may
pick another format than the ops it replaced.

Block sizes are read from the device shape, never assumed to be 16: ``C0`` is 32
for int8, 8 for fp32 on some cubes, 16 for fp16. The inverse conversions
(``to_device``) exist for writers: the demo's simulated NPU and the tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# --- data types ---------------------------------------------------------------------

#: CANN ``ge::DataType`` codes fusion-dd decodes, with the numpy dtype of the raw bytes.
DTYPES: dict[int, tuple[str, np.dtype]] = {
    1: ("FLOAT", np.dtype("<f4")),
    2: ("FLOAT16", np.dtype("<f2")),
    3: ("INT8", np.dtype("i1")),
    4: ("UINT8", np.dtype("u1")),
    5: ("INT16", np.dtype("<i2")),
    6: ("UINT16", np.dtype("<u2")),
    7: ("INT32", np.dtype("<i4")),
    8: ("INT64", np.dtype("<i8")),
    9: ("UINT32", np.dtype("<u4")),
    10: ("UINT64", np.dtype("<u8")),
    11: ("BOOL", np.dtype("?")),
    12: ("DOUBLE", np.dtype("<f8")),
    27: ("BF16", np.dtype("<u2")),  # widened to float32 on decode
}
BF16 = 27
DTYPE_CODES: dict[str, int] = {name: code for code, (name, _) in DTYPES.items()}

#: numpy dtype -> CANN code, for writers (bf16 has no numpy dtype: pass the code).
NUMPY_CODES: dict[np.dtype, int] = {
    np.dtype(raw): code for code, (name, raw) in DTYPES.items() if code != BF16
}


class LayoutError(ValueError):
    """A tensor that cannot be decoded; the message is the reason, shown per tensor."""


def dtype_name(code: int) -> str:
    return DTYPES[code][0] if code in DTYPES else f"data type {code}"


def raw_dtype(code: int) -> np.dtype:
    """The numpy dtype of the stored bytes; a LayoutError for types fusion-dd does not decode."""
    if code not in DTYPES:
        raise LayoutError(f"unsupported data type {code} (fusion-dd decodes {', '.join(n for n, _ in DTYPES.values())})")
    return DTYPES[code][1]


def decode_values(raw: np.ndarray, code: int) -> np.ndarray:
    """The values of stored elements (``raw`` already viewed as ``raw_dtype(code)``).

    bf16 is the upper half of a float32, so it widens exactly by a 16-bit shift.
    """
    if code == BF16:
        return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return raw


def encode_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (round to nearest even), for writers."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


# --- formats --------------------------------------------------------------------------

NCHW, NHWC, ND, NC1HWC0, FRACTAL_Z, HWCN, FRACTAL_NZ, NCDHW, NDC1HWC0 = 0, 1, 2, 3, 4, 16, 29, 30, 32
FORMATS: dict[int, str] = {
    NCHW: "NCHW",
    NHWC: "NHWC",
    ND: "ND",
    NC1HWC0: "NC1HWC0",
    FRACTAL_Z: "FRACTAL_Z",
    HWCN: "HWCN",
    FRACTAL_NZ: "FRACTAL_NZ",
    NCDHW: "NCDHW",
    NDC1HWC0: "NDC1HWC0",
}
#: Formats whose stored order already is the framework's (no conversion needed).
PLAIN_FORMATS = frozenset({NCHW, NHWC, ND, HWCN, NCDHW})


def format_name(code: int) -> str:
    return FORMATS.get(code, f"format {code}")


def to_framework(
    data: np.ndarray, fmt: int, original_shape: Sequence[int] = (), original_format: int | None = None
) -> np.ndarray:
    """A tensor in device format ``fmt`` (``data`` has the device shape) in framework layout.

    Padding is cropped to ``original_shape`` when it is given. ``original_format``
    (``OriginalOp.format`` of the dump) turns an NCHW result into NHWC or HWCN
    when the framework held it that way. Plain formats come back as a view.
    """
    original = tuple(int(d) for d in original_shape)
    shape = data.shape
    if fmt in PLAIN_FORMATS:
        if original and math.prod(original) == data.size and original != shape:
            return data.reshape(original)
        return data
    if fmt == NC1HWC0:
        _need(shape, 5, "NC1HWC0 (N, C1, H, W, C0)")
        n, c1, h, w, c0 = shape
        full = data.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)
        return _original_order(_crop(full, original, "NCHW", original_format), original_format)
    if fmt == FRACTAL_Z:
        _need(shape, 4, "FRACTAL_Z (C1*H*W, No, Ni, C0)")
        c1hw, no, ni, c0 = shape
        h, w = _fractal_z_hw(original, original_format, c1hw)
        c1 = c1hw // (h * w)
        full = data.reshape(c1, h, w, no, ni, c0).transpose(3, 4, 0, 5, 1, 2).reshape(no * ni, c1 * c0, h, w)
        return _original_order(_crop(full, original, "NCHW", original_format), original_format)
    if fmt == FRACTAL_NZ:
        if data.ndim < 4:
            raise LayoutError(f"FRACTAL_NZ needs at least 4 dims (..., C1, No, Ni, C0), got shape {list(shape)}")
        *batch, c1, no, ni, c0 = shape
        axes = tuple(range(len(batch)))
        k = len(batch)
        full = data.transpose(*axes, k + 1, k + 2, k, k + 3).reshape(*batch, no * ni, c1 * c0)
        return _crop(full, original, "ND", None)
    if fmt == NDC1HWC0:
        _need(shape, 6, "NDC1HWC0 (N, D, C1, H, W, C0)")
        n, d, c1, h, w, c0 = shape
        full = data.transpose(0, 2, 5, 1, 3, 4).reshape(n, c1 * c0, d, h, w)
        return _crop(full, original, "NCDHW", None)
    raise LayoutError(f"unsupported format {fmt} (fusion-dd converts {', '.join(FORMATS.values())})")


def _need(shape: tuple[int, ...], ndim: int, what: str) -> None:
    if len(shape) != ndim:
        raise LayoutError(f"{what} needs {ndim} dims, got shape {list(shape)}")


def _fractal_z_hw(original: tuple[int, ...], original_format: int | None, c1hw: int) -> tuple[int, int]:
    if len(original) != 4:
        raise LayoutError(f"FRACTAL_Z needs a 4-dim original_shape to find H and W, got {list(original)}")
    n, c, h, w = _as_nchw(original, original_format)
    if h * w == 0 or c1hw % (h * w):
        raise LayoutError(f"FRACTAL_Z first dim {c1hw} is not C1*H*W for original shape {list(original)}")
    return h, w


def _as_nchw(shape: tuple[int, ...], original_format: int | None) -> tuple[int, ...]:
    if original_format == NHWC:
        n, h, w, c = shape
        return (n, c, h, w)
    if original_format == HWCN:
        h, w, c, n = shape
        return (n, c, h, w)
    return shape


def _crop(full: np.ndarray, original: tuple[int, ...], order: str, original_format: int | None) -> np.ndarray:
    """Cut the block padding off: ``original`` is the framework shape (``order`` after transposing)."""
    if not original:
        return full
    target = _as_nchw(original, original_format) if order == "NCHW" and len(original) == 4 else original
    if len(target) == full.ndim - 0 and all(t <= f for t, f in zip(target, full.shape)):
        return full[tuple(slice(0, t) for t in target)]
    if math.prod(target) == full.size:
        return full.reshape(target)
    raise LayoutError(f"original_shape {list(original)} does not fit the device data (unpadded {list(full.shape)})")


def _original_order(nchw: np.ndarray, original_format: int | None) -> np.ndarray:
    if nchw.ndim != 4:
        return nchw
    if original_format == NHWC:
        return nchw.transpose(0, 2, 3, 1)
    if original_format == HWCN:
        return nchw.transpose(2, 3, 1, 0)
    return nchw


def to_device(array: np.ndarray, fmt: int, c0: int = 16, ni: int = 16) -> np.ndarray:
    """The inverse of ``to_framework`` for NCHW / (..., M, N) / NCDHW input, zero-padded.

    For writers (the demo's simulated NPU, tests): ``c0`` is the channel block,
    ``ni`` the row block of FRACTAL_Z and FRACTAL_NZ.
    """
    if fmt in PLAIN_FORMATS:
        return np.ascontiguousarray(array)
    if fmt == NC1HWC0:
        n, c, h, w = array.shape
        c1 = -(-c // c0)
        padded = np.zeros((n, c1 * c0, h, w), array.dtype)
        padded[:, :c] = array
        return np.ascontiguousarray(padded.reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2))
    if fmt == FRACTAL_Z:
        n, c, h, w = array.shape
        c1, no = -(-c // c0), -(-n // ni)
        padded = np.zeros((no * ni, c1 * c0, h, w), array.dtype)
        padded[:n, :c] = array
        blocks = padded.reshape(no, ni, c1, c0, h, w).transpose(2, 4, 5, 0, 1, 3)
        return np.ascontiguousarray(blocks.reshape(c1 * h * w, no, ni, c0))
    if fmt == FRACTAL_NZ:
        *batch, m, n = array.shape
        c1, no = -(-n // c0), -(-m // ni)
        padded = np.zeros((*batch, no * ni, c1 * c0), array.dtype)
        padded[..., :m, :n] = array
        k = len(batch)
        blocks = padded.reshape(*batch, no, ni, c1, c0)
        return np.ascontiguousarray(blocks.transpose(*range(k), k + 2, k, k + 1, k + 3))
    if fmt == NDC1HWC0:
        n, c, d, h, w = array.shape
        c1 = -(-c // c0)
        padded = np.zeros((n, c1 * c0, d, h, w), array.dtype)
        padded[:, :c] = array
        return np.ascontiguousarray(padded.reshape(n, c1, c0, d, h, w).transpose(0, 3, 1, 4, 5, 2))
    raise LayoutError(f"cannot write format {fmt}")
