"""Candidate rules from any mix of artifacts and lists; printing and reading back."""

from __future__ import annotations

import json

import pytest
import yaml

from fusion_dd.backends.cann.artifacts import collect_candidates, format_rules, load_graph, read_fusion_result
from fusion_dd.backends.cann.switch import parse_switch_text
from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import Rule, Section
from tests.support import REPO


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


def test_a_misspelled_name_without_section_is_refused_with_suggestions(tmp_path):
    plain = tmp_path / "rules.txt"
    plain.write_text("SoftmaxFusionPass\nTbeEltwiseFusionPas\n")
    with pytest.raises(UsageError) as info:
        collect_candidates([plain])
    message = str(info.value)
    assert message.startswith(f"{plain}:2: rule 'TbeEltwiseFusionPas' is not a known pass name and looks like a misspelling")
    assert "did you mean TbeEltwiseFusionPass" in message and "\n" not in message
    line_switch = tmp_path / "fusion_switch.cfg"
    line_switch.write_text("LayerNormGradV3FusionPas:off\n")
    with pytest.raises(UsageError, match="did you mean LayerNormGradV3FusionPass"):
        collect_candidates([line_switch])


def test_a_new_name_far_from_every_known_one_goes_into_both_sections_with_one_line(tmp_path):
    plain = tmp_path / "rules.txt"
    plain.write_text("SoftmaxFusionPass\nQuuxAttentionRewritePass\nBrandNewKernelFusion\n")
    candidates = collect_candidates([plain])
    assert candidates.rules == [
        Rule("BrandNewKernelFusion", Section.GRAPH),
        Rule("QuuxAttentionRewritePass", Section.GRAPH),
        Rule("SoftmaxFusionPass", Section.GRAPH),
        Rule("BrandNewKernelFusion", Section.UB),
        Rule("QuuxAttentionRewritePass", Section.UB),
    ]
    assert candidates.both_sections == ["QuuxAttentionRewritePass", "BrandNewKernelFusion"]
    (line,) = candidates.warnings
    assert line.startswith("2 name(s) in neither the catalog nor any given artifact, so written into both sections")
    assert line.endswith("QuuxAttentionRewritePass, BrandNewKernelFusion")
    # The old line format gives no section either: the same.
    line_switch = tmp_path / "old.cfg"
    line_switch.write_text("QuuxAttentionRewritePass:off\n")
    assert collect_candidates([line_switch]).both_sections == ["QuuxAttentionRewritePass"]


def test_a_section_declared_elsewhere_in_the_same_run_places_a_plain_name(tmp_path):
    plain = tmp_path / "rules.txt"
    plain.write_text("QuuxAttentionRewritePass\n")
    switch = tmp_path / "fusion_switch.cfg"
    switch.write_text('{"Switch": {"UBFusion": {"QuuxAttentionRewritePass": "off"}}}')
    candidates = collect_candidates([plain, switch])
    assert candidates.rules == [Rule("QuuxAttentionRewritePass", Section.UB)]
    assert candidates.both_sections == []


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


REAL = REPO / "tests" / "fixtures" / "ascend-real"


def real_pass_names() -> dict[str, Section]:
    """Every pass name in the real artifacts of tests/fixtures/ascend-real, with its section."""
    found: dict[str, Section] = {}
    for path in sorted(REAL.glob("fusion_result.*.json")):
        for rule in read_fusion_result(path).rules():
            found[rule.name] = rule.section
    for rule in load_graph(REAL / "atc_om_model.msprobe.json").rules():
        found.setdefault(rule.name, rule.section)
    for path in sorted(REAL.glob("*.cfg")):
        for name, section in parse_switch_text(path.read_text(), str(path)).names():
            found[name] = section
    return found


def test_every_real_pass_name_is_accepted_in_a_plain_list_and_the_line_format(tmp_path):
    real = real_pass_names()
    assert len(real) == 34 and real["TbeCommonRules0FusionPass"] is Section.UB
    assert real["ConstToAttrStridedSliceV2Fusion"] is Section.GRAPH  # the atc graph's only pass_name
    expected = sorted(Rule(name, section) for name, section in real.items())
    plain = tmp_path / "names.txt"
    plain.write_text("\n".join(real) + "\n")
    old = tmp_path / "old_switch.cfg"
    old.write_text("".join(f"{name}:off\n" for name in real))
    for source in (plain, old):
        candidates = collect_candidates([source])
        assert sorted(candidates.rules) == expected, source.name
        assert candidates.both_sections == [] and candidates.warnings == []


def test_rules_from_every_real_shape_are_exactly_the_fired_ones():
    for name, fired in [
        ("fusion_result.array.open-sora-plan.json", {"LayerNormGradV3FusionPass", "RefreshInt64ToInt32FusionPass"}),
        ("fusion_result.keyed.verl.json", set()),
    ]:
        candidates = collect_candidates([REAL / name])
        assert {rule.name for rule in candidates.rules} == fired
        assert [source.kind for source in candidates.sources] == ["fusion_result"]
        said = [warning for warning in candidates.warnings if "none has effect_times > 0" in warning]
        assert len(said) == (0 if fired else 1)
    flat = collect_candidates([REAL / "fusion_result.flat.atc-ctpn.json"])
    assert flat.by_section()[Section.UB] == ["TbeCommonRules0FusionPass"]
    assert len(flat.rules) == 8
