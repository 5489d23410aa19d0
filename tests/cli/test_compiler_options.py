"""The CLI for ONNX Runtime and XLA users: init, rules --compiler, search --dry-run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import FIXTURES
from tests.support.fake_training import call_fusion_dd, fusion_dd_runner, run_fusion_dd

COMPILERS = FIXTURES / "compilers"


@pytest.mark.parametrize(
    "framework, compiler, line",
    [
        ("onnxruntime", "onnxruntime", "**ort_session_kwargs()"),
        ("jax", "xla", "nothing: XLA reads XLA_FLAGS"),
        ("tensorflow-xla", "xla", "nothing: XLA reads XLA_FLAGS"),
    ],
)
def test_init_writes_a_config_that_validates_and_shows_the_training_line(tmp_path: Path, framework: str, compiler: str, line: str) -> None:
    run = fusion_dd_runner(framework == "onnxruntime")  # one framework through a real process
    result = run("init", "--framework", framework, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert line in result.stdout
    text = (tmp_path / "fusion-dd.yaml").read_text()
    assert f"compiler: {compiler}" in text and "GraphFusion" not in text
    (tmp_path / "train.py").write_text("print('accuracy 1')\n")
    dry = run("search", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    variable = "FUSION_DD_DISABLED_OPTIMIZERS=" if compiler == "onnxruntime" else "XLA_FLAGS="
    assert variable in dry.stdout and '"Switch"' not in dry.stdout
    assert "warning" not in dry.stderr  # the example names are all known to fusion-dd


def test_rules_prints_what_fired_in_an_onnxruntime_log_and_an_xla_dump(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    shutil.copy(COMPILERS / "ort_block_all_on.log", log)
    result = run_fusion_dd("rules", "--compiler", "onnxruntime", str(log), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "names: [MatMulAddFusion, LayerNormFusionL1, GeluFusionL2]" in result.stdout
    assert "CastFloat16Transformer" in result.stderr  # left out: it cannot be switched off
    dump = tmp_path / "dump"
    dump.mkdir()
    for name in (COMPILERS / "xla_dump_all_on.names").read_text().split():
        (dump / name).write_text("")
    result = call_fusion_dd("rules", "--compiler", "xla", str(dump), cwd=tmp_path)  # ONNX Runtime's went through a process
    assert result.returncode == 0 and "algsimp" in result.stdout and "pipeline-start" not in result.stdout
    bad = call_fusion_dd("rules", "--compiler", "xla", str(log), cwd=tmp_path)
    assert bad.returncode == 2 and "not a directory" in bad.stderr and "Traceback" not in bad.stderr
