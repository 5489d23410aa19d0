"""The graph IR of the simulated NPU: named nodes in topological order.

This mirrors what CANN's graph engine works on: a training step is one graph of
operators, fusion passes rewrite it, and every fused operator remembers which
passes produced it (``pass_name`` / ``pass_name_ub``, docs/architecture.md 2.4). The module is
numpy-free so that listing a scenario's candidate rules costs no array work.

A fused node keeps the *name* of the node whose output it replaces, so consumers
and graph outputs never need rewiring when a pattern collapses into one kernel.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .dtypes import FP16, FP32

#: Ops whose output dtype is fixed by an attribute rather than promoted from inputs.
_SOURCE_OPS = {"Data", "Variable"}


@dataclass
class Node:
    """One operator instance.

    ``inputs`` name other nodes. ``dtype`` is derived by ``Graph.infer_dtypes``
    (fp32 wins over fp16, like a mixed-precision graph after cast insertion),
    unless ``attrs["out_dtype"]`` pins it. ``inner`` holds the original nodes of
    a fused kernel (op ``"FusedKernel"``): they run inside one kernel, so their
    intermediate results never get rounded to the fp16 of global memory.
    """

    name: str
    op: str
    inputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    dtype: str = FP32
    pass_name: list[str] = field(default_factory=list)
    pass_name_ub: str | None = None
    inner: list[Node] = field(default_factory=list)
    #: The original (pre-fusion) nodes a fused node replaced, as GE's
    #: ``_datadump_original_op_names`` lists them; empty for an unfused node.
    original_names: list[str] = field(default_factory=list)


class Graph:
    """An ordered set of nodes; ``outputs`` are the tensors the step returns."""

    def __init__(self, name: str, *, training: bool = False) -> None:
        self.name = name
        #: True when autodiff runs on this graph, so backward-kernel passes apply.
        self.training = training
        self.nodes: list[Node] = []
        self._by_name: dict[str, Node] = {}
        self.outputs: list[str] = []
        self._consumers: dict[str, list[Node]] | None = None
        self._counter = 0

    # -- construction -----------------------------------------------------
    def add(
        self,
        op: str,
        inputs: Iterable[str] = (),
        *,
        name: str | None = None,
        **attrs: Any,
    ) -> str:
        if name is None:
            self._counter += 1
            name = f"{op}_{self._counter}"
        if name in self._by_name:
            raise ValueError(f"duplicate node name {name!r}")
        for source in inputs:
            if source not in self._by_name:
                raise ValueError(f"{name}: unknown input {source!r}")
        node = Node(name=name, op=op, inputs=list(inputs), attrs=dict(attrs))
        self.nodes.append(node)
        self._by_name[name] = node
        self._consumers = None
        return name

    def copy(self) -> Graph:
        return copy.deepcopy(self)

    # -- queries ------------------------------------------------------------
    def __getitem__(self, name: str) -> Node:
        return self._by_name[name]

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self.nodes))

    def consumers(self, name: str) -> list[Node]:
        if self._consumers is None:
            table: dict[str, list[Node]] = {node.name: [] for node in self.nodes}
            for node in self.nodes:
                for source in node.inputs:
                    table[source].append(node)
            self._consumers = table
        return self._consumers[name]

    def sole_consumer(self, name: str) -> Node | None:
        """The only consumer of ``name``, or None (graph outputs count as consumers)."""
        users = self.consumers(name)
        if len(users) != 1 or name in self.outputs:
            return None
        return users[0]

    def producer(self, node: Node, index: int = 0) -> Node:
        return self._by_name[node.inputs[index]]

    # -- rewriting ----------------------------------------------------------
    def fuse(self, members: list[Node], fused: Node) -> None:
        """Replace ``members`` by ``fused``, which takes the last member's name and slot.

        Only the last member may be used outside the group: fusion passes check
        that before calling, as CANN's matchers do.
        """
        last = members[-1]
        fused.name = last.name
        gone = {node.name for node in members}
        provenance: list[str] = []
        originals: list[str] = []
        for node in members:
            for original in node.original_names or [node.name]:
                if original not in originals:
                    originals.append(original)
        fused.original_names = originals
        for node in members:
            for pass_name in node.pass_name:
                if pass_name not in provenance:
                    provenance.append(pass_name)
        fused.pass_name = provenance + [p for p in fused.pass_name if p not in provenance]
        kept = []
        for node in self.nodes:
            if node is last:
                kept.append(fused)
            elif node.name not in gone:
                kept.append(node)
        self.nodes = kept
        for name in gone:
            del self._by_name[name]
        self._by_name[fused.name] = fused
        self._consumers = None

    def bypass(self, node: Node) -> None:
        """Remove a single-input node, wiring its consumers to its input."""
        source = node.inputs[0]
        for user in self.consumers(node.name):
            user.inputs = [source if name == node.name else name for name in user.inputs]
        if node.name in self.outputs:
            self.outputs = [source if name == node.name else name for name in self.outputs]
        self.nodes = [n for n in self.nodes if n is not node]
        del self._by_name[node.name]
        self._consumers = None

    def insert_before(self, anchor: str, node: Node) -> None:
        """Add a new node just before ``anchor`` (its inputs must already exist)."""
        if node.name in self._by_name:
            raise ValueError(f"duplicate node name {node.name!r}")
        position = next(i for i, n in enumerate(self.nodes) if n.name == anchor)
        self.nodes.insert(position, node)
        self._by_name[node.name] = node
        self._consumers = None

    def walk(self) -> Iterator[Node]:
        """Every node, including the original ops inside fused kernels."""
        for node in list(self.nodes):
            yield node
            yield from node.inner

    # -- dtypes ---------------------------------------------------------------
    def infer_dtypes(self) -> None:
        """Propagate dtypes: pinned by attrs, otherwise fp32 if any float input is fp32."""
        for node in self.nodes:
            node.dtype = self._dtype_of(node)
            for inner in node.inner:
                inner.dtype = FP32

    def _dtype_of(self, node: Node) -> str:
        pinned = node.attrs.get("out_dtype")
        if pinned is not None:
            return pinned
        if node.op in _SOURCE_OPS:
            return node.attrs.get("dtype", FP32)
        if node.op == "Cast":
            return node.attrs["to"]
        floats = [
            self._by_name[name].dtype
            for name in node.inputs
            if self._by_name[name].dtype in (FP16, FP32)
        ]
        if not floats:
            return FP32
        return FP32 if FP32 in floats else FP16
