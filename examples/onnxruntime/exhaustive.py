"""Every configuration of the example's candidates, in one process: the culprit sets fusion-dd must find.

A configuration fails when the optimized output differs at all from the
unoptimized one's (score.tolerance: 0 in fusion-dd.yaml); the culprit sets are
the failing configurations none of whose proper subsets fails. Prints them, one
a line, names sorted. Run: python exhaustive.py
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import block  # noqa: E402


def culprit_sets() -> list[frozenset[str]]:
    names = yaml.safe_load((Path(__file__).resolve().parent / "fusion-dd.yaml").read_text())["rules"]["names"]
    model = block.build_model()
    x = np.random.default_rng(1).normal(size=(8, block.WIDTH)).astype(np.float32)
    providers = ["CPUExecutionProvider"]
    reference = ort.InferenceSession(model, block.options(ort.GraphOptimizationLevel.ORT_DISABLE_ALL), providers=providers)
    want = reference.run(None, {"X": x})[0]
    failing: list[frozenset[str]] = []
    for size in range(len(names) + 1):
        for enabled in itertools.combinations(names, size):
            off = [name for name in names if name not in enabled]
            session = ort.InferenceSession(
                model, block.options(ort.GraphOptimizationLevel.ORT_ENABLE_ALL), providers=providers, disabled_optimizers=off
            )
            if np.abs(session.run(None, {"X": x})[0].astype(np.float64) - want).max() > 0:
                failing.append(frozenset(enabled))
    return sorted({s for s in failing if not any(t < s for t in failing)}, key=lambda s: (len(s), sorted(s)))


if __name__ == "__main__":
    for culprit in culprit_sets():
        print(" ".join(sorted(culprit)))
