"""The HTML report: parsed, every plot present, and its data points checked against the journal."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from test_cli import CULPRIT, GRAPH, UB, env, fusion_dd, write_config

HTML = {"FUSION_DD_HTML": "1"}  # the suite's CLI runs leave the page out (tests/fake_training.py)

SCREENSHOT = Path(__file__).resolve().parent.parent / "scripts" / "screenshot_report.py"

PLOTS = ("timeline", "metrics", "losses", "path", "budget")


class Page(HTMLParser):
    """Element ids, the text of each table cell by table, and the embedded data."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, dict[str, str | None]] = {}
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._script: str | None = None
        self.data_text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if attributes.get("id"):
            self.ids[str(attributes["id"])] = attributes
        if tag == "table":
            self._table = attributes.get("id") or f"table{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "script":
            self._script = attributes.get("id")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "script":
            self._script = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._script == "fusion-dd-data":
            self.data_text += data


def journal(state: Path) -> list[dict]:
    return [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines()]


def group(text: str, gid: str) -> str:
    start = text.index(f'<g id="{gid}">')
    return text[start : text.index("</g>", start)]


def linear(xs: list[float], ys: list[float], tolerance: float = 1e-3) -> bool:
    """Do the points (value, pixel) lie on one straight line (one axis scale)?"""
    pairs = sorted(zip(xs, ys))
    (x0, y0), (x1, y1) = pairs[0], pairs[-1]
    if x1 == x0:
        return all(abs(y - y0) < 0.5 for _, y in pairs)
    slope = (y1 - y0) / (x1 - x0)
    span = max(abs(y1 - y0), 1.0)
    return all(abs(y0 + slope * (x - x0) - y) <= tolerance * span + 0.01 for x, y in pairs)


def check_html_report(path: Path, state: Path) -> Page:
    """Every plot inline as SVG, nothing external, the culprit table and the data points as journaled."""
    text = path.read_text(encoding="utf-8")
    page = Page()
    page.feed(text)
    assert "<img" not in text and not re.search(r"<script[^>]+src=", text), "the page must be self-contained"
    assert not re.search(r"(href|src)=\"https?://", text)
    for name in PLOTS:
        assert f"plot-{name}" in page.ids, name
    assert text.count("<svg") >= 4
    report = json.loads((state / "report.json").read_text())
    records = journal(state)
    data = json.loads(page.data_text)

    # The culprit table: one row per culprit set, with its rules and what is switched off.
    if report["culprits"]:
        rows = page.tables["culprits"][1:]
        assert len(rows) == len(report["culprits"])
        for row, culprit in zip(rows, report["culprits"]):
            assert row[1] == culprit["kind"]
            for rule in culprit["rules"]:
                assert rule["name"] in row[2]
            assert row[3] == ", ".join(culprit["switched_off"])

    started = {r["trial_id"]: r for r in records if r["type"] == "trial_started"}
    ended = {r["trial_id"]: r for r in records if r["type"] == "trial_finished"}
    plotted = {trial["trial_id"]: trial for trial in data["trials"]}
    assert set(plotted) == set(started)
    assert [row[0] for row in page.tables["trials"][1:]] == list(started)
    for trial_id, record in started.items():
        trial = plotted[trial_id]
        assert trial["start"] == record["time"]
        assert trial["device"] == ",".join(record["device"])
        assert trial["size"] == len(record["config"])
        assert f"gantt-{trial_id}" in page.ids and f"path-{trial_id}" in page.ids
        if trial_id in ended:
            assert math.isclose(trial["end"] - trial["start"], ended[trial_id]["duration"], abs_tol=1e-6)
            value = ended[trial_id].get("value")
            if isinstance(value, (int, float)):
                assert trial["metric"] == value
                assert f"metric-{trial_id}" in page.ids

    # The metric markers sit on one axis scale: pixel height is a straight function of the value.
    points = [(t["metric"], t["trial_id"]) for t in data["trials"] if t["metric"] is not None and math.isfinite(t["metric"])]
    heights = [float(re.search(r' y="([\d.]+)"', group(text, f"metric-{tid}")).group(1)) for _, tid in points]
    assert linear([value for value, _ in points], heights)
    # The Gantt bars: pixel widths are one scale of the journaled durations.
    widths, durations = [], []
    for trial_id in ended:
        numbers = [float(x) for x in re.findall(r"[\d.]+", re.search(r' d="([^"]+)"', group(text, f"gantt-{trial_id}")).group(1))]
        widths.append(numbers[2] - numbers[0])
        durations.append(ended[trial_id]["duration"])
    assert linear([0.0, *durations], [0.0, *widths], tolerance=2e-3)
    # Budget: every device slot of the search has its utilisation bar.
    for device in data["devices"]:
        assert f"util-{device}" in page.ids
    assert data["trainings"] == report["trainings"] and data["budget"] == report["budget"]
    return page


def test_search_writes_an_html_report_whose_plots_match_the_journal(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, "--pair", f"{GRAPH[3]}+{UB[2]}", "--steps", "8")
    result = fusion_dd("search", cwd=tmp_path, env=HTML)
    assert result.returncode == 0, result.stderr
    state = tmp_path / ".fusion-dd"
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
    again = fusion_dd("report", "--html", str(tmp_path / "copy.html"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    check_html_report(tmp_path / "copy.html", state)


def test_fusion_dd_html_0_writes_no_page(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, budget=30)
    result = fusion_dd("search", cwd=tmp_path, env={"FUSION_DD_HTML": "0"})
    assert result.returncode == 0, result.stderr
    assert "html report" not in result.stdout and not (tmp_path / ".fusion-dd" / "report.html").exists()
    assert (tmp_path / ".fusion-dd" / "report.json").exists()


def test_a_refused_search_still_gets_a_page(tmp_path):
    write_config(tmp_path, "--culprits", "", budget=10)
    result = fusion_dd("search", cwd=tmp_path, env=HTML)
    assert result.returncode == 0, result.stderr
    state = tmp_path / ".fusion-dd"
    page = check_html_report(state / "report.html", state)
    assert json.loads((state / "report.json").read_text())["status"] == "no_failure"
    assert page.ids["status"]["class"] == "status bad" and "culprits" not in page.tables


def test_screenshot_script_renders_the_page_in_headless_chromium(tmp_path):
    """scripts/screenshot_report.py: a PNG of a report page; skipped (exit 77) without a browser."""
    write_config(tmp_path, "--culprits", CULPRIT, budget=30)
    assert fusion_dd("search", cwd=tmp_path, env=HTML).returncode == 0
    out = tmp_path / "shot.png"
    result = subprocess.run(
        [sys.executable, str(SCREENSHOT), str(tmp_path / ".fusion-dd" / "report.html"), str(out), "--height", "900"],
        env=env(), capture_output=True, text=True, timeout=240,
    )
    if result.returncode == 77:
        pytest.skip("no Chromium installed")
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 900)


def test_a_search_of_many_trials_draws_them_grouped_not_one_element_each(tmp_path, monkeypatch):
    """Above ONE_ARTIST_PER_TRIAL_UP_TO trials the plots group trials (seconds, not minutes, at 5,000)."""
    from fusion_dd import html_report
    from fusion_dd.store.journal import read_records

    write_config(tmp_path, "--culprits", CULPRIT, budget=30)
    assert fusion_dd("search", cwd=tmp_path).returncode == 0
    state = tmp_path / ".fusion-dd"
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
    # One compound path per group (id bars-N): one rectangle (one "M" subpath) per trial.
    paths = [d for block in re.findall(r'<g id="bars-\d+">(.*?)</g>', timeline, re.S) for d in re.findall(r' d="([^"]+)"', block)]
    assert sum(d.count("M ") for d in paths) == len([r for r in records if r["type"] == "trial_started"])
