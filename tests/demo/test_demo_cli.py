"""``python -m fusion_dd.demo.train`` as fusion-dd launches it: a real subprocess
reading a real switch file, printing the metric and writing fusion_result.json."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from fusion_dd.backends.cann.switch import render_switch
from fusion_dd.demo import QUICK_SCENARIO, candidate_rules, train_command
from fusion_dd.demo.network import (
    NetSpec,
    build_eval_graph,
    build_optimizer_graph,
    build_train_graph,
)
from fusion_dd.demo.pipeline import compile_graph
from fusion_dd.demo.scenarios import SCENARIOS
from fusion_dd.core.rules import Rule

RULES = candidate_rules(QUICK_SCENARIO)
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$")


def _launch(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ, OPENBLAS_NUM_THREADS="1", **env)
    for name in ("FUSION_DD_SWITCH_FILE", "FUSION_DD_TRIAL_DIR", "FUSION_DD_METRICS_FILE"):
        if name not in env:
            environment.pop(name, None)
    return subprocess.run(
        argv, cwd=cwd, env=environment, capture_output=True, text=True, timeout=120
    )


def _fired(on: set[Rule]) -> list[dict[str, set[str]]]:
    """Per graph, the rules each section reports, from the in-process compiler."""
    faults = SCENARIOS[QUICK_SCENARIO].faults
    graphs = []
    for build in (build_train_graph, build_optimizer_graph, build_eval_graph):
        _, stats = compile_graph(build(NetSpec()), lambda rule: rule in on, faults)
        graphs.append({name: count for name, count in stats.counts.items()})
    return graphs


def _report(document: dict) -> list[dict[str, dict]]:
    graphs = []
    for key in sorted(document):
        entry = document[key]
        graphs.append({**entry.get("graph_fusion", {}), **entry.get("ub_fusion", {})})
    return graphs


def test_training_process_follows_the_contract(tmp_path: Path) -> None:
    enabled = {rule for i, rule in enumerate(RULES) if i % 3 != 1}
    switch = tmp_path / "fusion_switch.cfg"
    switch.write_text(render_switch(RULES, enabled))
    trial = tmp_path / "trial"
    trial.mkdir()
    metrics = trial / "metrics.jsonl"
    argv = [
        switch.as_posix() if a == "{switch_file}" else a
        for a in train_command(QUICK_SCENARIO, steps=12)
    ]
    done = _launch(
        argv,
        tmp_path,
        FUSION_DD_TRIAL_DIR=str(trial),
        FUSION_DD_METRICS_FILE=str(metrics),
        FUSION_DD_REPEAT="0",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    steps = [int(m.group(1)) for m in map(STEP_LINE.match, lines) if m]
    assert steps == [10, 12]
    assert re.fullmatch(r"accuracy: \d\.\d+", lines[-1])
    accuracy = float(lines[-1].split()[1])

    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in records] == [10, 12, 12]
    assert all(set(r) == {"step", "loss"} for r in records[:-1])
    assert set(records[-1]) == {"step", "accuracy"} and records[-1]["step"] == 12
    assert abs(records[-1]["accuracy"] - accuracy) < 1e-6

    document = json.loads((trial / "fusion_result.json").read_text())
    assert list(document) == [f"session_and_graph_id_0_{i}" for i in range(3)]
    expected = _fired(enabled)
    reported = _report(document)
    assert [set(graph) for graph in reported] == [set(graph) for graph in expected]
    on_names = {rule.name for rule in enabled}
    for graph_report, graph_expected in zip(reported, expected):
        for name, counts in graph_report.items():
            assert name in on_names
            assert counts["match_times"] == str(graph_expected[name].match_times)
            assert counts["effect_times"] == str(graph_expected[name].effect_times)
    for entry in document.values():
        for counts in entry.get("ub_fusion", {}).values():
            assert counts["repository_hit_times"] == "0"
        for counts in entry.get("graph_fusion", {}).values():
            assert set(counts) == {"match_times", "effect_times"}


def test_switch_file_from_the_environment_in_line_format(tmp_path: Path) -> None:
    off = ["LayerNormFusionPass", "TbeEltwiseFusionPass", "MatMulBiasAddFusionPass"]
    switch = tmp_path / "old_format.cfg"
    switch.write_text("".join(f"{name}:off\n" for name in off))
    argv = [
        sys.executable,
        "-m",
        "fusion_dd.demo.train",
        "--scenario",
        QUICK_SCENARIO,
        "--steps",
        "2",
    ]
    done = _launch(argv, tmp_path, FUSION_DD_SWITCH_FILE=str(switch))
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "fusion_result.json").read_text())
    reported = set().union(*(set(graph) for graph in _report(document)))
    assert reported == {rule.name for rule in RULES} - set(off)


def test_without_a_switch_file_every_rule_is_on(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "fusion_dd.demo.train",
        "--scenario",
        QUICK_SCENARIO,
        "--steps",
        "1",
    ]
    done = _launch(argv, tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "fusion_result.json").read_text())
    reported = set().union(*(set(graph) for graph in _report(document)))
    assert reported == {rule.name for rule in RULES}


def test_malformed_switch_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    switch = tmp_path / "broken.cfg"
    switch.write_text('{"Switch": {"GraphFusion": {"LayerNormFusionPass": "ON"}}}')
    argv = [a if a != "{switch_file}" else str(switch) for a in train_command(QUICK_SCENARIO)]
    done = _launch(argv, tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    error = done.stderr.strip()
    assert len(error.splitlines()) == 1 and "broken.cfg" in error and "Traceback" not in error


def test_missing_file_unknown_scenario_and_missing_trial_dir_exit_2(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "fusion_dd.demo.train", "--scenario", QUICK_SCENARIO]
    done = _launch(argv, tmp_path, FUSION_DD_SWITCH_FILE=str(tmp_path / "absent.cfg"))
    assert done.returncode == 2 and "absent.cfg" in done.stderr
    done = _launch([*argv[:-1], "no-such-scenario"], tmp_path)
    assert done.returncode == 2 and "no-such-scenario" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = _launch(argv, tmp_path, FUSION_DD_TRIAL_DIR=str(tmp_path / "no-dir"))
    assert done.returncode == 2 and "FUSION_DD_TRIAL_DIR" in done.stderr
