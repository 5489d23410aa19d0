"""The HTML report parsed, and checked against the journal and report.json it was drawn from."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

from fusion_dd.report import html as html_report

from tests.support.journal_configs import decoded

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

    started = {r["trial_id"]: r for r in decoded(records) if r["type"] == "trial_started"}
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
