"""Candidate rules from any mix of artifacts and lists; printing and reading back."""

from __future__ import annotations

import json

import pytest
import yaml

from fusion_dd.ascend import collect_candidates, format_rules
from fusion_dd.errors import UsageError
from fusion_dd.rules import Rule, Section


def names(candidates, section):
    return candidates.by_section()[section]


def test_real_fixture_directory(ascend_fixtures):
    candidates = collect_candidates([ascend_fixtures])
    assert names(candidates, Section.GRAPH) == [
        "ARefreshCubeC0FusionPass",
        "FixPipeAbilityProcessPass",
        "TransdataFz2FzgFusionPass",
    ]
    assert names(candidates, Section.UB) == []
    # The afterUBMatch dump has no provenance: a warning, not an error.
    assert any("names no fusion rules" in warning for warning in candidates.warnings)
    assert [source.kind for source in candidates.sources] == ["fusion_result", "graph_text"]


def test_real_tdnn_json_by_name(ascend_fixtures):
    candidates = collect_candidates([ascend_fixtures / "tdnn.om.json"])
    assert len(names(candidates, Section.GRAPH)) == 5
    assert "TbeReduceElemwiseFusionPass" in names(candidates, Section.UB)
    assert candidates.warnings == []


def test_graph_without_provenance_gives_an_empty_set_and_a_warning(tmp_path, dumps):
    path = tmp_path / "ge_proto_00000001_graph_1_Build.txt"
    path.write_text(dumps.proto_text([dumps.OpSpec("conv", originals=["conv1"])]))
    candidates = collect_candidates([path])
    assert candidates.rules == []
    assert candidates.fired is None
    assert len(candidates.warnings) == 1
    assert "no op carries pass_name or pass_name_ub" in candidates.warnings[0]


def test_directory_prefers_build_dumps_and_finds_nested_fusion_results(tmp_path, dumps):
    (tmp_path / "ge_proto_00000001_graph_1_Build.txt").write_text(
        dumps.proto_text(dumps.SAMPLE_OPS)
    )
    (tmp_path / "ge_proto_00000001_graph_1_PreRunBegin.txt").write_text(
        dumps.proto_text([dumps.OpSpec("x", pass_name=["StageOnlyFusionPass"])])
    )
    nested = tmp_path / "FE" / "12345"
    nested.mkdir(parents=True)
    (nested / "fusion_result.json").write_text(
        dumps.fusion_result_text({"g": {"ub_fusion": {"TbeEltwiseFusionPass": 1}}})
    )
    candidates = collect_candidates([tmp_path])
    assert candidates.rules == [
        Rule("ConvBatchnormFusionPass", Section.GRAPH),
        Rule("ConvScaleFusionPass", Section.GRAPH),
        Rule("MulSquareFusionPass", Section.GRAPH),
        Rule("TbeEltwiseFusionPass", Section.UB),
        Rule("TbeReduceElemwiseFusionPass", Section.UB),
    ]
    assert candidates.fired_sections == {Section.GRAPH, Section.UB}


def test_empty_directory_and_missing_path_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="no fusion_result.json or ge_proto_"):
        collect_candidates([tmp_path])
    with pytest.raises(UsageError, match="no such file or directory"):
        collect_candidates([tmp_path / "absent"])
    with pytest.raises(UsageError, match="no rule source"):
        collect_candidates([])


def test_kinds_are_told_by_content_whatever_the_suffix(tmp_path, dumps):
    graph = tmp_path / "model.dump"
    graph.write_text(dumps.proto_text(dumps.SAMPLE_OPS))
    mode5 = tmp_path / "model.out"
    mode5.write_text(dumps.mode5_json(dumps.SAMPLE_OPS))
    line_switch = tmp_path / "switch"
    line_switch.write_text("TbeEltwiseFusionPass:off\nConvBatchnormFusionPass:on\n")
    json_switch = tmp_path / "switch.json"
    json_switch.write_text(json.dumps({"Switch": {"UBFusion": {"ALL": "off", "AutomaticUbFusion": "on"}}}))
    plain = tmp_path / "rules.txt"
    plain.write_text("# my rules\nSoftmaxFusionPass\nTbeEltwiseFusionPass UBFusion  # why not\n\n")
    result = tmp_path / "compile_stats.json"
    result.write_text(dumps.fusion_result_text({"g": {"graph_fusion": {"ConvBatchnormFusionPass": 1}}}))
    kinds = {
        graph: "graph_text",
        mode5: "graph_json",
        line_switch: "switch_cfg",
        json_switch: "switch_cfg",
        plain: "rule_list",
        result: "fusion_result",
    }
    for path, kind in kinds.items():
        assert [source.kind for source in collect_candidates([path], keep_unfired=True).sources] == [kind]


def test_lists_and_switch_files_resolve_sections_from_the_catalog(tmp_path):
    line_switch = tmp_path / "fusion_switch.cfg"
    line_switch.write_text("TbeEltwiseFusionPass:off\nSoftmaxFusionPass:on\n")
    candidates = collect_candidates([line_switch])
    assert candidates.rules == [
        Rule("SoftmaxFusionPass", Section.GRAPH),
        Rule("TbeEltwiseFusionPass", Section.UB),
    ]
    assert candidates.fired is None
    assert candidates.warnings == []


def test_a_rule_with_unknown_section_is_refused_not_guessed(tmp_path):
    plain = tmp_path / "rules.txt"
    plain.write_text("SoftmaxFusionPass\nTbeEltwiseFusionPas\n")
    with pytest.raises(UsageError) as info:
        collect_candidates([plain])
    message = str(info.value)
    assert message.startswith(f"{plain}:2: rule 'TbeEltwiseFusionPas' has no known section")
    assert "did you mean TbeEltwiseFusionPass" in message
    line_switch = tmp_path / "fusion_switch.cfg"
    line_switch.write_text("BrandNewFusionPass:off\n")
    with pytest.raises(UsageError, match="BrandNewFusionPass"):
        collect_candidates([line_switch])


def test_artifact_sections_resolve_names_missing_from_the_catalog(tmp_path, dumps):
    result = tmp_path / "fusion_result.json"
    result.write_text(
        dumps.fusion_result_text(
            {"g": {"ub_fusion": {"BrandNewUbFusionPass": 1}, "graph_fusion": {"SoftmaxFusionPass": 0}}}
        )
    )
    plain = tmp_path / "rules.txt"
    plain.write_text("BrandNewUbFusionPass\n")
    candidates = collect_candidates([result, plain])
    assert candidates.rules == [Rule("BrandNewUbFusionPass", Section.UB)]
    assert candidates.warnings == []  # fired, so right even though the catalog lacks it


def test_never_fired_names_are_left_out_unless_kept(tmp_path, dumps):
    result = tmp_path / "fusion_result.json"
    result.write_text(
        dumps.fusion_result_text({"g": {"graph_fusion": {"ConvBatchnormFusionPass": 1, "SoftmaxFusionPass": 0}}})
    )
    plain = tmp_path / "rules.txt"
    plain.write_text("SoftmaxFusionPass\nTbeEltwiseFusionPass\n")
    candidates = collect_candidates([result, plain])
    assert candidates.rules == [
        Rule("ConvBatchnormFusionPass", Section.GRAPH),
        # The result has no ub_fusion section: it proves nothing about UB rules.
        Rule("TbeEltwiseFusionPass", Section.UB),
    ]
    assert candidates.dropped == [Rule("SoftmaxFusionPass", Section.GRAPH)]
    assert any("SoftmaxFusionPass (GraphFusion) never fired" in w for w in candidates.warnings)
    kept = collect_candidates([result, plain], keep_unfired=True)
    assert Rule("SoftmaxFusionPass", Section.GRAPH) in kept.rules
    assert kept.dropped == []


def test_malformed_rule_lists_name_file_and_line(tmp_path):
    bad = tmp_path / "rules.txt"
    bad.write_text("SoftmaxFusionPass\nA B C\n")
    with pytest.raises(UsageError, match=r"rules.txt:2: expected one rule per line"):
        collect_candidates([bad])
    bad.write_text("SoftmaxFusionPass Graph\n")
    with pytest.raises(UsageError, match=r"rules.txt:1: unknown section 'Graph'"):
        collect_candidates([bad])
    bad_yaml = tmp_path / "rules.yaml"
    bad_yaml.write_text("rules:\n  GraphFusion: [a\n")
    with pytest.raises(UsageError, match=r"rules.yaml:\d+: not valid YAML"):
        collect_candidates([bad_yaml])
    odd_json = tmp_path / "odd.json"
    odd_json.write_text('{"hello": 1}')
    with pytest.raises(UsageError, match="JSON of unknown kind"):
        collect_candidates([odd_json])
    bad_switch = tmp_path / "fusion_switch.cfg"
    bad_switch.write_text('{"Switch": {"GraphFusion": {"A": "ON"}}}')
    with pytest.raises(UsageError, match="exactly"):
        collect_candidates([bad_switch])


@pytest.mark.parametrize("fmt", ["yaml", "txt", "json"])
def test_output_reads_back_to_the_same_rules(tmp_path, dumps, fmt):
    mode5 = tmp_path / "model.json"
    mode5.write_text(dumps.mode5_json(dumps.SAMPLE_OPS))
    candidates = collect_candidates([mode5])
    text = format_rules(candidates, fmt)
    saved = tmp_path / f"saved.{fmt}"
    saved.write_text(text)
    assert collect_candidates([saved]).rules == candidates.rules


def test_yaml_pastes_into_the_config_as_rules_by_section(tmp_path, dumps):
    mode5 = tmp_path / "model.json"
    mode5.write_text(dumps.mode5_json(dumps.SAMPLE_OPS))
    document = yaml.safe_load(format_rules(collect_candidates([mode5]), "yaml"))
    assert document == {
        "rules": {
            "GraphFusion": ["ConvBatchnormFusionPass", "ConvScaleFusionPass", "MulSquareFusionPass"],
            "UBFusion": ["TbeReduceElemwiseFusionPass"],
        }
    }
    with pytest.raises(UsageError, match="unknown format"):
        format_rules(collect_candidates([mode5]), "xml")


def test_fusion_result_section_beats_a_bare_pass_name_entry(tmp_path, dumps):
    mode5 = tmp_path / "model.json"
    mode5.write_text(dumps.mode5_json([dumps.OpSpec("x", pass_name=["TbeEltwiseFusionPass"])]))
    result = tmp_path / "fusion_result.json"
    result.write_text(dumps.fusion_result_text({"g": {"ub_fusion": {"TbeEltwiseFusionPass": 1}}}))
    assert collect_candidates([mode5, result]).rules == [Rule("TbeEltwiseFusionPass", Section.UB)]
    alone = collect_candidates([mode5])
    assert alone.rules == [Rule("TbeEltwiseFusionPass", Section.GRAPH)]
    # Taken as GraphFusion by the dump rule, but the catalog knows better: warned.
    assert [w.kind for w in alone.name_warnings] == ["section-mismatch"]
