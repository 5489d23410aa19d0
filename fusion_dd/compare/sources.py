"""Finding the dumped tensors of one run: Ascend binary dumps or ``.npy``/``.npz`` folders.

A directory argument may be a dump root or any folder below it; files are found
recursively (symlinked directories are not followed). Only headers are read
here; tensors are loaded when they are compared.

Ascend dumps sit in ``.../{device_id}/{model_name}/{model_id}/{dump_number}/``:
the dump number is the step (iteration) and a root may hold several models.
``select`` picks one model and one step; the default is the model with the most
dumped ops and its first step, and the caller names both in its output.

FFTS+ dumps (Atlas A2/A3) write one file per slice of an op (``_lxslice<N>``
in the name, or one thread id per file); the slices are joined back into the
op's tensor along the cut axis their ``outputCutList`` attribute names, and
where that cannot be done each slice is compared on its own, flagged. Files
that are no tensor dump are listed with the reason (``notes``); graph dumps
(``ge_proto_*.txt``) found in the folder are kept for pairing; ``Opdebug``
files are overflow records, listed as such.

``.npy`` files converted by msaccucmp (``Conv2D.conv1.5.1.<ts>.output.0.npy``,
with an optional format suffix, and msprobe's and MindSpore's with format and
dtype) and framework dumps (``{op}.{output}.{ts}.npy``)
are read by op name and tensor index, task ids and timestamps left out, so that
two runs pair. Other ``.npy`` files are named by op: the path below the directory without ``.npy``
(``encoder/layer_3/ln.npy`` is the op ``encoder/layer_3/ln``). The members of an
``.npz`` are ops named by their keys. Their order is the order they were written
(modification time), which is the execution order of a hook that dumps as it goes.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backends.cann.artifacts.dump import (
    MAPPING_CSV,
    NAME_GRAMMAR,
    DumpFile,
    DumpFileError,
    DumpName,
    TensorInfo,
    load_tensor,
    parse_file_name,
    read_dump_header,
    read_mapping,
)
from ..backends.cann.artifacts import discover
from ..core.errors import UsageError
from ..integrations.dump import ORDER_FILE
from ..core.safe_read import MiB

#: Largest ``.npy``/``.npz`` fusion-dd loads (they are read whole; memory-mapped for .npy).
MAX_NPY_BYTES = 64 * 1024 * MiB
_DIGITS = re.compile(r"^\d+$")
_OUTPUT_SUFFIX = re.compile(r"^(.*):(\d+)$")


@dataclass(frozen=True)
class DumpedTensor:
    """One output tensor of one op in a dump, not yet loaded.

    ``origin`` is the original (pre-fusion) op output this tensor stands for,
    from the dump header (``OpOutput.original_op``) when it carries one.
    """

    op: str
    op_type: str
    index: int
    source: str
    order: tuple[int, str]
    origin: tuple[str, int] | None = None
    info: TensorInfo | None = None  # Ascend binary dump
    npz_key: str | None = None  # member of an .npz
    kind: str = "output"  # or "input"
    slices: tuple[tuple[str, TensorInfo], ...] = ()  # FFTS+ slices joined along cut_axis
    cut_axis: int | None = None
    stats: tuple[tuple[str, float], ...] = ()  # a statistics-only dump's row (statistic.csv)
    stat_dtype: str = ""
    stat_shape: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.op, self.kind, self.index)

    @property
    def label(self) -> str:
        """``op:0`` for an output, ``op:input0`` for an input."""
        return f"{self.op}:{self.index}" if self.kind == "output" else f"{self.op}:input{self.index}"

    @property
    def dtype(self) -> str:
        return self.info.dtype_text if self.info is not None else self.stat_dtype

    @property
    def shape(self) -> tuple[int, ...]:
        if self.info is None:
            return self.stat_shape
        return self.info.original_shape or self.info.shape

    @property
    def nbytes(self) -> int:
        if self.stats:
            return 0
        if self.slices:
            return sum(info.size for _, info in self.slices)
        if self.info is not None:
            return self.info.size
        try:
            return os.stat(self.source).st_size
        except OSError:
            return 0

    def load(self) -> np.ndarray:
        """The tensor in framework layout (memory mapped where possible)."""
        if self.slices:
            return load_slices(self.slices, self.cut_axis)
        if self.info is not None:
            return load_tensor(self.source, self.info)
        return load_npy(Path(self.source), self.npz_key)


def load_slices(slices: tuple[tuple[str, TensorInfo], ...], axis: int | None) -> np.ndarray:
    """FFTS+ slices joined in device layout along ``axis``, then converted as one tensor
    with the first slice's format and original shape (msaccucmp's reassembly)."""
    from ..backends.cann.artifacts.dump import load_device_values
    from ..backends.cann.artifacts.layout import complex_as_pairs, to_framework

    parts = [load_device_values(path, info) for path, info in slices]
    first = slices[0][1]
    joined = np.concatenate(parts, axis=axis or 0)
    return complex_as_pairs(to_framework(joined, first.format, first.original_shape, first.original_format, first.sub_format))


@dataclass(frozen=True)
class FileProblem:
    """A file (or op) that could not be used, with the reason; listed, never fatal."""

    file: str
    reason: str
    op: str | None = None
    order: tuple[int, str] | None = None  # where the op ran (dump order), to tell what lies before a divergence
    side: str | None = None  # "fusion-on" or "fusion-off" when known

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "op": self.op, "reason": self.reason}


@dataclass
class DumpGroup:
    """The dumped tensors of one model at one step."""

    model: str | None
    model_id: str | None
    step: int | None
    tensors: list[DumpedTensor] = field(default_factory=list)

    def label(self) -> str:
        parts = []
        if self.model is not None:
            parts.append(f"model {self.model}" + (f" (id {self.model_id})" if self.model_id else ""))
        if self.step is not None:
            parts.append(f"step {self.step}")
        return ", ".join(parts) or "all files"


@dataclass
class ScannedDump:
    """Everything found under a directory: groups by (model, step), and bad files."""

    root: Path
    groups: dict[tuple[str | None, str | None, int | None], DumpGroup]
    problems: list[FileProblem]
    kind: str  # "ascend" or "npy"
    notes: list[FileProblem] = field(default_factory=list)  # files read with a remark, or not tensor dumps
    overflows: list[FileProblem] = field(default_factory=list)  # Opdebug overflow records
    graph_files: list[Path] = field(default_factory=list)  # GE graph dumps found in the folder


def scan(directory: str | Path) -> ScannedDump:
    """Read the headers of every dump file under ``directory``.

    A directory holding no dump file at all is a UsageError (exit 2): the
    argument is wrong. Bad files among good ones are listed as problems; files
    that are no tensor dump, with the reason, as notes.
    """
    root = Path(directory)
    if not root.exists():
        raise UsageError(f"{root}: dump directory not found")
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory; give the folder a dump was written to")
    ascend: list[tuple[Path, str]] = []
    arrays: list[Path] = []
    graphs: list[Path] = []
    statistics: list[Path] = []
    notes: list[FileProblem] = []
    for path in walk_files(root):
        if path.name.endswith((".npy", ".npz")):
            arrays.append(path)
        elif fnmatch.fnmatchcase(path.name, discover.GRAPH_DUMP_GLOB):
            graphs.append(path)
        elif path.name in (MAPPING_CSV, ORDER_FILE):
            continue  # read with the files they name
        elif path.name == STATISTIC_CSV:
            statistics.append(path)
        else:
            ascend.append((path, path.name))
    build = [path for path in graphs if path.name.endswith(discover.BUILD_SUFFIX)]
    for path in graphs:
        if build and path not in build:
            notes.append(FileProblem(str(path), "GE graph dump of a compile stage before Build: not used (the Build graph is)"))
    mapped = _apply_mappings(ascend)
    dump_files: list[tuple[Path, DumpName]] = []
    op_statistics: list[tuple[Path, DumpName]] = []  # dump_data: stats, one {dump file name}.csv per op
    for path, name in mapped:
        parsed = parse_file_name(name)
        if parsed is not None:
            dump_files.append((path, parsed))
            continue
        parsed = parse_file_name(name[: -len(".csv")]) if name.endswith(".csv") else None
        if parsed is not None:
            op_statistics.append((path, parsed))
        else:
            notes.append(FileProblem(str(path), f"not a tensor dump: the name does not match {NAME_GRAMMAR}"))
    if dump_files:
        scanned = _scan_ascend(root, dump_files)
        for path in arrays:
            notes.append(FileProblem(str(path), "array file beside an Ascend binary dump: not compared (give its folder on its own)"))
        for path in [*statistics, *(path for path, _ in op_statistics)]:
            notes.append(FileProblem(str(path), "statistics beside full tensor dumps: not used (the tensors are compared)"))
    elif statistics or op_statistics:
        scanned = _scan_statistics(root, statistics, op_statistics)
        for path in arrays:
            notes.append(FileProblem(str(path), "array file beside a statistics dump: not compared (give its folder on its own)"))
    elif arrays:
        scanned = _scan_arrays(root, arrays)
    else:
        raise UsageError(
            f"{root}: no tensor dump found (no Ascend dump files named "
            "{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp} or the FFTS+ variants, no statistics "
            "file of dump_data: stats, no .npy/.npz); "
            "give the directory the training dumped into"
        )
    scanned.notes[:0] = notes
    scanned.graph_files = build or graphs
    return scanned


def walk_files(root: Path) -> list[Path]:
    """Every regular file below ``root`` (the artifact walker: iterative, symlinked dirs not followed)."""
    return discover.walk_files(root, lambda entry: entry.is_file())


def _apply_mappings(files: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """Hashed file names replaced by the original names their folder's mapping.csv gives."""
    mappings: dict[Path, dict[str, str]] = {}
    result = []
    for path, name in files:
        if path.parent not in mappings:
            mappings[path.parent] = read_mapping(path.parent)
        result.append((path, mappings[path.parent].get(name, name)))
    return result


OVERFLOW_OP_TYPE = "Opdebug"


def _scan_ascend(root: Path, files: list[tuple[Path, DumpName]]) -> ScannedDump:
    groups: dict[tuple[str | None, str | None, int | None], DumpGroup] = {}
    problems: list[FileProblem] = []
    notes: list[FileProblem] = []
    overflows: list[FileProblem] = []
    sliced: dict[tuple[tuple[str | None, str | None, int | None], str, str], list[tuple[Path, DumpName, DumpFile]]] = {}
    # The newer adump names carry FFTSPLUS only when the context and thread ids are both
    # non-zero: thread 0 of a sliced op has the name of an unsliced one, and only its
    # header's slicing attributes tell it apart. Held until every file is read.
    first_threads: dict[tuple[tuple[str | None, str | None, int | None], str, str], list[tuple[Path, DumpName, DumpFile]]] = {}
    for path, parsed in files:
        location = _location(path, parsed.dump_number)
        group = groups.setdefault(location, DumpGroup(*location))
        order = (parsed.timestamp, path.name)
        if parsed.op_type == OVERFLOW_OP_TYPE:
            overflows.append(
                FileProblem(str(path), f"overflow record: the device reported a floating-point overflow "
                            f"(task {parsed.task_id}, stream {parsed.stream_id}, timestamp {parsed.timestamp})",
                            op=parsed.op_name, order=order)
            )  # fmt: skip
            continue
        try:
            header = read_dump_header(path)
        except DumpFileError as exc:
            problems.append(FileProblem(str(path), str(exc), op=parsed.base_name, order=order))
            continue
        for note in header.notes:
            notes.append(FileProblem(str(path), note, op=parsed.base_name, order=order))
        if not header.inputs and not header.outputs:
            notes.append(FileProblem(str(path), "the header declares no input and no output: nothing to compare",
                                     op=parsed.base_name, order=order))  # fmt: skip
            continue
        if parsed.ffts:
            sliced.setdefault((location, parsed.op_type, parsed.base_name), []).append((path, parsed, header))
            continue
        if _is_slice(header):
            first_threads.setdefault((location, parsed.op_type, parsed.base_name), []).append((path, parsed, header))
            continue
        op = header.op_name or parsed.op_name
        group.tensors.extend(_tensors_of(op, parsed.op_type, str(path), order, header))
    for key, threads in first_threads.items():
        if key in sliced:  # thread 0 of an op whose other threads carry FFTS+ names: one op, joined
            sliced[key][:0] = [(path, dataclasses.replace(parsed, thread_id=0), header) for path, parsed, header in threads]
            continue
        for path, parsed, header in threads:  # a slice on its own: compared as the file says
            op = header.op_name or parsed.op_name
            groups[key[0]].tensors.extend(_tensors_of(op, parsed.op_type, str(path), (parsed.timestamp, path.name), header))
    for (location, op_type, base), members in sliced.items():
        if all(m[1].slice_index is None for m in members) and len({m[1].thread_id for m in members}) == 1:
            # one thread, no slices: separate executions of the op, each file on its own
            for path, parsed, header in members:
                op = _LXSLICE.sub("", header.op_name) if header.op_name else parsed.base_name
                groups[location].tensors.extend(_tensors_of(op, op_type, str(path), (parsed.timestamp, path.name), header))
            continue
        tensors, problem = _join_slices(base, op_type, members)
        groups[location].tensors.extend(tensors)
        if problem is not None:
            notes.append(problem)
    return ScannedDump(root, groups, problems, "ascend", notes=notes, overflows=overflows)


STATISTIC_CSV = "statistic.csv"
#: statistic.csv columns (CANN's and MindSpore's spellings), lower-cased, to the statistic they hold.
_STAT_COLUMNS = {"max value": "max", "min value": "min", "avg value": "mean", "l2norm value": "norm",
                 "l2norm": "norm", "count": "count", "nan count": "nan"}  # fmt: skip
_INF_COLUMNS = ("negative inf count", "positive inf count")


def _scan_statistics(
    root: Path, paths: list[Path], op_files: Iterable[tuple[Path, DumpName]] = ()
) -> ScannedDump:
    """Tensors of a statistics-only dump: one row per input or output.

    Two layouts. A ``statistic.csv`` (msprobe's and MindSpore's) holds the whole
    step; its header row names the columns (``Op Type, Op Name, Task ID, Stream
    ID, Timestamp, Input/Output`` or ``IO``, ``Slot, Data Size, Data Type[,
    Format], Shape`` and the statistics chosen: ``Max Value, Min Value, Avg
    Value, L2Norm Value, Count, NaN Count, ...``). CANN's own ``dump_data:
    stats`` writes one file per op instead, named as its binary dump would be
    plus ``.csv``, with the columns ``Input/Output, Index, Data Size, Data Type,
    Format, Shape`` and the statistics: the op comes from the file name. Rows
    that cannot be read are problems.
    """
    groups: dict[tuple[str | None, str | None, int | None], DumpGroup] = {}
    problems: list[FileProblem] = []
    sources = [(path, None) for path in paths] + [(path, named) for path, named in op_files]
    for path, named in sources:
        location = _location(path, named.dump_number if named is not None else None)
        group = groups.setdefault(location, DumpGroup(*location))
        try:
            text = _read_text(path)
        except (OSError, ValueError) as exc:
            problems.append(FileProblem(str(path), f"cannot read ({exc})"))
            continue
        tensors, problem = _statistic_rows(path, text, named)
        group.tensors.extend(tensors)
        problems.extend(problem)
    return ScannedDump(root, groups, problems, "statistics")


def _statistic_rows(path: Path, text: str, named: DumpName | None) -> tuple[list[DumpedTensor], list[FileProblem]]:
    """The rows of one statistics file; ``named``: the op its file name gives (CANN's per-op files)."""
    import csv

    rows = list(csv.reader(text.splitlines()))
    what = "statistic.csv" if named is None else "per-op statistics file"
    if not rows:
        return [], [FileProblem(str(path), f"empty {what}")]
    columns = {name.strip().lower(): index for index, name in enumerate(rows[0])}
    kind_column = columns.get("input/output", columns.get("io"))
    needed = ("op name", "slot") if named is None else ("index",)
    if any(name not in columns for name in needed) or kind_column is None or not any(c in columns for c in _STAT_COLUMNS):
        wanted = "Op Name, Input/Output (or IO), Slot" if named is None else "Input/Output, Index"
        return [], [FileProblem(str(path), f"{what} without the columns {wanted} and a statistic")]
    tensors: list[DumpedTensor] = []
    problems: list[FileProblem] = []
    for number, row in enumerate(rows[1:], start=2):
        where = f"{path}:{number}"
        try:
            tensors.append(_statistic_row(row, columns, kind_column, where, named))
        except (ValueError, IndexError) as exc:
            problems.append(FileProblem(where, f"unreadable row ({exc})"))
    return tensors, problems


def _statistic_row(
    row: list[str], columns: dict[str, int], kind_column: int, where: str, named: DumpName | None = None
) -> DumpedTensor:
    cell = lambda name: row[columns[name]].strip() if name in columns and columns[name] < len(row) else ""  # noqa: E731
    kind = row[kind_column].strip().lower()
    if kind not in ("input", "output"):
        raise ValueError(f"Input/Output is {kind!r}")
    stats = {}
    for column, name in _STAT_COLUMNS.items():
        if cell(column):
            stats[name] = float(cell(column))
    if any(cell(column) for column in _INF_COLUMNS):
        stats["inf"] = sum(float(cell(column) or 0) for column in _INF_COLUMNS)
    timestamp = int(cell("timestamp")) if cell("timestamp").isdigit() else 0
    shape_text = cell("shape").strip('"()[] ')
    shape = tuple(int(d) for d in shape_text.replace("x", ",").split(",") if d.strip()) if shape_text else ()
    if named is not None:  # CANN's per-op file: the op is in its name, the slot is called Index
        op, op_type, index, timestamp = named.op_name, named.op_type, int(cell("index")), named.timestamp
    else:
        op, op_type, index = cell("op name"), cell("op type"), int(cell("slot"))
    return DumpedTensor(
        op=op, op_type=op_type, index=index, source=where, order=(timestamp, where), kind=kind,
        stats=tuple(stats.items()), stat_dtype=cell("data type"), stat_shape=shape,
    )  # fmt: skip


#: A statistic.csv has one short row per tensor: even a huge network stays far below.
MAX_STATISTIC_BYTES = 1024 * MiB


def _read_text(path: Path) -> str:
    with open(path, "rb") as handle:
        data = handle.read(MAX_STATISTIC_BYTES + 1)
    if len(data) > MAX_STATISTIC_BYTES:
        raise ValueError(f"larger than {MAX_STATISTIC_BYTES // MiB} MiB")
    return data.decode("utf-8", errors="replace")


def _tensors_of(op: str, op_type: str, source: str, order: tuple[int, str], header: DumpFile) -> list[DumpedTensor]:
    """Inputs and outputs of one dump file (ops without outputs, e.g. NetOutput, give only inputs)."""
    tensors = []
    for info in (*header.inputs, *header.outputs):
        tensors.append(
            DumpedTensor(op=op, op_type=op_type, index=info.index, source=source, order=order,
                         origin=info.origin, info=info, kind=info.kind)
        )  # fmt: skip
    return tensors


def _join_slices(
    base: str, op_type: str, members: list[tuple[Path, DumpName, DumpFile]]
) -> tuple[list[DumpedTensor], FileProblem | None]:
    """The tensors of one FFTS+ op: its slices joined, or each slice on its own when that cannot be done.

    Slices are ordered by ``_lxslice<N>`` (manual mode) or by thread id (auto
    mode). The cut axis of each output is the first dimension its
    ``outputCutList`` entry (in the JSON attribute of the dump) cuts into more
    than one piece; shapes must agree on every other dimension.
    """
    members = sorted(members, key=lambda m: (m[1].slice_index if m[1].slice_index is not None else -1, m[1].thread_id or 0, m[1].timestamp))
    first_path, first_name, first = members[0]
    order = (min(m[1].timestamp for m in members), first_path.name)
    base = _LXSLICE.sub("", first.op_name) if first.op_name else base
    if len(members) == 1:
        return _tensors_of(base, op_type, str(first_path), order, first), None
    attrs = _ffts_attrs(first)
    expected = attrs.get("slice_instance_num")
    cuts = attrs.get("outputCutList") or []
    reason = None
    if isinstance(expected, int) and expected != len(members):
        reason = f"{len(members)} of {expected} slices dumped"
    elif not cuts:
        reason = "no outputCutList attribute says along which axis the slices were cut"
    elif any(len(m[2].outputs) != len(first.outputs) for m in members):
        reason = "slices have different numbers of outputs"
    tensors: list[DumpedTensor] = []
    if reason is None:
        for info in first.outputs:
            cut = cuts[info.index] if info.index < len(cuts) else []
            axis = next((dim for dim, count in enumerate(cut) if count != 1), None)
            slices = tuple((str(m[0]), m[2].outputs[info.index]) for m in members)
            if axis is not None and not _joinable(slices, axis):
                reason = f"output {info.index}: slice shapes do not agree outside axis {axis}"
                break
            if axis is None:  # not cut: every slice holds the whole tensor; the first is compared
                slices = slices[:1]
            tensors.append(
                DumpedTensor(op=base, op_type=op_type, index=info.index, source=str(first_path), order=order,
                             origin=info.origin, info=info, slices=slices, cut_axis=axis)
            )  # fmt: skip
    if reason is None:
        for info in first.inputs:
            tensors.append(DumpedTensor(base, op_type, info.index, str(first_path), order, None, info, kind="input"))
        return tensors, None
    tensors = []
    for path, parsed, header in members:
        label = f"{base}_lxslice{parsed.slice_index}" if parsed.slice_index is not None else f"{base}#thread{parsed.thread_id}"
        tensors.extend(_tensors_of(label, op_type, str(path), (parsed.timestamp, path.name), header))
    note = FileProblem(
        str(first_path),
        f"FFTS+ op sliced into {len(members)} files could not be joined ({reason}): each slice compared on its own, "
        f"named {base}_lxslice<N> or {base}#thread<N>",
        op=base,
        order=order,
    )
    return tensors, note


_LXSLICE = re.compile(r"_lxslice\d+")


def _is_slice(header: DumpFile) -> bool:
    """Whether a dump's header says it holds one of several FFTS+ slices of its op."""
    count = _ffts_attrs(header).get("slice_instance_num") if header.attrs else None
    return isinstance(count, int) and not isinstance(count, bool) and count > 1


def _ffts_attrs(header: DumpFile) -> dict:
    """The FFTS+ slicing attributes: the first attr value that is a JSON object."""
    for value in header.attrs.values():
        try:
            data = json.loads(value)
        except (ValueError, TypeError):
            continue
        if isinstance(data, dict):
            return data
    return {}


def _joinable(slices: tuple[tuple[str, TensorInfo], ...], axis: int) -> bool:
    shapes = [info.shape for _, info in slices]
    if any(len(shape) != len(shapes[0]) or axis >= len(shape) for shape in shapes):
        return False
    return all(shape[:axis] + shape[axis + 1 :] == shapes[0][:axis] + shapes[0][axis + 1 :] for shape in shapes)


def _location(path: Path, dump_number: int | None) -> tuple[str | None, str | None, int | None]:
    """(model name, model id, step) from ``.../{model_name}/{model_id}/{dump_number}/file``.

    The folders above the directory argument count too, so that a folder below
    the dump root (one step's folder, say) still knows its model and step.
    """
    full = path.absolute().parent.parts
    step = model_id = model = None
    if full and _DIGITS.match(full[-1]) and len(full) >= 3 and _DIGITS.match(full[-2]):
        step, model_id, model = int(full[-1]), full[-2], full[-3]
    elif dump_number is not None:
        step = dump_number
    return model, model_id, step


def _scan_arrays(root: Path, paths: Iterable[Path]) -> ScannedDump:
    group = DumpGroup(None, None, None)
    problems: list[FileProblem] = []
    written = _write_order(root)
    for path in paths:
        relative = path.relative_to(root).as_posix()
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError as exc:
            problems.append(FileProblem(str(path), f"cannot read ({exc.strerror or exc})"))
            continue
        if path.name.endswith(".npy"):
            named = npy_name(path.name)
            if named is not None:
                op, op_type, kind, index, timestamp = named
                group.tensors.append(DumpedTensor(op, op_type, index, str(path), (timestamp, relative), kind=kind))
                continue
            stem = relative[: -len(".npy")]
            op, index = _op_and_index(stem)
            group.tensors.append(DumpedTensor(op, "", index, str(path), (written.get(stem, mtime), relative)))
            continue
        try:
            with zipfile.ZipFile(path) as archive:
                keys = [name[: -len(".npy")] for name in archive.namelist() if name.endswith(".npy")]
        except (zipfile.BadZipFile, OSError) as exc:
            problems.append(FileProblem(str(path), f"not a readable .npz ({exc})"))
            continue
        for position, key in enumerate(keys):
            op, index = _op_and_index(key)
            group.tensors.append(DumpedTensor(op, "", index, str(path), (mtime, f"{relative}:{position:09d}"), npz_key=key))
    return ScannedDump(root, {(None, None, None): group}, problems, "npy")


#: After ``.{input|output}.{index}``: msaccucmp adds the format (``NCHW``), msprobe's ACL dump the format
#: and the dtype (``ND.FLOAT``), MindSpore both in its own spelling (``DefaultFormat.float32``).
_CONVERTED = re.compile(
    r"^(?P<dump>.+)\.(?P<kind>input|output)\.(?P<index>\d+)"
    r"(?:\.(?P<format>[A-Za-z][A-Za-z0-9_]*))?(?:\.(?P<dtype>[A-Za-z][A-Za-z0-9_]*))?\.npy$"
)
_FRAMEWORK = re.compile(r"^(?P<op>[^.].*)\.(?P<index>\d+)\.(?P<timestamp>\d+)\.npy$")


def npy_name(name: str) -> tuple[str, str, str, int, int] | None:
    """``(op, op_type, kind, index, timestamp)`` of a named ``.npy``, or None for a plain one.

    msaccucmp's conversion of a dump file keeps the dump's name and adds
    ``.{input|output}.{index}[.{format}]``: ``Conv2D.conv1.5.1.<ts>.output.0.npy``;
    msprobe's ACL dump and MindSpore add ``.{format}.{dtype}`` as well
    (``...output.0.ND.FLOAT.npy``, ``...input.0.DefaultFormat.float32.npy``).
    A framework dump (the ground truth msaccucmp compares against) is
    ``{op}.{output_index}.{timestamp}.npy``. Task ids and timestamps differ
    between runs, so the op is named without them.
    """
    match = _CONVERTED.match(name)
    if match:
        parsed = parse_file_name(match.group("dump"))
        if parsed is not None:
            return parsed.base_name, parsed.op_type, match.group("kind"), int(match.group("index")), parsed.timestamp
    match = _FRAMEWORK.match(name)
    if match and parse_file_name(name[: -len(".npy")]) is None:
        return match.group("op"), "", "output", int(match.group("index")), int(match.group("timestamp"))
    return None


def _write_order(root: Path) -> dict[str, int]:
    """Call order from ``dump_tensors``' order file (last call wins), else empty."""
    try:
        with open(root / ORDER_FILE, encoding="utf-8", errors="replace") as handle:
            names = handle.read(64 * MiB).splitlines()
    except OSError:
        return {}
    return {name: position for position, name in enumerate(names)}


def _op_and_index(name: str) -> tuple[str, int]:
    """``op:1`` names output 1 of ``op``; a plain name is output 0."""
    match = _OUTPUT_SUFFIX.match(name)
    if match:
        return match.group(1), int(match.group(2))
    return name, 0


def load_npy(path: Path, key: str | None) -> np.ndarray:
    """An .npy (memory mapped) or one member of an .npz; ValueError for anything unreadable."""
    if not path.is_file():
        raise ValueError("not a regular file")
    if path.stat().st_size > MAX_NPY_BYTES:
        raise ValueError(f"larger than {MAX_NPY_BYTES // MiB} MiB")
    try:
        if key is None:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        with np.load(path, allow_pickle=False) as archive:
            return archive[key]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"unreadable array ({exc})") from None


def select(scanned: ScannedDump, step: int | None, model: str | None) -> DumpGroup:
    """The group to compare: ``model`` by name or id, ``step`` by number (UsageError if absent)."""
    groups = list(scanned.groups.values())
    models: dict[tuple[str | None, str | None], int] = {}
    for group in groups:
        key = (group.model, group.model_id)
        models[key] = models.get(key, 0) + len(group.tensors)
    if model is not None:
        chosen = [key for key in models if model in (key[0], key[1])]
        if not chosen:
            known = ", ".join(f"{name} (id {ident})" for name, ident in models if name is not None) or "none named"
            raise UsageError(f"{scanned.root}: --model {model}: no such model in this dump; models: {known}")
        model_key = chosen[0]
    else:
        model_key = max(models, key=lambda key: (models[key], str(key)))
    steps = sorted(
        (group for group in groups if (group.model, group.model_id) == model_key),
        key=lambda group: -1 if group.step is None else group.step,
    )
    if step is not None:
        for group in steps:
            if group.step == step:
                return group
        known_steps = ", ".join(str(group.step) for group in steps if group.step is not None) or "none"
        raise UsageError(f"{scanned.root}: --step {step}: not in this dump; steps: {known_steps}")
    return steps[0]
