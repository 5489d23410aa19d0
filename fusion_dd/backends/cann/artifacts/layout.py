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

Codes are those of CANN's ``dump_data.proto`` (``OutputDataType``,
``OutputFormat``). The 8-bit float types are decoded by a 256-entry table built
from their definitions (OCP FP8 for e4m3fn/e5m2, Ascend's HiFloat8 for
hifloat8), so that every bit pattern has one exact float32 value. Complex
tensors become float arrays with a trailing axis of 2 (real, imaginary): the
metrics then measure both parts. A format fusion-dd does not convert can be
handed to a user's converter (``converters.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from .converters import LayoutError, find_converter

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
    16: ("COMPLEX64", np.dtype("<c8")),  # (real, imag) float32 pairs on decode
    17: ("COMPLEX128", np.dtype("<c16")),
    27: ("BF16", np.dtype("<u2")),  # widened to float32 on decode
    29: ("UINT1", np.dtype("u1")),  # 8 elements per byte, first element in the high bit
    33: ("HIFLOAT8", np.dtype("u1")),  # decoded by table to float32
    34: ("FLOAT8_E5M2", np.dtype("u1")),
    35: ("FLOAT8_E4M3FN", np.dtype("u1")),
}
BF16, COMPLEX64, COMPLEX128, UINT1, HIFLOAT8, FLOAT8_E5M2, FLOAT8_E4M3FN = 27, 16, 17, 29, 33, 34, 35
DTYPE_CODES: dict[str, int] = {name: code for code, (name, _) in DTYPES.items()}

#: numpy dtype -> CANN code, for writers (bf16 has no numpy dtype: pass the code).
NUMPY_CODES: dict[np.dtype, int] = {
    np.dtype(raw): code for code, (name, raw) in DTYPES.items() if code not in (BF16, UINT1, HIFLOAT8, FLOAT8_E5M2, FLOAT8_E4M3FN)
}


def dtype_name(code: int) -> str:
    return DTYPES[code][0] if code in DTYPES else f"data type {code}"


def raw_dtype(code: int) -> np.dtype:
    """The numpy dtype of the stored bytes; a LayoutError for types fusion-dd does not decode."""
    if code not in DTYPES:
        raise LayoutError(f"unsupported data type {code} (fusion-dd decodes {', '.join(n for n, _ in DTYPES.values())})")
    return DTYPES[code][1]


def stored_bytes(code: int, count: int) -> int:
    """Bytes that ``count`` elements of type ``code`` occupy (uint1 packs 8 to a byte)."""
    if code == UINT1:
        return (count + 7) // 8
    return count * raw_dtype(code).itemsize


def stored_count(code: int, count: int) -> int:
    """Raw elements (of ``raw_dtype(code)``) that hold ``count`` values."""
    return (count + 7) // 8 if code == UINT1 else count


def decode_values(raw: np.ndarray, code: int, count: int | None = None) -> np.ndarray:
    """The values of stored elements (``raw`` already viewed as ``raw_dtype(code)``), flat.

    bf16 is the upper half of a float32, so it widens exactly by a 16-bit shift;
    8-bit floats go through their tables; uint1 is unpacked to ``count`` 0/1 values.
    """
    if code == BF16:
        return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if code in FLOAT8_TABLES:
        return FLOAT8_TABLES[code]()[raw]
    if code == UINT1:
        bits = np.unpackbits(np.asarray(raw, dtype=np.uint8))
        return bits if count is None else bits[:count]
    return raw


def complex_as_pairs(values: np.ndarray) -> np.ndarray:
    """A complex array as float (real, imag) pairs on a trailing axis; others unchanged."""
    if np.iscomplexobj(values):
        part = np.float32 if values.dtype == np.complex64 else np.float64
        return np.ascontiguousarray(values).view(part).reshape(*values.shape, 2)
    return values


def _table(decode) -> np.ndarray:
    return np.array([decode(bits) for bits in range(256)], dtype=np.float32)


def _e4m3fn(bits: int) -> float:
    """OCP FP8 E4M3FN: bias 7, subnormals, no infinities, NaN only at S.1111.111."""
    sign = -1.0 if bits & 0x80 else 1.0
    exponent, mantissa = (bits >> 3) & 0xF, bits & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.nan
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def _e5m2(bits: int) -> float:
    """OCP FP8 E5M2: bias 15, subnormals, IEEE infinities and NaNs."""
    sign = -1.0 if bits & 0x80 else 1.0
    exponent, mantissa = (bits >> 2) & 0x1F, bits & 0x3
    if exponent == 0x1F:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return sign * mantissa / 4 * 2.0**-14
    return sign * (1 + mantissa / 4) * 2.0 ** (exponent - 15)


def _hifloat8(bits: int) -> float:
    """Ascend HiFloat8: sign, a prefix-coded dot field giving the exponent width D
    (``11``: 4, ``10``: 3, ``01``: 2, ``001``: 1, ``0001``: 0, ``0000``: denormal),
    a sign-magnitude exponent of D bits with an implicit leading one
    (``±(2**(D-1) + magnitude)``), and the remaining bits of mantissa (1, 2, 3, 3, 3).
    Denormals are ``2**(m - 23)`` for the 3-bit m; 0x00 is zero, 0x80 NaN, 0x6F/0xEF ±inf.
    """
    if bits == 0x00:
        return 0.0
    if bits == 0x80:
        return math.nan
    sign = -1.0 if bits & 0x80 else 1.0
    if bits & 0x7F == 0x6F:
        return sign * math.inf
    field = bits & 0x7F
    if field >> 5 == 0b11:
        width, rest = 4, 5
    elif field >> 5 == 0b10:
        width, rest = 3, 5
    elif field >> 5 == 0b01:
        width, rest = 2, 5
    elif field >> 4 == 0b001:
        width, rest = 1, 4
    elif field >> 3 == 0b0001:
        width, rest = 0, 3
    else:
        return sign * 2.0 ** ((field & 0x7) - 23)
    mantissa_bits = rest - width
    tail = field & ((1 << rest) - 1)
    mantissa = tail & ((1 << mantissa_bits) - 1)
    exponent = 0
    if width:
        raw = tail >> mantissa_bits
        magnitude = (1 << (width - 1)) + (raw & ((1 << (width - 1)) - 1))
        exponent = -magnitude if raw >> (width - 1) else magnitude
    return sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0**exponent


@lru_cache(maxsize=None)
def e4m3fn_table() -> np.ndarray:
    return _table(_e4m3fn)


@lru_cache(maxsize=None)
def e5m2_table() -> np.ndarray:
    return _table(_e5m2)


@lru_cache(maxsize=None)
def hifloat8_table() -> np.ndarray:
    return _table(_hifloat8)


FLOAT8_TABLES = {HIFLOAT8: hifloat8_table, FLOAT8_E5M2: e5m2_table, FLOAT8_E4M3FN: e4m3fn_table}


def encode_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (round to nearest even), for writers."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


# --- formats --------------------------------------------------------------------------

NCHW, NHWC, ND, NC1HWC0, FRACTAL_Z, HWCN, FRACTAL_NZ, NCDHW, NDC1HWC0 = 0, 1, 2, 3, 4, 16, 29, 30, 32
CHWN, MD, NDHWC, DHWCN, CN, NC, DHWNC, RESERVED, NCL = 14, 26, 27, 31, 34, 35, 36, 40, 47
FORMATS: dict[int, str] = {
    NCHW: "NCHW",
    NHWC: "NHWC",
    ND: "ND",
    NC1HWC0: "NC1HWC0",
    FRACTAL_Z: "FRACTAL_Z",
    CHWN: "CHWN",
    HWCN: "HWCN",
    MD: "MD",
    NDHWC: "NDHWC",
    FRACTAL_NZ: "FRACTAL_NZ",
    NCDHW: "NCDHW",
    DHWCN: "DHWCN",
    NDC1HWC0: "NDC1HWC0",
    CN: "CN",
    NC: "NC",
    DHWNC: "DHWNC",
    RESERVED: "RESERVED",
    NCL: "NCL",
}
#: Every ``OutputFormat`` name of dump_data.proto, for messages and converter file names.
FORMAT_NAMES: dict[int, str] = {
    code: name
    for code, name in enumerate(
        "NCHW NHWC ND NC1HWC0 FRACTAL_Z NC1C0HWPAD NHWC1C0 FSR_NCHW FRACTAL_DECONV C1HWNC0 "
        "FRACTAL_DECONV_TRANSPOSE FRACTAL_DECONV_SP_STRIDE_TRANS NC1HWC0_C04 FRACTAL_Z_C04 CHWN "
        "FRACTAL_DECONV_SP_STRIDE8_TRANS HWCN NC1KHKWHWC0 BN_WEIGHT FILTER_HWCK HASHTABLE_LOOKUP_LOOKUPS "
        "HASHTABLE_LOOKUP_KEYS HASHTABLE_LOOKUP_VALUE HASHTABLE_LOOKUP_OUTPUT HASHTABLE_LOOKUP_HITS "
        "C1HWNCoC0 MD NDHWC FRACTAL_ZZ FRACTAL_NZ NCDHW DHWCN NDC1HWC0 FRACTAL_Z_3D CN NC DHWNC "
        "FRACTAL_Z_3D_TRANSPOSE FRACTAL_ZN_LSTM FRACTAL_Z_G RESERVED ALL NULL ND_RNN_BIAS FRACTAL_ZN_RNN "
        "YUV YUV_A NCL FRACTAL_Z_WINO C1HWC0".split()
    )
}
#: Formats whose stored order already is the framework's (no conversion needed).
PLAIN_FORMATS = frozenset({NCHW, NHWC, ND, HWCN, NCDHW, CHWN, MD, NDHWC, DHWCN, CN, NC, DHWNC, RESERVED, NCL})
#: Formats ``to_framework`` rebuilds itself; any other goes to a user's converter.
CONVERTED_FORMATS = frozenset({NC1HWC0, FRACTAL_Z, FRACTAL_NZ, NDC1HWC0})


def primary_format(code: int) -> tuple[int, int]:
    """``(format, sub_format)`` of a format code: GE packs a sub-format (the group
    count of a grouped convolution's weights) into bits 8-23 of the code."""
    return code & 0xFF, (code >> 8) & 0xFFFF


def format_name(code: int) -> str:
    return FORMAT_NAMES.get(code, f"format {code}")


def to_framework(
    data: np.ndarray,
    fmt: int,
    original_shape: Sequence[int] = (),
    original_format: int | None = None,
    sub_format: int = 0,
) -> np.ndarray:
    """A tensor in device format ``fmt`` (``data`` has the device shape) in framework layout.

    Padding is cropped to ``original_shape`` when it is given. ``original_format``
    (``OriginalOp.format`` of the dump) turns an NCHW result into NHWC or HWCN
    when the framework held it that way. Plain formats come back as a view.
    A ``sub_format`` above 1 on FRACTAL_Z is a grouped convolution's weight,
    whose groups are interleaved in the blocks: without a user's converter for
    it this is a LayoutError rather than a wrong rebuild.
    """
    fmt, packed_sub = primary_format(fmt)
    sub_format = sub_format or packed_sub
    original = tuple(int(d) for d in original_shape)
    shape = data.shape
    converter = find_converter(format_name(fmt), sub_format)
    if converter is not None:
        return converter(data, original, sub_format)
    if fmt == FRACTAL_Z and sub_format > 1:
        raise LayoutError(
            f"FRACTAL_Z with sub_format {sub_format} (grouped convolution weights) is not rebuilt; "
            f"give a converter convert_FRACTAL_Z_G{sub_format}_to_NCHW.py or convert_FRACTAL_Z_to_NCHW.py (--converters)"
        )
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
    spelled = FORMAT_NAMES.get(fmt, str(fmt))
    raise LayoutError(
        f"unsupported format {spelled} (fusion-dd reads {', '.join(FORMATS[code] for code in sorted(PLAIN_FORMATS | CONVERTED_FORMATS))}); "
        f"give a converter convert_{spelled}_to_ND.py (--converters)"
    )


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
    if len(target) < full.ndim:
        # FRACTAL_NZ of a 1-D tensor is one padded row: (1, n) cropped, then (n,)
        padded = (1,) * (full.ndim - len(target)) + tuple(target)
        if all(t <= f for t, f in zip(padded, full.shape)):
            return full[tuple(slice(0, t) for t in padded)].reshape(target)
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
        if array.ndim == 1:
            array = array.reshape(1, -1)
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
