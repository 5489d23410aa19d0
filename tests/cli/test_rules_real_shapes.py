"""`fusion-dd rules` and a search on the fusion_result.json shapes CANN really writes (keyed, list, flat)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support import REPO
from tests.support.artifacts import GRAPH_RULES, OBEDIENT_TRAINING, UB_RULE
from tests.support.fake_training import FAKE_PYTHON, call_fusion_dd, run_fusion_dd

REAL = REPO / "tests" / "fixtures" / "ascend-real"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "fusion_result.array.open-sora-plan.json",
            {"GraphFusion": ["LayerNormGradV3FusionPass", "RefreshInt64ToInt32FusionPass"], "UBFusion": []},
        ),
        (
            "fusion_result.flat.atc-ctpn.json",
            {
                "GraphFusion": [
                    "ConstToAttrPass", "ConstToAttrStridedSliceV2Fusion", "GRUFusionPass", "MapIndexFusionPass",
                    "RefreshInt64ToInt32FusionPass", "TransposedUpdateFusionPass", "ZSplitDFusionPass",
                ],
                "UBFusion": ["TbeCommonRules0FusionPass"],
            },
        ),
        ("fusion_result.keyed.verl.json", {"GraphFusion": [], "UBFusion": []}),
    ],
)
def test_rules_lists_exactly_the_rules_that_fired_in_every_real_shape(tmp_path, name, expected):
    # Under its own name, renamed, and inside a directory: told by content every time.
    shutil.copy(REAL / name, tmp_path / name)
    shutil.copy(REAL / name, tmp_path / "compile_stats.json")
    (tmp_path / "work" / "FE" / "123").mkdir(parents=True)
    shutil.copy(REAL / name, tmp_path / "work" / "FE" / "123" / "stats_rank0.json")
    for source in (name, "compile_stats.json", "work"):
        result = call_fusion_dd("rules", source, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert yaml.safe_load(result.stdout) == {"rules": expected}, source
        as_json = json.loads(call_fusion_dd("rules", source, "--format", "json", cwd=tmp_path).stdout)
        assert as_json["sources"][0]["kind"] == "fusion_result"


def test_rules_accepts_real_names_in_a_plain_list_and_puts_a_new_one_in_both_sections(tmp_path):
    (tmp_path / "names.txt").write_text("LayerNormGradV3FusionPass\nTbeCommonRules0FusionPass\nQuuxAttentionRewritePass\n")
    result = run_fusion_dd("rules", "names.txt", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout) == {
        "rules": {
            "GraphFusion": ["LayerNormGradV3FusionPass", "QuuxAttentionRewritePass"],
            "UBFusion": ["QuuxAttentionRewritePass", "TbeCommonRules0FusionPass"],
        }
    }
    assert result.stderr.count("written into both sections") == 1
    (tmp_path / "typo.txt").write_text("LayerNormGradV3FusionPas\n")
    typo = call_fusion_dd("rules", "typo.txt", cwd=tmp_path)
    assert typo.returncode == 2 and "did you mean LayerNormGradV3FusionPass" in typo.stderr
    assert "Traceback" not in typo.stderr and len(typo.stderr.strip().splitlines()) == 1


def write_config(tmp_path: Path, *training_args: str, rules: dict | None = None) -> None:
    sections = {name: "UBFusion" if name == UB_RULE else "GraphFusion" for name in GRAPH_RULES + [UB_RULE]}
    script = tmp_path / "train.py"
    script.write_text(OBEDIENT_TRAINING)
    document = {
        "rules": rules or {"GraphFusion": GRAPH_RULES, "UBFusion": [UB_RULE]},
        "train": {"command": [*FAKE_PYTHON, str(script), json.dumps(sections), *training_args], "devices": [0, 1]},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 40},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))


@pytest.mark.parametrize("training_args", [("--shape=list",), ("--shape=flat", "--result-name=compile_stats.json")])
def test_a_search_verifies_its_switch_files_from_list_and_flat_results(tmp_path, training_args):
    write_config(tmp_path, *training_args)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["switch_check"] == {"applied": report["trainings"]}
    assert report["fix_verified"] is True
    assert {rule["name"] for culprit in report["culprits"] for rule in culprit["rules"]} == {
        "FixPipeAbilityProcessPass", "ConvToFullyConnectionFusionPass", UB_RULE
    }
    assert "could not verify" not in result.stderr + result.stdout


def test_a_search_whose_trainings_leave_an_unreadable_result_names_it(tmp_path):
    # The shape argument is one no CANN writes: a JSON string; the file is named with why it was refused.
    script = OBEDIENT_TRAINING + 'open(os.path.join(os.environ["FUSION_DD_TRIAL_DIR"], "fusion_result.json"), "w").write(\'"x"\')\n'
    write_config(tmp_path)
    (tmp_path / "train.py").write_text(script)
    result = run_fusion_dd("search", cwd=tmp_path)
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert "no training left a fusion_result.json" not in output
    assert "unreadable fusion_result.json" in output and "top level must be a JSON object" in output
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert "applied" not in report["switch_check"]


def test_a_config_takes_sectionless_names_from_a_list_placing_them_by_the_config_or_in_both(tmp_path):
    (tmp_path / "names.txt").write_text("SoftmaxFusionPass\nQuuxAttentionRewritePass\nBrandNewKernelFusion\n")
    (tmp_path / "train.py").write_text("print('accuracy: 1')\n")
    document = {
        "rules": {"from": ["names.txt"], "UBFusion": ["QuuxAttentionRewritePass"], "unknown": "warn"},
        "train": {"command": ["python", "train.py"]},
        "metric": {"pattern": r"accuracy: (\S+)"},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    dry = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    listed = [line.split() for line in dry.stdout.splitlines() if line.startswith("  ") and len(line.split()) == 2]
    assert ["GraphFusion", "BrandNewKernelFusion"] in listed and ["UBFusion", "BrandNewKernelFusion"] in listed
    assert ["UBFusion", "QuuxAttentionRewritePass"] in listed and ["GraphFusion", "QuuxAttentionRewritePass"] not in listed
    assert dry.stderr.count("written into both sections") == 1 and "BrandNewKernelFusion" in dry.stderr
    (tmp_path / "names.txt").write_text("SoftmaxFusionPas\n")
    typo = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert typo.returncode == 2 and "did you mean SoftmaxFusionPass" in typo.stderr
    assert len(typo.stderr.strip().splitlines()) == 1


def test_rules_from_all_on_names_an_unreadable_result_instead_of_saying_nothing_fired(tmp_path):
    (tmp_path / "train.py").write_text(
        "import os\n"
        "open(os.path.join(os.environ['FUSION_DD_TRIAL_DIR'], 'fusion_result.json'), 'w')"
        ".write('[{\"graph_fusion\": {\"A\": {\"effect_times\": \"x\"}}}]')\n"
        "print('accuracy: 0.9')\n"
    )
    document = {
        "rules": {"from": "all_on"},
        "train": {"command": [*FAKE_PYTHON, "train.py"]},
        "metric": {"pattern": r"accuracy: (\S+)"},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2
    assert "could not read which rules fired: unreadable fusion_result.json" in result.stderr
    assert "'[0].graph_fusion.A.effect_times' is 'x'" in result.stderr and "Traceback" not in result.stderr


def test_a_config_whose_artifacts_name_no_fired_rule_says_why_not_what_it_already_did(tmp_path):
    """verl's real fusion_result.json: passes matched, none had an effect. The error says that, as `rules` does."""
    shutil.copy(REAL / "fusion_result.keyed.verl.json", tmp_path)
    document = {"rules": {"from": ["fusion_result.keyed.verl.json"]}, "train": {"command": ["python", "train.py"]}}
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    dry = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 2 and len(dry.stderr.strip().splitlines()) == 1, dry.stderr
    assert "rules.from: no candidate rules: " in dry.stderr
    assert "but none has effect_times > 0: no fusion rule changed this network" in dry.stderr
    assert "(or rules.from: [fusion_result.json])" not in dry.stderr
