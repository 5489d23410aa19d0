"""The HTML report: parsed, every plot present, and its data points checked against the journal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli import CULPRIT, GRAPH, UB, write_config
from tests.support.fake_training import cli_env, run_fusion_dd
from tests.support.html_page import PLOTS, check_html_report, group

HTML = {"FUSION_DD_HTML": "1"}  # the suite's CLI runs leave the page out (tests/support/fake_training.py)

SCREENSHOT = REPO / "scripts" / "screenshot_report.py"

@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One finished search with its page (a culprit and an interacting pair), for every test that reads one."""
    folder = tmp_path_factory.mktemp("searched")
    write_config(folder, "--culprits", CULPRIT, "--pair", f"{GRAPH[3]}+{UB[2]}", "--steps", "8")
    result = run_fusion_dd("search", cwd=folder, env=HTML)
    assert result.returncode == 0, result.stderr
    return folder, result


def test_search_writes_an_html_report_whose_plots_match_the_journal(searched, tmp_path):
    folder, result = searched
    state = folder / ".fusion-dd"
    assert "html report: .fusion-dd/report.html" in result.stdout
    page = check_html_report(state / "report.html", state)
    # Loss curves: the baseline, all-on, one probe per culprit set and the fix, each with the
    # steps its metrics file holds.
    data = json.loads(page.data_text)
    labels = [entry["label"] for entry in data["curves"]]
    assert labels[0].startswith("baseline") and labels[1].startswith("all on") and labels[-1].startswith("fix")
    assert sum(label.startswith("culprit") for label in labels) == 2
    for index, entry in enumerate(data["curves"]):
        metrics_file = state / "trials" / entry["trial_id"] / "metrics.jsonl"
        first: dict[float, float] = {}  # a step reported twice counts once, its first report
        for line in metrics_file.read_text().splitlines():
            first.setdefault(float(json.loads(line)["step"]), float(json.loads(line)["loss"]))
        expected = [[step, loss] for step, loss in sorted(first.items())]
        assert entry["points"] == expected
        drawn = group((state / "report.html").read_text(), f"loss-{index}")
        assert len(re.findall(r"\sL ", drawn)) == len(expected) - 1

    # fusion-dd report --html writes the same page anywhere.
    again = run_fusion_dd("report", "--html", str(tmp_path / "copy.html"), cwd=folder)
    assert again.returncode == 0, again.stderr
    check_html_report(tmp_path / "copy.html", state)


def test_fusion_dd_html_0_writes_no_page(tmp_path):
    write_config(tmp_path, "--culprits", "", budget=10)  # no failure: two trainings, then the report
    result = run_fusion_dd("search", cwd=tmp_path, env={"FUSION_DD_HTML": "0"})
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())["status"] == "no_failure"
    assert "html report" not in result.stdout and not (tmp_path / ".fusion-dd" / "report.html").exists()
    assert (tmp_path / ".fusion-dd" / "report.json").exists()


def test_a_refused_search_still_gets_a_page(tmp_path):
    write_config(tmp_path, "--culprits", "", budget=10)
    result = run_fusion_dd("search", cwd=tmp_path, env=HTML)
    assert result.returncode == 0, result.stderr
    state = tmp_path / ".fusion-dd"
    page = check_html_report(state / "report.html", state)
    assert json.loads((state / "report.json").read_text())["status"] == "no_failure"
    assert page.ids["status"]["class"] == "status bad" and "culprits" not in page.tables


def test_screenshot_script_renders_the_page_in_headless_chromium(searched, tmp_path):
    """scripts/screenshot_report.py: a PNG of a report page; skipped (exit 77) without a browser."""
    folder, _ = searched
    out = tmp_path / "shot.png"
    result = subprocess.run(
        [sys.executable, str(SCREENSHOT), str(folder / ".fusion-dd" / "report.html"), str(out), "--height", "900"],
        env=cli_env(), capture_output=True, text=True, timeout=240,
    )
    if result.returncode == 77:
        pytest.skip("no Chromium installed")
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 900)


def test_a_search_of_many_trials_draws_them_grouped_not_one_element_each(searched, monkeypatch):
    """Above ONE_ARTIST_PER_TRIAL_UP_TO trials the plots group trials (seconds, not minutes, at 5,000)."""
    from fusion_dd import html_report
    from fusion_dd.store.journal import read_records

    folder, _ = searched
    state = folder / ".fusion-dd"
    report = json.loads((state / "report.json").read_text())
    records = read_records(state / "journal.jsonl")
    single = html_report.render_html(report, records, state)
    monkeypatch.setattr(html_report, "ONE_ARTIST_PER_TRIAL_UP_TO", 2)
    grouped = html_report.render_html(report, records, state)
    assert report["trainings"] > 2
    for prefix in ("gantt-", "metric-", "path-"):
        assert f'id="{prefix}' in single and f'id="{prefix}' not in grouped
    # Every plot is still there, with every trial's bar in the timeline's bar collections.
    assert all(f'id="plot-{plot}"' in grouped for plot in PLOTS)
    timeline = grouped[grouped.index('id="plot-timeline"'):]
    timeline = timeline[: timeline.index("</svg>")]
    bars = sum(block.count("<path ") for block in re.findall(r'<g id="\w*Collection_\d+">(.*?)</g>', timeline, re.S))
    assert bars == len([r for r in records if r["type"] == "trial_started"])
