"""AutoFuse, CANN's second fusion mechanism, in the simulated compiler.

CANN 8.3 and later fuse operators beside the rules of ``fusion_switch.cfg``:
AutoFuse, switched only by the environment variable ``AUTOFUSE_FLAGS``
(``--key=value`` items separated by ``;``). The demo training reads it exactly
like CANN (``AutoFuseSwitch.parse``):

* ``--enable_autofuse=true|false`` (default false) is AutoFuse as a whole, the
  ``elemwise`` switch point: chains of elementwise ops become one kernel that
  keeps its intermediates in fp32 (no fp16 round trip between the ops);
* ``--autofuse_enable_pass=reduce`` adds the ``reduce`` capability: a reduction
  is fused into the elementwise ops that produce its input, so the reduced
  tensor is never written out (``--autofuse_disable_pass`` switches it off, the
  default). With AutoFuse off the capabilities do nothing, as in CANN;
* ``concat`` is parsed like ``reduce`` but the demo network has no Concat.

The pipeline runs this stage after the model's GraphFusion passes (so a fusion
rule and AutoFuse never compete for a model op: the rule wins, the stage fuses
what the rules left) and before the optimizer's passes and UB fusion (so on the
update step AutoFuse's Reduce fusion takes the per-tensor sums of squares of
gradient clipping before SquareSumV2 does). That order is the simulator's choice.

The planted fault (``FAULT_AUTOFUSE_REDUCE_FP16``): the AutoFuse-fused reduce
accumulates in fp16 whatever its input dtype. With Reduce on, gradient clipping's
per-tensor sums of squares (of loss-scaled gradients), the AddN of their global
sum and the clip factor are one kernel; in fp16 the global sum overflows to Inf,
the clip factor becomes 0 and the update step is lost, so the training never
learns. The fault needs both ``elemwise`` and ``reduce`` on: the pair
{elemwise, reduce}, whatever the fusion rules do (they never take those ops first).

The compiler is given the switch explicitly (``compile_graph(..., autofuse=...)``),
never through the rule decision, so that "every rule on" leaves AutoFuse off as
CANN does without ``AUTOFUSE_FLAGS``.

AutoFuse's counts are not written to ``fusion_result.json`` (CANN reports only
the fusion rules there); ``FusionStats.autofuse`` keeps them for the demo's own
candidate list. Numpy-free, like the other passes; the fused reduce's kernel is
in ``autofuse_kernels``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fusion_dd.backends.cann.autofuse import DISABLE_PASS, ENABLE, ENABLE_PASS, FLAGS_ENV, parse_flags
from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import AUTOFUSE_POINTS

from .graph import Graph, Node
from .passes_base import ELEMENTWISE, MEANS, SUMS, Faults, fuse_kernel, sole

#: The planted fault: AutoFuse's fused reduce keeps an fp16 accumulator.
FAULT_AUTOFUSE_REDUCE_FP16 = "autofuse_reduce_accumulates_in_fp16"

ELEMWISE, REDUCE, CONCAT = AUTOFUSE_POINTS
CAPABILITIES = (REDUCE, CONCAT)
#: The ops a fused reduce, and an AddN adding reduced values, become inside an
#: AutoFuse kernel (autofuse_kernels.py).
FUSED_REDUCE = "AscReduce"
FUSED_ADDN = "AscAddN"
#: What AutoFuse's Elemwise fusion takes: the elementwise ops, and AddN (an n-ary Add).
ELEMWISE_OPS = ELEMENTWISE | {"AddN"}
#: ``pass_name`` of an AutoFuse kernel in the compiled graph (and its dump).
PASS_NAME = "AutoFuse"

@dataclass(frozen=True)
class AutoFuseSwitch:
    """What ``AUTOFUSE_FLAGS`` switches on: AutoFuse itself and its capabilities."""

    enabled: bool = False
    capabilities: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str | None) -> AutoFuseSwitch:
        """Read ``AUTOFUSE_FLAGS`` like CANN; bad values are a UsageError naming the item.

        Keys the simulator does not know (``--autofuse_dfx...``, a user's own) are
        ignored, as are capabilities other than reduce and concat.
        """
        items = parse_flags(text)
        enable = items.get(ENABLE, "false").strip().lower()
        if enable not in ("true", "false"):
            raise UsageError(
                f"{FLAGS_ENV}: {ENABLE}={items[ENABLE]!r} must be true or false; fix or unset {FLAGS_ENV}"
            )
        on = _listed(items, ENABLE_PASS)
        off = _listed(items, DISABLE_PASS)
        both = sorted(on & off)
        if both:
            raise UsageError(
                f"{FLAGS_ENV}: {', '.join(both)} is in both {ENABLE_PASS} and {DISABLE_PASS}; "
                "keep it in one of them"
            )
        return cls(enabled=enable == "true", capabilities=frozenset(on & set(CAPABILITIES)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AutoFuseSwitch:
        return cls.parse(environ.get(FLAGS_ENV))

    @classmethod
    def of(cls, names: Iterable[str]) -> AutoFuseSwitch:
        """The switch with these points on (other names are ignored): what the demo's tests train."""
        chosen = set(names)
        return cls(enabled=ELEMWISE in chosen, capabilities=frozenset(chosen & set(CAPABILITIES)))

    def is_on(self, name: str) -> bool:
        """Whether a switch point acts: a capability only while AutoFuse is on."""
        if name == ELEMWISE:
            return self.enabled
        return self.enabled and name in self.capabilities

    def describe(self) -> str:
        if not self.enabled:
            return "AutoFuse off"
        extra = sorted(self.capabilities)
        return "AutoFuse on" + (f" (+ {', '.join(extra)})" if extra else "")


def _listed(items: Mapping[str, str], key: str) -> set[str]:
    return {value.strip() for value in items.get(key, "").split(",") if value.strip()}


#: CANN's default, and the compiler's unless told otherwise.
AUTOFUSE_OFF = AutoFuseSwitch()


def run_autofuse(graph: Graph, switch: AutoFuseSwitch, faults: Faults) -> dict[str, int]:
    """Fuse ``graph`` (in place) as AutoFuse would; the kernels fused per switch point.

    The switch is explicit, not a rule decision, because AutoFuse is off unless
    ``AUTOFUSE_FLAGS`` says otherwise: a decision that switches "every rule" on
    must not switch AutoFuse on with them.

    1. Elemwise: every maximal chain of elementwise ops (each the sole consumer of
       the one before) becomes one kernel. With Reduce on, a reduction that alone
       consumes the chain's end joins it (the reduced tensor is never written out).
    2. Reduce: a reduce kernel whose only consumer is another AutoFuse kernel is
       fused into it, and an AddN there that adds reduced values continues their
       accumulation: the per-tensor sums of squares of gradient clipping, their
       global sum and the clip factor become one kernel.
    """
    if not switch.is_on(ELEMWISE):
        return {}
    fuse_reduce = switch.is_on(REDUCE)
    accumulate = "fp16" if FAULT_AUTOFUSE_REDUCE_FP16 in faults else "fp32"
    counts = {ELEMWISE: 0, REDUCE: 0}
    for head in [node for node in graph.nodes if node.op in ELEMWISE_OPS]:
        if head.name not in graph or graph[head.name] is not head:
            continue  # already inside a kernel fused from an earlier head
        chain = _elementwise_chain(graph, head)
        reduce = _fusable_reduce(graph, chain[-1]) if fuse_reduce else None
        if reduce is not None:
            fused = fuse_kernel(graph, chain + [reduce], PASS_NAME, ub=False)
            inner = fused.inner[-1]
            inner.attrs["kind"] = "mean" if inner.op in MEANS else "sum"
            inner.attrs["accumulate"] = accumulate
            inner.op = FUSED_REDUCE
            counts[REDUCE] += 1
            counts[ELEMWISE] += len(chain) > 1
        elif len(chain) > 1:
            fuse_kernel(graph, chain, PASS_NAME, ub=False)
            counts[ELEMWISE] += 1
    if fuse_reduce:
        _fuse_reductions_into_consumers(graph, accumulate)
    graph.infer_dtypes()
    return {name: count for name, count in counts.items() if count}


def _is_kernel(node: Node) -> bool:
    return node.op == "FusedKernel" and PASS_NAME in node.pass_name


def _reduces(node: Node) -> bool:
    return _is_kernel(node) and node.inner[-1].op == FUSED_REDUCE


def _fuse_reductions_into_consumers(graph: Graph, accumulate: str) -> None:
    for consumer in [node for node in graph.nodes if _is_kernel(node)]:
        producers = [graph[name] for name in dict.fromkeys(consumer.inputs)]
        reduces = [node for node in producers if _reduces(node) and sole(graph, node) is consumer]
        if not reduces:
            continue
        reduced = {node.name for node in reduces}
        fused = fuse_kernel(graph, reduces + [consumer], PASS_NAME, ub=False)
        for inner in fused.inner:
            if inner.op == "AddN" and all(source in reduced for source in inner.inputs):
                inner.op = FUSED_ADDN
                inner.attrs["accumulate"] = accumulate


def _elementwise_chain(graph: Graph, head: Node) -> list[Node]:
    """``head`` and the elementwise ops after it, each the sole consumer of the one before."""
    chain = [head]
    user = sole(graph, head)
    while user is not None and user.op in ELEMWISE_OPS:
        chain.append(user)
        user = sole(graph, user)
    return chain


def _fusable_reduce(graph: Graph, last: Node) -> Node | None:
    """The reduction that alone consumes ``last`` (the end of an elementwise chain), if any."""
    user = sole(graph, last)
    if user is None or user.op not in MEANS + SUMS or user.inputs[0] != last.name:
        return None
    return user
