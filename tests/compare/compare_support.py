"""Test-made runs: GE graph text and Ascend dump folders for a few named ops."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf import text_format

from fusion_dd.backends.cann.artifacts.ge_schema import message_class
from tests.backends.cann.artifacts.dump_writer import ffts_attrs, op_file, write, write_nano


@dataclass
class Op:
    """One op of a test run: graph provenance and its output values."""

    name: str
    type: str
    value: np.ndarray | None = None
    inputs: tuple[str, ...] = ()
    pass_name: tuple[str, ...] = ()
    pass_name_ub: str | None = None
    originals: tuple[str, ...] = ()
    origin: tuple[str, int] | None = None
    fmt: int = 2
    stored: np.ndarray | None = None  # device-layout data when fmt is not plain
    extra: dict = field(default_factory=dict)
    slices: int = 0  # FFTS+ manual slicing: this many _lxslice<N> files, cut along axis 0
    cut_list: bool = True  # whether the sliced files say along which axis they were cut
    thread_mode: bool = False  # FFTS+ auto mode: one file per thread id instead of _lxslice<N> names


def graph_text(ops: list[Op], name: str = "net") -> str:
    model = message_class("ModelDef")()
    model.name = name
    graph = model.graph.add()
    graph.name = name
    for spec in ops:
        op = graph.op.add()
        op.name, op.type = spec.name, spec.type
        op.input.extend(f"{source}:0" for source in spec.inputs)
        if spec.pass_name:
            op.attr["pass_name"].list.s.extend(p.encode() for p in spec.pass_name)
        if spec.pass_name_ub:
            op.attr["pass_name_ub"].s = spec.pass_name_ub.encode()
        if spec.originals:
            op.attr["_datadump_original_op_names"].list.s.extend(o.encode() for o in spec.originals)
        desc = op.output_desc.add()
        if spec.origin:
            desc.attr["_datadump_origin_name"].s = spec.origin[0].encode()
            desc.attr["_datadump_origin_output_index"].i = spec.origin[1]
    return text_format.MessageToString(model)


def write_run(
    root: Path,
    ops: list[Op],
    step: int = 0,
    model: str = "net",
    model_id: int = 1,
    variant: str = "stream",
    nano: bool = False,
    inputs: bool = False,
    task_base: int = 0,
    with_graph: bool = True,
) -> Path:
    """Dump files for every op with a value, plus ``ge_proto_..._Build.txt``; returns the graph path.

    ``variant`` picks the file-name form (``op_file``); FFTS+ variants get 16-digit
    timestamps as the runtime writes. ``inputs`` dumps each op's inputs (the values
    of the ops it reads) beside its outputs; ``nano`` writes nano dumps.
    """
    folder = root / "20260101000000" / "0" / model / str(model_id) / str(step)
    values = {spec.name: spec.value for spec in ops}
    base_time = 1767225600000000 if variant.startswith("ffts") else 1000
    for task, spec in enumerate(ops):
        if spec.value is None:
            continue
        data = spec.stored if spec.stored is not None else spec.value
        tensor = {"data": data, "format": spec.fmt, "original_shape": spec.value.shape, "origin": spec.origin}
        feeds = [{"data": values[name]} for name in spec.inputs if values.get(name) is not None] if inputs else []
        timestamp = base_time + 10 * task
        if nano:
            write_nano(op_file(folder, spec.type, spec.name, task_base + task, timestamp, variant), [tensor], feeds,
                       origin_names=[spec.origin[0] if spec.origin else ""])  # fmt: skip
        elif spec.slices:
            pieces = np.array_split(data, spec.slices, axis=0)
            cuts = [[spec.slices] + [1] * (data.ndim - 1)]
            attrs = ffts_attrs(spec.slices, cuts, spec.thread_mode) if spec.cut_list else None
            for number, piece in enumerate(pieces):
                name = spec.name if spec.thread_mode else f"{spec.name}_lxslice{number}"
                thread = number if spec.thread_mode else 0
                piece_tensor = {**tensor, "data": piece, "original_shape": spec.value.shape}
                write(op_file(folder, spec.type, name, task_base + task, timestamp + number, variant, thread), name,
                      [piece_tensor], feeds, attrs=attrs)  # fmt: skip
        else:
            write(op_file(folder, spec.type, spec.name, task_base + task, timestamp, variant), spec.name, [tensor], feeds)
    graph_path = root / f"ge_proto_00000001_graph_{model_id}_Build.txt"
    if with_graph:
        graph_path.write_text(graph_text(ops, model), encoding="utf-8")
    return graph_path
