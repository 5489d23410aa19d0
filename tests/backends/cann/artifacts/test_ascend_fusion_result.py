"""fusion_result.json: the rules that changed the graph, and clear errors."""

from __future__ import annotations

import json

import pytest

from fusion_dd.backends.cann.artifacts import read_fusion_result
from fusion_dd.backends.cann.artifacts.discover import fusion_results_in
from fusion_dd.backends.cann.artifacts.fusion_result import PassStats, looks_like_fusion_result, parse_fusion_result
from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import Rule, Section
from tests.support import REPO

REAL = REPO / "tests" / "fixtures" / "ascend-real"
G, U = Section.GRAPH, Section.UB


@pytest.mark.parametrize(
    ("name", "graphs", "fired", "sections"),
    [
        (
            "fusion_result.array.open-sora-plan.json",
            35,
            [Rule("LayerNormGradV3FusionPass", G), Rule("RefreshInt64ToInt32FusionPass", G)],
            {G},
        ),
        (
            "fusion_result.flat.atc-ctpn.json",
            1,
            [
                Rule(name, G)
                for name in (
                    "ConstToAttrPass", "ConstToAttrStridedSliceV2Fusion", "GRUFusionPass", "MapIndexFusionPass",
                    "RefreshInt64ToInt32FusionPass", "TransposedUpdateFusionPass", "ZSplitDFusionPass",
                )
            ]
            + [Rule("TbeCommonRules0FusionPass", U)],
            {G, U},
        ),
        ("fusion_result.keyed.verl.json", 1, [], {G}),
    ],
)
def test_every_real_shape_is_read(name, graphs, fired, sections):
    """List, flat and keyed files as CANN wrote them for real networks (tests/fixtures/ascend-real)."""
    result = read_fusion_result(REAL / name)
    assert len(result.graphs) == graphs
    assert result.fired() == fired
    assert result.sections() == sections
    assert looks_like_fusion_result(json.loads((REAL / name).read_text()))


def test_list_and_flat_graphs_are_named_by_their_session_and_graph_id():
    listed = read_fusion_result(REAL / "fusion_result.array.open-sora-plan.json")
    assert list(listed.graphs)[:2] == ["session_and_graph_id_10_10", "session_and_graph_id_11_11"]
    flat = read_fusion_result(REAL / "fusion_result.flat.atc-ctpn.json")
    assert list(flat.graphs) == ["session_and_graph_id_0_0"]
    stats = flat.graphs["session_and_graph_id_0_0"]
    assert stats[Rule("TbeCommonRules0FusionPass", U)] == PassStats(150, 150)


def test_counts_as_numbers_and_graphs_with_either_section_or_neither():
    text = json.dumps(
        [
            {"session_and_graph_id": "0_0", "graph_fusion": {"A": {"match_times": 2, "effect_times": 1.0}}},
            {"session_and_graph_id": "0_1", "ub_fusion": {"B": {"match_times": "3", "repository_hit_times": "1", "effect_times": "3"}}},
            {"session_and_graph_id": "0_2"},
        ]
    )
    result = parse_fusion_result(text, "any.json")
    assert result.fired() == [Rule("A", G), Rule("B", U)]
    assert len(result.graphs) == 3
    with pytest.raises(UsageError, match=r"'session_and_graph_id_0_0.graph_fusion.A.effect_times' is 1.5"):
        parse_fusion_result('{"session_and_graph_id": "0_0", "graph_fusion": {"A": {"effect_times": 1.5}}}', "f")


def test_looks_like_tells_fusion_results_from_other_json():
    assert looks_like_fusion_result({"session_and_graph_id_0_0": {}})
    assert not looks_like_fusion_result({"Switch": {"GraphFusion": {}}})
    assert not looks_like_fusion_result({"rules": {"GraphFusion": ["A"]}})
    assert not looks_like_fusion_result([{"name": "x"}])
    assert not looks_like_fusion_result([])


def test_directories_find_results_by_content_whatever_they_are_called(tmp_path):
    (tmp_path / "FE" / "7").mkdir(parents=True)
    (tmp_path / "FE" / "7" / "fusion_result.json").write_text((REAL / "fusion_result.keyed.verl.json").read_text())
    (tmp_path / "rank0_compile_stats.json").write_text((REAL / "fusion_result.flat.atc-ctpn.json").read_text())
    (tmp_path / "graphs.json").write_text((REAL / "fusion_result.array.open-sora-plan.json").read_text())
    (tmp_path / "metrics.json").write_text('{"accuracy": 0.9}')
    (tmp_path / "model.om.json").write_text((REAL / "atc_om_model.msprobe.json").read_text())
    found = fusion_results_in(tmp_path)
    assert [path.relative_to(tmp_path).as_posix() for path in found] == [
        "FE/7/fusion_result.json", "graphs.json", "rank0_compile_stats.json"
    ]


def test_real_fusion_result_fires_exactly_three_graph_passes(ascend_fixtures):
    result = read_fusion_result(ascend_fixtures / "fusion_result.json")
    assert result.fired() == [
        Rule("ARefreshCubeC0FusionPass", Section.GRAPH),
        Rule("FixPipeAbilityProcessPass", Section.GRAPH),
        Rule("TransdataFz2FzgFusionPass", Section.GRAPH),
    ]
    assert len(result.rules()) == 14
    assert result.sections() == {Section.GRAPH}
    stats = result.graphs["session_and_graph_id_0_0"]
    assert stats[Rule("TransdataFz2FzgFusionPass", Section.GRAPH)].match_times == 3


def test_several_graphs_both_sections_and_string_counts(tmp_path, dumps):
    path = tmp_path / "fusion_result.json"
    path.write_text(
        dumps.fusion_result_text(
            {
                "session_and_graph_id_0_0": {
                    "graph_fusion": {"ConvBatchnormFusionPass": 0},
                    "ub_fusion": {"TbeEltwiseFusionPass": 2},
                },
                "session_and_graph_id_0_1": {"graph_fusion": {"ConvBatchnormFusionPass": 1}},
            }
        )
    )
    result = read_fusion_result(path)
    assert result.fired() == [
        Rule("ConvBatchnormFusionPass", Section.GRAPH),
        Rule("TbeEltwiseFusionPass", Section.UB),
    ]
    assert result.sections() == {Section.GRAPH, Section.UB}


def test_appended_objects_and_duplicate_graph_keys_keep_every_graph():
    first = '{"g": {"graph_fusion": {"A": {"match_times": "1", "effect_times": "1"}}}}'
    second = '{"g": {"ub_fusion": {"B": {"match_times": "1", "effect_times": "3"}}}}'
    result = parse_fusion_result(first + "\n" + second, "fusion_result.json")
    assert set(result.graphs) == {"g", "g#2"}
    assert {rule.name for rule in result.fired()} == {"A", "B"}


def test_integer_counts_are_accepted_and_unknown_keys_ignored():
    text = '{"g": {"graph_fusion": {"A": {"match_times": 2, "effect_times": 1, "x": "y"}}, "other": 1}}'
    assert parse_fusion_result(text, "f").fired() == [Rule("A", Section.GRAPH)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"g": {"graph_fusion": {\n"A": {"effect_times": "1",}}}}', "fusion_result.json:2:"),
        ("[1, 2]", "'[0]' must be an object"),
        ('"text"', "top level must be a JSON object"),
        ('{"g": 3}', "'g' must be an object"),
        ('{"g": {"graph_fusion": []}}', "'g.graph_fusion' must be an object"),
        ('{"g": {"graph_fusion": {"A": {"match_times": "1"}}}}', "'g.graph_fusion.A' has no 'effect_times'"),
        ('{"g": {"graph_fusion": {"A": {"effect_times": "one"}}}}', "'g.graph_fusion.A.effect_times' is 'one'"),
        ('{"g": {"graph_fusion": {"A": {"effect_times": "-1"}}}}', "negative"),
        ("   ", "empty file"),
    ],
)
def test_malformed_fusion_result_names_file_and_key(tmp_path, text, expected):
    path = tmp_path / "fusion_result.json"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        read_fusion_result(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert expected in message
    assert "\n" not in message


def test_missing_fusion_result_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="fusion_result.json not found"):
        read_fusion_result(tmp_path / "fusion_result.json")
