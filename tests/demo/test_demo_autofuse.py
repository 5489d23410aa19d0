"""The demo compiler's AutoFuse stage: AUTOFUSE_FLAGS read like CANN, the fault only with Reduce on."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

from fusion_dd.backends.cann.autofuse import realize, render_flags
from fusion_dd.demo import SCENARIOS, candidate_rules
from fusion_dd.demo.fusion_result import fusion_result
from fusion_dd.demo.graph_executor import Program
from fusion_dd.demo.network import NetSpec, build_optimizer_graph, build_train_graph, param_specs
from fusion_dd.demo.passes_autofuse import (
    FAULT_AUTOFUSE_REDUCE_FP16,
    FUSED_ADDN,
    FUSED_REDUCE,
    AutoFuseSwitch,
)
from fusion_dd.demo.pipeline import compile_graph
from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import AUTOFUSE_POINTS, Rule, Section

ELEMWISE, REDUCE, CONCAT = POINTS = [Rule(name, Section.AUTOFUSE) for name in AUTOFUSE_POINTS]
LAYERNORM = Rule("LayerNormFusionPass", Section.GRAPH)
FAULT = frozenset({FAULT_AUTOFUSE_REDUCE_FP16})


# -- AUTOFUSE_FLAGS ------------------------------------------------------------------------


def test_autofuse_is_off_by_default_and_capabilities_need_it_on() -> None:
    for flags in (None, "", "--autofuse_enable_pass=reduce,concat", "--enable_autofuse=false;--autofuse_enable_pass=reduce"):
        switch = AutoFuseSwitch.parse(flags)
        assert not any(switch.is_on(name) for name in AUTOFUSE_POINTS), flags
    switch = AutoFuseSwitch.parse("--enable_autofuse=true")
    assert switch.is_on("elemwise") and not switch.is_on("reduce") and not switch.is_on("concat")
    switch = AutoFuseSwitch.parse(" --enable_autofuse=TRUE ; --autofuse_enable_pass=reduce ; --autofuse_dfx=1;--x")
    assert switch.is_on("elemwise") and switch.is_on("reduce") and not switch.is_on("concat")
    assert switch.describe() == "AutoFuse on (+ reduce)"
    switch = AutoFuseSwitch.parse("--enable_autofuse=true;--autofuse_disable_pass=reduce,concat")
    assert [name for name in AUTOFUSE_POINTS if switch.is_on(name)] == ["elemwise"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--enable_autofuse=yes", "--enable_autofuse='yes' must be true or false"),
        ("--enable_autofuse=true;--autofuse_enable_pass=reduce;--autofuse_disable_pass=concat,reduce",
         "reduce is in both --autofuse_enable_pass and --autofuse_disable_pass"),
    ],
)  # fmt: skip
def test_bad_flags_are_a_usage_error_naming_the_variable(flags: str, message: str) -> None:
    with pytest.raises(UsageError, match="AUTOFUSE_FLAGS") as raised:
        AutoFuseSwitch.parse(flags)
    assert message in str(raised.value)


@pytest.mark.parametrize("on", [set(c) for n in range(4) for c in itertools.combinations(POINTS, n)])
def test_the_demo_trains_what_the_cann_backend_renders_and_realizes(on: set[Rule]) -> None:
    """fusion-dd's rendering and the demo's reading agree, so the demo trains the realized configuration."""
    for user in (None, "--enable_autofuse=true;--autofuse_dfx=1"):
        switch = AutoFuseSwitch.parse(render_flags(POINTS, on, user))
        assert {rule for rule in POINTS if switch.is_on(rule.name)} == realize(POINTS, on, user)


# -- the compiler stage -----------------------------------------------------------------------


def _ops(graph) -> list[tuple[str, list[str]]]:
    return [(node.op, [inner.op for inner in node.inner]) for node in graph.nodes]


def _compile(build, on: set[Rule], faults: frozenset[str] = FAULT):
    """Compile with the fusion rules and the AutoFuse points in ``on``."""
    return compile_graph(build(NetSpec()), lambda rule: rule in on, faults, AutoFuseSwitch.of(r.name for r in on))


def test_a_decision_for_every_rule_leaves_autofuse_off_as_cann_does() -> None:
    everything, stats = compile_graph(build_train_graph(NetSpec()), lambda rule: True, FAULT)
    assert stats.autofuse == {} and not any("AutoFuse" in node.pass_name for node in everything.nodes)


def test_elemwise_fuses_chains_and_reduce_fuses_reductions_only_with_it() -> None:
    off, _ = _compile(build_train_graph, set())
    reduce_alone, stats = _compile(build_train_graph, {REDUCE})
    assert _ops(reduce_alone) == _ops(off) and stats.autofuse == {}  # CANN ignores Reduce with AutoFuse off

    elemwise, stats = _compile(build_train_graph, {ELEMWISE})
    kernels = [node for node in elemwise.nodes if "AutoFuse" in node.pass_name]
    assert kernels and stats.autofuse.get("elemwise") == len(kernels)
    assert not any(inner.op == FUSED_REDUCE for node in kernels for inner in node.inner)

    both, stats = _compile(build_train_graph, {ELEMWISE, REDUCE})
    reduced = [node for node in both.nodes if any(inner.op == FUSED_REDUCE for inner in node.inner)]
    assert reduced and stats.autofuse["reduce"] >= len(reduced)
    assert [rule for rule in stats.effective() if rule.section is Section.AUTOFUSE] == [ELEMWISE, REDUCE]


def test_autofuse_never_takes_a_pattern_from_a_model_fusion_rule() -> None:
    rules_first, _ = _compile(build_train_graph, {LAYERNORM, ELEMWISE, REDUCE}, frozenset())
    layer_norms = [node for node in rules_first.nodes if node.op == "LayerNorm"]
    assert [node.name for node in layer_norms] == ["ln_a/add_beta"]  # ln_a; ln_b has no affine tail


def test_autofuse_counts_stay_out_of_fusion_result_json() -> None:
    everything = AutoFuseSwitch.of(AUTOFUSE_POINTS)
    _, stats = compile_graph(build_train_graph(NetSpec()), lambda rule: True, FAULT, everything)
    assert {"elemwise", "reduce"} <= {rule.name for rule in stats.effective()}
    document = fusion_result([stats])
    names = {name for entry in document.values() for section in entry.values() for name in section}
    assert "LayerNormFusionPass" in names and not names & set(AUTOFUSE_POINTS)


def _clip_factor(on: set[Rule], faults: frozenset[str], gradient: float) -> float:
    """The optimizer's clip factor for loss-scaled gradients that are all ``gradient``."""
    graph, _ = _compile(build_optimizer_graph, on, faults)
    specs = param_specs(NetSpec())
    sizes = [int(np.prod(spec.shape)) for spec in specs]
    grads = np.full(sum(sizes), gradient, np.float32)
    feeds = {"grads": grads, "weights": np.zeros_like(grads), "momentum": np.zeros_like(grads)}
    offset = 0
    for spec, size in zip(specs, sizes):
        feeds[f"grad/{spec.name}"] = grads[offset : offset + size]
        offset += size
    program = Program(graph)
    with np.errstate(all="ignore"):
        update = program.value(program.forward(feeds), "unscale")  # (grads * factor + 0 decay) / loss scale
    return float(update[0]) * NetSpec().loss_scale / gradient


def test_the_planted_fault_overflows_the_clip_sum_only_with_elemwise_and_reduce() -> None:
    # Every per-tensor sum of squares fits fp16 (< 65504), their total does not.
    gradient = 10.0
    limit = NetSpec().clip_norm * NetSpec().loss_scale
    total = sum(int(np.prod(spec.shape)) for spec in param_specs(NetSpec())) * gradient**2
    assert max(int(np.prod(spec.shape)) for spec in param_specs(NetSpec())) * gradient**2 < 65504 < total
    expected = limit / np.sqrt(total)
    for on, faults in (
        (set(), FAULT),
        ({ELEMWISE}, FAULT),
        ({REDUCE}, FAULT),
        ({ELEMWISE, REDUCE}, frozenset()),
    ):
        assert _clip_factor(on, faults, gradient) == pytest.approx(expected, rel=1e-5), (on, faults)
    assert _clip_factor({ELEMWISE, REDUCE}, FAULT, gradient) == 0.0  # Inf sum: the step is lost


def test_reduce_fuses_the_clip_sums_their_addn_and_the_update_into_one_kernel() -> None:
    graph, stats = _compile(build_optimizer_graph, {ELEMWISE, REDUCE})
    kernel = graph["unscale"]
    inner = {node.name: node for node in kernel.inner}
    assert [node.op for node in kernel.inner].count(FUSED_REDUCE) == len(param_specs(NetSpec())) == stats.autofuse["reduce"]
    assert inner["clip/global_sum"].op == FUSED_ADDN and inner["decay/addn"].op == "AddN"  # only the AddN of sums
    assert {inner[name].op for name in ("clip/maximum", "clip/rsqrt", "clip/factor")} == {"Maximum", "Rsqrt", "Mul"}
    assert all(node.attrs["accumulate"] == "fp16" for node in kernel.inner if node.op in (FUSED_REDUCE, FUSED_ADDN))


# -- the scenario -----------------------------------------------------------------------------


def test_only_the_autofuse_scenario_offers_autofuse_points() -> None:
    for name, scenario in SCENARIOS.items():
        points = [rule for rule in candidate_rules(name) if rule.section is Section.AUTOFUSE]
        assert points == ([ELEMWISE, REDUCE] if scenario.autofuse else []), name
    assert frozenset({"elemwise", "reduce"}) in SCENARIOS["autofuse"].planted


def _train(*args: str, flags: str | None, cwd) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("AUTOFUSE_FLAGS", None)
    if flags is not None:
        env["AUTOFUSE_FLAGS"] = flags
    return subprocess.run(
        [sys.executable, "-m", "fusion_dd.demo.train", "--scenario", "autofuse", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_demo_training_reads_autofuse_flags_from_its_environment(tmp_path) -> None:
    bad = _train("--steps", "1", flags="--enable_autofuse=on", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "AUTOFUSE_FLAGS" in bad.stderr
    assert "Traceback" not in bad.stderr
    done = _train("--steps", "1", flags="--enable_autofuse=true;--autofuse_enable_pass=reduce", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "AutoFuse on (+ reduce)" in done.stdout.splitlines()[0]
    assert (tmp_path / "fusion_result.json").exists()
