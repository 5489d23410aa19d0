"""``fusion-dd compare`` on the dump forms msaccucmp reads: FFTS+ names and slices, nano dumps,
converted ``.npy`` files; inputs beside outputs; what the summary says about files it could not use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fusion_dd.compare import compare_dumps
from fusion_dd.compare.sources import scan
from tests.backends.cann.artifacts.dump_writer import op_file, write
from tests.compare.compare_support import Op, write_run

RULE = "BatchNormBnInferFusionPass"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fusion_dd.cli", "compare", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _network(bad: bool, slices: int = 0, cut_list: bool = True, thread_mode: bool = False) -> tuple[list[Op], list[Op]]:
    """conv -> bn+relu (fused in the fusion-on run, ``bad`` plants an error there) -> fc."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 20)).astype(np.float32)
    relu = np.maximum(x * 0.5 + 0.1, 0).astype(np.float32)
    bad_relu = relu.copy()
    if bad:
        bad_relu[0, :5] += 3.0
    on = [
        Op("conv1", "Conv2D", x, origin=("conv1", 0)),
        Op("bn1/fused", "BNInferenceRelu", bad_relu, inputs=("conv1",), pass_name=(RULE,),
           originals=("bn1/FusedBatchNorm", "bn1/Relu"), origin=("bn1/Relu", 0), slices=slices, cut_list=cut_list,
           thread_mode=thread_mode),
        Op("fc", "MatMul", bad_relu[:, :10] * 2, inputs=("bn1/fused",), origin=("fc", 0)),
    ]  # fmt: skip
    off = [
        Op("conv1", "Conv2D", x, origin=("conv1", 0)),
        Op("bn1/FusedBatchNorm", "BatchNorm", x * 0.5 + 0.1, inputs=("conv1",), origin=("bn1/FusedBatchNorm", 0)),
        Op("bn1/Relu", "Relu", relu, inputs=("bn1/FusedBatchNorm",), origin=("bn1/Relu", 0)),
        Op("fc", "MatMul", relu[:, :10] * 2, inputs=("bn1/Relu",), origin=("fc", 0)),
    ]
    return on, off


def _first_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return next(line for line in done.stdout.splitlines() if line.startswith("first divergence:"))


def test_ffts_names_and_lxslice_slices_are_joined_and_the_planted_op_found(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=True, slices=2)
    write_run(tmp_path / "on", on_ops, variant="ffts")
    write_run(tmp_path / "off", off_ops, variant="ffts8", task_base=40)
    on_folder = next((tmp_path / "on").rglob("Conv2D.*")).parent
    assert sorted(p.name.split(".")[1] for p in on_folder.iterdir() if p.name.startswith("BN")) == [
        "bn1_fused_lxslice0", "bn1_fused_lxslice1",
    ]  # fmt: skip
    done = _cli("--on", "on", "--off", "off", "--out", "report", cwd=tmp_path)
    assert _first_line(done).startswith(f"first divergence: bn1/fused ({RULE}; layers bn1/FusedBatchNorm, bn1/Relu)")
    report = json.loads((tmp_path / "report" / "compare.json").read_text())
    assert report["problems"] == [] and report["notes"] == []
    fused = next(p for p in report["pairs"] if p["op"] == "bn1/fused")
    assert fused["shape"] == [4, 20] and fused["metrics"]["elements"] == 80  # both slices, joined
    assert report["graph"].startswith("found in the fusion-on dump")


def test_ffts_auto_mode_thread_files_are_joined_in_thread_order(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=True, slices=3, thread_mode=True)
    write_run(tmp_path / "on", on_ops, variant="ffts")
    write_run(tmp_path / "off", off_ops, variant="ffts")
    threads = sorted(p.name.split(".")[-2] for p in (tmp_path / "on").rglob("BNInferenceRelu.*"))
    assert threads == ["0", "1", "2"]
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    assert comparison.problems == [] and comparison.notes == []
    fused = next(p for p in comparison.pairs if p.op == "bn1/fused")
    assert fused.metrics.elements == 80
    assert comparison.first_divergence is not None and comparison.first_divergence.op == "bn1/fused"
    # unplanted, the joined slices equal the unsliced fusion-off tensor: joined in the right order
    good_on, _ = _network(bad=False, slices=3, thread_mode=True)
    write_run(tmp_path / "good", good_on, variant="ffts")
    good = compare_dumps(tmp_path / "good", tmp_path / "off")
    assert next(p for p in good.pairs if p.op == "bn1/fused").metrics.max_abs == 0.0


def test_fftsplus_thread_files_are_joined_with_thread_0_which_keeps_the_classic_name(tmp_path: Path) -> None:
    # The newer adump names carry FFTSPLUS only when the context and thread ids are both
    # non-zero, so thread 0 of a sliced op is dumped under the 6-field name of an unsliced op.
    on_ops, off_ops = _network(bad=True, slices=3, thread_mode=True)
    write_run(tmp_path / "on", on_ops, variant="fftsplus")
    write_run(tmp_path / "off", off_ops, variant="dumpnum")
    names = sorted(p.name for p in (tmp_path / "on").rglob("BNInferenceRelu.*"))
    assert [name.count(".") for name in names] == [5, 9, 9] and "FFTSPLUS" not in names[0]
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    assert comparison.problems == [] and comparison.notes == []
    fused = next(p for p in comparison.pairs if p.op == "bn1/fused")
    assert fused.metrics.elements == 80  # all three threads, joined
    assert comparison.first_divergence is not None and comparison.first_divergence.op == "bn1/fused"
    good_on, _ = _network(bad=False, slices=3, thread_mode=True)
    write_run(tmp_path / "good", good_on, variant="fftsplus")
    good = compare_dumps(tmp_path / "good", tmp_path / "off")
    assert next(p for p in good.pairs if p.op == "bn1/fused").metrics.max_abs == 0.0  # joined in thread order


def test_slices_without_a_cut_list_are_compared_one_by_one_and_flagged(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=False, slices=2, cut_list=False)
    write_run(tmp_path / "on", on_ops, variant="ffts")
    write_run(tmp_path / "off", off_ops, variant="ffts")
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    notes = [note.reason for note in comparison.notes]
    assert len(notes) == 1 and "could not be joined (no outputCutList" in notes[0]
    unpaired = [p for p in comparison.problems if p.op and "_lxslice" in p.op]
    assert {p.op for p in unpaired} == {"bn1/fused_lxslice0", "bn1/fused_lxslice1"}  # listed, never dropped


def test_nano_dumps_find_the_planted_op(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=True)
    write_run(tmp_path / "on", on_ops, nano=True, inputs=True)
    write_run(tmp_path / "off", off_ops, nano=True, inputs=True)
    done = _cli("--on", "on", "--off", "off", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_divergence"]["op"] == "bn1/fused" and report["problems"] == []
    assert {(p["op"], p["tensor"]) for p in report["pairs"]} >= {("conv1", "output"), ("fc", "input"), ("fc", "output")}


def test_msaccucmp_converted_npy_pair_by_op_and_index_across_task_ids_and_timestamps(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=5)
    for side, task, ts, shift in (("on", 5, 1670205069987341, 0.5), ("off", 9, 1670205070000000, 0.0)):
        folder = tmp_path / side
        folder.mkdir()
        np.save(folder / f"Conv2D.conv1.{task}.1.{ts}.input.0.npy", a)
        np.save(folder / f"Conv2D.conv1.{task}.1.{ts}.output.0.NCHW.npy", a * 2)
        np.save(folder / f"Add.add_1.{task + 1}.1.{ts + 7}.input.0.npy", a * 2)
        np.save(folder / f"Add.add_1.{task + 1}.1.{ts + 7}.output.0.npy", b + shift)
    done = _cli("--on", "on", "--off", "off", "--format", "json", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert [(p["op"], p["tensor"], p["index"]) for p in report["pairs"]] == [
        ("conv1", "input", 0), ("conv1", "output", 0), ("add_1", "input", 0), ("add_1", "output", 0),
    ]  # fmt: skip
    assert report["first_divergence"]["op"] == "add_1"


@pytest.mark.parametrize(
    "suffix",
    [
        ".ND.FLOAT",  # msprobe's ACL dump (AclDumpDataProcessor: .{inout}.{slot}.{format}.{dtype})
        ".DefaultFormat.float32",  # MindSpore's own dump
    ],
)
def test_npy_names_with_format_and_dtype_pair_across_task_ids_and_timestamps(tmp_path: Path, suffix: str) -> None:
    rng = np.random.default_rng(2)
    a = rng.normal(size=(2, 3))
    for side, task, ts, shift in (("on", 4, 1700000000000002, 0.5), ("off", 8, 1700000000900000, 0.0)):
        folder = tmp_path / side
        folder.mkdir()
        np.save(folder / f"MatMul.Default_MatMul-op1.{task}.0.{ts}.input.0{suffix}.npy", a)
        np.save(folder / f"MatMul.Default_MatMul-op1.{task}.0.{ts}.output.0{suffix}.npy", a * 2)
        np.save(folder / f"Add.Default_Add-op2.{task + 1}.0.{ts + 5}.output.0{suffix}.npy", a + shift)
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    assert comparison.problems == []
    assert [(p.op, p.kind, p.output, p.off_op) for p in comparison.pairs] == [
        ("Default_MatMul-op1", "input", 0, "Default_MatMul-op1"), ("Default_MatMul-op1", "output", 0, "Default_MatMul-op1"),
        ("Default_Add-op2", "output", 0, "Default_Add-op2"),
    ]  # fmt: skip
    assert comparison.first_divergence is not None and comparison.first_divergence.op == "Default_Add-op2"


def test_framework_npy_names_pair_without_their_timestamps(tmp_path: Path) -> None:
    for side, ts, shift in (("on", 111, 1.0), ("off", 222, 0.0)):
        (tmp_path / side).mkdir()
        np.save(tmp_path / side / f"conv1.0.{ts}.npy", np.ones(4))
        np.save(tmp_path / side / f"relu1.0.{ts + 1}.npy", np.arange(4.0) + shift)
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    assert [p.op for p in comparison.pairs] == ["conv1", "relu1"]
    assert comparison.first_divergence is not None and comparison.first_divergence.op == "relu1"


def test_an_op_whose_input_already_differs_is_not_the_first_divergence(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=True)
    write_run(tmp_path / "on", on_ops, inputs=True)
    write_run(tmp_path / "off", off_ops, inputs=True)
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    fc_input = next(p for p in comparison.pairs if p.op == "fc" and p.kind == "input")
    assert fc_input.bad  # fc reads the bad fused output
    assert comparison.first_divergence is not None and comparison.first_divergence.op == "bn1/fused"
    # without bn1/fused's own dump, fc is bad but its input already was: the cause lies upstream of fc,
    # and the graph names the fused op there that could not be compared
    next((tmp_path / "on").rglob("BNInferenceRelu.*")).unlink()
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    first = comparison.first_divergence
    assert first is not None and first.seen_at == "fc" and first.upstream and "already differs" in first.upstream
    assert first.op == "bn1/fused" and first.rules == (RULE,)
    # and without a graph, fc itself is reported, with the warning that the cause lies upstream
    for graph in (tmp_path / "on").glob("ge_proto_*"):
        graph.unlink()
    first = compare_dumps(tmp_path / "on", tmp_path / "off").first_divergence
    assert first is not None and first.op == "fc" and "already differs" in (first.upstream or "")


def test_an_unreadable_file_before_the_divergence_is_named(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=True)
    write_run(tmp_path / "on", on_ops)
    write_run(tmp_path / "off", off_ops)
    conv = next((tmp_path / "on").rglob("Conv2D.*"))
    conv.write_bytes(conv.read_bytes()[:-6])  # truncated
    done = _cli("--on", "on", "--off", "off", cwd=tmp_path)
    assert _first_line(done).startswith("first divergence: bn1/fused")
    earlier = next(line for line in done.stdout.splitlines() if line.startswith("the first divergence may lie earlier"))
    assert "at ops conv1" in earlier


def test_without_any_graph_the_summary_says_so(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=True)
    write_run(tmp_path / "on", on_ops, with_graph=False)
    write_run(tmp_path / "off", off_ops, with_graph=False)
    done = _cli("--on", "on", "--off", "off", cwd=tmp_path)
    first = _first_line(done)
    assert "no graph given" in first and "no fusion rule" not in first
    assert any(line.startswith("graph: no graph given") for line in done.stdout.splitlines())


def test_every_file_is_compared_or_listed(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=False)
    write_run(tmp_path / "on", on_ops)
    write_run(tmp_path / "off", off_ops)
    folder = next((tmp_path / "on").rglob("Conv2D.*")).parent
    (folder / "README").write_text("x")
    (tmp_path / "on" / "ge_proto_00000001_graph_1_PreRunBegin.txt").write_text("")
    write(op_file(folder, "Opdebug", "Node_OpDebug", 7, 1767225600000099), "Node_OpDebug", [{"data": np.zeros(8, np.uint8)}])
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    listed = {Path(item.file).name for item in (*comparison.notes, *comparison.problems, *comparison.overflows)}
    compared = {Path(p.on_file).name for p in comparison.pairs}
    every = {p.name for p in (tmp_path / "on").rglob("*") if p.is_file()}
    assert every <= listed | compared | {"ge_proto_00000001_graph_1_Build.txt"}
    assert [Path(o.file).name.split(".")[0] for o in comparison.overflows] == ["Opdebug"]


def test_relative_error_threshold_from_the_cli(tmp_path: Path) -> None:
    x = np.random.default_rng(4).normal(size=(8, 8)).astype(np.float32)
    write_run(tmp_path / "on", [Op("scale", "Mul", x * 1.3, origin=("scale", 0))])
    write_run(tmp_path / "off", [Op("scale", "Mul", x, origin=("scale", 0))])
    assert "first divergence: scale" in _first_line(_cli("--on", "on", "--off", "off", cwd=tmp_path))
    assert _first_line(_cli("--on", "on", "--off", "off", "--rel", "0.5", cwd=tmp_path)).startswith("first divergence: none")
    done = _cli("--on", "on", "--off", "off", "--rel", "-1", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--rel" in done.stderr


@pytest.mark.parametrize("flag", ["--converters"])
def test_converters_folder_must_hold_converters(tmp_path: Path, flag: str) -> None:
    (tmp_path / "plugins").mkdir()
    on_ops, off_ops = _network(bad=False)
    write_run(tmp_path / "on", on_ops)
    write_run(tmp_path / "off", off_ops)
    done = _cli("--on", "on", "--off", "off", flag, "plugins", cwd=tmp_path)
    assert done.returncode == 2 and "convert_<FROM>_to_<TO>.py" in done.stderr


STAT_HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,Input/Output,Slot,Data Size,Data Type,Format,Shape,"
               "Max Value,Min Value,Avg Value,L2Norm Value,Count,NaN Count")  # fmt: skip


def _statistic_csv(folder: Path, ops: list[Op], inputs: bool = True) -> Path:
    """A statistics-only dump as msprobe aggregates it (statistic.csv): one row per input and output."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {op.name: op.value for op in ops}
    rows = [STAT_HEADER]
    for task, op in enumerate(ops):
        tensors = [("output", 0, op.value)]
        if inputs:
            tensors = [("input", slot, values[name]) for slot, name in enumerate(op.inputs)] + tensors
        for kind, slot, value in tensors:
            v = np.asarray(value, dtype=np.float64)
            shape = ",".join(str(d) for d in v.shape)
            rows.append(f'{op.type},{op.name},{task},0,{1767225600000000 + task},{kind},{slot},{v.size * 4},DT_FLOAT,ND,"({shape})",'
                        f"{float(v.max())!r},{float(v.min())!r},{float(v.mean())!r},{float(np.sqrt((v * v).sum()))!r},{v.size},0")  # fmt: skip
    path = folder / "statistic.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _compare_statistics_runs(tmp_path: Path, write_statistics) -> dict:
    """Both runs of the planted network as statistics only, beside their graph dumps, compared by the CLI.

    The first divergence must be the planted op, from statistics alone; the compare.json is returned.
    """
    on_ops, off_ops = _network(bad=True)
    for side, ops in (("on", on_ops), ("off", off_ops)):
        write_statistics(tmp_path / side / "20260101000000" / "0" / "net" / "1" / "0", ops)
        write_run(tmp_path / side, ops, with_graph=True, step=99)  # only for the graph file
        for dump in (tmp_path / side).rglob("99"):
            for file in dump.iterdir():
                file.unlink()
            dump.rmdir()
    done = _cli("--on", "on", "--off", "off", "--out", "report", cwd=tmp_path)
    first = _first_line(done)
    assert first.startswith(f"first divergence: bn1/fused ({RULE}") and "statistics only" in first
    report = json.loads((tmp_path / "report" / "compare.json").read_text())
    assert report["problems"] == []
    assert {p["metrics"]["basis"] for p in report["pairs"]} == {"statistics"}
    return report


def test_statistics_only_dumps_rank_and_localize(tmp_path: Path) -> None:
    report = _compare_statistics_runs(tmp_path, _statistic_csv)
    assert [p["op"] for p in report["pairs"] if p["bad"]][:1] == ["bn1/fused"]


#: The header of CANN's own per-op statistics file (dump_data "stats"), as its runtime writes it.
OP_STAT_HEADER = ("Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value,Count,"
                  "Nan Count,Negative Inf Count,Positive Inf Count")  # fmt: skip


def _op_statistic_files(folder: Path, ops: list[Op]) -> list[Path]:
    """A statistics-only dump as CANN's runtime writes it: one {binary dump name}.csv per op, no op-name column."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {op.name: op.value for op in ops}
    paths = []
    for task, op in enumerate(ops):
        rows = [OP_STAT_HEADER]
        tensors = [("Input", slot, values[name]) for slot, name in enumerate(op.inputs)] + [("Output", 0, op.value)]
        for kind, slot, value in tensors:
            v = np.asarray(value, dtype=np.float64)
            shape = "x".join(str(d) for d in v.shape)
            rows.append(f"{kind},{slot},{v.size * 4},DT_FLOAT,ND,{shape},{float(v.max())!r},{float(v.min())!r},"
                        f"{float(v.mean())!r},{v.size},0,0,0")  # fmt: skip
        name = op.name.replace("/", "_").replace(".", "_")
        path = folder / f"{op.type}.{name}.{task + 3}.0.{1767225600000000 + 11 * task}.csv"
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def test_canns_own_per_op_statistics_files_rank_and_localize(tmp_path: Path) -> None:
    report = _compare_statistics_runs(tmp_path, _op_statistic_files)
    assert {(p["op"], p["tensor"]) for p in report["pairs"]} >= {("conv1", "output"), ("fc", "input"), ("fc", "output")}


def test_a_per_op_statistics_file_without_its_columns_is_a_problem(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=False)
    path = _op_statistic_files(tmp_path / "on", on_ops)[0]
    _op_statistic_files(tmp_path / "off", off_ops)
    path.write_text("Kind,Slot,Max Value\nOutput,0,1.0\n", encoding="utf-8")
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    assert [p.reason for p in comparison.problems if p.file == str(path)] == [
        "per-op statistics file without the columns Input/Output, Index and a statistic"
    ]


def test_a_statistics_row_that_cannot_be_read_is_a_problem(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=False)
    path = _statistic_csv(tmp_path / "on", on_ops, inputs=False)
    _statistic_csv(tmp_path / "off", off_ops, inputs=False)
    path.write_text(path.read_text() + "Add,broken,1,0,5,sideways,0,4,DT_FLOAT,ND,\"(1)\",1,1,1,1,1,0\n")
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    assert [p.reason for p in comparison.problems if p.file.endswith(":5")] == ["unreadable row (Input/Output is 'sideways')"]


def test_lying_sizes_and_nan_pairs_are_shown_as_they_are(tmp_path: Path) -> None:
    for side in ("on", "off"):
        folder = tmp_path / side / "20260101000000" / "0" / "net" / "1" / "0"
        value = np.full(4, np.nan, np.float32) if side == "on" else np.ones(4, np.float32)
        write(op_file(folder, "Relu", "a", 1, 1000), "a", [{"data": value}])
        big = {"data": np.ones(4, np.float32), "shape": (2**32, 2**32), "size": 16}
        write(op_file(folder, "Add", "lying", 2, 1001), "lying", [big])
    done = _cli("--on", "on", "--off", "off", cwd=tmp_path)
    first = _first_line(done)
    assert first.startswith("first divergence: a ") and "4 NaN fusion-on" in first
    lying = next(line for line in done.stdout.splitlines() if "[lying]" in line)
    assert f"shape holds {2**64 * 4} bytes but size says 16" in lying


def test_an_ffts_op_run_twice_on_one_thread_is_two_executions_not_slices(tmp_path: Path) -> None:
    folder = tmp_path / "on" / "20260101000000" / "0" / "net" / "1" / "0"
    for number, ts in enumerate((1767225600000001, 1767225600000009)):
        write(op_file(folder, "Add", "add", 3 + number, ts, "ffts"), "add", [{"data": np.full(3, float(number), np.float32)}])
    scanned = scan(tmp_path / "on")
    assert scanned.notes == [] and scanned.problems == []
    assert [t.op for t in next(iter(scanned.groups.values())).tensors] == ["add", "add"]
