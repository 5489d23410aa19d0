"""The HTML report: parsed, every plot present, and its data points checked against the journal."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from state_support import finished, search_started, session_started, started

from fusion_dd import html_report
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


def well_formed(text: str) -> list[ET.Element]:
    """Every inline SVG of the page parses as XML (so its text was escaped); the parsed plots."""
    plots = re.findall(r"<svg .*?</svg>", text, re.S)
    assert plots
    return [ET.fromstring(plot) for plot in plots]


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
    assert re.findall(r"<script[^>]*>", text) == ['<script type="application/json" id="fusion-dd-data">'], "data only"
    well_formed(text)
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
    heights = [float(re.search(r' cy="([\d.]+)"', group(text, f"metric-{tid}")).group(1)) for _, tid in points]
    assert linear([value for value, _ in points], heights)
    # The Gantt bars: pixel widths are one scale of the journaled durations (bars drawn wider
    # than their time, at the minimum width of an instant training, left out).
    widths, durations = [], []
    for trial_id in ended:
        width = float(re.search(r'<rect x="[\d.]+" y="[\d.]+" width="([\d.]+)"', group(text, f"gantt-{trial_id}")).group(1))
        if width > html_report.MIN_BAR:
            widths.append(width)
            durations.append(ended[trial_id]["duration"])
    assert len(widths) >= 2
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


# -- pages built in-process from hand-made journals (milliseconds, no search) ---------------

ODD = 'Fuse<Add&Mul>"q\'Pass'  # a rule name that must be escaped everywhere it is shown


def synthetic(tmp_path: Path, count: int) -> tuple[dict, list[dict]]:
    """A report and a journal of ``count`` finished trials on 2 devices: passes, failures, a crash,
    stopped-early trainings and retries, one culprit named ``ODD`` with a loss curve."""
    records: list[dict] = [search_started([ODD, "B"]), session_started(budget=count + 10)]
    entries = []
    for index in range(1, count + 1):
        trial_id = f"{index:04d}"
        fails = index % 3 == 0
        crash = index == 5
        on = [ODD] if fails else ["B"]
        start = 1000.0 + index * 1.5
        records.append(started(trial_id, on, device=str(index % 2), time=start, attempt=2 if index % 11 == 0 else 1))
        extra = {"early_stop": {"step": 4}} if index % 7 == 0 else {}
        value = None if crash else (0.5 if fails else 0.9)
        records.append(finished(trial_id, value, kind="crash" if crash else "metric", **extra) | {"duration": 1.0 + index % 4})
        outcome = "unresolved" if crash else ("fail" if fails else "pass")
        entries.append({"trial_id": trial_id, "outcome": outcome, "metric": value, "kind": "crash" if crash else "metric"})
    probe = tmp_path / "trials" / "0003"
    probe.mkdir(parents=True, exist_ok=True)
    probe.joinpath("metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 4.0 / s}) + "\n" for s in range(1, 9)))
    report = {
        "status": "found", "message": f"culprit {ODD} found", "trials": entries, "trainings": count,
        "budget": count + 10, "threshold": {"limit": 0.8, "goal": "max"}, "baseline": 0.9, "baseline_spread": 0.01,
        "candidates": [{"name": ODD, "section": "GraphFusion"}, {"name": "B", "section": "GraphFusion"}],
        "culprits": [{"kind": "independent", "rules": [{"name": ODD, "section": "GraphFusion"}],
                      "switched_off": [ODD], "support": 2, "trainings": 2}],
    }
    return report, records


def test_a_page_is_deterministic_and_escapes_rule_names_in_plots_and_tooltips(tmp_path):
    report, records = synthetic(tmp_path, 40)
    text = html_report.render_html(report, records, tmp_path)
    assert text == html_report.render_html(report, records, tmp_path)  # byte for byte: diffable pages
    plots = well_formed(text)
    assert ODD not in text.replace(json.dumps(ODD)[1:-1], "")  # raw only inside the JSON data, as JSON
    escaped = 'Fuse&lt;Add&amp;Mul&gt;&quot;q&#x27;Pass'
    loss = group(text, "loss-0")
    assert f"culprit 1: {escaped} (#0003)" in loss
    assert any(f"{ODD}" in "".join(node.itertext()) for svg in plots for node in svg.iter())  # parsed back intact
    # Every trial has its tooltip, its bar, its metric marker and its point on the path.
    for index in range(1, 41):
        trial_id = f"{index:04d}"
        assert f"<title>#{trial_id} search" in group(text, f"gantt-{trial_id}")
        assert f'id="metric-{trial_id}"' in text and f'id="path-{trial_id}"' in text
    assert group(text, "gantt-0005").count("<rect") == 1 and group(text, "metric-0005").count("<path") == 1  # crash: an x
    assert 'fill="url(#fdd-hatch)"' in group(text, "gantt-0007") and 'stroke="#000000"' in group(text, "gantt-0011")
    assert text.count('<pattern id="fdd-hatch"') == 1


def test_a_search_of_many_trials_draws_them_grouped_not_one_element_each(tmp_path, monkeypatch):
    """Above ONE_ARTIST_PER_TRIAL_UP_TO trials, trials of one kind are one path: the page stays small."""
    count = 1200
    assert count > html_report.ONE_ARTIST_PER_TRIAL_UP_TO
    report, records = synthetic(tmp_path, count)
    text = html_report.render_html(report, records, tmp_path)
    well_formed(text)
    for prefix in ("gantt-", "metric-", "path-"):
        assert f'id="{prefix}' not in text
    assert all(f'id="plot-{plot}"' in text for plot in PLOTS)
    data = json.loads(text[text.index('id="fusion-dd-data">') + 20 : text.index("</script>")])
    assert len(data["trials"]) == count  # every plotted number is still in the data
    timeline = text[text.index('id="plot-timeline"') :]
    timeline = timeline[: timeline.index("</svg>")]
    # Far fewer elements than trials, and yet every training's bar is in them (one closed sub-path each).
    assert len(re.findall(r"<[a-z]", timeline)) < 100
    bars = re.findall(r'<path class="bars" d="([^"]+)"', timeline)
    assert sum(d.count("z") for d in bars) == count
    marks = text[text.index('id="plot-metrics"') :]
    assert len(re.findall(r"<[a-z]", marks[: marks.index("</svg>")])) < 100
    # Grouped, the plots take a fraction of the bytes of one element (and tooltip) per trial.
    plots = sum(len(plot) for plot in re.findall(r"<svg .*?</svg>", text, re.S))
    monkeypatch.setattr(html_report, "ONE_ARTIST_PER_TRIAL_UP_TO", 10 * count)
    single = html_report.render_html(report, records, tmp_path)
    assert f'id="gantt-{count:04d}"' in single
    assert plots * 4 < sum(len(plot) for plot in re.findall(r"<svg .*?</svg>", single, re.S))
