"""fusion_result.json: the rules that changed the graph, and clear errors."""

from __future__ import annotations

import pytest

from fusion_dd.ascend import read_fusion_result
from fusion_dd.ascend.fusion_result import parse_fusion_result
from fusion_dd.errors import UsageError
from fusion_dd.rules import Rule, Section


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
        ("[1, 2]", "top level must be a JSON object"),
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
