"""Finding the dumped tensors of one run: Ascend binary dumps or ``.npy``/``.npz`` folders.

A directory argument may be a dump root or any folder below it; files are found
recursively (symlinked directories are not followed). Only headers are read
here; tensors are loaded when they are compared.

Ascend dumps sit in ``.../{device_id}/{model_name}/{model_id}/{dump_number}/``:
the dump number is the step (iteration) and a root may hold several models.
``select`` picks one model and one step; the default is the model with the most
dumped ops and its first step, and the caller names both in its output.

``.npy`` files are named by op: the path below the directory without ``.npy``
(``encoder/layer_3/ln.npy`` is the op ``encoder/layer_3/ln``). The members of an
``.npz`` are ops named by their keys. Their order is the order they were written
(modification time), which is the execution order of a hook that dumps as it goes.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..ascend.dump import (
    DumpFileError,
    DumpName,
    TensorInfo,
    load_tensor,
    parse_file_name,
    read_dump_header,
    read_mapping,
)
from ..ascend import discover
from ..errors import UsageError
from ..safe_read import MiB

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

    @property
    def key(self) -> tuple[str, int]:
        return (self.op, self.index)

    @property
    def nbytes(self) -> int:
        if self.info is not None:
            return self.info.size
        try:
            return os.stat(self.source).st_size
        except OSError:
            return 0

    def load(self) -> np.ndarray:
        """The tensor in framework layout (memory mapped where possible)."""
        if self.info is not None:
            return load_tensor(self.source, self.info)
        return load_npy(Path(self.source), self.npz_key)


@dataclass(frozen=True)
class FileProblem:
    """A file (or op) that could not be used, with the reason; listed, never fatal."""

    file: str
    reason: str
    op: str | None = None

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


def scan(directory: str | Path) -> ScannedDump:
    """Read the headers of every dump file under ``directory``.

    A directory holding no dump file at all is a UsageError (exit 2): the
    argument is wrong. Bad files among good ones are listed as problems.
    """
    root = Path(directory)
    if not root.exists():
        raise UsageError(f"{root}: dump directory not found")
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory; give the folder a dump was written to")
    ascend: list[tuple[Path, str]] = []
    arrays: list[Path] = []
    for path in walk_files(root):
        if path.name.endswith((".npy", ".npz")):
            arrays.append(path)
        else:
            ascend.append((path, path.name))
    mapped = _apply_mappings(ascend)
    dump_files: list[tuple[Path, DumpName]] = []
    for path, name in mapped:
        parsed = parse_file_name(name)
        if parsed is not None:
            dump_files.append((path, parsed))
    if dump_files:
        return _scan_ascend(root, dump_files)
    if arrays:
        return _scan_arrays(root, arrays)
    raise UsageError(
        f"{root}: no tensor dump found (no Ascend dump files named "
        "{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}, no .npy/.npz); "
        "give the directory the training dumped into"
    )


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


def _scan_ascend(root: Path, files: list[tuple[Path, DumpName]]) -> ScannedDump:
    groups: dict[tuple[str | None, str | None, int | None], DumpGroup] = {}
    problems: list[FileProblem] = []
    for path, parsed in files:
        model, model_id, step = _location(path, parsed.dump_number)
        group = groups.setdefault((model, model_id, step), DumpGroup(model, model_id, step))
        try:
            header = read_dump_header(path)
        except DumpFileError as exc:
            problems.append(FileProblem(str(path), str(exc), op=parsed.op_name))
            continue
        op = header.op_name or parsed.op_name
        order = (parsed.timestamp, path.name)
        if not header.outputs:
            continue  # ops without outputs (e.g. NetOutput) have nothing to compare
        for info in header.outputs:
            group.tensors.append(
                DumpedTensor(
                    op=op,
                    op_type=parsed.op_type,
                    index=info.index,
                    source=str(path),
                    order=order,
                    origin=info.origin,
                    info=info,
                )
            )
    return ScannedDump(root, groups, problems, "ascend")


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


def _write_order(root: Path) -> dict[str, int]:
    """Call order from ``dump_tensors``' order file (last call wins), else empty."""
    from ..integrations.dump import ORDER_FILE

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
