"""Synthetic sensor data, generated from a seed (no download).

Each class is a pair (token pattern, global pattern): three patterns over the six
sensor tokens times two patterns over the global features, so a classifier needs
both branches of the network; breaking either branch costs at least a third of
the accuracy. Every sample carries a random per-sample offset of 30-60 raw units
(sensor drift) that only a LayerNorm removes, and readings are stored in fp16 as
an input pipeline would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .network import NetSpec

TOKEN_PATTERNS = 3
GLOBAL_PATTERNS = 2


@dataclass(frozen=True)
class Split:
    readings: np.ndarray  # (n, tokens, readings), fp16 values held in float32
    global_: np.ndarray  # (n, global_features)
    labels: np.ndarray  # (n,) int64


@dataclass(frozen=True)
class DataSpec:
    train: int = 3072
    test: int = 4096
    token_noise: float = 1.0
    global_noise: float = 0.9
    offset_low: float = 30.0
    offset_high: float = 60.0


def make_data(net: NetSpec, data: DataSpec, seed: int) -> tuple[Split, Split]:
    """Train and held-out splits drawn from one seeded distribution."""
    rng = np.random.default_rng([seed, 20240601])
    token_protos = rng.normal(size=(TOKEN_PATTERNS, net.tokens, net.readings))
    token_protos -= token_protos.mean(axis=-1, keepdims=True)
    global_protos = rng.normal(size=(GLOBAL_PATTERNS, net.global_features))
    global_protos -= global_protos.mean(axis=-1, keepdims=True)
    gains = rng.uniform(0.7, 1.4, size=(net.tokens, 1))

    def draw(n: int) -> Split:
        labels = rng.integers(0, net.classes, size=n)
        token_class = labels % TOKEN_PATTERNS
        global_class = labels // TOKEN_PATTERNS
        noise = rng.normal(scale=data.token_noise, size=(n, net.tokens, net.readings))
        drift = rng.uniform(data.offset_low, data.offset_high, size=(n, net.tokens, 1))
        readings = drift + gains * (token_protos[token_class] + noise)
        gnoise = rng.normal(scale=data.global_noise, size=(n, net.global_features))
        gdrift = rng.uniform(data.offset_low, data.offset_high, size=(n, 1))
        global_ = gdrift + global_protos[global_class] + gnoise
        return Split(
            readings=readings.astype(np.float16).astype(np.float32),
            global_=global_.astype(np.float16).astype(np.float32),
            labels=labels.astype(np.int64),
        )

    return draw(data.train), draw(data.test)
