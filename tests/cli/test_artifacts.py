"""The CLI with CANN artifacts: rules, init, rules.from, rules.graphs and the switch-applied check."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import yaml

from tests.support.artifacts import GRAPH_RULES, OBEDIENT_TRAINING, UB_RULE, fusion_result
from tests.support.fake_training import FAKE_PYTHON, FAKE_TRAIN, call_fusion_dd, run_fusion_dd


def graph_dump(path: Path) -> None:
    """A GE Build graph in protobuf text format with provenance for two rules."""
    path.write_text(
        textwrap.dedent(
            """
            name: "net"
            graph {
              name: "net_graph"
              op {
                name: "fc1_fused"
                type: "FullyConnection"
                attr { key: "pass_name" value { list { s: "FixPipeAbilityProcessPass" val_type: VT_LIST_STRING } } }
                attr { key: "_datadump_original_op_names" value { list { s: "dense_1/MatMul" s: "dense_1/BiasAdd" val_type: VT_LIST_STRING } } }
              }
              op {
                name: "add_relu"
                type: "Add"
                attr { key: "pass_name_ub" value { s: "TbeEltwiseFusionPass" } }
                attr { key: "fusion_scope" value { i: 3 } }
                attr { key: "_datadump_original_op_names" value { list { s: "block1/add" s: "block1/relu" val_type: VT_LIST_STRING } } }
              }
            }
            """
        )
    )


def write_config(tmp_path: Path, rules: dict, *extra_args: str) -> Path:
    sections = {name: "UBFusion" if name == UB_RULE else "GraphFusion" for name in GRAPH_RULES + [UB_RULE]}
    script = tmp_path / "train.py"
    script.write_text(OBEDIENT_TRAINING)
    document = {
        "rules": rules,
        "train": {"command": [*FAKE_PYTHON, str(script), json.dumps(sections), *extra_args], "devices": [0, 1]},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 40},
    }
    path = tmp_path / "fusion-dd.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_search_takes_rules_from_artifacts_and_names_culprit_layers(tmp_path):
    fusion_result(tmp_path / "fusion_result.json", {name: "GraphFusion" for name in GRAPH_RULES} | {UB_RULE: "UBFusion"})
    graph_dump(tmp_path / "ge_proto_00000001_graph_1_Build.txt")
    write_config(tmp_path, {"from": ["fusion_result.json"], "graphs": ["ge_proto_*_Build.txt"]})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert {rule["name"] for rule in report["candidates"]} == set(GRAPH_RULES) | {UB_RULE}
    by_kind = {culprit["kind"]: culprit for culprit in report["culprits"]}
    culprit = by_kind["independent"]
    assert culprit["rules"] == [{"name": "FixPipeAbilityProcessPass", "section": "GraphFusion"}]
    assert culprit["where"]["FixPipeAbilityProcessPass"]["layers"] == ["dense_1/MatMul", "dense_1/BiasAdd"]
    pair = by_kind["interacting"]
    assert {rule["name"] for rule in pair["rules"]} == {"ConvToFullyConnectionFusionPass", UB_RULE}
    # The UB rule fused 5 places in the all-on run, the graph rule 1: keep the bigger fusion on.
    assert pair["switched_off"] == ["ConvToFullyConnectionFusionPass"]
    assert "fewest places" in pair["reason"]
    assert report["fix_verified"] is True
    assert "dense_1/MatMul" in result.stdout
    assert report["switch_check"] == {"applied": report["trainings"]}


def test_a_training_that_ignores_its_switch_file_stops_the_search(tmp_path):
    write_config(tmp_path, {"GraphFusion": GRAPH_RULES, "UBFusion": [UB_RULE]}, "--ignore-switch")
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2
    assert "fired although switched off" in result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "switch_ignored"
    again = run_fusion_dd("search", cwd=tmp_path)
    assert again.returncode == 2 and "fix the wiring" in again.stderr


def test_rules_command_formats_and_errors(tmp_path):
    fusion_result(tmp_path / "fusion_result.json", {"FixPipeAbilityProcessPass": "GraphFusion", UB_RULE: "UBFusion"})
    result = run_fusion_dd("rules", "fusion_result.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout) == {
        "rules": {"GraphFusion": ["FixPipeAbilityProcessPass"], "UBFusion": [UB_RULE]}
    }
    # The other formats and errors of the same command: in-process (the first call was a real process).
    as_json = call_fusion_dd("rules", "fusion_result.json", "--format", "json", cwd=tmp_path)
    assert "FixPipeAbilityProcessPass" in as_json.stdout
    (tmp_path / "broken.json").write_text('{"session_and_graph_id_0_0": {"graph_fusion": ')
    broken = call_fusion_dd("rules", "broken.json", cwd=tmp_path)
    assert broken.returncode == 2
    assert "broken.json" in broken.stderr and "Traceback" not in broken.stderr
    missing = call_fusion_dd("rules", "nope.json", cwd=tmp_path)
    assert missing.returncode == 2 and "nope.json" in missing.stderr


def test_rules_where_names_the_layers(tmp_path):
    graph_dump(tmp_path / "ge_proto_00000001_graph_1_Build.txt")
    result = run_fusion_dd("rules", "--where", UB_RULE, ".", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "block1/add" in result.stdout and "fusion_scope 3" in result.stdout


def test_init_writes_a_config_that_validates(tmp_path):
    fusion_result(tmp_path / "fusion_result.json", {"FixPipeAbilityProcessPass": "GraphFusion", UB_RULE: "UBFusion"})
    result = run_fusion_dd(
        "init", "--from", "fusion_result.json", "--framework", "torchair",
        "--command", f"{sys.executable} {FAKE_TRAIN} --fusion-switch {{switch_file}}", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "fusion-dd.yaml").read_text()
    assert "device_env: ASCEND_RT_VISIBLE_DEVICES" in text and "fusion_switch_file" in text
    dry = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "FixPipeAbilityProcessPass" in dry.stdout
    again = call_fusion_dd("init", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_fusion_counts_are_journaled_so_a_resume_never_reads_them_again(tmp_path):
    """The all-on run's counts steer the switch-off choice; changing its file afterwards changes nothing."""
    rules = {"GraphFusion": GRAPH_RULES, "UBFusion": [UB_RULE]}
    config = write_config(tmp_path, rules)
    document = yaml.safe_load(config.read_text())
    document["search"]["budget"] = 4
    config.write_text(yaml.safe_dump(document))
    first = run_fusion_dd("search", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    journal = [json.loads(line) for line in (tmp_path / ".fusion-dd" / "journal.jsonl").read_text().splitlines()]
    started = {r["trial_id"]: r for r in journal if r["type"] == "trial_started"}
    (all_on,) = [
        r for r in journal if r["type"] == "trial_finished" and started[r["trial_id"]]["role"] == "all_on"
    ]
    assert all_on["artifacts"]["fusion_result"]["effects"] == {
        **{name: 1 for name in GRAPH_RULES}, UB_RULE: 5
    }
    # Turn the counts around on disk: a re-read would now switch off the UB rule.
    trial_dir = tmp_path / ".fusion-dd" / started[all_on["trial_id"]].get("trial_dir", f"trials/{all_on['trial_id']}")
    counts = {name: "9" for name in GRAPH_RULES}
    text = json.loads((trial_dir / "fusion_result.json").read_text())
    for section in text.values():
        for name, stats in section["graph_fusion"].items():
            stats["effect_times"] = counts[name]
        for stats in section["ub_fusion"].values():
            stats["effect_times"] = "1"
    (trial_dir / "fusion_result.json").write_text(json.dumps(text))
    second = run_fusion_dd("resume", "--budget", "40", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    (pair,) = [culprit for culprit in report["culprits"] if culprit["kind"] == "interacting"]
    assert pair["switched_off"] == ["ConvToFullyConnectionFusionPass"]
