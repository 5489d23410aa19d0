"""Helpers for the demo tests: cached in-process trainings and the scoring rule.

Trainings run in-process through ``run_training`` (no ``python -m`` launch per
training) and are cached for the session, so a scenario's baseline and all-on
runs are trained once however many tests use them. ``prefetch`` trains a batch of
configurations on two worker processes first, so a test module's trainings use
both cores.

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
from fusion_dd.demo.passes_autofuse import AutoFuseSwitch
from fusion_dd.demo.trainer import TrainConfig, TrainResult, run_training

Key = tuple[frozenset[str], frozenset[str], int, int]
_CACHE: dict[Key, TrainResult] = {}
WORKERS = 2


def _key(scenario: str, on: Iterable[str], steps: int | None, seed: int) -> Key:
    """With every rule off no planted fault can act, so all scenarios share that run."""
    chosen = steps if steps is not None else SCENARIOS[scenario].steps
    on = frozenset(on)
    faults = SCENARIOS[scenario].faults if on else frozenset()
    return faults, on, chosen, seed


def _run(key: Key) -> TrainResult:
    faults, on, steps, seed = key
    config = TrainConfig(steps=steps, seed=seed)
    return run_training(config, lambda rule: rule.name in on, faults, autofuse=AutoFuseSwitch.of(on))


def train(
    scenario: str, on: Iterable[str], *, steps: int | None = None, seed: int = 0
) -> TrainResult:
    """One cached training of ``scenario`` with exactly the rules ``on`` switched on."""
    key = _key(scenario, on, steps, seed)
    if key not in _CACHE:
        _CACHE[key] = _run(key)
    return _CACHE[key]


def prefetch(
    requests: Iterable[tuple[str, Iterable[str]] | tuple[str, Iterable[str], int]],
) -> None:
    """Train the uncached (scenario, on[, steps]) configurations on two processes."""
    keys = []
    for request in requests:
        scenario, on, *rest = request
        key = _key(scenario, on, rest[0] if rest else None, 0)
        if key not in _CACHE and key not in keys:
            keys.append(key)
    if len(keys) < 2:
        for key in keys:
            _CACHE[key] = _run(key)
        return
    previous = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # inherited by the spawned workers
    try:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(WORKERS, mp_context=context) as pool:
            for key, result in zip(keys, pool.map(_run, keys)):
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
