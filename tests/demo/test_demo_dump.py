"""The demo dumps like CANN, and comparing its dumps localizes every planted culprit.

For each planted culprit set: the fix configuration (every planted rule off) is
the fusion-off run, the fix with that set switched back on the fusion-on run;
``compare_dumps`` must name an op of a layer the scenario damaged, made by one
of the culprit's rules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusion_dd.backends.cann.artifacts.graph import load_graph
from fusion_dd.compare import compare_dumps
from fusion_dd.demo.dump import GRAPH_FILE, DemoDumper
from fusion_dd.demo.scenarios import SCENARIOS
from fusion_dd.demo.trainer import TrainConfig, run_training


class _Dumped(Exception):
    """Stops a training once its dump is written (the rest of it is not needed)."""


def _dump(directory: Path, scenario_name: str, switched_on: frozenset[str]) -> Path:
    scenario = SCENARIOS[scenario_name]
    planted = frozenset().union(*scenario.planted)
    dumper = DemoDumper(directory, scenario.dump_step)

    def hook(step, graph, values) -> None:
        dumper(step, graph, values)
        if dumper.written:
            raise _Dumped

    with pytest.raises(_Dumped):
        run_training(
            TrainConfig(steps=scenario.steps),
            lambda rule: rule.name not in planted or rule.name in switched_on,
            scenario.faults,
            on_forward=hook,
        )
    return directory


@pytest.mark.parametrize("scenario_name", ["mixed", "nan"])
def test_every_planted_culprit_is_localized_to_the_damaged_layer(tmp_path: Path, scenario_name: str) -> None:
    scenario = SCENARIOS[scenario_name]
    fix = _dump(tmp_path / "fix", scenario_name, frozenset())
    for culprit, damaged in zip(scenario.planted, scenario.damaged, strict=True):
        on = _dump(tmp_path / "+".join(sorted(culprit)), scenario_name, culprit)
        comparison = compare_dumps(on, fix, load_graph(on / GRAPH_FILE), load_graph(fix / GRAPH_FILE))
        found = comparison.first_divergence
        assert found is not None, f"{sorted(culprit)}: no divergence"
        scopes = {layer.split("/")[0] for layer in found.layers}
        assert scopes <= set(damaged), f"{sorted(culprit)} localized to {found.layers}"
        assert set(found.rules) & culprit, f"{sorted(culprit)} blamed on {found.rules}"
        assert not comparison.problems or all("no counterpart" in p.reason for p in comparison.problems)


def test_dump_files_carry_device_formats_and_the_graph_carries_provenance(tmp_path: Path) -> None:
    from fusion_dd.backends.cann.artifacts.dump import read_dump_header
    from fusion_dd.backends.cann.artifacts.layout import FRACTAL_NZ, NC1HWC0

    directory = _dump(tmp_path / "d", "quick", frozenset({"LayerNormFusionPass"}))
    headers = [read_dump_header(path) for path in directory.rglob("*.*.*.*.*") if path.name != GRAPH_FILE]
    formats = {info.format for header in headers for info in header.outputs}
    assert {FRACTAL_NZ, NC1HWC0} <= formats
    padded = [i for h in headers for i in h.outputs if i.format == FRACTAL_NZ and i.shape[-1] * i.shape[-4] > i.original_shape[-1]]
    assert padded, "FRACTAL_NZ outputs must include padding"
    graph = load_graph(directory / GRAPH_FILE)
    layer_norm = next(op for op in graph.ops if "LayerNormFusionPass" in op.pass_name)
    assert layer_norm.original_names[0] == "ln_a/mean" and layer_norm.output_origins == ((layer_norm.name, 0),)


def test_demo_training_dumps_through_its_environment_and_compare_localizes(tmp_path: Path) -> None:
    """The subprocess path: FUSION_DD_DUMP_DIR, --fusion-switch, then fusion-dd compare."""
    switch = tmp_path / "fix.cfg"
    switch.write_text(json.dumps({"Switch": {"GraphFusion": {"LayerNormFusionPass": "off"}, "UBFusion": {}}}))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    for name, extra in (("on", []), ("off", ["--fusion-switch", str(switch)])):
        run_env = {**env, "FUSION_DD_DUMP_DIR": str(tmp_path / name), "FUSION_DD_TRIAL_DIR": str(tmp_path)}
        cmd = [sys.executable, "-m", "fusion_dd.demo.train", "--scenario", "quick", "--steps", "2", *extra]
        subprocess.run(cmd, env=run_env, check=True, capture_output=True, timeout=120)
    done = subprocess.run(
        [sys.executable, "-m", "fusion_dd.cli", "compare", "--on", "on", "--off", "off",
         "--graph-on", "on", "--graph-off", "off"],  # directories: the Build graph in them
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first = next(line for line in done.stdout.splitlines() if line.startswith("first divergence:"))
    assert first.startswith("first divergence: ln_a/add_beta (") and "LayerNormFusionPass" in first
