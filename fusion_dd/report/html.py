"""The HTML report: one self-contained file with the answer on top and the search's plots.

Written at the end of every run (``report.html`` in the state directory), by
``fusion-dd report --html PATH`` and by ``fusion-dd demo``. Everything comes from
``report.json`` (the answer, every trial's verdict) and the journal (start and
end times, devices); the loss curves are read from the trials' metrics files
(or their output, when the curves were printed) when the page is built: a report
shows them, no decision rests on them.

The plots are SVG written here with the small toolkit of ``fusion_dd.report.svg`` and
inlined, so the page opens offline in any browser: no raster image, no script,
no dependency, and milliseconds instead of the second or two that matplotlib
cost at the end of every search. Each plotted trial is an SVG group (with a
tooltip) whose id names the trial (``gantt-0007``, ``metric-0007``, ``path-0007``), and the
plotted numbers are embedded once more as JSON (``<script type="application/json"
id="fusion-dd-data">``, data only, never executed) so that tests and programs can
check them against the journal.
"""

from __future__ import annotations

import html
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from . import svg
from ..store.state import LOCALIZE_ROLE, SearchState, TrialState, replay
from .build import device_seconds_text, smallest_failing_text, time_unit
from .trials import reference_words
from .build import HTML_NAME as HTML_NAME  # the page's name, where the report's other files are named

AXIS_GRAY = "#555555"

# Outcome -> (color, label); colorblind-friendly (Okabe-Ito).
OUTCOME_STYLE: dict[str, tuple[str, str]] = {
    "pass": ("#009E73", "pass"),
    "fail": ("#D55E00", "fail"),
    "unresolved": ("#E69F00", "unresolved (crash, timeout, no metric)"),
    "unevaluable": ("#F0E442", "cannot evaluate (the training exited 125)"),
    "cancelled": ("#999999", "cancelled"),
    "running": ("#0072B2", "running"),
    "unknown": ("#CC79A7", "finished before the threshold was known"),
    "dumped": ("#56B4E9", "dumped tensors for localization (not a verdict)"),
}


def _outcome(entry: dict[str, Any]) -> str:
    outcome = entry.get("outcome")
    if entry.get("kind") == "unevaluable":
        return "unevaluable"  # told apart from a crash: the training said so
    if outcome is None:
        return "unknown"
    return outcome if outcome in OUTCOME_STYLE else "unresolved"


def _trial_outcome(trial: TrialState, entry: dict[str, Any]) -> str:
    """A trial's class on the page: a localization training that ran has no verdict to show."""
    outcome = _outcome(entry) if entry else ("running" if trial.open else "unknown")
    return "dumped" if outcome == "unknown" and trial.role == LOCALIZE_ROLE else outcome


def _metric_fact(report: dict[str, Any], role: str) -> Any:
    """A reference's metric for the facts table: words where no training gave one, never ``None``."""
    return reference_words(report, role) or "no usable metric (see the trainings below)"


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number


# -- the data -------------------------------------------------------------------------


def _is_retry(before: TrialState | None) -> bool:
    """Whether a trial re-runs a training whose previous attempt finished without a result that stands.

    That is a retry (``train.retries``: a crash, a timeout). The full training
    after an early verdict, and a training cancelled by an interrupt and started
    again, are attempts of the same configuration too, but no retry.
    """
    return before is not None and before.finished is not None and not before.finished.get("early_stop")


def report_data(
    report: dict[str, Any], records: Iterable[dict[str, Any]], state_dir: Path, state: SearchState | None = None
) -> dict[str, Any]:
    """Every number the page plots, from the report and the journal (pure apart from the loss files).

    ``state``: the journal's records already replayed (the engine's own state at the
    end of a run), which spares replaying thousands of trials once more.
    """
    if state is None:
        state = replay(list(records))
    now = time.time()
    entries = {entry["trial_id"]: entry for entry in report.get("trials") or []}
    trials: list[dict[str, Any]] = []
    last_attempt: dict[Any, TrialState] = {}
    for trial in state.trials.values():
        entry = entries.get(trial.trial_id, {})
        before = last_attempt.get(trial.key)
        last_attempt[trial.key] = trial
        end = _end_time(trial, now)
        trials.append(
            {
                "trial_id": trial.trial_id,
                "role": trial.role,
                "size": len(trial.config),
                "device": ",".join(trial.device) or "?",
                "start": trial.started_at,
                "end": end,
                "outcome": _trial_outcome(trial, entry),
                "kind": entry.get("kind"),
                "metric": _float(entry.get("metric")),
                "attempt": trial.attempt,
                "retry": _is_retry(before),
                "early_stop": bool(trial.finished and trial.finished.get("early_stop")),
                "repeat": trial.repeat,
            }
        )
    starts = [trial["start"] for trial in trials]
    t0 = min(starts) if starts else (state.started_at or now)
    t1 = max((trial["end"] for trial in trials), default=t0)
    busy: dict[str, float] = {}
    for trial in trials:
        busy[trial["device"]] = busy.get(trial["device"], 0.0) + max(0.0, trial["end"] - trial["start"])
    devices = _devices(state, busy)
    wall = max(0.0, t1 - t0)
    capacity = len(devices) * wall
    threshold = report.get("threshold") or {}
    return {
        "status": report.get("status"),
        "t0": t0,
        "wall_seconds": wall,
        "trials": trials,
        "threshold": _float(threshold.get("limit")),
        "goal": threshold.get("goal", "max"),
        "baseline": _float(report.get("baseline")),
        "baseline_spread": _float(report.get("baseline_spread")),
        "budget": report.get("budget"),
        "trainings": report.get("trainings"),
        "devices": devices,
        "busy_seconds": busy,
        "utilisation": (sum(busy.values()) / capacity) if capacity > 0 else None,
        "curves": _curves(report, state, state_dir),
    }


def _end_time(trial: TrialState, now: float) -> float:
    """When a training ended (its journal record's time), or now while it runs."""
    record = trial.finished or trial.cancelled
    if record is None:
        return now
    if trial.finished is not None and isinstance(trial.finished.get("duration"), (int, float)):
        return trial.started_at + float(trial.finished["duration"])
    return float(record.get("time", trial.started_at))


def _devices(state: SearchState, busy: dict[str, float]) -> list[str]:
    """The device slots of the search: those of its sessions, plus any a trial ran on."""
    names: list[str] = []
    for session in state.sessions:
        for device in session.get("devices") or []:
            name = ",".join(str(part) for part in device)
            if name not in names:
                names.append(name)
    for name in busy:
        if name not in names:
            names.append(name)
    return names


def _curves(report: dict[str, Any], state: SearchState, state_dir: Path) -> list[dict[str, Any]]:
    """Loss curves of the baseline, all-on, each culprit set's probe and the fix, from the trials' files.

    A curve the trainings only printed is read from their output with the pattern
    the baseline's output named (``early_passes.curves_from_output``).
    """
    import re

    from ..runner.early_stop import read_curve

    named = ((report.get("early_passes") or {}).get("curves_from_output") or {}).get("step_pattern")
    try:
        printed = re.compile(named) if isinstance(named, str) else None
    except re.error:
        printed = None

    everything = frozenset(rule["name"] for rule in report.get("candidates") or [])
    wanted: list[tuple[str, frozenset[str]]] = [("baseline", frozenset()), ("all on", everything)]
    for index, culprit in enumerate(report.get("culprits") or [], start=1):
        names = frozenset(rule["name"] for rule in culprit.get("rules") or [])
        wanted.append((f"culprit {index}: " + " + ".join(sorted(names)), names))
    if report.get("switched_off"):
        wanted.append(("fix", everything - frozenset(report["switched_off"])))
    curves: list[dict[str, Any]] = []  # a list: the order (references first) survives JSON
    first_finished: dict[frozenset[str], TrialState] = {}  # one pass: a search may have hundreds of culprit sets
    for t in state.trials.values():
        if t.finished is not None:
            first_finished.setdefault(t.config, t)
    for label, names in wanted:
        trial = first_finished.get(names)
        if trial is None:
            continue
        try:
            curve = read_curve(state_dir / trial.trial_dir, printed)
        except (OSError, ValueError):
            curve = []
        if not curve:
            facts = trial.facts("loss_curve")
            if isinstance(facts.get("curve"), list):
                curve = [(int(step), float(loss)) for step, loss in facts["curve"]]
        if curve:
            curves.append(
                {
                    "label": f"{label} (#{trial.trial_id})",
                    "trial_id": trial.trial_id,
                    "points": [[float(step), float(loss)] for step, loss in curve],
                }
            )
    return curves


# -- the plots --------------------------------------------------------------------------

WIDTH = 1000  # pixels of every plot; the page scales them down to its width

#: Up to this many trials, every trial is an SVG group of its own, with an id naming it
#: (``gantt-0007``, ``metric-0007``, ``path-0007``) and a tooltip (the page's tests and a
#: reader's browser tools find each). Beyond it, trials of one kind are drawn as one
#: element (one path of many bars or markers), so that the page of a 5,000-trial search
#: stays small and quick to open.
ONE_ARTIST_PER_TRIAL_UP_TO = 500

#: The colors of the loss curves, in order (matplotlib's default cycle, "tab10").
CURVE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf")

LEGEND_CURVES = 12  # legend rows of the loss plot at most

MIN_BAR = 1.0  # pixels: an instant training is still a visible sliver in the timeline


def _outcome_entries(outcomes: Iterable[str], kind: str = "box") -> list[svg.Entry]:
    present = set(outcomes)
    return [svg.Entry(OUTCOME_STYLE[name][1], OUTCOME_STYLE[name][0], kind) for name in OUTCOME_STYLE if name in present]


def _tooltip(trial: dict[str, Any]) -> str:
    """What a reader's pointer shows over a trial's mark (an SVG ``<title>``)."""
    bits = [f"#{trial['trial_id']} {trial['role']}", trial["outcome"]]
    if trial["metric"] is not None:
        bits.append(f"metric {trial['metric']:.6g}")
    bits += [f"{trial['size']} rules on", f"device {trial['device']}", f"{trial['end'] - trial['start']:.1f} s"]
    if trial["early_stop"]:
        bits.append("stopped early")
    if trial["attempt"] > 1:
        bits.append(f"attempt {trial['attempt']}")
    return f"<title>{svg.esc(', '.join(bits))}</title>"


def _drawable(trial: dict[str, Any]) -> tuple[bool, bool]:
    """(has a mark in the metric plot, its metric is finite): cancelled or running trials without one have none."""
    value = trial["metric"]
    finite = value is not None and math.isfinite(value)
    return finite or trial["outcome"] not in ("cancelled", "running"), finite


def _gantt(data: dict[str, Any]) -> str:
    trials, devices = data["trials"], data["devices"] or ["?"]
    scale, unit = time_unit(data["wall_seconds"])
    span = data["wall_seconds"] / scale
    row_height = 28.0
    labels = [f"device {name}" for name in devices]
    entries = _outcome_entries(trial["outcome"] for trial in trials)
    if any(trial["early_stop"] for trial in trials):
        entries.append(svg.Entry("stopped early", "#bbbbbb", hatch=True))
    if any(trial["retry"] for trial in trials):
        entries.append(svg.Entry("a retry", "#bbbbbb", edge="#000000"))
    box, at, height = svg.layout(WIDTH, row_height * len(devices) + 8, y_labels=labels, ylabel=False, entries=entries)
    x = svg.Linear(*svg.padded(0.0, span or 1.0, 0.02))
    x.place(box.left, box.right)
    rows = {name: index for index, name in enumerate(devices)}

    def middle(device: str) -> float:
        return box.top + 4 + row_height * (rows.get(device, 0) + 0.5)

    bar = row_height * 0.7
    body: list[str] = []
    if len(trials) > ONE_ARTIST_PER_TRIAL_UP_TO:
        groups: dict[tuple[int, str, bool, bool], list[str]] = {}
        for trial in trials:
            left = x((trial["start"] - data["t0"]) / scale)
            width = max(x((trial["end"] - data["t0"]) / scale) - left, MIN_BAR)
            key = (rows.get(trial["device"], 0), trial["outcome"], trial["retry"], bool(trial["early_stop"]))
            groups.setdefault(key, []).append(
                f"M{svg.num(left)} {svg.num(middle(trial['device']) - bar / 2)}h{svg.num(width)}v{svg.num(bar)}h{svg.num(-width)}z"
            )
        for (row, outcome, retry, early), segments in sorted(groups.items()):
            d = "".join(segments)
            note = f"{len(segments)} trainings: {outcome} on device {devices[row] if row < len(devices) else '?'}"
            note += ", retries" if retry else ""
            note += ", stopped early" if early else ""
            edge = 'stroke="#000000" stroke-width="1.2"' if retry else 'stroke="none"'
            body.append(f'<path class="bars" d="{d}" fill="{OUTCOME_STYLE[outcome][0]}" {edge}><title>{svg.esc(note)}</title></path>')
            if early:
                body.append(f'<path d="{d}" fill="url(#{svg.HATCH_ID})" stroke="none"/>')
    else:
        for trial in trials:
            left = x((trial["start"] - data["t0"]) / scale)
            width = max(x((trial["end"] - data["t0"]) / scale) - left, MIN_BAR)
            top = middle(trial["device"]) - bar / 2
            retry = trial["retry"]
            edge = 'stroke="#000000" stroke-width="1.6"' if retry else 'stroke="#ffffff" stroke-width="0.5"'
            geometry = f'x="{svg.num(left)}" y="{svg.num(top)}" width="{svg.num(width)}" height="{svg.num(bar)}"'
            parts = [f'<g id="gantt-{svg.esc(trial["trial_id"])}">', _tooltip(trial),
                     f'<rect {geometry} fill="{OUTCOME_STYLE[trial["outcome"]][0]}" {edge}/>']
            if trial["early_stop"]:
                parts.append(f'<rect {geometry} fill="url(#{svg.HATCH_ID})"/>')
            if span and (trial["end"] - trial["start"]) / scale / span > 0.035:
                parts.append(svg.text(left + width / 2, middle(trial["device"]), trial["trial_id"].lstrip("0") or "0",
                                      size=8, anchor="middle", color="#ffffff"))
            parts.append("</g>")
            body.append("".join(parts))
    categories = [(middle(name), label) for name, label in zip(devices, labels)]
    frame = svg.axes(box, x, None, categories=categories,
                     xlabel=f"time since the first training ({unit}); hatched: stopped early; black edge: a retry")
    hatch = svg.hatch_pattern() if any(trial["early_stop"] for trial in trials) else ""
    return svg.figure(WIDTH, height, "Trainings per device", [frame, *body, svg.legend(*at, entries)], defs=hatch)


def _metrics(data: dict[str, Any]) -> str:
    trials = data["trials"]
    values = [trial["metric"] for trial in trials if trial["metric"] is not None and math.isfinite(trial["metric"])]
    low = min(values) if values else 0.0
    span = list(values)
    baseline, spread, threshold = data["baseline"], data["baseline_spread"], data["threshold"]
    entries: list[svg.Entry] = []
    if baseline is not None and spread:
        span += [baseline - spread, baseline + spread]
        entries.append(svg.Entry("baseline spread", "#56B4E9", "band"))
    if baseline is not None:
        span.append(baseline)
        entries.append(svg.Entry(f"baseline {baseline:.6g}", "#56B4E9", "line"))
    if threshold is not None:
        span.append(threshold)
        fails = "below" if data["goal"] == "max" else "above"
        entries.append(svg.Entry(f"threshold {threshold:.6g} (fails {fails})", "#D55E00", "line", dash="5 3"))
    span = [value for value in span if math.isfinite(value)]
    y = svg.Linear(*svg.padded(min(span, default=0.0), max(span, default=1.0)))
    drawn = [(order, trial) for order, trial in enumerate(trials, start=1) if _drawable(trial)[0]]
    entries += _outcome_entries((trial["outcome"] for _, trial in drawn), "marker")
    if any(not _drawable(trial)[1] for _, trial in drawn):
        entries.append(svg.Entry("no finite metric", AXIS_GRAY, "cross"))
    box, at, height = svg.layout(WIDTH, 240, y_labels=[label for _, label in y.ticks()[0]], ylabel=True, entries=entries)
    x = svg.Linear(*svg.padded(1.0, float(max(len(trials), 1))), integer=True)
    x.place(box.left, box.right)
    y.place(box.bottom, box.top)
    body: list[str] = []
    if baseline is not None and spread:
        top, bottom = y(baseline + spread), y(baseline - spread)
        body.append(f'<rect x="{svg.num(box.left)}" y="{svg.num(top)}" width="{svg.num(box.right - box.left)}" '
                    f'height="{svg.num(bottom - top)}" fill="#56B4E9" fill-opacity="0.2"/>')
    if baseline is not None:
        body.append(svg.line(box.left, y(baseline), box.right, y(baseline), "#56B4E9"))
    if threshold is not None:
        body.append(svg.line(box.left, y(threshold), box.right, y(threshold), "#D55E00", dash="5 3"))
    if len(trials) > ONE_ARTIST_PER_TRIAL_UP_TO:
        groups: dict[tuple[str, bool], dict[str, None]] = {}
        for order, trial in drawn:
            finite = _drawable(trial)[1]
            px, py = x(order), y(trial["metric"] if finite else low)
            mark = svg.dot_path(px, py) if finite else svg.cross_path(px, py, 2.5)
            groups.setdefault((trial["outcome"], finite), {})[mark] = None  # one mark per pixel spot
        for (outcome, finite), marks in sorted(groups.items()):
            color = OUTCOME_STYLE[outcome][0]
            pen = 'stroke-width="5" stroke-linecap="round"' if finite else 'stroke-width="1.2"'
            body.append(f'<path class="marks" d="{"".join(marks)}" fill="none" stroke="{color}" {pen}/>')
    else:
        for order, trial in drawn:
            finite = _drawable(trial)[1]
            px, py = x(order), y(trial["metric"] if finite else low)
            color = OUTCOME_STYLE[trial["outcome"]][0]
            mark = (f'<circle cx="{svg.num(px)}" cy="{svg.num(py)}" r="4" fill="{color}"/>' if finite else
                    f'<path d="{svg.cross_path(px, py, 4)}" stroke="{color}" stroke-width="1.6" fill="none"/>')
            body.append(f'<g id="metric-{svg.esc(trial["trial_id"])}">{_tooltip(trial)}{mark}</g>')
    frame = svg.axes(box, x, y, xlabel="trial (in start order); x: no finite metric (crash, NaN, timeout)", ylabel="metric")
    return svg.figure(WIDTH, height, "Metric of every trial against the threshold", [frame, *body, svg.legend(*at, entries)])


def _losses(data: dict[str, Any]) -> str | None:
    curves = [
        (entry, [(step, loss) for step, loss in entry["points"] if math.isfinite(step) and math.isfinite(loss)])
        for entry in data["curves"]
    ]
    if not any(points for _, points in curves):
        return None
    everything = [point for _, points in curves for point in points]
    positive = all(loss > 0 for _, loss in everything)
    steps = [step for step, _ in everything]
    losses = [loss for _, loss in everything]
    if positive:
        y: svg.Linear = svg.Log(*svg.log_padded(min(losses), max(losses)))
    else:
        y = svg.Linear(*svg.padded(min(losses), max(losses)))
    entries = []
    styles = []
    for index, (entry, _) in enumerate(curves):
        dash = None if index < 2 else ("2 3" if entry["label"].startswith("fix") else "6 4")
        color = CURVE_COLORS[index % len(CURVE_COLORS)]
        styles.append((color, dash))
        entries.append(svg.Entry(entry["label"], color, "line", dash=dash))
    if len(entries) > LEGEND_CURVES:  # hundreds of culprit sets: the rest are named by their tooltips
        entries = entries[: LEGEND_CURVES - 1] + [
            svg.Entry(f"and {len(entries) - LEGEND_CURVES + 1} more curves (point at one for its name)", "#999999", "line")
        ]
    box, at, height = svg.layout(WIDTH, 250, y_labels=[label for _, label in y.ticks()[0]], ylabel=True, entries=entries)
    x = svg.Linear(*svg.padded(min(steps), max(steps)))
    x.place(box.left, box.right)
    y.place(box.bottom, box.top)
    body = []
    for index, ((entry, points), (color, dash)) in enumerate(zip(curves, styles)):
        dashing = f' stroke-dasharray="{dash}"' if dash else ""
        d = svg.polyline_path((x(step), y(loss)) for step, loss in points)
        body.append(f'<g id="loss-{index}"><title>{svg.esc(entry["label"])}</title>'
                    f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.5"{dashing}/></g>')
    frame = svg.axes(box, x, y, xlabel="step", ylabel="loss" + (" (log scale)" if positive else ""))
    return svg.figure(WIDTH, height, "Loss curves", [frame, *body, svg.legend(*at, entries)])


def _path(data: dict[str, Any]) -> str:
    trials = data["trials"]
    scale, unit = time_unit(data["wall_seconds"])
    smallest: list[tuple[float, int]] = []
    best: int | None = None
    for trial in sorted(trials, key=lambda t: t["end"]):
        if trial["outcome"] == "fail" and (best is None or trial["size"] < best):
            best = trial["size"]
            smallest.append(((trial["end"] - data["t0"]) / scale, best))
    entries = _outcome_entries((trial["outcome"] for trial in trials), "marker")
    if smallest:
        entries.append(svg.Entry("smallest failing so far", "#D55E00", "line"))
    top = max((trial["size"] for trial in trials), default=1)
    y = svg.Linear(*svg.padded(0.0, float(max(top, 1))), integer=True)
    box, at, height = svg.layout(WIDTH, 240, y_labels=[label for _, label in y.ticks()[0]], ylabel=True, entries=entries)
    end = data["wall_seconds"] / scale
    x = svg.Linear(*svg.padded(0.0, max(end, smallest[-1][0] if smallest else 0.0) or 1.0))
    x.place(box.left, box.right)
    y.place(box.bottom, box.top)
    body: list[str] = []
    if smallest:
        points: list[tuple[float, float]] = []
        for index, (when, size) in enumerate(smallest):
            if index:
                points.append((x(when), y(smallest[index - 1][1])))
            points.append((x(when), y(size)))
        points.append((x(max(end, smallest[-1][0])), y(smallest[-1][1])))
        body.append(f'<path id="smallest-failing" d="{svg.polyline_path(points)}" fill="none" stroke="#D55E00" stroke-width="1.2"/>')
    if len(trials) > ONE_ARTIST_PER_TRIAL_UP_TO:
        groups: dict[str, dict[str, None]] = {}
        for trial in trials:
            px, py = x((trial["start"] - data["t0"]) / scale), y(trial["size"])
            groups.setdefault(trial["outcome"], {})[svg.dot_path(px, py)] = None  # one mark per pixel spot
        for outcome, marks in sorted(groups.items()):
            body.append(f'<path class="marks" d="{"".join(marks)}" fill="none" stroke="{OUTCOME_STYLE[outcome][0]}" '
                        'stroke-width="5" stroke-linecap="round"/>')
    else:
        for trial in trials:
            px, py = x((trial["start"] - data["t0"]) / scale), y(trial["size"])
            body.append(f'<g id="path-{svg.esc(trial["trial_id"])}">{_tooltip(trial)}<circle cx="{svg.num(px)}" '
                        f'cy="{svg.num(py)}" r="4" fill="{OUTCOME_STYLE[trial["outcome"]][0]}"/></g>')
    frame = svg.axes(box, x, y, xlabel=f"training start ({unit} since the first)", ylabel="rules switched on")
    return svg.figure(WIDTH, height, "Path of the search", [frame, *body, svg.legend(*at, entries)])


def _budget(data: dict[str, Any]) -> str:
    scale, unit = time_unit(data["wall_seconds"])
    end = data["wall_seconds"] / scale
    starts = sorted((trial["start"] - data["t0"]) / scale for trial in data["trials"])
    entries = [svg.Entry("trainings started", "#0072B2", "line")]
    if data["budget"]:
        entries.append(svg.Entry(f"budget {data['budget']}", "#000000", "line", dash="5 3"))
    most = max(len(starts), int(data["budget"] or 0), 1)
    y = svg.Linear(*svg.padded(0.0, float(most)), integer=True)
    left = svg.Box(30 + max(svg.text_width(label) for _, label in y.ticks()[0]) + 10, 28, 540, 228)
    x = svg.Linear(*svg.padded(0.0, end or 1.0))
    x.place(left.left, left.right)
    y.place(left.bottom, left.top)
    body = [svg.axes(left, x, y, xlabel=f"time ({unit})", ylabel="trainings")]
    if data["budget"]:
        body.append(svg.line(left.left, y(data["budget"]), left.right, y(data["budget"]), "#000000", dash="5 3"))
    if starts:
        # One step per pixel column at most: a search of thousands of trainings stays a short path.
        points: list[tuple[float, float]] = []
        count = 0
        for start in starts:
            px = round(x(start) * 2) / 2
            if not points or points[-1][0] != px:
                points.append((px, y(count)))
            count += 1
            points.append((px, y(count)))
            if len(points) >= 3 and points[-2][0] == px and points[-3][0] == px:
                del points[-2]
        points.append((x(max(end, starts[-1])), y(count)))
        body.append(f'<path id="trainings-started" d="{svg.polyline_path(points)}" fill="none" stroke="#0072B2" stroke-width="1.5"/>')
    body.append(svg.legend(left.right + 14, left.top, entries))
    devices = data["devices"] or ["?"]
    wall = data["wall_seconds"] or 1.0
    fractions = [data["busy_seconds"].get(name, 0.0) / wall for name in devices]
    right = svg.Box(770, 28, WIDTH - 16, 228)
    share = svg.Linear(0.0, 1.05)
    share.place(right.bottom, right.top)
    column = (right.right - right.left) / len(devices)
    columns = [(right.left + column * (index + 0.5), f"dev {name}") for index, name in enumerate(devices)]
    overall = data["utilisation"]
    body.append(svg.axes(right, None, share, xcategories=columns, ylabel="busy / wall time", ylabel_x=right.left - 44,
                         title=f"utilisation {overall:.0%}" if overall is not None else "utilisation -"))
    for index, (name, fraction) in enumerate(zip(devices, fractions)):
        middle = right.left + column * (index + 0.5)
        top = share(min(fraction, 1.05))
        body.append(f'<g id="util-{svg.esc(name)}"><title>{svg.esc(f"device {name}: busy {fraction:.0%} of the wall time")}</title>'
                    f'<rect x="{svg.num(middle - column * 0.4)}" y="{svg.num(top)}" width="{svg.num(column * 0.8)}" '
                    f'height="{svg.num(right.bottom - top)}" fill="#0072B2"/></g>')
    return svg.figure(WIDTH, 272, "Budget and device utilisation", body)


# -- the page -----------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ddd; }
.status { font-size: 1.15em; padding: 0.6em 0.9em; border-radius: 6px; background: #f1f6f4; }
.status.bad { background: #fbeee6; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.6em 0; }
td, th { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 0.6em 0; } figure svg { max-width: 100%; height: auto; }
.note { color: #555; font-size: 0.9em; } code { background: #f5f5f5; padding: 0 0.2em; }
details { margin: 0.5em 0; } .where { font-size: 0.9em; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _cost_facts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The search's cost in accelerator time and its early passes, for the facts table."""
    cost = report.get("cost") or {}
    facts: list[tuple[str, str]] = []
    if cost.get("training_steps") is not None:
        text = f"{cost['training_steps']:,} training-steps"
        if cost.get("full_training_equivalents") is not None:
            text += f" (= {cost['full_training_equivalents']:g} full trainings)"
        facts.append(("cost", f"{text}, {device_seconds_text(cost)}"))
    early = report.get("early_passes") or {}
    if early.get("trainings"):
        text = f"{early['trainings']} training(s) stopped inside the baseline's band and counted as passes"
        if early.get("fix_proven_by"):
            text += f"; fix proven by full training #{', #'.join(early['fix_proven_by'])}"
        if early.get("revised"):
            text += "; revised after a full training contradicted them"
        facts.append(("early passes", text))
    speed = report.get("speed") or {}
    if report.get("status") == "found" and speed.get("fix_vs_all_on") is not None:
        text = f"{speed['fix_vs_all_on']:.2f}x the speed of all fusion on ({speed['fix']['trainings']} training(s))"
        if speed.get("baseline_vs_all_on") is not None:
            text += f"; all off {speed['baseline_vs_all_on']:.2f}x ({speed['baseline']['trainings']} training(s))"
        facts.append((f"the fix's speed ({speed.get('unit')})", text))
    return facts


def _answer(report: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    good = report.get("status") == "found"
    parts.append(f'<p class="status{"" if good else " bad"}" id="status">{_e(report.get("message", report.get("status")))}</p>')
    facts = [
        ("status", report.get("status")),
        ("trainings launched", f"{report.get('trainings')} of budget {report.get('budget')}"),
        *_cost_facts(report),
        ("strategy", report.get("strategy")),
        (
            "baseline (required passes on, the rest off)" if (report.get("required") or {}).get("rules")
            else "baseline (all candidates off)",
            _metric_fact(report, "baseline"),
        ),
        ("all candidates on", _metric_fact(report, "all_on")),
    ]
    threshold = report.get("threshold")
    if threshold:
        comparison = "<" if threshold.get("goal") == "max" else ">"
        limit = _float(threshold.get("limit"))
        shown = f"{limit:.6g}" if limit is not None else "-"
        setting = threshold.get("tolerance_setting")
        facts.append(("fails when the metric is", f"{comparison} {shown}" + (f" (tolerance {setting})" if setting is not None else "")))
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts if v is not None)  # unknown: left out
    parts.append(f'<table id="facts">{rows}</table>')
    culprits = report.get("culprits") or []
    if culprits:
        rows = []
        for index, culprit in enumerate(culprits, start=1):
            rules = ", ".join(f"{rule['name']} ({rule.get('section', '')})" for rule in culprit.get("rules", []))
            where = _localization(culprit)
            rows.append(
                f"<tr><td class=num>{index}</td><td>{_e(culprit.get('kind'))}</td><td>{_e(rules)}</td>"
                f"<td>{_e(', '.join(culprit.get('switched_off', [])))}</td>"
                f"<td class=num>{_e(culprit.get('support'))} of {_e(culprit.get('trainings'))}</td>"
                f"<td>{_e(culprit.get('reason', ''))}{where}</td></tr>"
            )
        parts.append(
            '<table id="culprits"><tr><th>#</th><th>kind</th><th>rules</th><th>switch off</th>'
            "<th>failing trainings</th><th>why / where</th></tr>" + "".join(rows) + "</table>"
        )
        from .localize import incomplete_note

        note = incomplete_note(report)
        if note is not None:
            parts.append(f'<p class="note" id="localization">{_e(note)}</p>')
    required = report.get("required") or {}
    if required.get("rules"):
        tail = "\n".join(required.get("log_tail") or [])
        parts.append(
            f'<p id="required"><b>Required</b> (not culprits): <code>{_e(", ".join(required["rules"]))}</code> must stay on '
            f"for the training to run: with every candidate off it ended as {_e(required.get('reason') or 'a crash')} "
            f"(#{_e(required.get('trial_id'))}); kept on in every configuration and in the fix.</p>"
            + (f"<pre>{_e(tail)}</pre>" if tail else "")
        )
    if report.get("status") == "found":
        from .build import fix_statement, fix_verdict

        parts.append(
            f'<p id="fix"><b>Fix</b> (<code>{_e(report.get("fix_config"))}</code>, {_e(fix_verdict(report))}): '
            f"{_e(fix_statement(report))}.</p>"
        )
    elif report.get("smallest_failing"):
        parts.append(f"<p>Smallest failing configuration so far: {_e(smallest_failing_text(report['smallest_failing']))}.</p>")
    if report.get("continue_with"):
        parts.append(f"<p>Continue with <code>{_e(report['continue_with'])}</code></p>")
    for warning in report.get("warnings") or []:
        parts.append(f'<p class="note">warning: {_e(warning)}</p>')
    return parts


def _localization(culprit: dict[str, Any]) -> str:
    """Where a culprit acted, in the summary's words: the layers it fused (graph dumps) and the op it broke."""
    from .localize import culprit_sentence

    bits: list[str] = []
    for name, found in (culprit.get("where") or {}).items():
        layers = list(found.get("layers") or [])
        shown = ", ".join(layers[:8]) or "no fused op in the graph dumps"
        more = f" (+{len(layers) - 8} more)" if len(layers) > 8 else ""
        bits.append(f"{name} fused layers: {shown}{more}")
    sentence = culprit_sentence(culprit)
    if sentence is not None:
        bits.append(sentence)
    compare = (culprit.get("localization") or {}).get("compare") if isinstance(culprit.get("localization"), dict) else None
    if compare:
        bits.append(f"the two dumps compared: {compare}/ in the state directory")
    return "".join(f'<br><span class="where">{_e(bit)}</span>' for bit in bits)


def _guide(report: dict[str, Any]) -> list[str]:
    """The guide's ranking as a table: the suspects asked first and why, the culprits marked."""
    from ..analysis.guide import SHOWN, ranking_rows

    guide = report.get("guide")
    if not guide:
        return []
    culprits = [[rule["name"] for rule in culprit.get("rules") or []] for culprit in report.get("culprits") or []]
    rows = ranking_rows(guide, culprits)
    if not rows:
        reason = (guide.get("dumps") or {}).get("reason") or "no suspect"
        return [f'<p class="note" id="guide">No guide used: {_e(reason)}.</p>']
    body = "".join(
        f"<tr><td class=num>{row['rank']}</td><td>{_e(row['rule'])}</td><td>{_e(row['why'])}</td>"
        f"<td>{'culprit' if row['culprit'] else ''}</td></tr>"
        for row in rows
    )
    more = len(guide.get("ranking") or []) - SHOWN
    note = f'<p class="note">{more} more suspect(s) in report.json (guide.ranking).</p>' if more > 0 else ""
    return [
        '<h2 id="h-guide">Suspects, as the guide ranked them</h2>',
        '<table id="guide"><tr><th>#</th><th>rule</th><th>why suspected</th><th>found</th></tr>' + body + "</table>",
        note,
    ]


def _trial_table(data: dict[str, Any]) -> str:
    rows = []
    for trial in data["trials"]:
        metric = "" if trial["metric"] is None else f"{trial['metric']:.6g}"
        rows.append(
            f'<tr id="trial-{_e(trial["trial_id"])}"><td>{_e(trial["trial_id"])}</td><td>{_e(trial["role"])}</td>'
            f"<td class=num>{trial['size']}</td><td>{_e(trial['device'])}</td>"
            f"<td class=num>{trial['end'] - trial['start']:.1f}</td><td>{_e(trial['outcome'])}</td>"
            f"<td>{_e(trial['kind'] or '')}</td><td class=num>{_e(metric)}</td>"
            f"<td>{'early stop' if trial['early_stop'] else ''}{' retry' if trial['retry'] else ''}</td></tr>"
        )
    return (
        '<table id="trials"><tr><th>trial</th><th>role</th><th>rules on</th><th>device</th><th>seconds</th>'
        "<th>outcome</th><th>kind</th><th>metric</th><th></th></tr>" + "".join(rows) + "</table>"
    )


def render_html(
    report: dict[str, Any], records: Iterable[dict[str, Any]], state_dir: Path, state: SearchState | None = None
) -> str:
    """The whole page as text (``state``: see :func:`report_data`)."""
    data = report_data(report, records, state_dir, state)
    utilisation = data["utilisation"]
    plots: list[tuple[str, str, str | None, str]] = [
        ("timeline", "Trainings per device", _gantt(data),
         "Each bar is one training, colored by its verdict."),
        ("metrics", "Metric of every trial against the threshold", _metrics(data),
         "Trials in start order; the band is the baseline's run-to-run spread when it was measured."),
        ("losses", "Loss curves", _losses(data),
         "From the trials' metrics files: the baseline, all candidates on, one probe of each culprit set, the fix."),
        ("path", "Path of the search", _path(data),
         "Configuration size of each training over time; the line is the smallest failing configuration known."),
        ("budget", "Budget and device utilisation", _budget(data),
         f"{data['trainings']} of {data['budget']} trainings used; devices busy "
         + (f"{utilisation:.0%}" if utilisation is not None else "-") + " of devices x wall time."),
    ]
    body = ["<h1>fusion-dd report</h1>", *_answer(report), *_guide(report)]
    for ident, title, picture, note in plots:
        body.append(f'<h2 id="h-{ident}">{_e(title)}</h2>')
        if picture is None:
            advice = (report.get("cost") or {}).get("steps_advice")
            why = f"; {_e(advice)}" if advice else ""
            body.append(
                f'<p class="note" id="plot-{ident}">No loss curves: the trials left no metrics.jsonl with steps and losses{why}.</p>'
            )
            continue
        body.append(f'<figure class="plot" id="plot-{ident}">{picture}<figcaption class="note">{_e(note)}</figcaption></figure>')
    body.append("<h2>Trials</h2>")
    body.append(_trial_table(data))
    payload = json.dumps(data, sort_keys=True, default=str).replace("</", "<\\/")
    title = f"fusion-dd report: {report.get('message', '')}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(body)
        + f'\n<script type="application/json" id="fusion-dd-data">{payload}</script>\n</body></html>\n'
    )


def write_html(
    path: Path, report: dict[str, Any], records: Sequence[dict[str, Any]], state_dir: Path, state: SearchState | None = None
) -> Path:
    """Write the page atomically (a browser never sees half a file); ``state``: see :func:`report_data`."""
    text = render_html(report, records, state_dir, state)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
