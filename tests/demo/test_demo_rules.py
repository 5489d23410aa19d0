"""Every fusion rule is real: when it fires it changes the computation, and some
rules only fire after another one has (chains)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from fusion_dd.demo import DEFAULT_SCENARIO, candidate_rules
from fusion_dd.demo.data import DataSpec
from fusion_dd.demo.trainer import TrainConfig, TrainResult, run_training

NAMES = [rule.name for rule in candidate_rules(DEFAULT_SCENARIO)]
# A few steps on a small held-out set: enough for every rule to move some bits
# (gradient clipping and momentum are active from the first steps).
_CONFIG = TrainConfig(steps=8, data=DataSpec(train=1024, test=256))


@lru_cache(maxsize=None)
def _run(on: frozenset[str]) -> TrainResult:
    """Benign kernels only: these tests are about numerics, not planted faults."""
    return run_training(_CONFIG, lambda rule: rule.name in on)


def _fired(result: TrainResult) -> set[str]:
    return {
        name
        for stats in result.stats.values()
        for name, count in stats.counts.items()
        if count.effect_times > 0
    }


def _same(a: TrainResult, b: TrainResult) -> bool:
    return np.array_equal(a.weights, b.weights) and np.array_equal(a.outputs, b.outputs)


def test_all_off_fires_nothing_and_all_on_fires_every_candidate() -> None:
    assert _fired(_run(frozenset())) == set()
    assert _fired(_run(frozenset(NAMES))) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_rule_changes_numerics_among_all_the_others(name: str) -> None:
    everything = frozenset(NAMES)
    assert not _same(_run(everything - {name}), _run(everything)), name


@pytest.mark.parametrize("name", NAMES)
def test_rule_alone_changes_numerics_exactly_when_it_fires(name: str) -> None:
    alone = _run(frozenset({name}))
    if name in _fired(alone):
        assert not _same(alone, _run(frozenset())), f"{name} fired without effect"
    else:
        assert _same(alone, _run(frozenset())), f"{name} changed numerics without firing"


def test_there_are_chains() -> None:
    """Rules that find their pattern only in what another rule produced."""
    chained = [name for name in NAMES if name not in _fired(_run(frozenset({name})))]
    assert len(chained) >= 5
    assert "LayerNormGradFusionPass" in chained
    with_prerequisite = _run(frozenset({"LayerNormFusionPass", "LayerNormGradFusionPass"}))
    assert "LayerNormGradFusionPass" in _fired(with_prerequisite)
