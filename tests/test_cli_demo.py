"""`fusion-dd demo` end to end: the built-in training, the real engine, real subprocesses."""

from __future__ import annotations

import json

from fusion_dd.demo import DEFAULT_SCENARIO, QUICK_SCENARIO, SCENARIOS
from test_cli import fusion_dd
from test_html_report import check_html_report


def planted(name: str) -> list[set[str]]:
    return sorted((set(culprit) for culprit in SCENARIOS[name].planted), key=sorted)


def found(report: dict) -> list[set[str]]:
    return sorted(({rule["name"] for rule in culprit["rules"]} for culprit in report["culprits"]), key=sorted)


def test_quick_scenario_finds_exactly_the_planted_rule(tmp_path):
    result = fusion_dd("demo", "--scenario", QUICK_SCENARIO, "--jobs", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd-demo" / "report.json").read_text())
    assert report["status"] == "found"
    assert found(report) == planted(QUICK_SCENARIO)
    assert report["fix_verified"] is True
    # The demo writes fusion_result.json like CANN; with every candidate off it reports
    # no section at all, so only that baseline run stays unverified.
    assert report["switch_check"] == {"applied": report["trainings"] - 1, "unverified": 1}
    assert "all planted culprit sets found" in result.stdout
    assert (tmp_path / ".fusion-dd-demo" / "fusion-dd.yaml").exists()


def test_default_scenario_finds_every_culprit_set_and_verifies_the_fix(tmp_path):
    result = fusion_dd("demo", "--state-dir", "state", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "state" / "report.json").read_text())
    assert found(report) == planted(DEFAULT_SCENARIO)
    assert {culprit["kind"] for culprit in report["culprits"]} == {"independent", "interacting"}
    assert report["fix_verified"] is True
    # The demo writes the HTML report too and says where.
    assert "html report: state/report.html" in result.stdout
    page = check_html_report(tmp_path / "state" / "report.html", tmp_path / "state")
    assert len(page.tables["culprits"]) == 1 + len(report["culprits"])


def test_list_scenarios_and_bad_scenario(tmp_path):
    listed = fusion_dd("demo", "--list-scenarios", cwd=tmp_path)
    assert listed.returncode == 0
    for name in SCENARIOS:
        assert name in listed.stdout
    bad = fusion_dd("demo", "--scenario", "nope", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown scenario 'nope'" in bad.stderr
