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


def test_rules_format_is_honoured_on_every_compiler_path_and_a_bogus_one_refused(tmp_path: Path) -> None:
    import json

    import yaml

    log = tmp_path / "run.log"
    shutil.copy(COMPILERS / "ort_block_all_on.log", log)
    dump = tmp_path / "dump"
    dump.mkdir()
    for name in (COMPILERS / "xla_dump_all_on.names").read_text().split():
        (dump / name).write_text("")
    for compiler, source in (("onnxruntime", log), ("xla", dump)):
        as_yaml = call_fusion_dd("rules", "--compiler", compiler, str(source), cwd=tmp_path)
        names = yaml.safe_load(as_yaml.stdout)["rules"]["names"]
        assert names and yaml.safe_load(as_yaml.stdout)["rules"]["compiler"] == compiler
        as_txt = call_fusion_dd("rules", "--compiler", compiler, str(source), "--format", "txt", cwd=tmp_path)
        assert as_txt.returncode == 0
        assert [line for line in as_txt.stdout.splitlines() if not line.startswith("#")] == names
        as_json = call_fusion_dd("rules", "--compiler", compiler, str(source), "--format", "json", cwd=tmp_path)
        document = json.loads(as_json.stdout)
        assert document["rules"] == {"compiler": compiler, "names": names}
        bogus = call_fusion_dd("rules", "--compiler", compiler, str(source), "--format", "bogus", cwd=tmp_path)
        assert bogus.returncode == 2 and bogus.stdout == ""
        assert bogus.stderr.strip().splitlines() == ["fusion-dd: error: --format: 'bogus' is not one of yaml, txt, json"]
    assert "CastFloat16Transformer" in json.loads(
        call_fusion_dd("rules", "--compiler", "onnxruntime", str(log), "--format", "json", cwd=tmp_path).stdout
    )["left_out"]
    for argv in (("rules", "x.json", "--format", "bogus"), ("rules", "--closure", "--format", "bogus")):
        refused = call_fusion_dd(*argv, cwd=tmp_path)
        assert refused.returncode == 2 and "--format: 'bogus'" in refused.stderr
    where = call_fusion_dd("rules", "--where", "X", str(dump), "--format", "json", cwd=tmp_path)
    assert where.returncode == 2 and "--where prints the fused ops as text" in where.stderr
