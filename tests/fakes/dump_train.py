#!/usr/bin/env python3
"""A fake training that dumps its layers' outputs as ``.npy`` files (for localization tests).

Four layers ``layer_0`` .. ``layer_3`` transform a fixed input. ``--breaks RULE@K``
(repeatable; ``A+B@K`` for rules that break layer K only together) adds an
error to layer K's output while the rule(s) are on in ``$FUSION_DD_SWITCH_FILE``
(a rule the file does not mention is on, as in CANN); the training then reports
``accuracy: 0.5`` instead of ``0.9``. With ``FUSION_DD_DUMP_DIR`` set, every
layer's output is dumped through ``fusion_dd.integrations.dump_tensors``, and
``--dump-log FILE`` gets one line per dumping run (so tests can count them).
Same input, same weights every run: only the switched-on rules change a number.
"""

from __future__ import annotations

import argparse
import os
import sys

# The switch file is read by fake_train.py's own stdlib reader (next to this file),
# not by fusion-dd's: the training checks what fusion-dd wrote against the format.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_train import load_switch  # noqa: E402

LAYERS = 4


def _dump_layers(broken: dict[int, bool]) -> None:
    """Run the four layers and dump each output (numpy and fusion-dd imported only here:
    a training that does not dump skips them, as its accuracy depends on ``broken`` alone)."""
    import numpy as np

    from fusion_dd.integrations import dump_tensors

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    for layer in range(LAYERS):
        weights = rng.standard_normal((16, 16)).astype(np.float32) / 4
        x = np.tanh(x @ weights)
        if broken.get(layer):
            x = x + np.float32(0.5)
        dump_tensors(f"layer_{layer}/out", x)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--breaks", action="append", default=[], metavar="RULE[+RULE]@LAYER")
    parser.add_argument("--dump-log")
    args = parser.parse_args()
    switch = load_switch(os.environ["FUSION_DD_SWITCH_FILE"])

    def on(name: str) -> bool:
        state = switch.state(name, "GraphFusion")
        return True if state is None else state

    broken: dict[int, bool] = {}
    for item in args.breaks:
        names, _, layer = item.partition("@")
        if all(on(name) for name in names.split("+")):
            broken[int(layer)] = True
    if os.environ.get("FUSION_DD_DUMP_DIR", "").strip():
        _dump_layers(broken)
    if os.environ.get("FUSION_DD_DUMP_DIR") and args.dump_log:
        with open(args.dump_log, "a", encoding="utf-8") as log:
            log.write(os.environ["FUSION_DD_DUMP_DIR"] + "\n")
    print(f"accuracy: {0.5 if broken else 0.9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
