"""The HTML report: one self-contained file with the answer on top and the search's plots.

Written at the end of every run (``report.html`` in the state directory), by
``fusion-dd report --html PATH`` and by ``fusion-dd demo``. Everything comes from
``report.json`` (the answer, every trial's verdict) and the journal (start and
end times, devices); the loss curves are read from the trials' metrics files
when the page is built: a report shows them, no decision rests on them.

The plots are matplotlib figures saved as SVG and inlined, so the page opens
offline in any browser: no raster image, no script. matplotlib is imported here
only, lazily, so that the CLI starts fast. Each plotted trial is an SVG group
whose id names the trial (``gantt-0007``, ``metric-0007``, ``path-0007``), and the
plotted numbers are embedded once more as JSON (``<script type="application/json"
id="fusion-dd-data">``, data only, never executed) so that tests and programs can
check them against the journal.
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .store.state import SearchState, TrialState, replay

HTML_NAME = "report.html"

# Outcome -> (color, label); colorblind-friendly (Okabe-Ito).
OUTCOME_STYLE: dict[str, tuple[str, str]] = {
    "pass": ("#009E73", "pass"),
    "fail": ("#D55E00", "fail"),
    "unresolved": ("#E69F00", "unresolved (crash, timeout, no metric)"),
    "cancelled": ("#999999", "cancelled"),
    "running": ("#0072B2", "running"),
    "unknown": ("#CC79A7", "finished before the threshold was known"),
}


def _outcome(entry: dict[str, Any]) -> str:
    outcome = entry.get("outcome")
    if outcome is None:
        return "unknown"
    return outcome if outcome in OUTCOME_STYLE else "unresolved"


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number


# -- the data -------------------------------------------------------------------------


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
    for trial in state.trials.values():
        entry = entries.get(trial.trial_id, {})
        end = _end_time(trial, now)
        trials.append(
            {
                "trial_id": trial.trial_id,
                "role": trial.role,
                "size": len(trial.config),
                "device": ",".join(trial.device) or "?",
                "start": trial.started_at,
                "end": end,
                "outcome": _outcome(entry) if entry else ("running" if trial.open else "unknown"),
                "kind": entry.get("kind"),
                "metric": _float(entry.get("metric")),
                "attempt": trial.attempt,
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
    """Loss curves of the baseline, all-on, each culprit set's probe and the fix, from the trials' files."""
    from .runner.early_stop import read_curve

    everything = frozenset(rule["name"] for rule in report.get("candidates") or [])
    wanted: list[tuple[str, frozenset[str]]] = [("baseline", frozenset()), ("all on", everything)]
    for index, culprit in enumerate(report.get("culprits") or [], start=1):
        names = frozenset(rule["name"] for rule in culprit.get("rules") or [])
        wanted.append((f"culprit {index}: " + " + ".join(sorted(names)), names))
    if report.get("switched_off"):
        wanted.append(("fix", everything - frozenset(report["switched_off"])))
    first_finished: dict[frozenset[str], TrialState] = {}  # one pass: a search has thousands of trials
    for candidate in state.trials.values():
        if candidate.finished is not None:
            first_finished.setdefault(candidate.config, candidate)
    curves: list[dict[str, Any]] = []  # a list: the order (references first) survives JSON
    for label, names in wanted:
        trial = first_finished.get(names)
        if trial is None:
            continue
        try:
            curve = read_curve(state_dir / trial.trial_dir)
        except (OSError, ValueError):
            curve = []
        if not curve:
            facts = ((trial.finished or {}).get("artifacts") or {}).get("loss_curve")
            if isinstance(facts, dict) and isinstance(facts.get("curve"), list):
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


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 3 * 3600:
        return 3600.0, "h"
    if seconds >= 600:
        return 60.0, "min"
    return 1.0, "s"


def _svg(figure: Any) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _legend(ax: Any, outcomes: Iterable[str]) -> None:
    from matplotlib.patches import Patch

    present = set(outcomes)
    shown = [name for name in OUTCOME_STYLE if name in present]
    if shown:
        ax.legend(
            handles=[Patch(color=OUTCOME_STYLE[name][0], label=OUTCOME_STYLE[name][1]) for name in shown],
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=8,
            frameon=False,
        )


#: Up to this many trials, every trial is an SVG element of its own, with an id naming it
#: (``gantt-0007``, ``metric-0007``, ``path-0007``: the page's tests and a reader's
#: browser tools find each). Beyond it, trials of one kind are drawn as one element:
#: matplotlib spends milliseconds per element, which made the page of a 5,000-trial
#: search cost half a minute.
ONE_ARTIST_PER_TRIAL_UP_TO = 500

#: Beyond ONE_ARTIST_PER_TRIAL_UP_TO trials, a marker is left out where one of the same
#: kind is already drawn within half a marker of it (on a grid of this many cells across
#: the data's range: about half a 4-point marker on the page's 10-inch plots): at 5,000
#: trials most markers only cover others, and each costs the SVG writer as much as a bar.
THIN_COLUMNS, THIN_ROWS = 280, 100


def _thin(xs: Sequence[float], ys: Sequence[float], coarser: float = 1.0) -> tuple[list[float], list[float]]:
    """The points that are not drawn over by an earlier one (one per cell of a THIN_COLUMNS x THIN_ROWS grid).

    ``coarser``: cells this many times as large, for markers this many times as large.
    """
    if not xs:
        return [], []
    x0, y0 = min(xs), min(ys)
    dx = (max(xs) - x0) * coarser / THIN_COLUMNS or 1.0
    dy = (max(ys) - y0) * coarser / THIN_ROWS or 1.0
    seen: set[tuple[int, int]] = set()
    kept_x: list[float] = []
    kept_y: list[float] = []
    for x, y in zip(xs, ys):
        cell = (round((x - x0) / dx), round((y - y0) / dy))
        if cell not in seen:
            seen.add(cell)
            kept_x.append(x)
            kept_y.append(y)
    return kept_x, kept_y


def _bars_path(spans: Sequence[tuple[float, float]], bottom: float, height: float) -> Any:
    """One compound path of rectangles (left, width): the SVG writer's cost is one element, not one per bar."""
    import numpy as np
    from matplotlib.path import Path as MplPath

    edges = np.asarray(spans, dtype=float).reshape(-1, 2)
    left, right = edges[:, 0], edges[:, 0] + edges[:, 1]
    vertices = np.empty((len(edges), 5, 2))
    vertices[:, 0] = np.column_stack([left, np.full(len(edges), bottom)])
    vertices[:, 1] = np.column_stack([right, np.full(len(edges), bottom)])
    vertices[:, 2] = np.column_stack([right, np.full(len(edges), bottom + height)])
    vertices[:, 3] = np.column_stack([left, np.full(len(edges), bottom + height)])
    vertices[:, 4] = vertices[:, 0]
    codes = np.tile(
        np.array([MplPath.MOVETO, MplPath.LINETO, MplPath.LINETO, MplPath.LINETO, MplPath.CLOSEPOLY], dtype=MplPath.code_type),
        len(edges),
    )
    return MplPath(vertices.reshape(-1, 2), codes)


def _gantt_grouped(ax: Any, trials: Sequence[dict[str, Any]], rows: Mapping[str, int], t0: float, scale: float) -> None:
    """The Gantt bars as one element per device, outcome, retry and early stop (id ``bars-N``)."""
    from matplotlib.patches import PathPatch

    groups: dict[tuple[int, str, bool, bool], list[tuple[float, float]]] = {}
    for trial in trials:
        key = (rows.get(trial["device"], 0), trial["outcome"], trial["attempt"] > 1, bool(trial["early_stop"]))
        groups.setdefault(key, []).append(
            ((trial["start"] - t0) / scale, max((trial["end"] - trial["start"]) / scale, 1e-9))
        )
    for number, ((row, outcome, retry, early), spans) in enumerate(groups.items()):
        patch = PathPatch(
            _bars_path(spans, row - 0.35, 0.7),
            facecolor=OUTCOME_STYLE[outcome][0],
            edgecolor="black" if retry else "white",
            linewidth=1.6 if retry else 0.5,
            hatch="///" if early else None,
        )
        patch.set_gid(f"bars-{number}")
        # add_artist, not add_patch: add_patch walks every bar's outline to update the data
        # limits (a second per 5,000 bars); the limits are the spans' own.
        ax.add_artist(patch)
        patch.set_clip_path(ax.patch)
        ax.update_datalim([(min(left for left, _ in spans), row - 0.35),
                           (max(left + width for left, width in spans), row + 0.35)])
    ax.autoscale_view()


def _metrics_grouped(ax: Any, trials: Sequence[dict[str, Any]], low: float) -> None:
    """The metric per trial as one element per outcome (and finite or not), markers drawn over others left out."""
    groups: dict[tuple[str, bool], tuple[list[int], list[float]]] = {}
    for order, trial in enumerate(trials, start=1):
        value = trial["metric"]
        finite = value is not None and math.isfinite(value)
        if not finite and trial["outcome"] in ("cancelled", "running"):
            continue
        xs, ys = groups.setdefault((trial["outcome"], finite), ([], []))
        xs.append(order)
        ys.append(value if finite else low)
    for (outcome, finite), (xs, ys) in groups.items():
        shown_x, shown_y = _thin(xs, ys)
        ax.plot(shown_x, shown_y, marker="o" if finite else "x", markersize=4, linestyle="none",
                color=OUTCOME_STYLE[outcome][0])
        # The axes span every trial, also those whose markers were left out.
        ax.update_datalim([(min(xs), min(ys)), (max(xs), max(ys))])


def _gantt(data: dict[str, Any]) -> str:
    import matplotlib.pyplot as plt

    trials, devices = data["trials"], data["devices"] or ["?"]
    scale, unit = _time_unit(data["wall_seconds"])
    figure, ax = plt.subplots(figsize=(10, 0.6 + 0.45 * len(devices)))
    rows = {name: index for index, name in enumerate(devices)}
    if len(trials) > ONE_ARTIST_PER_TRIAL_UP_TO:
        _gantt_grouped(ax, trials, rows, data["t0"], scale)
    for trial in trials if len(trials) <= ONE_ARTIST_PER_TRIAL_UP_TO else ():
        left = (trial["start"] - data["t0"]) / scale
        width = max((trial["end"] - trial["start"]) / scale, 1e-9)
        bar = ax.barh(
            rows.get(trial["device"], 0),
            width,
            left=left,
            height=0.7,
            color=OUTCOME_STYLE[trial["outcome"]][0],
            edgecolor="black" if trial["attempt"] > 1 else "white",
            linewidth=1.6 if trial["attempt"] > 1 else 0.5,
            hatch="///" if trial["early_stop"] else None,
        )
        bar.patches[0].set_gid(f"gantt-{trial['trial_id']}")
        if data["wall_seconds"] and width / (data["wall_seconds"] / scale) > 0.035:
            ax.text(left + width / 2, rows.get(trial["device"], 0), trial["trial_id"].lstrip("0") or "0",
                    ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(devices)), [f"device {name}" for name in devices])
    ax.invert_yaxis()
    ax.set_xlabel(f"time since the first training ({unit}); hatched: stopped early; black edge: a retry")
    _legend(ax, (trial["outcome"] for trial in trials))
    return _svg(figure)


def _metrics(data: dict[str, Any]) -> str:
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(10, 3.6))
    values = [trial["metric"] for trial in data["trials"] if trial["metric"] is not None and math.isfinite(trial["metric"])]
    low = min(values) if values else 0.0
    if len(data["trials"]) > ONE_ARTIST_PER_TRIAL_UP_TO:
        _metrics_grouped(ax, data["trials"], low)
    for order, trial in enumerate(data["trials"] if len(data["trials"]) <= ONE_ARTIST_PER_TRIAL_UP_TO else (), start=1):
        value = trial["metric"]
        finite = value is not None and math.isfinite(value)
        if not finite and trial["outcome"] in ("cancelled", "running"):
            continue
        (line,) = ax.plot(
            [order],
            [value if finite else low],
            marker="o" if finite else "x",
            markersize=6,
            linestyle="none",
            color=OUTCOME_STYLE[trial["outcome"]][0],
        )
        line.set_gid(f"metric-{trial['trial_id']}")
    if data["baseline"] is not None and data["baseline_spread"]:
        ax.axhspan(data["baseline"] - data["baseline_spread"], data["baseline"] + data["baseline_spread"],
                   color="#56B4E9", alpha=0.2, label="baseline spread")
    if data["baseline"] is not None:
        ax.axhline(data["baseline"], color="#56B4E9", linewidth=1, label=f"baseline {data['baseline']:.6g}")
    if data["threshold"] is not None:
        ax.axhline(data["threshold"], color="#D55E00", linestyle="--", linewidth=1,
                   label=f"threshold {data['threshold']:.6g} (fails {'below' if data['goal'] == 'max' else 'above'})")
    ax.set_xlabel("trial (in start order); x: no finite metric (crash, NaN, timeout)")
    ax.set_ylabel("metric")
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _svg(figure)


def _losses(data: dict[str, Any]) -> str | None:
    import matplotlib.pyplot as plt

    if not data["curves"]:
        return None
    figure, ax = plt.subplots(figsize=(10, 3.8))
    for index, entry in enumerate(data["curves"]):
        label = entry["label"]
        steps = [point[0] for point in entry["points"]]
        losses = [point[1] for point in entry["points"]]
        style = "-" if index < 2 else ("--" if not label.startswith("fix") else ":")
        (line,) = ax.plot(steps, losses, linestyle=style, linewidth=1.5, label=label)
        line.set_gid(f"loss-{index}")
    positive = all(point[1] > 0 for entry in data["curves"] for point in entry["points"])
    if positive:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss" + (" (log scale)" if positive else ""))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _svg(figure)


def _path(data: dict[str, Any]) -> str:
    import matplotlib.pyplot as plt

    scale, unit = _time_unit(data["wall_seconds"])
    figure, ax = plt.subplots(figsize=(10, 3.6))
    smallest: list[tuple[float, int]] = []
    best: int | None = None
    for trial in sorted(data["trials"], key=lambda t: t["end"]):
        if trial["outcome"] == "fail" and (best is None or trial["size"] < best):
            best = trial["size"]
            smallest.append(((trial["end"] - data["t0"]) / scale, best))
    if len(data["trials"]) > ONE_ARTIST_PER_TRIAL_UP_TO:
        by_outcome: dict[str, list[dict[str, Any]]] = {}
        for trial in data["trials"]:
            by_outcome.setdefault(trial["outcome"], []).append(trial)
        for outcome, group in by_outcome.items():
            every_x, every_y = [(t["start"] - data["t0"]) / scale for t in group], [t["size"] for t in group]
            xs, ys = _thin(every_x, every_y, coarser=1.5)  # markers of 6 points, not 4
            ax.plot(xs, ys, marker="o", linestyle="none", color=OUTCOME_STYLE[outcome][0])
            ax.update_datalim([(min(every_x), min(every_y)), (max(every_x), max(every_y))])
    for trial in data["trials"] if len(data["trials"]) <= ONE_ARTIST_PER_TRIAL_UP_TO else ():
        (line,) = ax.plot(
            [(trial["start"] - data["t0"]) / scale],
            [trial["size"]],
            marker="o",
            linestyle="none",
            color=OUTCOME_STYLE[trial["outcome"]][0],
        )
        line.set_gid(f"path-{trial['trial_id']}")
    if smallest:
        end = max(data["wall_seconds"] / scale, smallest[-1][0])
        xs = [point[0] for point in smallest] + [end]
        ys = [point[1] for point in smallest] + [smallest[-1][1]]
        ax.step(xs, ys, where="post", color="#D55E00", linewidth=1, label="smallest failing so far")
        ax.legend(loc="upper right", fontsize=8, frameon=False)
    ax.set_xlabel(f"training start ({unit} since the first)")
    ax.set_ylabel("rules switched on")
    return _svg(figure)


def _budget(data: dict[str, Any]) -> str:
    import matplotlib.pyplot as plt

    scale, unit = _time_unit(data["wall_seconds"])
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": [3, 2]})
    starts = sorted((trial["start"] - data["t0"]) / scale for trial in data["trials"])
    if starts:
        left.step(starts + [data["wall_seconds"] / scale], list(range(1, len(starts) + 1)) + [len(starts)],
                  where="post", color="#0072B2", label="trainings started")
    if data["budget"]:
        left.axhline(data["budget"], color="black", linestyle="--", linewidth=1, label=f"budget {data['budget']}")
    left.set_xlabel(f"time ({unit})")
    left.set_ylabel("trainings")
    left.legend(fontsize=8, frameon=False, loc="center right")
    devices = data["devices"] or ["?"]
    wall = data["wall_seconds"] or 1.0
    fractions = [data["busy_seconds"].get(name, 0.0) / wall for name in devices]
    bars = right.bar(range(len(devices)), fractions, color="#0072B2")
    for name, patch in zip(devices, bars.patches):
        patch.set_gid(f"util-{name}")
    right.set_xticks(range(len(devices)), [f"dev {name}" for name in devices], fontsize=8)
    right.set_ylim(0, 1.05)
    right.set_ylabel("busy / wall time")
    overall = data["utilisation"]
    right.set_title(f"utilisation {overall:.0%}" if overall is not None else "utilisation -", fontsize=9)
    return _svg(figure)


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
details { margin: 0.5em 0; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _answer(report: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    good = report.get("status") == "found"
    parts.append(f'<p class="status{"" if good else " bad"}" id="status">{_e(report.get("message", report.get("status")))}</p>')
    facts = [
        ("status", report.get("status")),
        ("trainings launched", f"{report.get('trainings')} of budget {report.get('budget')}"),
        ("strategy", report.get("strategy")),
        ("baseline (all candidates off)", report.get("baseline")),
        ("all candidates on", report.get("all_on")),
    ]
    threshold = report.get("threshold")
    if threshold:
        comparison = "<" if threshold.get("goal") == "max" else ">"
        limit = _float(threshold.get("limit"))
        shown = f"{limit:.6g}" if limit is not None else "-"
        facts.append(("fails when the metric is", f"{comparison} {shown} (tolerance {threshold.get('tolerance_setting')})"))
    parts.append('<table id="facts">' + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts) + "</table>")
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
    if report.get("status") == "found":
        verified = "verified: trained and passes" if report.get("fix_verified") else "NOT verified"
        parts.append(
            f'<p id="fix"><b>Fix</b> (<code>{_e(report.get("fix_config"))}</code>, {_e(verified)}): switch off '
            f"{_e(', '.join(report.get('switched_off') or []) or 'nothing')}; every other fusion stays on. "
            f"{_e(report.get('fix_reason', ''))}</p>"
        )
    elif report.get("smallest_failing"):
        parts.append(f"<p>Smallest failing configuration so far: {len(report['smallest_failing'])} rules on.</p>")
    if report.get("continue_with"):
        parts.append(f"<p>Continue with <code>{_e(report['continue_with'])}</code></p>")
    for warning in report.get("warnings") or []:
        parts.append(f'<p class="note">warning: {_e(warning)}</p>')
    return parts


def _localization(culprit: dict[str, Any]) -> str:
    """Where a culprit acted: the layers from graph dumps (``where``) and any ``localization``."""
    bits: list[str] = []
    for name, found in (culprit.get("where") or {}).items():
        layers = ", ".join(found.get("layers", [])[:8]) or "no fused op in the graph dumps"
        bits.append(f"{name} fused layers: {layers}")
    localization = culprit.get("localization")
    if isinstance(localization, dict):
        summary = localization.get("summary") or localization.get("message")
        bits.append(str(summary) if summary else json.dumps(localization, sort_keys=True)[:400])
    elif localization:
        bits.append(str(localization)[:400])
    return "".join(f"<br><small>{_e(bit)}</small>" for bit in bits)


def _trial_table(data: dict[str, Any]) -> str:
    rows = []
    for trial in data["trials"]:
        metric = "" if trial["metric"] is None else f"{trial['metric']:.6g}"
        rows.append(
            f'<tr id="trial-{_e(trial["trial_id"])}"><td>{_e(trial["trial_id"])}</td><td>{_e(trial["role"])}</td>'
            f"<td class=num>{trial['size']}</td><td>{_e(trial['device'])}</td>"
            f"<td class=num>{trial['end'] - trial['start']:.1f}</td><td>{_e(trial['outcome'])}</td>"
            f"<td>{_e(trial['kind'] or '')}</td><td class=num>{_e(metric)}</td>"
            f"<td>{'early stop' if trial['early_stop'] else ''}{' retry' if trial['attempt'] > 1 else ''}</td></tr>"
        )
    return (
        '<table id="trials"><tr><th>trial</th><th>role</th><th>rules on</th><th>device</th><th>seconds</th>'
        "<th>outcome</th><th>kind</th><th>metric</th><th></th></tr>" + "".join(rows) + "</table>"
    )


def render_html(
    report: dict[str, Any], records: Iterable[dict[str, Any]], state_dir: Path, state: SearchState | None = None
) -> str:
    """The whole page as text (``state``: see :func:`report_data`)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    matplotlib.rcParams["svg.hashsalt"] = "fusion-dd"  # stable ids across runs
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
    body = ["<h1>fusion-dd report</h1>", *_answer(report)]
    for ident, title, svg, note in plots:
        body.append(f'<h2 id="h-{ident}">{_e(title)}</h2>')
        if svg is None:
            body.append(f'<p class="note" id="plot-{ident}">No loss curves: the trials left no metrics.jsonl with steps and losses.</p>')
            continue
        body.append(f'<figure class="plot" id="plot-{ident}">{svg}<figcaption class="note">{_e(note)}</figcaption></figure>')
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
