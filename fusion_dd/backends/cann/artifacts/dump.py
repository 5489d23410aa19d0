"""Ascend tensor dump files: names, the binary layout, and reading tensors lazily.

With data dump on, the runtime writes one file per executed op under
``{dump_path}/{YYYYMMDDhhmmss}/{device_id}/{model_name}/{model_id}/{dump_number}/``,
named ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp_us}``. Releases
differ: some leave out the stream id, some add a dump-number field after the op
name, and FFTS+ (Atlas A2/A3) adds task type, context, thread and device ids
and may slice an op into ``{op_name}_lxslice<N>`` files; 4 to 9 fields are read
(``parse_file_name``). Space, ``.``, ``/`` and ``\\`` of the op type and name
become ``_``; a name too long for the file system is saved under a hash, with a
``hash,original_file_name`` line in a ``mapping.csv`` of the same folder.

A file is ``uint64 header_len`` (little-endian), a ``DumpData`` message of that
many bytes whose tensor ``data`` fields are empty, then the raw bytes of every
input, output, buffer and workspace in that order, ``size`` bytes each. A nano
dump has the same frame around a TLV header (magic ``0x5A5A5A5A``). A file
shorter than ``8 + header_len + sum(sizes)`` is truncated and reported per file;
bytes beyond it are tolerated with a note, as msaccucmp does.

Only headers are read when a dump is scanned; a tensor's bytes are read (memory
mapped) when it is compared, so a dump of many gigabytes is streamed.
"""

from __future__ import annotations

import math
import os
import re
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from ....core.safe_read import MiB
from .dump_schema import message_class
from .layout import (
    BF16,
    NUMPY_CODES,
    LayoutError,
    complex_as_pairs,
    decode_values,
    stored_bytes,
    stored_count,
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
    """What a dump file name says. ``op_name`` is the sanitized name (``.``/``/`` -> ``_``).

    FFTS+ names (Atlas A2/A3) add ``task_type``, ``context_id``, ``thread_id`` and
    ``device_id``; a manually sliced op's name carries ``_lxslice<N>`` (``slice_index``),
    and ``base_name`` is the op the slices belong to.
    """

    op_type: str
    op_name: str
    task_id: int
    stream_id: int | None
    timestamp: int
    dump_number: int | None = None
    task_type: int | None = None
    context_id: int | None = None
    thread_id: int | None = None
    device_id: int | None = None

    @property
    def slice_index(self) -> int | None:
        match = _LXSLICE.search(self.op_name)
        return int(match.group(1)) if match else None

    @property
    def base_name(self) -> str:
        return _LXSLICE.sub("", self.op_name)

    @property
    def ffts(self) -> bool:
        return self.thread_id is not None or self.slice_index is not None


def sanitize(name: str) -> str:
    """The runtime's file-name form of an op type or name."""
    return _UNSAFE.sub("_", name)


#: A microsecond timestamp has 16 digits; task, stream, context and thread ids are short.
_TIMESTAMP_DIGITS = 13
#: Position of the timestamp among the numeric fields, by their count, when no field is long enough to tell.
_TIMESTAMP_AT = {2: 1, 3: 2, 4: 3, 5: 1, 6: 1, 7: 2}
_LXSLICE = re.compile(r"_lxslice(\d+)")

#: The grammar, for messages: what a dump file name may look like.
NAME_GRAMMAR = (
    "{op_type}.{op_name}[.{dump_number}].{task_id}[.{stream_id}].{timestamp}"
    "[.{task_type}.{context_id}.{thread_id}[.{device_id}]] (4 to 9 fields) or "
    "{op_type}.{op_name}.{dump_number}.{task_id}.{stream_id}.{timestamp}.FFTSPLUS.{context_id}.{thread_id}.{device_id}"
)


def parse_file_name(name: str) -> DumpName | None:
    """Parse a dump file name of 4 to 9 fields; None for other files.

    ``type.name.task.stream.ts`` (5 fields), ``type.name.task.ts`` (no stream id),
    ``type.name.dumpnum.task.stream.ts`` (6 fields), and the FFTS+ names of
    Atlas A2/A3, ``type.name[.stream].task.ts.task_type.context.thread.device``
    (8 or 9 fields; ``name`` may end in ``_lxslice<N>``). Since ``.`` in op names
    is replaced by ``_``, every field after the name is a number; the timestamp
    is the long one (16 digits), which tells the variants apart. The newer
    ``...{timestamp}.FFTSPLUS.{context}.{thread}.{device}`` form has 10 fields
    or more (``_parse_ffts_plus_marked``).
    """
    parts = name.split(".")
    if len(parts) >= 10 and parts[-4] == FFTS_PLUS_MARK:
        return _parse_ffts_plus_marked(parts)
    if len(parts) < 4 or len(parts) > 9 or not parts[0] or not parts[1]:
        return None
    numbers = parts[2:]
    if not all(_DIGITS.match(part) for part in numbers):
        return None
    values = [int(part) for part in numbers]
    long = [index for index, part in enumerate(numbers) if len(part) >= _TIMESTAMP_DIGITS]
    at = long[0] if len(long) == 1 else _TIMESTAMP_AT[len(values)]
    before, timestamp, after = values[:at], values[at], values[at + 1 :]
    if len(after) not in (0, 1, 3, 4) or not 1 <= len(before) <= 3:
        return None
    dump_number = stream = None
    if len(before) == 1:
        task = before[0]
    elif len(before) == 2:
        # ``task.stream`` in the classic names, ``stream.task`` in the FFTS+ ones
        task, stream = (before[0], before[1]) if len(after) < 3 else (before[1], before[0])
    else:
        dump_number, task, stream = before
    task_type = context = thread = device = None
    if len(after) == 1:
        device = after[0]
    elif len(after) >= 3:
        task_type, context, thread = after[:3]
        device = after[3] if len(after) == 4 else None
    return DumpName(parts[0], parts[1], task, stream, timestamp, dump_number, task_type, context, thread, device)


#: The literal field of the newer adump names of FFTS+ slices (see ``_parse_ffts_plus_marked``).
FFTS_PLUS_MARK = "FFTSPLUS"


def _parse_ffts_plus_marked(parts: list[str]) -> DumpName | None:
    """``type.name.dump_number.task.stream.ts.FFTSPLUS.context.thread.device``: the newer adump form.

    The runtime's dump manager writes the six classic fields and, for a
    context and thread of an FFTS+ task, a literal ``FFTSPLUS`` and the three
    ids; it does not replace the dots of the op name on this path, so the name
    is everything between the type and the last eight fields.
    """
    numbers, ids = parts[-8:-4], parts[-3:]
    name = ".".join(parts[1:-8])
    if not parts[0] or not name or not all(_DIGITS.match(part) for part in (*numbers, *ids)):
        return None
    dump_number, task, stream, timestamp = (int(part) for part in numbers)
    context, thread, device = (int(part) for part in ids)
    return DumpName(parts[0], name, task, stream, timestamp, dump_number, None, context, thread, device)


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
    sub_format: int = 0

    def describe(self) -> str:
        return f"{self.kind} {self.index} ({dtype_name(self.data_type)}, {format_name(self.format)}, {list(self.shape)})"

    @property
    def dtype_text(self) -> str:
        return dtype_name(self.data_type)


@dataclass(frozen=True)
class DumpFile:
    """The header of one dump file; tensors are read on demand with ``load_tensor``."""

    path: Path
    op_name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    dump_time: int = 0
    attrs: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    nano: bool = False


def read_dump_header(path: str | Path) -> DumpFile:
    """Read and check one dump file's header; a DumpFileError names what is wrong.

    Regular files only (a FIFO would block), the header length bounded, and the
    file size checked against the tensor sizes the header declares: a file
    shorter than that is truncated (an error); bytes after the declared tensors
    are tolerated with a note, as msaccucmp does. A header that starts with the
    nano magic ``0x5A5A5A5A`` is a nano dump's TLV header (``read_nano_header``).
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
    if raw[:4] == NANO_MAGIC:
        inputs, outputs = read_nano_header(raw, 8 + header_len)
        end = 8 + header_len + sum(info.size for info in (*inputs, *outputs))
        return _checked(DumpFile(path=path, op_name="", inputs=inputs, outputs=outputs, nano=True), end, 0, total)
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
    extra = sum(int(item.size) for item in message.buffer) + sum(int(item.size) for item in message.space)
    dump = DumpFile(
        path=path,
        op_name=message.op_name,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        dump_time=int(message.dump_time),
        attrs={attr.name: attr.value for attr in message.attr},
    )
    return _checked(dump, offset, extra, total)


def _checked(dump: DumpFile, tensors_end: int, extra: int, total: int) -> DumpFile:
    declared = tensors_end + extra
    if declared > total:
        raise DumpFileError(f"size mismatch: the header declares {declared} bytes in all, the file has {total} (truncated)")
    if declared < total:
        note = f"{total - declared} trailing bytes after the declared tensors (ignored)"
        return DumpFile(dump.path, dump.op_name, dump.inputs, dump.outputs, dump.dump_time, dump.attrs, (note,), dump.nano)
    return dump


#: The first four header bytes of a nano dump (little-endian 0x5A5A5A5A).
NANO_MAGIC = struct.pack("<I", 0x5A5A5A5A)
#: The nano dump's own data-type codes, as dump_data.proto codes.
NANO_DTYPES = {0: 1, 1: 2, 2: 3, 3: 7, 4: 4, 6: 5, 7: 6, 8: 9, 9: 8, 10: 10, 11: 12, 12: 11, 16: 16, 17: 17, 23: 8, 27: 27, 30: 29}
_NANO_INPUT = struct.Struct("<iiiQQQI")  # data_type, format, address_type, address, offset, size, tlv_list_len
_NANO_OUTPUT = struct.Struct("<iiiiiiQQQI")  # ... original_index, original_data_type, original_format before address


def read_nano_header(raw: bytes, data_start: int) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    """The tensors of a nano dump's TLV header (after ``uint32 magic, uint32 version``).

    An input-description TLV (tag 4) and an output-description TLV (tag 5),
    each ``uint32 count`` and per tensor fixed little-endian fields followed by
    TLNV entries: shape (tag 0, uint64 dims), original shape (tag 1) and, for
    outputs, the original op name (tag 2). Data follows the header: inputs, then
    outputs, ``size`` bytes each.
    """
    reader = _Cursor(raw, 8)
    offset = data_start
    tensors: dict[str, list[TensorInfo]] = {"input": [], "output": []}
    for tag, kind, fixed in ((4, "input", _NANO_INPUT), (5, "output", _NANO_OUTPUT)):
        if not reader.next_tag_is(tag):
            continue
        reader.take(8)
        (count,) = struct.unpack("<I", reader.take(4))
        if count > 1 << 16:
            raise DumpFileError(f"corrupt nano dump header: {count} {kind}s")
        for index in range(count):
            values = fixed.unpack(reader.take(fixed.size))
            code, fmt, size = values[0], values[1], values[-2]
            shape = reader.tlnv(0, "Q") or ()
            original = reader.tlnv(1, "Q") or ()
            origin = None
            if kind == "output":
                name = reader.tlnv(2, "s")
                origin = (name, int(values[3])) if name else None
            if code not in NANO_DTYPES:
                raise DumpFileError(f"nano dump {kind} {index}: unknown nano data type {code}")
            tensors[kind].append(
                TensorInfo(kind, index, NANO_DTYPES[code], int(fmt), tuple(shape), tuple(original), 0, int(size), origin,
                           int(values[5]) if kind == "output" else None)
            )  # fmt: skip
    for kind in ("input", "output"):
        placed = []
        for info in tensors[kind]:
            placed.append(TensorInfo(info.kind, info.index, info.data_type, info.format, info.shape, info.original_shape,
                                     offset, info.size, info.origin, info.original_format))  # fmt: skip
            offset += info.size
        tensors[kind] = placed
    return tuple(tensors["input"]), tuple(tensors["output"])


class _Cursor:
    """Sequential reads over a nano header; running off its end is a DumpFileError."""

    def __init__(self, raw: bytes, position: int) -> None:
        self.raw, self.position = raw, position

    def take(self, count: int) -> bytes:
        if self.position + count > len(self.raw):
            raise DumpFileError("corrupt nano dump header: it ends inside a tensor description")
        chunk = self.raw[self.position : self.position + count]
        self.position += count
        return chunk

    def next_tag_is(self, tag: int) -> bool:
        if self.position + 8 > len(self.raw):
            return False
        return struct.unpack_from("<I", self.raw, self.position)[0] == tag

    def tlnv(self, tag: int, element: str):
        """A tag-length-values entry with ``tag``, or None when the next entry has another tag."""
        if not self.next_tag_is(tag):
            return None
        _, length = struct.unpack("<II", self.take(8))
        payload = self.take(length)
        if element == "s":
            return payload.split(b"\0", 1)[0].decode("utf-8", errors="replace")
        return struct.unpack(f"<{length // 8}Q", payload[: length // 8 * 8])


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
        sub_format=int(item.sub_format),
    )


def load_tensor(path: str | Path, info: TensorInfo) -> np.ndarray:
    """One tensor in framework layout, memory-mapped when no conversion copies it.

    A LayoutError (unsupported type or format, size not matching the shape) is
    the caller's per-tensor problem to list.
    """
    values = load_device_values(path, info)
    framework = to_framework(values, info.format, info.original_shape, info.original_format, info.sub_format)
    return complex_as_pairs(framework)


def load_device_values(path: str | Path, info: TensorInfo) -> np.ndarray:
    """One tensor's decoded values in its device shape (no format conversion yet)."""
    raw = raw_dtype(info.data_type)
    count = math.prod(info.shape) if info.shape else 1  # Python ints: no overflow
    needed = stored_bytes(info.data_type, count)
    if needed != info.size:
        raise LayoutError(f"{info.describe()}: shape holds {needed} bytes but size says {info.size}")
    if count == 0:
        data = np.zeros(0, raw)
    else:
        data = np.memmap(path, dtype=raw, mode="r", offset=info.offset, shape=(stored_count(info.data_type, count),))
    return decode_values(data, info.data_type, count).reshape(info.shape)


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
