"""Every configuration of the example's candidates, one process each: the culprit sets fusion-dd must find.

XLA reads XLA_FLAGS once per process, so each configuration is its own run of
model.py (about 2 s each, 16 configurations). A configuration fails when its
value differs at all from the all-off baseline's (score.tolerance: 0); the
culprit sets are the failing configurations none of whose proper subsets fails.
Run: python exhaustive.py
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def value(enabled: tuple[str, ...], names: list[str]) -> str:
    off = [name for name in names if name not in enabled]
    passes = [name for name in off if not name.startswith("xla_")]
    flags = [f"--{name}=false" for name in off if name.startswith("xla_")]
    if passes:
        flags.append("--xla_disable_hlo_passes=" + ",".join(passes))
    env = {**os.environ, "XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, str(HERE / "model.py")], env=env, check=True, capture_output=True, text=True)
    return out.stdout.split()[-1]


def culprit_sets() -> list[frozenset[str]]:
    names = yaml.safe_load((HERE / "fusion-dd.yaml").read_text())["rules"]["names"]
    baseline = value((), names)
    failing = [
        frozenset(enabled)
        for size in range(1, len(names) + 1)
        for enabled in itertools.combinations(names, size)
        if value(enabled, names) != baseline
    ]
    return sorted({s for s in failing if not any(t < s for t in failing)}, key=lambda s: (len(s), sorted(s)))


if __name__ == "__main__":
    for culprit in culprit_sets():
        print(" ".join(sorted(culprit)))
