"""Through the CLI: a search over AutoFuse switch points and fusion rules at once."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
from pathlib import Path

import yaml

from fusion_dd.backends.cann.autofuse import parse_flags
from tests.support.artifacts import READ_SWITCH
from tests.support.fake_training import FAKE_PYTHON, call_fusion_dd, run_fusion_dd

# A training that fails when AutoFuse's Reduce fusion runs, or when the graph culprit is on.
TRAINING = READ_SWITCH + textwrap.dedent(
    """
    import os
    items = dict(item.split("=", 1) for item in os.environ.get("AUTOFUSE_FLAGS", "").split(";") if "=" in item)
    autofuse = items.get("--enable_autofuse") == "true"
    reduce_on = autofuse and "reduce" in items.get("--autofuse_enable_pass", "").split(",")
    graph_on = load_switch(os.environ["FUSION_DD_SWITCH_FILE"]).state("ConvToFullyConnectionFusionPass", "GraphFusion") is not False
    print("accuracy: %s" % (0.5 if reduce_on or graph_on else 0.9))
    """
)


def test_a_search_over_autofuse_and_fusion_rules_finds_both_and_writes_both_fixes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAINING)
    document = {
        "rules": {
            "GraphFusion": ["ConvToFullyConnectionFusionPass", "ARefreshCubeC0FusionPass", "FixPipeAbilityProcessPass"],
            "UBFusion": ["TbeEltwiseFusionPass"],
            "AutoFuse": ["elemwise", "reduce", "concat"],
        },
        "train": {
            "command": [*FAKE_PYTHON, str(script)],
            "devices": [0, 1],
            "env": {"AUTOFUSE_FLAGS": "--autofuse_dfx=1"},
        },
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 60},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    state = tmp_path / ".fusion-dd"
    report = json.loads((state / "report.json").read_text())
    found = {frozenset(rule["name"] for rule in c["rules"]) for c in report["culprits"]}
    assert found == {frozenset({"ConvToFullyConnectionFusionPass"}), frozenset({"elemwise", "reduce"})}
    assert set(report["switched_off"]) == {"ConvToFullyConnectionFusionPass", "reduce"}
    flags = report["fix_env"]["AUTOFUSE_FLAGS"]
    assert parse_flags(flags) == {
        "--autofuse_dfx": "1",
        "--enable_autofuse": "true",
        "--autofuse_enable_pass": "concat",
        "--autofuse_disable_pass": "reduce",
    }
    assert (state / "autofuse_flags.txt").read_text() == flags + "\n"
    assert f"export AUTOFUSE_FLAGS={shlex.quote(flags)}" in result.stdout
    cfg = json.loads((state / "fusion_switch.cfg").read_text())
    assert cfg["Switch"]["GraphFusion"]["ConvToFullyConnectionFusionPass"] == "off"
    assert "reduce" not in json.dumps(cfg)
    assert report["fix_verified"] is True


def test_a_wrong_autofuse_point_is_one_line(tmp_path: Path) -> None:
    document = {
        "rules": {"AutoFuse": ["elemwise", "transpose"]},
        "train": {"command": [sys.executable, "-c", "print('accuracy: 1')"]},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    result = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2
    assert "rules.AutoFuse[1]" in result.stderr and "'transpose' is not an AutoFuse switch point" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_init_and_rules_offer_the_switch_points_when_autofuse_is_on(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AUTOFUSE_FLAGS", "--enable_autofuse=true")
    result = run_fusion_dd("init", "--command", "python train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load((tmp_path / "fusion-dd.yaml").read_text())
    assert document["rules"]["AutoFuse"] == ["elemwise", "reduce", "concat"]
    (tmp_path / "fusion_result.json").write_text(
        json.dumps({"g": {"graph_fusion": {"ConvToFullyConnectionFusionPass": {"match_times": "1", "effect_times": "1"}}}})
    )
    listed = call_fusion_dd("rules", "fusion_result.json", cwd=tmp_path)  # init above was a real process
    assert yaml.safe_load(listed.stdout)["rules"]["AutoFuse"] == ["elemwise", "reduce", "concat"]
    monkeypatch.setenv("AUTOFUSE_FLAGS", "--enable_autofuse=false")
    listed = call_fusion_dd("rules", "fusion_result.json", "--format", "json", cwd=tmp_path)
    assert "AutoFuse" not in json.loads(listed.stdout)["rules"]
