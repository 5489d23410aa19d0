"""``build_report`` and the summary on hand-made search states (fusion_dd/report/build.py).

A report must be derivable from the journal alone; these tests hand it a state
replayed from records and a search result, and check what it says about the
references, the culprits and the fix, each trial, the budget and the warnings.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
import yaml

from fusion_dd.config.settings import SearchConfig, load_config
from fusion_dd.report.build import (
    NAMED_SMALLEST,
    STATUS_TEXT,
    build_report,
    cost_lines,
    fix_verdict,
    smallest_failing_text,
    summary_lines,
)
from fusion_dd.core.rules import Rule, Section
from fusion_dd.core.scoring import Preconditions, Threshold
from fusion_dd.runner.early_stop import EarlyStopRule
from fusion_dd.search.culprits import CulpritSearch, CulpritSet
from fusion_dd.search.oracle import Outcome
from fusion_dd.store.state import encode_float, replay
from tests.support.states import cancelled, search_started, started, trial

A, B, C = (Rule(name, Section.GRAPH) for name in "ABC")
EVERYTHING = ["A", "B", "C"]
THRESHOLD = Threshold(baseline=0.9, tolerance=0.1, goal="max", all_on=0.5)  # fails below 0.8
OK = Preconditions(ok=True, status="ok", message="ready", threshold=THRESHOLD, warnings=("all-on is close",))


def make_config(tmp_path: Path, **score: object) -> SearchConfig:
    document = {
        "rules": {"GraphFusion": EVERYTHING, "unknown": "ignore"},
        "train": {"command": ["python3", "train.py"]},
        "metric": {"pattern": r"accuracy: (\S+)"},
        "search": {"budget": 20},
    }
    if score:
        document["score"] = score
    path = tmp_path / "fusion-dd.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_config(path)


def references(baseline: float = 0.9, all_on: float = 0.5) -> list[dict]:
    return [
        search_started(EVERYTHING),
        *trial("0001", [], baseline, role="baseline"),
        *trial("0002", EVERYTHING, all_on, role="all_on"),
    ]


def found_result() -> CulpritSearch:
    culprit = CulpritSet(rules=frozenset({C}), kind="independent", switched_off=frozenset({C}), reason="fails alone")
    return CulpritSearch(
        culprit_sets=[culprit], fix=frozenset({A, B}), fix_verified=True, fix_outcome=Outcome.PASS,
        smallest_failing=frozenset({C}),
    )


def test_a_found_report_names_the_culprits_their_backing_and_the_fix(tmp_path: Path) -> None:
    records = [
        *references(),
        *trial("0003", ["C"], 0.5),
        *trial("0004", ["C"], 0.85, repeat=1, role="repeat"),  # a repeat that disagreed
        *trial("0005", ["A", "B"], 0.9, switch_check="applied"),
    ]
    report = build_report(
        config=make_config(tmp_path), state=replay(records), status="found", preconditions=OK,
        result=found_result(), rounds=4,
    )
    assert report["status"] == "found" and report["message"] == STATUS_TEXT["found"]
    assert report["culprits"] == [{
        "rules": [{"name": "C", "section": "GraphFusion"}], "kind": "independent", "switched_off": ["C"],
        "reason": "fails alone", "trainings": 2, "support": 1,
    }]
    assert report["switched_off"] == ["C"] and report["fix_config"] == "fusion_switch.cfg"
    assert report["fix_verified"] is True and report["fix_verified_by"] == 1 and report["fix_trainings"] == 1
    assert report["smallest_failing"] == ["C"] and report["rounds"] == 4
    assert report["threshold"]["limit"] == pytest.approx(0.8) and report["threshold"]["goal"] == "max"
    assert report["baseline"] == 0.9 and report["all_on"] == 0.5
    assert report["trainings"] == 5 and report["budget"] == 20
    assert [entry["outcome"] for entry in report["trials"]] == ["pass", "fail", "fail", "pass", "pass"]
    assert report["switch_check"] == {"unverified": 4, "applied": 1}
    assert report["warnings"] == ["all-on is close"], "a check that applied once silences the switch warning"
    assert "continue_with" not in report


def test_the_pattern_printed_curves_are_read_with_is_reported_with_where_it_came_from(tmp_path: Path) -> None:
    records = [*references(), *trial("0003", ["A", "B"], 0.9)]
    plain = build_report(config=make_config(tmp_path), state=replay(records), status="found", preconditions=OK,
                         result=found_result(), rounds=2)
    assert "curves_from_output" not in plain["early_passes"]  # metrics files, or no curve
    config = make_config(tmp_path)
    config = dataclasses.replace(config, early_stop=EarlyStopRule(step_pattern=re.compile(r"step (\d+) loss (\S+)")))
    report = build_report(config=config, state=replay(records), status="found", preconditions=OK,
                          result=found_result(), rounds=2)
    assert report["early_passes"]["curves_from_output"] == {"step_pattern": r"step (\d+) loss (\S+)", "source": "config"}


def test_a_fix_that_passed_only_some_trainings_is_reported_as_not_two_agreeing(tmp_path: Path) -> None:
    records = [*references(), *trial("0003", ["A", "B"], 0.9), *trial("0004", ["A", "B"], 0.5, repeat=1)]
    result = CulpritSearch(
        culprit_sets=found_result().culprit_sets, fix=frozenset({A, B}), fix_verified=False, fix_outcome=Outcome.PASS,
    )
    report = build_report(config=make_config(tmp_path), state=replay(records), status="found", preconditions=OK,
                          result=result, rounds=None)
    assert report["fix_verified"] is False and (report["fix_verified_by"], report["fix_trainings"]) == (1, 2)
    assert report["fix_reason"].startswith("the fix configuration passed 1 of 2 training(s)")


def test_trials_that_were_cancelled_or_still_run_say_so_and_nan_is_a_string(tmp_path: Path) -> None:
    records = [
        *references(),
        *trial("0003", ["C"], encode_float(math.nan), kind="nonfinite"),
        started("0004", ["A"]), cancelled("0004", reason="not needed"),
        started("0005", ["B"]), cancelled("0005", was_launched=False),
        started("0006", ["A", "C"]),
    ]
    report = build_report(config=make_config(tmp_path), state=replay(records), status="interrupted",
                          preconditions=OK, result=None, rounds=None)
    entries = {entry["trial_id"]: entry for entry in report["trials"]}
    assert entries["0003"]["metric"] == "nan" and entries["0003"]["outcome"] == "fail"
    assert entries["0004"] == {**entries["0004"], "outcome": "cancelled", "reason": "not needed"}
    assert entries["0006"]["outcome"] == "running"
    assert report["trainings"] == 5, "a training that never launched costs nothing"
    assert report["continue_with"].startswith("fusion-dd resume --state-dir ")
    assert report["culprits"] == [] and report["message"] == STATUS_TEXT["interrupted"]


def test_budget_exhausted_suggests_a_larger_budget(tmp_path: Path) -> None:
    report = build_report(config=make_config(tmp_path), state=replay(references()), status="budget_exhausted",
                          preconditions=OK, result=None, rounds=2)
    assert report["continue_with"].endswith("--budget 30")  # 20 + max(10, 20 // 2)


def test_references_are_listed_in_repeat_order_and_given_metrics_win(tmp_path: Path) -> None:
    records = [
        search_started(EVERYTHING),
        *trial("0002", [], 0.88, repeat=1, role="baseline"),
        *trial("0001", [], 0.92, role="baseline"),
        *trial("0003", EVERYTHING, 0.5, role="all_on"),
    ]
    state = replay(records)
    plain = build_report(config=make_config(tmp_path), state=state, status="interrupted", preconditions=None,
                         result=None, rounds=None)
    assert plain["baseline_runs"] == [0.92, 0.88]
    assert plain["baseline"] == pytest.approx(0.9), "before a threshold is set, the runs' mean"
    assert plain["threshold"] is None and plain["all_on"] == 0.5
    given = build_report(config=make_config(tmp_path, baseline_metric=0.95, all_on_metric=0.3), state=state,
                         status="interrupted", preconditions=None, result=None, rounds=None)
    assert given["baseline"] == 0.95 and given["all_on"] == 0.3


def test_without_any_applied_switch_check_the_report_warns_and_flags_identical_references(tmp_path: Path) -> None:
    state = replay(references(baseline=0.7, all_on=0.7))
    report = build_report(config=make_config(tmp_path), state=state, status="no_failure", preconditions=None,
                          result=None, rounds=None)
    assert report["switch_check"] == {"unverified": 2}
    assert len(report["warnings"]) == 2 and report["warnings"][1].startswith("suspicious: the baseline and all-on")


def test_retired_devices_and_refusals_reach_the_warnings_and_the_message(tmp_path: Path) -> None:
    records = [*references(), {"type": "device_retired", "device": ["1"], "reason": "device 1 set aside"}]
    refused = Preconditions(ok=False, status="baseline_fails", message="the baseline is worse than 0.95",
                            threshold=None)
    report = build_report(config=make_config(tmp_path), state=replay(records), status="baseline_fails",
                          preconditions=refused, result=None, rounds=None)
    assert report["message"] == "the baseline is worse than 0.95"
    assert report["warnings"][-1] == "device 1 set aside"


def test_the_summary_tells_what_the_report_says(tmp_path: Path) -> None:
    records = [*references(), *trial("0003", ["C"], 0.5), *trial("0004", ["A", "B"], 0.9)]
    report = build_report(config=make_config(tmp_path), state=replay(records), status="found", preconditions=OK,
                          result=found_result(), rounds=3)
    lines = summary_lines(report, tmp_path / "state")
    text = "\n".join(lines)
    assert lines[0] == "fusion-dd: culprits found"
    assert "a configuration fails when its metric < 0.8 (tolerance 0.1, auto)" in text
    assert "trainings launched in all: 4 of budget 20, 3 rounds this session" in text
    assert "switched off: C; every other fusion stays on" in text
    assert "fix config (verified: trained and passes, 1 of 1 training(s) passed)" in text
    assert "  warning: all-on is close" in lines


def _found_report(tmp_path: Path) -> dict:
    records = [*references(), *trial("0003", ["C"], 0.5), *trial("0004", ["A", "B"], 0.9)]
    return build_report(config=make_config(tmp_path), state=replay(records), status="found", preconditions=OK,
                        result=found_result(), rounds=3)


def test_other_fixes_are_said_by_what_they_switch_off_instead(tmp_path: Path) -> None:
    fix = [f"Rule{index:03d}" for index in range(40)]
    others = [[*fix[1:], "Other1"], [*fix[2:], "Other1", "Other2"], *([[*fix[1:], f"More{k}"] for k in range(3)])]
    report = {**_found_report(tmp_path), "switched_off": fix, "other_fixes": others}
    line = next(line for line in summary_lines(report) if "a faster fix may exist" in line)
    assert "switching off Other1 instead of Rule000, or Other1, Other2 instead of Rule000, Rule001" in line
    assert "(and 2 more: report.json other_fixes)" in line
    assert "Rule039" not in line  # the rules every fix shares are not listed again


def test_alternatives_trained_for_speed_are_said_against_the_searched_fix(tmp_path: Path) -> None:
    fix = [f"Rule{index:03d}" for index in range(40)]
    report = {
        **_found_report(tmp_path), "switched_off": fix,
        "fix_alternatives": [
            {"switched_off": fix, "passed": True, "per_second": 90.0, "searched": True, "picked": False},
            {"switched_off": [*fix[1:], "Fast"], "passed": True, "per_second": 99.0, "picked": True},
        ],
    }  # fmt: skip
    lines = [line for line in summary_lines(report) if "fix.prefer: speed" in line]
    assert "the 40 rules of the search's fix: passes its full training, 90/s (the search chose it)" in lines[0]
    assert "switching off Fast instead of Rule000: passes its full training, 99/s <- handed over" in lines[1]


def test_the_fix_verdict_says_which_passing_trainings_stopped_early() -> None:
    full = {"fix_verified": True, "fix_verified_by": 2, "fix_trainings": 2, "fix_verified_early": 0}
    assert fix_verdict(full) == "verified: trained and passes, 2 of 2 training(s) passed"
    early = {**full, "fix_verified_early": 1}
    assert fix_verdict(early) == (
        "verified: trained and passes, 2 of 2 training(s) passed (1 to its end, 1 stopped early at the horizon)"
    )


def test_early_failures_are_called_backed_by_full_trainings_only_when_the_search_found_its_sets() -> None:
    early = {"early_passes": {"early_fails": 2, "culprits_proven_by": []}}
    found = "\n".join(cost_lines({**early, "status": "found"}))
    assert "every culprit set's failure is backed by full trainings" in found
    cut_off = "\n".join(cost_lines({**early, "status": "budget_exhausted"}))
    assert "backed by full trainings" not in cut_off
    assert "the search ended before a full training proved any culprit set" in cut_off


def test_one_round_is_said_in_the_singular(tmp_path: Path) -> None:
    records = [*references(), *trial("0003", ["C"], 0.5), *trial("0004", ["A", "B"], 0.9)]
    report = build_report(config=make_config(tmp_path), state=replay(records), status="found", preconditions=OK,
                          result=found_result(), rounds=1)
    assert "trainings launched in all: 4 of budget 20, 1 round this session" in "\n".join(summary_lines(report))


def test_a_search_cut_off_by_its_budget_says_nothing_of_a_fix_it_did_not_hand_over(tmp_path: Path) -> None:
    report = {
        **_found_report(tmp_path), "status": "budget_exhausted", "may_hide": ["A"], "other_fixes": [["B"]],
    }  # fmt: skip
    text = "\n".join(summary_lines(report))
    assert "the fix holds either way" not in text
    assert "a faster fix may exist" not in text
    found = "\n".join(summary_lines({**report, "status": "found"}))
    assert "the fix holds either way" in found and "a faster fix may exist" in found


def test_a_short_smallest_failing_configuration_is_named_a_long_one_counted() -> None:
    assert smallest_failing_text(["SoftmaxFusionPass"]) == "1 rule on: SoftmaxFusionPass"
    assert smallest_failing_text(["A", "B"]) == "2 rules on: A, B"
    many = [f"R{index}" for index in range(NAMED_SMALLEST + 1)]
    assert smallest_failing_text(many) == f"{len(many)} rules on"
