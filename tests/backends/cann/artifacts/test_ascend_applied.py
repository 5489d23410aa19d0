"""The check that a trial's switch file reached the compiler."""

from __future__ import annotations

from fusion_dd.backends.cann.artifacts import check_switch_applied, find_fusion_results, read_trial_results
from fusion_dd.backends.cann.artifacts.fusion_result import parse_fusion_result
from fusion_dd.core.rules import Rule, Section

A = Rule("ConvBatchnormFusionPass", Section.GRAPH)
B = Rule("TbeEltwiseFusionPass", Section.UB)


def result(dumps, graph=None, ub=None):
    sections = {}
    if graph is not None:
        sections["graph_fusion"] = graph
    if ub is not None:
        sections["ub_fusion"] = ub
    return parse_fusion_result(dumps.fusion_result_text({"g": sections}), "fusion_result.json")


def test_switched_off_rule_that_fired_means_the_switch_was_ignored(dumps):
    check = check_switch_applied([result(dumps, graph={A.name: 1}, ub={})], [A, B], enabled=[B])
    assert check.status == "ignored"
    assert check.fired_while_off == (A,)
    assert "ConvBatchnormFusionPass (GraphFusion) fired although switched off" in check.message
    assert "fusion_switch_file" in check.message and "cache" in check.message


def test_all_on_and_none_fired_is_suspicious(dumps):
    check = check_switch_applied([result(dumps, graph={}, ub={})], [A, B], enabled=[A, B])
    assert check.status == "ignored"
    assert "none fired" in check.message


def test_obeyed_switch_is_applied(dumps):
    assert check_switch_applied([result(dumps, graph={}, ub={B.name: 2})], [A, B], [B]).status == "applied"
    # A rule switched off in the wrong section proves nothing about the wiring.
    other = Rule(A.name, Section.UB)
    assert check_switch_applied([result(dumps, graph={A.name: 1}, ub={})], [other], []).status == "applied"


def test_without_result_or_coverage_the_switch_is_unverified(dumps):
    assert check_switch_applied([], [A], [A]).status == "unverified"
    only_graph = result(dumps, graph={})
    assert check_switch_applied([only_graph], [B], [B]).status == "unverified"


def test_trial_results_are_found_under_the_work_path(tmp_path, dumps):
    assert find_fusion_results(tmp_path / "absent") == []
    fe = tmp_path / "FE" / "4242"
    fe.mkdir(parents=True)
    (fe / "fusion_result.json").write_text(dumps.fusion_result_text({"g": {"graph_fusion": {A.name: 1}}}))
    read = read_trial_results(tmp_path)
    assert [r.fired() for r in read.results] == [[A]]
    assert read.unreadable == ()


def test_an_unreadable_result_is_named_with_its_reason_not_taken_for_no_file(tmp_path, dumps):
    (tmp_path / "fusion_result.json").write_text('{"session_and_graph_id_0_0": {"graph_fusion": ')
    read = read_trial_results(tmp_path)
    assert read.results == ()
    ((path, reason),) = read.unreadable
    assert path == str(tmp_path / "fusion_result.json") and "not valid JSON" in reason
    check = check_switch_applied(read.results, [A], [A], read.unreadable)
    assert check.status == "unverified"
    assert f"unreadable fusion_result.json {path}" in check.message and "not valid JSON" in check.message
    assert "left no fusion_result.json" not in check.message
    # A readable file that proves the switch was ignored still says so.
    (tmp_path / "FE").mkdir()
    (tmp_path / "FE" / "fusion_result.json").write_text(dumps.fusion_result_text({"g": {"graph_fusion": {A.name: 1}}}))
    read = read_trial_results(tmp_path)
    assert check_switch_applied(read.results, [A], [], read.unreadable).status == "ignored"
