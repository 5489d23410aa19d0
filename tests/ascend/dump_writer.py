"""A test-side writer of Ascend dump files, independent of fusion_dd's own writer.

Built from the schema only (the ``DumpData`` message classes) and element-wise
formulas for the device formats, so that a reader bug cannot be mirrored by a
writer bug: the transposes in ``fusion_dd/ascend/layout.py`` are checked against
index arithmetic here.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from fusion_dd.ascend.dump_schema import message_class

CODES = {
    np.dtype("float32"): 1, np.dtype("float16"): 2, np.dtype("int8"): 3, np.dtype("uint8"): 4,
    np.dtype("int16"): 5, np.dtype("uint16"): 6, np.dtype("int32"): 7, np.dtype("int64"): 8,
    np.dtype("uint32"): 9, np.dtype("uint64"): 10, np.dtype("bool"): 11, np.dtype("float64"): 12,
}  # fmt: skip
BF16 = 27
NCHW, ND, NC1HWC0, FRACTAL_Z, FRACTAL_NZ, NDC1HWC0 = 0, 2, 3, 4, 29, 32


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """Truncate float32 to bf16 (values chosen exactly representable in tests)."""
    return (np.ascontiguousarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


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


def write(
    path: Path,
    op_name: str,
    outputs: list[dict],
    inputs: list[dict] = (),  # type: ignore[assignment]
    truncate: int = 0,
    extra: bytes = b"",
) -> Path:
    """Write a dump file; each tensor is ``{"data", "format", "original_shape", "origin", "dtype"}``."""
    message = message_class("DumpData")()
    message.version = "2.0"
    message.op_name = op_name
    blobs = []
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for tensor in tensors:
            data = np.asarray(tensor["data"])
            code = tensor.get("dtype", CODES.get(data.dtype))
            payload = bf16_bits(data).tobytes() if code == BF16 else np.ascontiguousarray(data).tobytes()
            item = (message.input if kind == "input" else message.output).add()
            item.data_type = code
            item.format = tensor.get("format", ND)
            item.shape.dim.extend(data.shape)
            item.original_shape.dim.extend(tensor.get("original_shape", ()))
            item.size = tensor.get("size", len(payload))
            if kind == "output" and tensor.get("origin"):
                item.original_op.name, item.original_op.output_index = tensor["origin"]
            blobs.append(payload)
    buffer = message.buffer.add()
    buffer.buffer_type = 1
    buffer.size = 4
    blobs.append(b"\0\0\0\0")
    header = message.SerializeToString()
    content = struct.pack("<Q", len(header)) + header + b"".join(blobs) + extra
    if truncate:
        content = content[:-truncate]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def op_file(folder: Path, op_type: str, op_name: str, task: int, timestamp: int, variant: str = "stream") -> Path:
    """The dump file name in one of the three variants: stream, nostream, dumpnum."""
    safe = lambda text: "".join("_" if ch in " ./\\" else ch for ch in text)  # noqa: E731
    base = f"{safe(op_type)}.{safe(op_name)}"
    if variant == "nostream":
        return folder / f"{base}.{task}.{timestamp}"
    if variant == "dumpnum":
        return folder / f"{base}.0.{task}.0.{timestamp}"
    return folder / f"{base}.{task}.0.{timestamp}"
