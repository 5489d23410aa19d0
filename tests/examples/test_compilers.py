"""The ONNX Runtime and XLA examples, searched through the CLI with the real compilers.

They need the optional extra (``pip install 'fusion-dd[compilers]'``: onnxruntime,
onnx, jax[cpu]); without it they are skipped, saying which package is missing.
Each example's answer is compared with an exhaustive check: ONNX Runtime's 256
configurations run in this process (a second); XLA's 16 need a process each
(about 30 s), so its exhaustive answer is the one examples/xla/README.md
records from examples/xla/exhaustive.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.fake_training import run_fusion_dd

pytestmark = pytest.mark.compilers

EXAMPLES = REPO / "examples"


def need(*modules: str) -> None:
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}: install the optional extra, pip install -e '.[compilers]'")


def search(example: str, tmp_path: Path, config: str = "fusion-dd.yaml", state: str = ".fusion-dd") -> tuple[dict, str]:
    """Copy the example, search it with `fusion-dd search -c config`, return its report and output."""
    folder = tmp_path / example
    shutil.copytree(EXAMPLES / example, folder, ignore=shutil.ignore_patterns(".fusion-dd", "__pycache__"))
    # `python` in the example's command is this interpreter (the one with the extra installed).
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    result = run_fusion_dd("search", "-c", config, cwd=folder, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((folder / state / "report.json").read_text()), result.stdout + result.stderr


def culprits(report: dict) -> set[frozenset[str]]:
    return {frozenset(rule["name"] for rule in culprit["rules"]) for culprit in report["culprits"]}


def test_the_onnxruntime_example_finds_the_exhaustively_checked_culprits(tmp_path: Path) -> None:
    need("onnxruntime", "onnx")
    sys.path.insert(0, str(EXAMPLES / "onnxruntime"))
    try:
        import exhaustive
    finally:
        sys.path.remove(str(EXAMPLES / "onnxruntime"))
    expected = set(exhaustive.culprit_sets())
    report, output = search("onnxruntime", tmp_path)
    assert culprits(report) == expected == {
        frozenset({"GeluFusionL2"}),
        frozenset({"LayerNormFusionL1"}),
        frozenset({"SimplifiedLayerNormFusion"}),
    }
    assert report["fix_verified"] and report["switch_check"] == {"applied": report["trainings"]}
    assert report["trainings"] <= 18  # deterministic, search.confirm: off: no repeats (this test's runtime)
    assert "export FUSION_DD_DISABLED_OPTIMIZERS='GeluFusionL2;LayerNormFusionL1;SimplifiedLayerNormFusion'" in output
    assert "(score.tolerance: 0, bitwise)" in output
    assert "did you mean" not in output and "fusion_result.json" not in output


def test_the_xla_example_finds_the_exhaustively_checked_culprits(tmp_path: Path) -> None:
    need("jax", "jaxlib")
    report, output = search("xla", tmp_path)
    recorded = (EXAMPLES / "xla" / "README.md").read_text()
    assert "xla_allow_excess_precision\ncse float-normalization-bf16\n" in recorded
    assert culprits(report) == {frozenset({"xla_allow_excess_precision"}), frozenset({"cse", "float-normalization-bf16"})}
    assert report["fix_verified"] and report["switch_check"] == {"applied": report["trainings"]}
    assert report["trainings"] <= 11  # against 16 exhaustive configurations; each costs seconds of JAX import
    assert "export XLA_FLAGS='--xla_disable_hlo_passes=cse --xla_allow_excess_precision=false'" in output


def test_the_xla_matmul_example_reports_float_normalization_as_required_and_finds_the_culprits(tmp_path: Path) -> None:
    # XLA:CPU cannot compile a bf16 dot with float-normalization-bf16 off: the all-off baseline
    # crashes. The pass is required (kept on), and the culprits are searched among the other three;
    # examples/xla/README.md records the 8 configurations with it on.
    need("jax", "jaxlib")
    report, output = search("xla", tmp_path, "matmul.yaml", ".fusion-dd-matmul")
    assert report["status"] == "found"
    assert report["required"]["rules"] == ["float-normalization-bf16"]
    assert any("RET_CHECK failure" in line for line in report["required"]["log_tail"])
    assert culprits(report) == {frozenset({"cse"}), frozenset({"xla_allow_excess_precision"})}
    assert report["fix_verified"]
    assert "fusion is not the cause" not in output
    assert "required: float-normalization-bf16 (not a culprit" in output
    assert "export XLA_FLAGS='--xla_disable_hlo_passes=cse --xla_allow_excess_precision=false'" in output


def test_an_onnxruntime_culprit_inside_level1_rule_based_transformer_is_named_by_its_rewrite_rule(tmp_path: Path) -> None:
    # DivMulFusion, a rewrite rule of Level1_RuleBasedTransformer, changes the bits; the log names only the
    # container. The answer names the rule, and the fix switches off that rule alone.
    need("onnxruntime", "onnx")
    report, output = search("onnxruntime", tmp_path, "level1.yaml", ".fusion-dd-level1")
    assert culprits(report) == {frozenset({"DivMulFusion"})}
    assert report["culprits"][0]["inside"] == ["Level1_RuleBasedTransformer"]
    assert report["switched_off"] == ["DivMulFusion"] and report["fix_verified"]
    fixed = (tmp_path / "onnxruntime" / ".fusion-dd-level1" / "ort_disabled_optimizers.txt").read_text()
    assert [line for line in fixed.splitlines() if not line.startswith("#")] == ["DivMulFusion"]
    assert "export FUSION_DD_DISABLED_OPTIMIZERS=DivMulFusion" in output
    assert "a rewrite rule inside Level1_RuleBasedTransformer" in output
