"""The demo scenarios: which fused kernels carry a planted fault, and the API the CLI uses.

Every scenario trains the same network through the same compiler; a scenario only
decides which fused kernels are the buggy variant (``faults``) and how long to
train. ``planted`` names the culprit sets a search must find: one set per fault,
a single rule for an independent culprit, two rules for an interacting pair.

This module stays numpy-free so that ``fusion-dd demo --list-scenarios`` is fast;
``candidate_rules`` imports the compiler lazily.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import lru_cache

from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import AUTOFUSE_POINTS, Rule

from .passes_autofuse import FAULT_AUTOFUSE_REDUCE_FP16
from .passes_base import (
    FAULT_LAYERNORM_ONE_PASS_FP16,
    FAULT_SOFTMAX_CE_FP16_NO_MAX,
    FAULT_VARIANCE_IN_INPUT_DTYPE,
)

TRAIN_MODULE = "fusion_dd.demo.train"

_LAYERNORM = frozenset({"LayerNormFusionPass"})
_PAIR = frozenset({"CastRemoveFusionPass", "ZReduceMeanVarianceFusionPass"})
_NAN = frozenset({"SoftmaxCrossEntropyWithLogitsPass"})
_AUTOFUSE_REDUCE = frozenset({"elemwise", "reduce"})
_LAYERNORM_LAYERS = ("ln_a",)
_PAIR_LAYERS = ("ln_a", "ln_b")


@dataclass(frozen=True)
class Scenario:
    """One demo training: its planted culprit sets and default length."""

    name: str
    description: str
    planted: tuple[frozenset[str], ...]
    steps: int = 120
    faults: frozenset[str] = field(default_factory=frozenset)
    #: Per planted set, the layers (name scopes) its fault damages: where a tensor
    #: comparison of the culprit's dump against the fix's must localize it. The
    #: pair damages the variance of whichever of ln_a/ln_b no LayerNorm fusion took.
    damaged: tuple[tuple[str, ...], ...] = ()
    #: The step whose tensors the demo dumps: the first, or for a NaN fault the
    #: step where the culprit's loss first turns non-finite (a user dumps that one).
    dump_step: int = 1
    #: The demo's search runs with AutoFuse on (``AUTOFUSE_FLAGS``): its switch
    #: points that fire are candidates beside the fusion rules.
    autofuse: bool = False


SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        Scenario(
            name="mixed",
            description=(
                "One independent culprit and one interacting pair: the fused LayerNorm "
                "computes the variance in one pass in fp16, and removing an fp32 up-cast "
                "breaks a fused variance that accumulates in its input dtype."
            ),
            planted=(_LAYERNORM, _PAIR),
            faults=frozenset({FAULT_LAYERNORM_ONE_PASS_FP16, FAULT_VARIANCE_IN_INPUT_DTYPE}),
            damaged=(_LAYERNORM_LAYERS, _PAIR_LAYERS),
        ),
        Scenario(
            name="layernorm",
            description=(
                "A single culprit: the fused LayerNorm computes E[x^2]-E[x]^2 in fp16, "
                "which cancels catastrophically on readings with a large offset."
            ),
            planted=(_LAYERNORM,),
            faults=frozenset({FAULT_LAYERNORM_ONE_PASS_FP16}),
            damaged=(_LAYERNORM_LAYERS,),
        ),
        Scenario(
            name="pair",
            description=(
                "An interacting pair, harmless alone: CastRemoveFusionPass drops an fp32 "
                "up-cast, ZReduceMeanVarianceFusionPass then accumulates a variance in fp16."
            ),
            planted=(_PAIR,),
            faults=frozenset({FAULT_VARIANCE_IN_INPUT_DTYPE}),
            damaged=(_PAIR_LAYERS,),
        ),
        Scenario(
            name="nan",
            description=(
                "A NaN culprit: the fused softmax cross-entropy takes exp of the raw logits "
                "in fp16 without subtracting the max; it overflows to Inf and the loss is NaN."
            ),
            planted=(_NAN,),
            faults=frozenset({FAULT_SOFTMAX_CE_FP16_NO_MAX}),
            damaged=(("loss",),),
            dump_step=31,
        ),
        Scenario(
            name="autofuse",
            description=(
                "AutoFuse (AUTOFUSE_FLAGS) on, beside a fusion rule: AutoFuse's Reduce fusion "
                "sums gradient clipping's squares with an fp16 accumulator, which overflows, so "
                "no step updates the weights (a pair: Reduce fusion acts only with AutoFuse "
                "on); and the fused LayerNorm computes its variance in one pass in fp16."
            ),
            planted=(_AUTOFUSE_REDUCE, _LAYERNORM),
            steps=60,
            faults=frozenset({FAULT_AUTOFUSE_REDUCE_FP16, FAULT_LAYERNORM_ONE_PASS_FP16}),
            damaged=(("clip",), _LAYERNORM_LAYERS),
            autofuse=True,
        ),
        Scenario(
            name="quick",
            description=(
                "The LayerNorm culprit alone with few training steps: a fast end-to-end "
                "check (used by CI)."
            ),
            planted=(_LAYERNORM,),
            steps=40,
            faults=frozenset({FAULT_LAYERNORM_ONE_PASS_FP16}),
            damaged=(_LAYERNORM_LAYERS,),
        ),
    )
}

DEFAULT_SCENARIO = "mixed"
QUICK_SCENARIO = "quick"


def get_scenario(name: str) -> Scenario:
    """The scenario called ``name``; a UsageError listing the known ones otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        known = ", ".join(SCENARIOS)
        raise UsageError(f"unknown demo scenario {name!r}; choose one of: {known}") from None


@lru_cache(maxsize=None)
def _candidates(name: str) -> tuple[Rule, ...]:
    from .network import NetSpec, build_eval_graph, build_optimizer_graph, build_train_graph
    from .passes_autofuse import AUTOFUSE_OFF, AutoFuseSwitch
    from .pipeline import compile_graph

    scenario = get_scenario(name)
    seen: dict[Rule, None] = {}
    autofuse = AutoFuseSwitch.of(AUTOFUSE_POINTS) if scenario.autofuse else AUTOFUSE_OFF
    for build in (build_train_graph, build_optimizer_graph, build_eval_graph):
        _, stats = compile_graph(build(NetSpec()), lambda rule: True, scenario.faults, autofuse)
        for rule in stats.effective():
            seen.setdefault(rule, None)
    return tuple(seen)


def candidate_rules(scenario_name: str) -> list[Rule]:
    """The rules this scenario's network fires with every fusion on.

    This is what a user would read from the all-on run's ``fusion_result.json``
    (passes with ``effect_times > 0``), in compiler order, each with its section;
    for a scenario with AutoFuse on, then the AutoFuse switch points that fused.
    """
    return list(_candidates(scenario_name))


def train_command(
    scenario_name: str,
    *,
    steps: int | None = None,
    noise: float = 0.0,
    python: str = sys.executable,
) -> list[str]:
    """The argv of one demo training, with fusion-dd's ``{switch_file}`` placeholder."""
    get_scenario(scenario_name)
    argv = [python, "-m", TRAIN_MODULE, "--scenario", scenario_name]
    argv += ["--fusion-switch", "{switch_file}"]
    if steps is not None:
        argv += ["--steps", str(steps)]
    if noise:
        argv += ["--noise", repr(float(noise))]
    return argv
