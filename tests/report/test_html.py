"""The HTML report: parsed, every plot present, and its data points checked against the journal."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fusion_dd.report import html as html_report
from tests.support import REPO
from tests.support.cli import CULPRIT, GRAPH, UB, write_config
from tests.support.fake_training import cli_env, run_fusion_dd
from tests.support.html_page import PLOTS, check_html_report, group, well_formed
from tests.support.states import finished, search_started, session_started, started

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


def test_references_without_a_metric_are_said_in_words_not_none(tmp_path):
    report, records = synthetic(tmp_path, 6)
    report.update({"status": "training_broken", "message": "the training does not run", "baseline": None, "all_on": None})
    text = html_report.render_html(report, records, tmp_path)
    assert "None" not in text
    assert "<th>baseline (all candidates off)</th><td>no usable metric (see the trainings below)</td>" in text
    assert "<th>all candidates on</th><td>no usable metric (see the trainings below)</td>" in text


def test_only_a_rerun_after_a_crash_is_marked_a_retry_not_the_full_training_after_an_early_verdict(tmp_path):
    from fusion_dd.store.state import replay

    records = [
        search_started(), session_started(),
        started("0001", ["A"]), finished("0001", 0.2, early_stop={"kind": "early_fail", "step": 12}),
        started("0002", ["A"], role="proof", attempt=2), finished("0002", 0.2),  # its full training
        started("0003", ["B"]), finished("0003", None, kind="crash"),
        started("0004", ["B"], attempt=2), finished("0004", 0.9),  # train.retries
    ]  # fmt: skip
    data = html_report.report_data({"trials": []}, records, tmp_path, replay(records))
    assert {trial["trial_id"]: trial["retry"] for trial in data["trials"]} == {
        "0001": False, "0002": False, "0003": False, "0004": True,
    }  # fmt: skip


def test_a_localization_training_is_shown_as_dumped_not_as_finished_before_the_threshold(tmp_path):
    from fusion_dd.store.state import replay

    records = [
        search_started(), session_started(),
        started("0001", ["A"]), finished("0001", 0.2),  # adopted before the threshold: no verdict yet
        started("0002", ["A"], role="localize"), finished("0002", 0.2),
    ]  # fmt: skip
    data = html_report.report_data({"trials": []}, records, tmp_path, replay(records))
    assert {trial["trial_id"]: trial["outcome"] for trial in data["trials"]} == {"0001": "unknown", "0002": "dumped"}
    assert html_report.OUTCOME_STYLE["dumped"][1] == "dumped tensors for localization (not a verdict)"


def test_a_reference_stopped_on_a_nan_loss_says_so_in_the_facts(tmp_path):
    report, records = synthetic(tmp_path, 6)
    stopped = {"trial_id": "0002", "role": "all_on", "kind": "nonfinite", "outcome": "fail", "metric": None,
               "reason": "stopped early at step 40: loss nan"}
    report.update({"all_on": None, "trials": [*(t for t in report["trials"] if t.get("role") != "all_on"), stopped]})
    text = html_report.render_html(report, records, tmp_path)
    assert "<th>all candidates on</th><td>fails, no metric (stopped early at step 40: loss nan)</td>" in text


def test_a_curve_only_printed_is_drawn_with_the_pattern_the_baselines_output_named(tmp_path):
    report, records = synthetic(tmp_path, 6)
    probe = tmp_path / "trials" / "0003"
    (probe / "metrics.jsonl").unlink()
    (probe / "output.log").write_text("".join(f"Step {s}: train_loss={4.0 / s:.3f}\n" for s in range(1, 9)))
    assert "No loss curves" in html_report.render_html(report, records, tmp_path)  # metrics.jsonl only
    report["early_passes"] = {"curves_from_output": {"step_pattern": r"Step (\d+): train_loss=(\S+)", "printed": "x"}}
    text = html_report.render_html(report, records, tmp_path)
    assert "culprit 1: " in group(text, "loss-0") and "No loss curves" not in text


def test_a_page_without_loss_curves_says_how_to_read_the_printed_ones(tmp_path):
    report, records = synthetic(tmp_path, 6)
    (tmp_path / "trials" / "0003" / "metrics.jsonl").unlink()  # the one curve of the synthetic search
    advice = "output.log prints 'step 4 loss 0.2': to read the loss curve from the output, set early_stop.step_pattern: 'x'"
    plain = html_report.render_html(report, records, tmp_path)
    assert "with steps and losses.</p>" in plain
    report["cost"] = {"steps_advice": advice}
    text = html_report.render_html(report, records, tmp_path)
    note = text[text.index('id="plot-losses"') :].split("</p>", 1)[0]
    assert note.endswith("with steps and losses; " + html.escape(advice) + "."), note
