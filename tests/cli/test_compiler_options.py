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


# A training that reads what each compiler's user hands to it: ONNX Runtime's disabled
# optimizers (through FUSION_DD_DISABLED_OPTIMIZERS), XLA's --xla_disable_hlo_passes in XLA_FLAGS.
# BiasGeluFusion (ONNX Runtime) and algsimp (XLA) break its accuracy while they run.
LIST_TRAINING = """\
import os, re
disabled = set(filter(None, os.environ.get("FUSION_DD_DISABLED_OPTIMIZERS", "").split(";")))
match = re.search(r"--xla_disable_hlo_passes=(\\S+)", os.environ.get("XLA_FLAGS", ""))
disabled |= set(match.group(1).split(",")) if match else set()
broken = {"BiasGeluFusion", "algsimp"} - disabled
print("accuracy:", 0.5 if broken & set(os.environ["CANDIDATES"].split(",")) else 0.9)
"""


@pytest.mark.parametrize(
    "compiler, names, fix_name, culprit",
    [
        ("onnxruntime", ["AttentionFusion", "BiasGeluFusion", "BiasDropoutFusion", "BiasSoftmaxFusion"],
         "ort_disabled_optimizers.txt", "BiasGeluFusion"),
        ("xla", ["algsimp", "after_layout_assignment", "apply-xla-transforms", "async-collective-replacer"],
         "xla_disabled_passes.txt", "algsimp"),
    ],
)
def test_the_fix_file_is_named_by_the_compiler_and_the_summary_says_so(
    tmp_path: Path, compiler: str, names: list[str], fix_name: str, culprit: str
) -> None:
    import sys

    import yaml

    (tmp_path / "train.py").write_text(LIST_TRAINING)
    document = {
        "rules": {"compiler": compiler, "names": names},
        "train": {"command": [sys.executable, "train.py"], "devices": [0], "env": {"CANDIDATES": ",".join(names)}},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 30},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    result = call_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    state = tmp_path / ".fusion-dd"
    assert (state / fix_name).read_text().splitlines()[-1] == culprit
    assert not (state / "fusion_switch.cfg").exists(), "CANN's name for another compiler's list"
    assert f"fix config (verified: trained and passes, 2 of 2 training(s) passed): .fusion-dd/{fix_name}" in result.stdout


# ONNX Runtime as its log shows it: one line per transformer that runs, a container (Level1) and never
# its rewrite rules by name; NotWhereFusion, a rule inside Level1, breaks the accuracy while it runs.
CONTAINER_TRAINING = """\
import os
disabled = set(filter(None, os.environ.get("FUSION_DD_DISABLED_OPTIMIZERS", "").split(";")))
for name in ("Level1_RuleBasedTransformer", "ConstantFolding", "MatMulAddFusion"):
    if name not in disabled:
        print(f"[I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer {name} modified: 1 with status: OK")
broken = "Level1_RuleBasedTransformer" not in disabled and "NotWhereFusion" not in disabled
print("accuracy:", 0.5 if broken else 0.9)
"""


def test_a_culprit_inside_an_onnxruntime_container_is_named_by_its_rule_and_switched_off_alone(tmp_path: Path) -> None:
    import json
    import sys

    import yaml

    (tmp_path / "train.py").write_text(CONTAINER_TRAINING)
    document = {
        "rules": {"compiler": "onnxruntime", "names": ["ConstantFolding", "Level1_RuleBasedTransformer", "MatMulAddFusion"]},
        "train": {"command": [sys.executable, "train.py"], "devices": [0, 1]},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 60},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    result = call_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    state = tmp_path / ".fusion-dd"
    report = json.loads((state / "report.json").read_text())
    assert report["status"] == "found"
    assert [[rule["name"] for rule in culprit["rules"]] for culprit in report["culprits"]] == [["NotWhereFusion"]]
    assert report["culprits"][0]["inside"] == ["Level1_RuleBasedTransformer"]
    assert report["switched_off"] == ["NotWhereFusion"] and report["fix_verified"]
    assert [line for line in (state / "ort_disabled_optimizers.txt").read_text().splitlines() if not line.startswith("#")] == [
        "NotWhereFusion"
    ]
    assert "a rewrite rule inside Level1_RuleBasedTransformer" in result.stdout
    # The replayed report (fusion-dd report) gives the same answer.
    replayed = call_fusion_dd("report", "--json", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert '"NotWhereFusion"' in replayed.stdout
