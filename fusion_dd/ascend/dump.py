"""Ascend tensor dump files: names, the binary layout, and reading tensors lazily.

With data dump on, the runtime writes one file per executed op under
``{dump_path}/{YYYYMMDDhhmmss}/{device_id}/{model_name}/{model_id}/{dump_number}/``,
named ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp_us}``. Releases
differ: some leave out the stream id, some add a dump-number field after the op
name; all three are read. Space, ``.``, ``/`` and ``\\`` of the op type and name
become ``_``; a name too long for the file system is saved under a hash, with a
``hash,original_file_name`` line in a ``mapping.csv`` of the same folder.

A file is ``uint64 header_len`` (little-endian), a ``DumpData`` message of that
many bytes whose tensor ``data`` fields are empty, then the raw bytes of every
input, output, buffer and workspace in that order, ``size`` bytes each. The file
size must equal ``8 + header_len + sum(sizes)``; anything else is a truncated or
foreign file, reported per file rather than failing the comparison.

Only headers are read when a dump is scanned; a tensor's bytes are read (memory
mapped) when it is compared, so a dump of many gigabytes is streamed.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from ..safe_read import MiB
from .dump_schema import message_class
from .layout import (
    BF16,
    NUMPY_CODES,
    LayoutError,
    decode_values,
    dtype_name,
    encode_bf16,
    format_name,
    raw_dtype,
    to_framework,
)

#: A header describes a few tensors; even ops with thousands of inputs stay far below.
MAX_HEADER_BYTES = 64 * MiB
#: The CSV of hashed file names: one short line per long-named op.
MAX_MAPPING_BYTES = 64 * MiB
MAPPING_CSV = "mapping.csv"

_DIGITS = re.compile(r"^\d+$")
_UNSAFE = re.compile(r"[ ./\\]")


class DumpFileError(ValueError):
    """A dump file that cannot be read; the message is the reason, listed per file."""


@dataclass(frozen=True)
class DumpName:
    """What a dump file name says. ``op_name`` is the sanitized name (``.``/``/`` -> ``_``)."""

    op_type: str
    op_name: str
    task_id: int
    stream_id: int | None
    timestamp: int
    dump_number: int | None = None


def sanitize(name: str) -> str:
    """The runtime's file-name form of an op type or name."""
    return _UNSAFE.sub("_", name)


def parse_file_name(name: str) -> DumpName | None:
    """Parse a dump file name in any of the three variants; None for other files.

    ``type.name.task.stream.ts`` (5 fields), ``type.name.task.ts`` (no stream id),
    ``type.name.dumpnum.task.stream.ts`` (6 fields). Since ``.`` in op names is
    replaced by ``_``, the field count tells the variants apart.
    """
    parts = name.split(".")
    if len(parts) < 4 or len(parts) > 6 or not parts[0] or not parts[1]:
        return None
    numbers = parts[2:]
    if not all(_DIGITS.match(part) for part in numbers):
        return None
    values = [int(part) for part in numbers]
    if len(values) == 2:
        return DumpName(parts[0], parts[1], values[0], None, values[1])
    if len(values) == 3:
        return DumpName(parts[0], parts[1], values[0], values[1], values[2])
    return DumpName(parts[0], parts[1], values[1], values[2], values[3], dump_number=values[0])


def read_mapping(folder: Path) -> dict[str, str]:
    """``hash -> original file name`` from a folder's ``mapping.csv`` (empty without one).

    Unreadable or malformed lines are skipped: the hashed files they would name are
    then listed as files that are not dump files, which says enough.
    """
    path = folder / MAPPING_CSV
    try:
        data = _read_small(path, MAX_MAPPING_BYTES)
    except (OSError, DumpFileError):
        return {}
    mapping: dict[str, str] = {}
    for line in data.decode("utf-8", errors="replace").splitlines():
        key, sep, original = line.strip().partition(",")
        if sep and key and original:
            mapping[key.strip()] = original.strip()
    return mapping


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a dump file: where its bytes are and how to decode them."""

    kind: str  # "input" or "output"
    index: int
    data_type: int
    format: int
    shape: tuple[int, ...]
    original_shape: tuple[int, ...]
    offset: int
    size: int
    origin: tuple[str, int] | None = None  # OriginalOp (name, output_index) of an output
    original_format: int | None = None

    def describe(self) -> str:
        return f"{self.kind} {self.index} ({dtype_name(self.data_type)}, {format_name(self.format)}, {list(self.shape)})"


@dataclass(frozen=True)
class DumpFile:
    """The header of one dump file; tensors are read on demand with ``load_tensor``."""

    path: Path
    op_name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    dump_time: int = 0
    attrs: dict[str, str] = field(default_factory=dict)


def read_dump_header(path: str | Path) -> DumpFile:
    """Read and check one dump file's header; a DumpFileError names what is wrong.

    Regular files only (a FIFO would block), the header length bounded, and the
    file size checked against the tensor sizes the header declares.
    """
    path = Path(path)
    fd = _open_regular(path)
    try:
        total = os.fstat(fd).st_size
        if total < 8:
            raise DumpFileError(f"truncated: {total} bytes, shorter than the 8-byte header length")
        (header_len,) = struct.unpack("<Q", os.pread(fd, 8, 0))
        if header_len > MAX_HEADER_BYTES or 8 + header_len > total:
            raise DumpFileError(
                f"header length {header_len} does not fit the file ({total} bytes): truncated or not an Ascend dump file"
            )
        raw = os.pread(fd, header_len, 8)
    finally:
        os.close(fd)
    message = message_class("DumpData")()
    try:
        message.ParseFromString(raw)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise DumpFileError(f"corrupt DumpData header ({exc or 'undecodable'})") from None
    offset = 8 + header_len
    inputs = []
    for index, item in enumerate(message.input):
        inputs.append(_tensor("input", index, item, offset, None))
        offset += int(item.size)
    outputs = []
    for index, item in enumerate(message.output):
        origin = None
        if item.HasField("original_op") and item.original_op.name:
            origin = (item.original_op.name, int(item.original_op.output_index))
        original_format = int(item.original_op.format) if item.HasField("original_op") else None
        outputs.append(_tensor("output", index, item, offset, origin, original_format))
        offset += int(item.size)
    offset += sum(int(item.size) for item in message.buffer)
    offset += sum(int(item.size) for item in message.space)
    if offset != total:
        raise DumpFileError(
            f"size mismatch: the header declares {offset} bytes in all, the file has {total}"
            + (" (truncated)" if total < offset else " (trailing bytes)")
        )
    return DumpFile(
        path=path,
        op_name=message.op_name,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        dump_time=int(message.dump_time),
        attrs={attr.name: attr.value for attr in message.attr},
    )


def _tensor(kind: str, index: int, item, offset: int, origin, original_format: int | None = None) -> TensorInfo:
    return TensorInfo(
        kind=kind,
        index=index,
        data_type=int(item.data_type),
        format=int(item.format),
        shape=tuple(int(d) for d in item.shape.dim),
        original_shape=tuple(int(d) for d in item.original_shape.dim),
        offset=offset,
        size=int(item.size),
        origin=origin,
        original_format=original_format,
    )


def load_tensor(path: str | Path, info: TensorInfo) -> np.ndarray:
    """One tensor in framework layout, memory-mapped when no conversion copies it.

    A LayoutError (unsupported type or format, size not matching the shape) is
    the caller's per-tensor problem to list.
    """
    raw = raw_dtype(info.data_type)
    count = int(np.prod(info.shape, dtype=np.int64)) if info.shape else 1
    if count * raw.itemsize != info.size:
        raise LayoutError(
            f"{info.describe()}: shape holds {count * raw.itemsize} bytes but size says {info.size}"
        )
    if count == 0:
        data = np.zeros(info.shape, raw)
    else:
        data = np.memmap(path, dtype=raw, mode="r", offset=info.offset, shape=(count,))
    values = decode_values(data, info.data_type).reshape(info.shape)
    return to_framework(values, info.format, info.original_shape, info.original_format)


def _open_regular(path: Path) -> int:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise DumpFileError(f"cannot open ({exc.strerror or exc})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DumpFileError("not a regular file")
    return fd


def _read_small(path: Path, limit: int) -> bytes:
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise DumpFileError(f"larger than {limit} bytes")
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


# --- writing (the demo's simulated NPU; tests keep their own independent writer) -----


@dataclass(frozen=True)
class TensorToWrite:
    """One tensor for ``write_dump_file``: device data plus what the header says of it."""

    data: np.ndarray  # already in device layout
    format: int = 2
    original_shape: Sequence[int] = ()
    origin: tuple[str, int] | None = None
    data_type: int | None = None  # None: from data.dtype; BF16 takes float32 data


def write_dump_file(
    path: str | Path, op_name: str, outputs: Sequence[TensorToWrite], inputs: Sequence[TensorToWrite] = (), dump_time: int = 0
) -> None:
    """Write one dump file in the runtime's layout."""
    message = message_class("DumpData")()
    message.version = "2.0"
    message.op_name = op_name
    message.dump_time = dump_time
    blobs: list[bytes] = []
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for tensor in tensors:
            code, payload = _encode(tensor)
            item = (message.input if kind == "input" else message.output).add()
            item.data_type = code
            item.format = tensor.format
            item.shape.dim.extend(int(d) for d in tensor.data.shape)
            item.original_shape.dim.extend(int(d) for d in tensor.original_shape)
            item.size = len(payload)
            if kind == "output" and tensor.origin is not None:
                item.original_op.name = tensor.origin[0]
                item.original_op.output_index = tensor.origin[1]
                item.original_op.data_type = code
                item.original_op.format = 2
            blobs.append(payload)
    header = message.SerializeToString()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)))
        handle.write(header)
        for blob in blobs:
            handle.write(blob)


def _encode(tensor: TensorToWrite) -> tuple[int, bytes]:
    if tensor.data_type == BF16:
        return BF16, encode_bf16(tensor.data).tobytes()
    data = np.ascontiguousarray(tensor.data)
    code = tensor.data_type if tensor.data_type is not None else NUMPY_CODES.get(data.dtype.newbyteorder("<") if data.dtype.byteorder == ">" else data.dtype)
    if code is None:
        raise LayoutError(f"no CANN data type for numpy {data.dtype}")
    return code, data.astype(raw_dtype(code), copy=False).tobytes()


def dump_file_name(op_type: str, op_name: str, task_id: int, stream_id: int, timestamp: int) -> str:
    """The runtime's file name of one op's dump (the 5-field variant)."""
    return f"{sanitize(op_type)}.{sanitize(op_name)}.{task_id}.{stream_id}.{timestamp}"
