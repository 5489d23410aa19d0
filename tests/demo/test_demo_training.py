"""Determinism and the --noise option of the demo training (in-process)."""

from __future__ import annotations

import numpy as np

from fusion_dd.demo.data import DataSpec
from fusion_dd.demo.trainer import TrainConfig, run_training

_SMALL = DataSpec(train=512, test=256)


def _weights(**config: object) -> np.ndarray:
    result = run_training(TrainConfig(steps=3, data=_SMALL, **config), lambda rule: True)
    return result.weights


def test_same_seed_same_run_without_noise() -> None:
    assert np.array_equal(_weights(), _weights())
    assert np.array_equal(_weights(repeat=0), _weights(repeat=5))  # repeats only matter with noise


def test_noise_jitters_each_repeat_reproducibly() -> None:
    first = _weights(noise=0.05, repeat=1)
    assert not np.array_equal(first, _weights())
    assert not np.array_equal(first, _weights(noise=0.05, repeat=2))
    assert np.array_equal(first, _weights(noise=0.05, repeat=1))


def test_seed_changes_the_data_and_the_initialisation() -> None:
    assert not np.array_equal(_weights(seed=0), _weights(seed=1))


def test_learning_happens() -> None:
    result = run_training(TrainConfig(steps=30, data=_SMALL), lambda rule: False)
    assert result.losses[-1][1] < 0.7 * result.losses[0][1]
    assert result.accuracy > 0.5
