"""A test-side writer of Ascend dump files, independent of fusion_dd's reader.

The protobuf header is encoded here byte by byte (varints and length-delimited
fields) with the field numbers and enum values of CANN's ``dump_data.proto``
(package ``toolkit.dumpdata``), not with the reader's schema module, so that a
wrong field number in the reader cannot be mirrored by the writer. Nano dumps
(magic ``0x5A5A5A5A``, TLV header, own dtype enum) are packed with ``struct``
as msaccucmp's nano reader unpacks them. Device formats are built with
element-wise formulas, so that the transposes in ``fusion_dd/backends/cann/artifacts/layout.py``
are checked against index arithmetic.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

# OutputDataType of dump_data.proto.
CODES = {
    np.dtype("float32"): 1, np.dtype("float16"): 2, np.dtype("int8"): 3, np.dtype("uint8"): 4,
    np.dtype("int16"): 5, np.dtype("uint16"): 6, np.dtype("int32"): 7, np.dtype("int64"): 8,
    np.dtype("uint32"): 9, np.dtype("uint64"): 10, np.dtype("bool"): 11, np.dtype("float64"): 12,
    np.dtype("complex64"): 16, np.dtype("complex128"): 17,
}  # fmt: skip
BF16, UINT1, HIFLOAT8, FLOAT8_E5M2, FLOAT8_E4M3FN = 27, 29, 33, 34, 35
# OutputFormat of dump_data.proto.
NCHW, NHWC, ND, NC1HWC0, FRACTAL_Z, HWCN, NDHWC, FRACTAL_NZ, NCDHW, DHWCN, NDC1HWC0, NC, RESERVED = (
    0, 1, 2, 3, 4, 16, 27, 29, 30, 31, 32, 35, 40
)
# The nano dump's own data-type enum (it differs from dump_data.proto's).
NANO_CODES = {1: 0, 2: 1, 3: 2, 7: 3, 4: 4, 5: 6, 6: 7, 9: 8, 8: 9, 10: 10, 12: 11, 11: 12, 16: 16, 17: 17, 27: 27}


# --- protobuf wire format ------------------------------------------------------------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32 values are sign-extended to 10 bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint((number << 3) | wire)


def _int(number: int, value: int) -> bytes:
    return _key(number, 0) + _varint(value) if value else b""


def _bytes(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _shape(number: int, dims) -> bytes:
    packed = b"".join(_varint(int(d)) for d in dims)
    return _bytes(number, _bytes(1, packed) if dims else b"")


def _tensor_message(kind: str, tensor: dict, code: int, size: int) -> bytes:
    """OpOutput (data_type 1, format 2, shape 3, original_op 4, size 6, original_shape 7, sub_format 8)
    or OpInput (data_type 1, format 2, shape 3, size 5, original_shape 6, sub_format 7)."""
    data = np.asarray(tensor["data"])
    shape = tensor.get("shape", data.shape)
    body = _int(1, code) + _int(2, tensor.get("format", ND)) + _shape(3, shape)
    if kind == "output":
        origin = tensor.get("origin")
        if origin:
            original = _bytes(1, origin[0].encode()) + _int(2, origin[1]) + _int(3, code) + _int(4, tensor.get("original_format", 0))
            body += _bytes(4, original)
        body += _int(6, size) + _shape(7, tensor.get("original_shape", ())) + _int(8, tensor.get("sub_format", 0))
    else:
        body += _int(5, size) + _shape(6, tensor.get("original_shape", ())) + _int(7, tensor.get("sub_format", 0))
    return body


# --- values ---------------------------------------------------------------------------


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """Truncate float32 to bf16 (values chosen exactly representable in tests)."""
    return (np.ascontiguousarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def payload_of(data: np.ndarray, code: int) -> bytes:
    if code == BF16:
        return bf16_bits(data).tobytes()
    if code == UINT1:
        return np.packbits(np.asarray(data, dtype=np.uint8).reshape(-1)).tobytes()
    return np.ascontiguousarray(data).tobytes()


def device(array: np.ndarray, fmt: int, c0: int = 16, ni: int = 16) -> np.ndarray:
    """Element-wise device layout with zero padding (slow, small arrays only)."""
    ceil = lambda a, b: -(-a // b)  # noqa: E731
    if fmt == NC1HWC0:
        n, c, h, w = array.shape
        out = np.zeros((n, ceil(c, c0), h, w, c0), array.dtype)
        for (i, ch, y, x), v in np.ndenumerate(array):
            out[i, ch // c0, y, x, ch % c0] = v
        return out
    if fmt == FRACTAL_Z:
        n, c, h, w = array.shape
        c1, no = ceil(c, c0), ceil(n, ni)
        out = np.zeros((c1 * h * w, no, ni, c0), array.dtype)
        for (i, ch, y, x), v in np.ndenumerate(array):
            out[(ch // c0) * h * w + y * w + x, i // ni, i % ni, ch % c0] = v
        return out
    if fmt == FRACTAL_NZ:
        if array.ndim == 1:
            array = array.reshape(1, -1)
        *batch, m, n = array.shape
        out = np.zeros((*batch, ceil(n, c0), ceil(m, ni), ni, c0), array.dtype)
        for index, v in np.ndenumerate(array):
            *b, r, col = index
            out[(*b, col // c0, r // ni, r % ni, col % c0)] = v
        return out
    if fmt == NDC1HWC0:
        n, c, d, h, w = array.shape
        out = np.zeros((n, d, ceil(c, c0), h, w, c0), array.dtype)
        for (i, ch, z, y, x), v in np.ndenumerate(array):
            out[i, z, ch // c0, y, x, ch % c0] = v
        return out
    return array


# --- files ----------------------------------------------------------------------------


def write(
    path: Path,
    op_name: str,
    outputs: list[dict],
    inputs: list[dict] = (),  # type: ignore[assignment]
    truncate: int = 0,
    extra: bytes = b"",
    attrs: dict[str, str] | None = None,
) -> Path:
    """Write a dump file; each tensor is ``{"data", "format", "original_shape", "origin", "dtype", ...}``.

    DumpData fields: version 1, dump_time 2, output 3, input 4, buffer 5, op_name 6, attr 7.
    """
    header = _bytes(1, b"2.0") + _int(2, 1)
    blobs: list[bytes] = []
    parts: dict[str, list[bytes]] = {"output": [], "input": []}
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for tensor in tensors:
            data = np.asarray(tensor["data"])
            code = tensor.get("dtype", CODES.get(data.dtype))
            payload = tensor["raw"] if "raw" in tensor else payload_of(data, code)
            parts[kind].append(_tensor_message(kind, tensor, code, tensor.get("size", len(payload))))
            blobs.append(payload)
    for body in parts["output"]:
        header += _bytes(3, body)
    for body in parts["input"]:
        header += _bytes(4, body)
    header += _bytes(5, _int(1, 0) + _int(3, 4))  # one L1 buffer of 4 bytes
    blobs.append(b"\0\0\0\0")
    header += _bytes(6, op_name.encode())
    for name, value in (attrs or {}).items():
        header += _bytes(7, _bytes(1, name.encode()) + _bytes(2, value.encode()))
    content = struct.pack("<Q", len(header)) + header + b"".join(blobs) + extra
    if truncate:
        content = content[:-truncate]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def write_nano(path: Path, outputs: list[dict], inputs: list[dict] = (), origin_names: list[str] | None = None) -> Path:  # type: ignore[assignment]
    """A nano dump: uint64 header length, then magic 0x5A5A5A5A, version, an input-desc TLV
    (tag 4) and an output-desc TLV (tag 5), each ``uint32 count`` and per tensor fixed fields
    followed by TLNV shape (tag 0), original shape (tag 1) and, for outputs, origin name (tag 2)."""

    def tlnv(tag: int, payload: bytes) -> bytes:
        return struct.pack("<II", tag, len(payload)) + payload

    def dims(values) -> bytes:
        return b"".join(struct.pack("<Q", int(d)) for d in values)

    blobs = []
    descs = {4: [], 5: []}
    for tag, tensors in ((4, inputs), (5, outputs)):
        for position, tensor in enumerate(tensors):
            data = np.asarray(tensor["data"])
            code = tensor.get("dtype", CODES.get(data.dtype))
            payload = payload_of(data, code)
            nano = NANO_CODES[code]
            fmt = tensor.get("format", ND)
            tail = tlnv(0, dims(data.shape)) + tlnv(1, dims(tensor.get("original_shape", data.shape)))
            if tag == 4:
                fixed = struct.pack("<iiiQQQI", nano, fmt, 0, 0, 0, len(payload), len(tail))
            else:
                name = (origin_names or [""] * len(tensors))[position].encode()
                tail += tlnv(2, name)
                fixed = struct.pack("<iiiiiiQQQI", nano, fmt, 0, position, nano, fmt, 0, 0, len(payload), len(tail))
            descs[tag].append(fixed + tail)
            blobs.append(payload)
    header = struct.pack("<II", 0x5A5A5A5A, 1)
    for tag in (4, 5):
        body = struct.pack("<I", len(descs[tag])) + b"".join(descs[tag])
        header += struct.pack("<II", tag, len(body)) + body
    input_blobs = blobs[: len(inputs)]
    output_blobs = blobs[len(inputs) :]
    content = struct.pack("<Q", len(header)) + header + b"".join(input_blobs) + b"".join(output_blobs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def ffts_attrs(slices: int, cuts: list[list[int]], thread_mode: bool = False) -> dict[str, str]:
    """The JSON attr an FFTS+ sliced dump carries (slice count, per-output cut counts, mode)."""
    return {"ffts": json.dumps({"slice_instance_num": slices, "outputCutList": cuts, "threadMode": thread_mode})}


def op_file(
    folder: Path, op_type: str, op_name: str, task: int, timestamp: int, variant: str = "stream", thread: int = 0
) -> Path:
    """The dump file name in one of the runtime's variants.

    stream ``type.name.task.stream.ts``, nostream ``type.name.task.ts``, dumpnum
    ``type.name.num.task.stream.ts``, ffts ``type.name.stream.task.ts.task_type.context.thread.device``
    (9 fields, Atlas A2/A3), ffts8 the same without the stream id, fftsplus the newer adump
    form ``type.name.num.task.stream.ts.FFTSPLUS.context.thread.device``, which the runtime
    writes only when the context and thread ids are both non-zero: thread 0 keeps the
    6-field name.
    """
    safe = lambda text: "".join("_" if ch in " ./\\" else ch for ch in text)  # noqa: E731
    base = f"{safe(op_type)}.{safe(op_name)}"
    if variant == "nostream":
        return folder / f"{base}.{task}.{timestamp}"
    if variant == "dumpnum":
        return folder / f"{base}.0.{task}.0.{timestamp}"
    if variant == "ffts":
        return folder / f"{base}.2.{task}.{timestamp}.4.330.{thread}.0"
    if variant == "fftsplus":
        return folder / (f"{base}.0.{task}.0.{timestamp}" + (f".FFTSPLUS.330.{thread}.0" if thread else ""))
    if variant == "ffts8":
        return folder / f"{base}.{task}.{timestamp}.4.330.{thread}.0"
    return folder / f"{base}.{task}.0.{timestamp}"
