"""Helpers for the demo tests: cached in-process trainings and the scoring rule.

Trainings run in-process through ``run_training`` (no ``python -m`` launch per
training) and are cached for the session, so a scenario's baseline and all-on
runs are trained once however many tests use them. ``prefetch`` trains a batch of
configurations on two worker processes first, so a test module's trainings use
both cores.

The cache is keyed by what a training runs: its three compiled graphs (training,
optimizer, evaluation) and its length and seed. ``run_training`` uses the rules,
the planted faults and the AutoFuse switch only to compile those graphs (a fault is
an attribute of the fused node it breaks), so two configurations that compile to
the same graphs train identically, bit for bit: a rule that fuses nothing in this
network alone, or a scenario whose faults sit in kernels nobody built. Compiling is
a few milliseconds; a training is a third of a second to a second, and about a
fifth of tests/demo/test_demo_planted.py's configurations are such duplicates.

The scoring mirrors fusion-dd's: the tolerance is 10% of the gap between the
all-off baseline and the all-on run (1% of the baseline when the all-on run is
NaN), and a run fails below ``baseline - tolerance`` or on NaN.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache

from fusion_dd.demo import SCENARIOS, candidate_rules
from fusion_dd.demo.network import build_eval_graph, build_optimizer_graph, build_train_graph
from fusion_dd.demo.passes_autofuse import AutoFuseSwitch
from fusion_dd.demo.pipeline import compile_graph
from fusion_dd.demo.trainer import TrainConfig, TrainResult, run_training

#: What a training runs: its compiled graphs as text, its steps and its seed.
Key = tuple[str, int, int]
#: What to train for a key: the planted faults, the rules on, steps and seed (one such
#: configuration; any other of the same key trains the same).
Run = tuple[frozenset[str], frozenset[str], int, int]
_CACHE: dict[Key, TrainResult] = {}
WORKERS = 2


@lru_cache(maxsize=None)
def _compiled(faults: frozenset[str], on: frozenset[str]) -> str:
    """The training, optimizer and evaluation graphs ``run_training`` would compile, as exact text."""
    net = TrainConfig().net  # the network does not depend on the steps or the seed

    def decide(rule) -> bool:
        return rule.name in on

    graphs = [
        compile_graph(build(net), decide, faults, AutoFuseSwitch.of(on))[0]
        for build in (build_train_graph, build_optimizer_graph, build_eval_graph)
    ]
    return "\n".join(repr((graph.nodes, graph.outputs)) for graph in graphs)


def _key(scenario: str, on: Iterable[str], steps: int | None, seed: int) -> tuple[Key, Run]:
    chosen = steps if steps is not None else SCENARIOS[scenario].steps
    on = frozenset(on)
    faults = SCENARIOS[scenario].faults
    return (_compiled(faults, on), chosen, seed), (faults, on, chosen, seed)


def _run(run: Run) -> TrainResult:
    faults, on, steps, seed = run
    config = TrainConfig(steps=steps, seed=seed)
    return run_training(config, lambda rule: rule.name in on, faults, autofuse=AutoFuseSwitch.of(on))


def train(
    scenario: str, on: Iterable[str], *, steps: int | None = None, seed: int = 0
) -> TrainResult:
    """One cached training of ``scenario`` with exactly the rules ``on`` switched on.

    Its ``stats`` are those of the first configuration trained with the same graphs.
    """
    key, run = _key(scenario, on, steps, seed)
    if key not in _CACHE:
        _CACHE[key] = _run(run)
    return _CACHE[key]


def prefetch(
    requests: Iterable[tuple[str, Iterable[str]] | tuple[str, Iterable[str], int]],
) -> None:
    """Train the uncached (scenario, on[, steps]) configurations on two processes."""
    runs: dict[Key, Run] = {}
    for request in requests:
        scenario, on, *rest = request
        key, run = _key(scenario, on, rest[0] if rest else None, 0)
        if key not in _CACHE:
            runs.setdefault(key, run)
    if len(runs) < 2:
        for key, run in runs.items():
            _CACHE[key] = _run(run)
        return
    previous = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # inherited by the spawned workers
    try:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(WORKERS, mp_context=context) as pool:
            for key, result in zip(runs, pool.map(_run, runs.values())):
                _CACHE[key] = result
    finally:
        if previous is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = previous


def names(scenario: str) -> list[str]:
    return [rule.name for rule in candidate_rules(scenario)]


class Scoring:
    """The verdict fusion-dd would give, from a scenario's baseline and all-on runs."""

    def __init__(self, scenario: str, steps: int | None = None) -> None:
        self.baseline = train(scenario, [], steps=steps).accuracy
        self.all_on = train(scenario, names(scenario), steps=steps).accuracy
        if math.isnan(self.all_on):
            self.tolerance = 0.01 * self.baseline
        else:
            self.tolerance = 0.1 * (self.baseline - self.all_on)
        self.threshold = self.baseline - self.tolerance

    def fails(self, accuracy: float) -> bool:
        return math.isnan(accuracy) or accuracy < self.threshold


@lru_cache(maxsize=None)
def scoring(scenario: str, steps: int | None = None) -> Scoring:
    return Scoring(scenario, steps)
