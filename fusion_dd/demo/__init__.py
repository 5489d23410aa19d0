"""The built-in simulated-NPU demo training behind ``fusion-dd demo``.

A small numpy graph engine trains a mixed-precision sensor classifier. Its graph
goes through a simulated CANN compiler whose fusion passes (real CANN pass names,
GraphFusion and UBFusion) rewrite it into fused kernels with their own numerics;
each scenario plants faults in some of those kernels. The training is launched
exactly like a user's: ``python -m fusion_dd.demo.train`` reads
``fusion_switch.cfg``, prints ``accuracy: X`` and writes ``fusion_result.json``.

Importing this package does not import numpy.
"""

from .scenarios import (
    DEFAULT_SCENARIO,
    QUICK_SCENARIO,
    SCENARIOS,
    Scenario,
    candidate_rules,
    get_scenario,
    train_command,
)

__all__ = [
    "DEFAULT_SCENARIO",
    "QUICK_SCENARIO",
    "SCENARIOS",
    "Scenario",
    "candidate_rules",
    "get_scenario",
    "train_command",
]
