"""``fusion-dd compare`` end to end, through a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fusion_dd.compare import compare_dumps
from fusion_dd.integrations import dump_tensors
from tests.backends.cann.artifacts.dump_writer import NC1HWC0, device, write
from tests.compare.compare_support import Op, write_run

RULE = "BatchNormBnInferFusionPass"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fusion_dd.cli", "compare", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _network(bad: bool) -> tuple[list[Op], list[Op]]:
    """A conv -> bn -> relu -> fc network; fusion-on fuses bn+relu, ``bad`` plants an error there."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 20, 3, 3)).astype(np.float16)
    bn = (x * 0.5 + 0.1).astype(np.float16)
    relu = np.maximum(bn, 0).astype(np.float16)
    fc = relu.reshape(2, -1)[:, :10].astype(np.float32) * 2
    bad_relu = relu.copy()
    if bad:
        bad_relu[0, :5] += 3.0
    bad_fc = bad_relu.reshape(2, -1)[:, :10].astype(np.float32) * 2
    on = [
        # the fused run keeps conv1's output in NC1HWC0 (padded C0 blocks), the other in NCHW
        Op("conv1", "Conv2D", x, fmt=NC1HWC0, stored=device(x, NC1HWC0), origin=("conv1", 0)),
        Op("bn1/fused", "BNInferenceRelu", bad_relu, inputs=("conv1",), pass_name=(RULE,),
           originals=("bn1/FusedBatchNorm", "bn1/Relu"), origin=("bn1/Relu", 0)),
        Op("fc", "MatMul", bad_fc, inputs=("bn1/fused",), origin=("fc", 0)),
    ]  # fmt: skip
    off = [
        Op("conv1", "Conv2D", x, origin=("conv1", 0)),
        Op("bn1/FusedBatchNorm", "BatchNorm", bn, inputs=("conv1",), origin=("bn1/FusedBatchNorm", 0)),
        Op("bn1/Relu", "Relu", relu, inputs=("bn1/FusedBatchNorm",), origin=("bn1/Relu", 0)),
        Op("fc", "MatMul", fc, inputs=("bn1/Relu",), origin=("fc", 0)),
    ]
    return on, off


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    on_ops, off_ops = _network(bad=True)
    graph_on = write_run(tmp_path / "on", on_ops)
    graph_off = write_run(tmp_path / "off", off_ops)
    return tmp_path / "on", tmp_path / "off", graph_on, graph_off


def test_planted_bad_fused_op_is_the_first_divergence(tmp_path: Path, runs) -> None:
    on, off, graph_on, graph_off = runs
    folder = next(on.rglob("Conv2D.*")).parent
    (folder / "Add.corrupt.9.0.9999").write_bytes(b"\x10\0\0\0\0\0\0\0garbage")
    (folder / "notes.txt").write_text("not a dump file\n")
    for side in (on, off):  # a tensor in a data type fusion-dd does not decode
        target = next(side.rglob("Conv2D.*")).parent / "Cast.weird.8.0.8888"
        write(target, "weird", [{"data": np.ones(4, np.float32), "dtype": 99}])
    done = _cli("--on", str(on), "--off", str(off), "--graph-on", str(graph_on), "--graph-off", str(graph_off),
                "--out", "report", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first = next(line for line in lines if line.startswith("first divergence:"))
    assert first.startswith(f"first divergence: bn1/fused ({RULE}; layers bn1/FusedBatchNorm, bn1/Relu): cosine ")
    assert "Traceback" not in done.stderr
    assert any("Add.corrupt" in line and "corrupt" in line or "header length" in line for line in lines)
    report = json.loads((tmp_path / "report" / "compare.json").read_text())
    assert report["first_divergence"]["op"] == "bn1/fused"
    assert report["first_divergence"]["rules"] == [RULE]
    assert [p["op"] for p in report["pairs"]] == ["conv1", "bn1/fused", "fc"]
    assert report["pairs"][0]["bad"] is False  # NC1HWC0 vs NCHW, same values
    problems = {Path(p["file"]).name: p["reason"] for p in report["problems"]}
    assert {"Add.corrupt.9.0.9999", "Cast.weird.8.0.8888"} <= set(problems)
    # "weird" is in neither graph: said once per graph, and it is still compared by name
    graph_problems = [reason for name, reason in problems.items() if name.startswith("ge_proto")]
    assert graph_problems and "1 of " in graph_problems[0] and "weird" in graph_problems[0]
    assert "unsupported data type 99" in problems["Cast.weird.8.0.8888"]
    csv_lines = (tmp_path / "report" / "compare.csv").read_text().splitlines()
    assert csv_lines[0].startswith("position,op,op_type") and len(csv_lines) == 4


def test_json_output_and_no_divergence(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=False)
    write_run(tmp_path / "on", on_ops)
    write_run(tmp_path / "off", off_ops)
    done = _cli("--on", "on", "--off", "off", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_divergence"] is None and report["bad"] == 0
    # without graphs, the dump headers' origins still pair bn1/fused with bn1/Relu
    assert {p["op"]: p["off_op"] for p in report["pairs"]}["bn1/fused"] == "bn1/Relu"


def test_a_folder_that_is_no_dump_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("hello")
    done = _cli("--on", "empty", "--off", "missing", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no tensor dump found" in done.stderr
    done = _cli("--on", "empty", "--off", "empty", "--format", "xml", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_the_same_folder_on_both_sides_is_compared_with_a_warning(tmp_path: Path) -> None:
    on_ops, _ = _network(bad=True)
    write_run(tmp_path / "on", on_ops)
    done = _cli("--on", "on", "--off", "./on/", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "warning: --on and --off are the same folder (on): every tensor is compared with itself" in done.stderr
    apart = _cli("--on", "on", "--off", "on/20260101000000", cwd=tmp_path)
    assert "same folder" not in apart.stderr


def test_an_out_that_cannot_hold_the_reports_is_refused_before_comparing(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=True)
    write_run(tmp_path / "on", on_ops)
    write_run(tmp_path / "off", off_ops)
    (tmp_path / "taken").write_text("a file")
    for out, says in (("taken", "--out taken: is a file"), ("taken/sub", "taken is a file, so no folder")):
        done = _cli("--on", "on", "--off", "off", "--out", out, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == "", done.stdout  # nothing printed before the refusal
        assert says in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_step_and_model_choose_within_a_dump(tmp_path: Path) -> None:
    on_ops, off_ops = _network(bad=True)
    good_on, _ = _network(bad=False)
    for step, ops in ((0, good_on), (5, on_ops)):
        write_run(tmp_path / "on", ops, step=step)
        write_run(tmp_path / "off", off_ops, step=step)
    write_run(tmp_path / "on", good_on[:1], model="small", model_id=2)
    default = compare_dumps(tmp_path / "on", tmp_path / "off")
    assert default.on_selected == "model net (id 1), step 0" and default.first_divergence is None
    chosen = compare_dumps(tmp_path / "on", tmp_path / "off", step=5, model="net")
    assert chosen.first_divergence is not None and chosen.first_divergence.op == "bn1/fused"
    done = _cli("--on", "on", "--off", "off", "--step", "7", cwd=tmp_path)
    assert done.returncode == 2 and "steps: 0, 5" in done.stderr


def test_npy_dumps_from_dump_tensors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"embed": np.arange(6.0).reshape(2, 3), "block/ln": np.ones(4), "head": np.full(2, 5.0)}
    for side in ("on", "off"):
        for name, value in values.items():
            changed = value + 3.0 if (side == "on" and name != "embed") else value
            dump_tensors(name, changed, tmp_path / side)
    monkeypatch.delenv("FUSION_DD_DUMP_DIR", raising=False)
    assert dump_tensors("x", np.ones(1)) is None  # outside fusion-dd: nothing written
    comparison = compare_dumps(tmp_path / "on", tmp_path / "off")
    assert [p.op for p in comparison.pairs] == ["embed", "block/ln", "head"]  # call order
    assert comparison.first_divergence is not None and comparison.first_divergence.op == "block/ln"
    with pytest.raises(ValueError):
        dump_tensors("../escape", np.ones(1), tmp_path)


def test_parallel_workers_give_the_same_result(tmp_path: Path, runs) -> None:
    on, off, graph_on, graph_off = runs
    from fusion_dd.backends.cann.artifacts.graph import load_graph

    serial = compare_dumps(on, off, load_graph(graph_on), load_graph(graph_off), jobs=1)
    parallel = compare_dumps(on, off, load_graph(graph_on), load_graph(graph_off), jobs=2)
    assert serial.pairs and [p.metrics.to_json() for p in serial.pairs] == [p.metrics.to_json() for p in parallel.pairs]


def test_help_says_how_each_framework_dumps(tmp_path: Path) -> None:
    done = _cli("--help", cwd=tmp_path)
    assert done.returncode == 0
    for fact in ("DumpConfig(enable_dump=True", "config.dump_config.dump_path", "MINDSPORE_DUMP_CONFIG", "dump_tensors"):
        assert fact in done.stdout


def test_progress_only_on_a_terminal_or_when_long(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from fusion_dd.compare import command

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet, live = io.StringIO(), Terminal()
    for stream in (quiet, live):
        progress = command._Progress(stream)
        progress(1, 2, 1 << 20)
        progress(2, 2, 2 << 20)
        progress.done()
    assert quiet.getvalue() == ""  # a short comparison in a log stays silent
    assert "compared 2/2 tensors" in live.getvalue()
    clock = iter([0.0, 11.0, 22.0])
    monkeypatch.setattr(command.time, "monotonic", lambda: next(clock))
    slow = io.StringIO()
    command._Progress(slow)(1, 9, 0)
    assert slow.getvalue().startswith("compared 1/9 tensors")  # a long one reports every 10 s
