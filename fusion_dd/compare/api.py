"""``compare_dumps``: the op-by-op comparison of a fusion-on and a fusion-off dump.

This is the library call behind ``fusion-dd compare`` and behind localization
after a search: given two dump directories (and optionally the fusion-on and
fusion-off GE graph dumps), it pairs the tensors, computes the metrics in
topological order of the fusion-on graph and returns a ``Comparison``:

* ``first_divergence``: the first pair judged bad, i.e. the op whose output goes
  wrong first, with its type, its fusion rules (``pass_name``/``pass_name_ub``),
  the original layers it replaced and its metrics;
* ``top(n)``: the worst pairs;
* ``problems``: files and ops that could not be compared, each with a reason;
* ``to_json()`` / ``localization()``: plain data for ``compare.json`` and
  ``report.json``.

It prints nothing and exits nothing: a wrong argument (a directory that is no
dump, a step or model that is not there) raises ``UsageError``; bad files are
problems in the result. Only the ``progress`` callback, when given, reports.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends.cann.artifacts.graph import GraphModel
from ..backends.cann.artifacts.layout import LayoutError
from ..core.errors import UsageError
from .metrics import Metrics, Thresholds, compare_arrays, compare_statistics, tensor_statistics
from .pairing import Pair, pair_tensors
from .sources import DumpedTensor, DumpGroup, FileProblem, scan, select

#: Below this many bytes in all, worker processes cost more than they save.
PARALLEL_MIN_BYTES = 64 << 20

Progress = Callable[[int, int, int], None]  # (pairs done, pairs in all, bytes done)


@dataclass(frozen=True)
class ComparedPair:
    """One compared tensor pair: where it is, what made it, how far apart it is."""

    position: int
    op: str
    op_type: str
    output: int
    off_op: str
    off_output: int
    relation: str
    rules: tuple[str, ...]
    layers: tuple[str, ...]
    metrics: Metrics
    bad: bool
    on_file: str
    off_file: str
    kind: str = "output"  # "input": ``output`` is then the input index
    dtype: str = ""
    shape: tuple[int, ...] = ()
    order: tuple[int, str] | None = None

    @property
    def tensor(self) -> str:
        """``output 0`` or ``input 1``."""
        return f"{self.kind} {self.output}"

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "op": self.op,
            "op_type": self.op_type,
            "tensor": self.kind,
            "index": self.output,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "output": self.output,
            "off_op": self.off_op,
            "off_output": self.off_output,
            "relation": self.relation,
            "rules": list(self.rules),
            "layers": list(self.layers),
            "metrics": self.metrics.to_json(),
            "bad": self.bad,
            "on_file": self.on_file,
            "off_file": self.off_file,
        }

    def describe(self, graph_given: bool = True) -> str:
        """``op (Rule; layers a, b): cosine 0.71, max abs 3.2``."""
        rules = " + ".join(self.rules) if self.rules else ("no fusion rule" if graph_given else "no graph given")
        return f"{self.op} ({rules}; layers {', '.join(self.layers)}): {self.metrics.short()}"


@dataclass(frozen=True)
class Divergence:
    """Where the numbers start going wrong, and the fused op to blame for it.

    ``seen_at`` is the first bad compared op. Its output may come from an op that
    fusion did not change, fed by a fused op that has no counterpart in the
    fusion-off run (e.g. a fused LayerNorm whose last original op was fused into a
    different kernel there) and therefore could not be compared itself. Then the
    nearest such fused op upstream (through ops that were not compared) is blamed:
    ``op``, ``op_type``, ``rules`` and ``layers`` describe it, ``metrics`` stay
    those seen at ``seen_at``, and ``through`` lists the uncompared ops between.
    """

    op: str
    op_type: str
    rules: tuple[str, ...]
    layers: tuple[str, ...]
    metrics: Metrics
    seen_at: str
    through: tuple[str, ...] = ()
    upstream: str | None = None  # why the cause lies before this op (its inputs already differ)
    graph_given: bool = True

    def describe(self) -> str:
        """``op (Rule; layers a, b): cosine 0.71, max abs 3.2`` (plus where it was seen)."""
        rules = " + ".join(self.rules) if self.rules else ("no fusion rule" if self.graph_given else "no graph given")
        text = f"{self.op} ({rules}; layers {', '.join(self.layers)}): {self.metrics.short()}"
        if self.seen_at != self.op:
            text += f" (seen at {self.seen_at}; {self.op} has no fusion-off counterpart)"
        if self.upstream:
            text += f" ({self.upstream})"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "op_type": self.op_type,
            "rules": list(self.rules),
            "layers": list(self.layers),
            "metrics": self.metrics.to_json(),
            "seen_at": self.seen_at,
            "through": list(self.through),
            "upstream": self.upstream,
        }


@dataclass
class Comparison:
    """The result of ``compare_dumps``; pairs are in topological order of the fusion-on run."""

    on_dir: str
    off_dir: str
    on_selected: str
    off_selected: str
    pairs: list[ComparedPair]
    problems: list[FileProblem]
    thresholds: Thresholds
    skipped_inner: int = 0
    unpaired_off: list[str] = field(default_factory=list)
    bytes_read: int = 0
    graph_on: GraphModel | None = None
    notes: list[FileProblem] = field(default_factory=list)
    overflows: list[FileProblem] = field(default_factory=list)
    unpaired_inputs: int = 0
    graph_source: str | None = None  # "given: ..." or "found in the dump: ..."

    @property
    def first_bad(self) -> ComparedPair | None:
        """The first bad pair in topological order of the fusion-on run."""
        return next((pair for pair in self.pairs if pair.bad), None)

    @property
    def first_divergence(self) -> Divergence | None:
        """The first op whose output goes bad while its compared inputs are still good.

        An op whose input already differs did not start the divergence: the
        op that produced that input did. When that producer is not in the
        comparison (not dumped, or not paired), the op is reported with a note
        that the cause lies upstream of it.
        """
        bad_inputs: dict[str, list[ComparedPair]] = {}
        for pair in self.pairs:
            if pair.kind == "input":
                if pair.bad:
                    bad_inputs.setdefault(pair.op, []).append(pair)
                continue
            if not pair.bad:
                continue
            upstream = None
            if pair.op in bad_inputs:
                inputs = ", ".join(str(p.output) for p in bad_inputs[pair.op])
                upstream = (
                    f"its input {inputs} already differs: the cause lies upstream, "
                    "in an op that was not dumped or not paired"
                )
            found = blame(pair, self.pairs, self.graph_on)
            if upstream:
                found = Divergence(found.op, found.op_type, found.rules, found.layers, found.metrics, found.seen_at,
                                   found.through, upstream, found.graph_given)  # fmt: skip
            if self.graph_on is None:
                found = Divergence(found.op, found.op_type, found.rules, found.layers, found.metrics, found.seen_at,
                                   found.through, found.upstream, False)  # fmt: skip
            return found
        return None

    def hidden_before(self) -> list[FileProblem]:
        """Fusion-on files that could not be read or decoded and ran before the first
        divergence (or anywhere, when none was found): the real first divergence may be
        among them. Ops that merely have no fusion-off counterpart are not counted: the
        blame of a divergence already looks through those."""
        first = self.first_divergence
        limit = None
        if first is not None:
            seen = next((pair for pair in self.pairs if pair.op == first.seen_at and pair.kind == "output"), None)
            limit = seen.order if seen is not None else None
        hidden = []
        for problem in self.problems:
            if problem.side != "fusion-on" or problem.order is None or problem.op is None:
                continue
            if limit is None or problem.order < limit:
                hidden.append(problem)
        return hidden

    @property
    def bad(self) -> list[ComparedPair]:
        return [pair for pair in self.pairs if pair.bad]

    def top(self, count: int = 10) -> list[ComparedPair]:
        """The ``count`` worst pairs: bad ones first, then lowest cosine, then largest error."""
        return sorted(self.pairs, key=_badness)[:count]

    def localization(self, top: int = 5) -> dict[str, Any] | None:
        """``{"op", "op_type", "rules", "layers", "metrics", "seen_at", "top"}`` of the first
        divergence (the shape of ``report.json``'s ``culprits[i].localization``), or None."""
        first = self.first_divergence
        if first is None:
            return None
        return {
            "op": first.op,
            "op_type": first.op_type,
            "rules": list(first.rules),
            "layers": list(first.layers),
            "metrics": first.metrics.to_json(),
            "seen_at": first.seen_at,
            "top": [pair.to_json() for pair in self.top(top)],
        }

    def to_json(self, top: int = 10) -> dict[str, Any]:
        return {
            "on": {"dir": self.on_dir, "selected": self.on_selected},
            "off": {"dir": self.off_dir, "selected": self.off_selected},
            "thresholds": vars(self.thresholds),
            "compared": len(self.pairs),
            "bad": len(self.bad),
            "first_divergence": None if self.first_divergence is None else self.first_divergence.to_json(),
            "first_bad": None if self.first_bad is None else self.first_bad.to_json(),
            "top": [pair.to_json() for pair in self.top(top)],
            "pairs": [pair.to_json() for pair in self.pairs],
            "problems": [problem.to_json() for problem in self.problems],
            "skipped_inner_ops": self.skipped_inner,
            "unpaired_off": self.unpaired_off,
            "unpaired_inputs": self.unpaired_inputs,
            "notes": [note.to_json() for note in self.notes],
            "overflows": [record.to_json() for record in self.overflows],
            "graph": self.graph_source,
            "may_lie_earlier": sorted({problem.op for problem in self.hidden_before() if problem.op}),
        }


def load_graph_dumps(paths: Sequence[str | Path]) -> GraphModel | None:
    """The GE graph dumps of one run (files, directories, globs) as one model, or None.

    A training compiles several graphs (one per dumped model); their op names do
    not collide, so their ops are simply pooled for pairing and provenance.
    """
    from ..backends.cann.artifacts import load_graphs

    models = load_graphs(paths) if paths else []
    if not models:
        return None
    if len(models) == 1:
        return models[0]
    return GraphModel(
        source=", ".join(model.source for model in models),
        name=models[0].name,
        graphs=tuple(name for model in models for name in model.graphs),
        ops=tuple(op for model in models for op in model.ops),
    )


def _badness(pair: ComparedPair) -> tuple[Any, ...]:
    cosine = pair.metrics.cosine
    return (not pair.bad, -1.0 if math.isnan(cosine) else cosine, -pair.metrics.max_abs, pair.position)


def compare_dumps(
    on_dir: str | Path,
    off_dir: str | Path,
    graph_on: GraphModel | None = None,
    graph_off: GraphModel | None = None,
    step: int | None = None,
    model: str | None = None,
    *,
    thresholds: Thresholds | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> Comparison:
    """Compare the fusion-on dump in ``on_dir`` with the fusion-off dump in ``off_dir``.

    ``graph_on``/``graph_off`` are the runs' GE graph dumps (``load_graph``); with
    them, tensors pair by original op names and the first divergence names its
    rules and layers; without them, by origin names in the dump or by op name.
    ``step``/``model`` choose within dumps that hold several (default: the model
    with the most ops, its first step). ``jobs`` worker processes decode in
    parallel (default: up to 4, one when the dump is small); memory stays bounded
    by one pair of tensors per worker.
    """
    thresholds = thresholds or Thresholds()
    on_scan, off_scan = scan(on_dir), scan(off_dir)
    graph_source = f"given: {graph_on.source}" if graph_on is not None else None
    if graph_on is None and on_scan.graph_files:
        graph_on = load_graph_dumps(on_scan.graph_files)
        graph_source = None if graph_on is None else f"found in the fusion-on dump: {graph_on.source}"
    if graph_off is None and off_scan.graph_files and graph_on is not None:
        graph_off = load_graph_dumps(off_scan.graph_files)
    on_group = select(on_scan, step, model)
    off_group = _select_off(off_scan, step, on_group.step, model)
    problems = [_sided(p, "fusion-on") for p in on_scan.problems] + [_sided(p, "fusion-off") for p in off_scan.problems]
    pairing = pair_tensors(on_group.tensors, off_group.tensors, graph_on, graph_off)
    problems += pairing.problems
    results = _evaluate(pairing.pairs, jobs, progress)
    compared: list[ComparedPair] = []
    total_bytes = 0
    for pair, (outcome, nbytes) in zip(pairing.pairs, results):
        total_bytes += nbytes
        if isinstance(outcome, str):
            problems.append(FileProblem(pair.on.source, outcome, op=pair.on.op, order=pair.on.order, side="fusion-on"))
            continue
        compared.append(
            ComparedPair(
                position=len(compared),
                op=pair.on.op,
                op_type=pair.op_type,
                output=pair.on.index,
                off_op=pair.off.op,
                off_output=pair.off.index,
                relation=pair.relation,
                rules=pair.rules,
                layers=pair.layers,
                metrics=outcome,
                bad=thresholds.is_bad(outcome),
                on_file=pair.on.source,
                off_file=pair.off.source,
                kind=pair.on.kind,
                dtype=pair.on.dtype,
                shape=pair.on.shape,
                order=pair.on.order,
            )
        )
    return Comparison(
        on_dir=str(on_dir),
        off_dir=str(off_dir),
        on_selected=on_group.label(),
        off_selected=off_group.label(),
        pairs=compared,
        problems=problems,
        thresholds=thresholds,
        skipped_inner=pairing.skipped_inner,
        unpaired_off=pairing.unpaired_off,
        bytes_read=total_bytes,
        graph_on=graph_on,
        notes=on_scan.notes + off_scan.notes,
        overflows=on_scan.overflows + off_scan.overflows,
        unpaired_inputs=pairing.unpaired_inputs,
        graph_source=graph_source,
    )


def _sided(problem: FileProblem, side: str) -> FileProblem:
    return FileProblem(problem.file, problem.reason, problem.op, problem.order, side)


def blame(first: ComparedPair, pairs: Sequence[ComparedPair], graph: GraphModel | None) -> Divergence:
    """The ``Divergence`` for the first bad pair: itself when fused, else the nearest
    uncompared fused op upstream of it in the fusion-on graph (breadth first)."""
    own = Divergence(first.op, first.op_type, first.rules, first.layers, first.metrics, first.op)
    if first.rules or graph is None:
        return own
    ops = {op.name: op for op in graph.ops}
    compared = {pair.op for pair in pairs}
    parents: dict[str, str] = {}
    queue = [first.op]
    seen = {first.op}
    while queue:
        name = queue.pop(0)
        op = ops.get(name)
        if op is None:
            continue
        for text in op.inputs:
            producer, _, index = text.rpartition(":")
            producer = producer or text
            if index == "-1" or producer in seen or producer in compared or producer not in ops:
                continue
            seen.add(producer)
            parents[producer] = name
            candidate = ops[producer]
            if candidate.fused:
                through = []
                step = parents[producer]
                while step != first.op:
                    through.append(step)
                    step = parents[step]
                return Divergence(
                    op=candidate.name,
                    op_type=candidate.type,
                    rules=candidate.passes(),
                    layers=tuple(dict.fromkeys(candidate.original_names)) or (candidate.name,),
                    metrics=first.metrics,
                    seen_at=first.op,
                    through=tuple(reversed(through)),
                )
            queue.append(producer)
    return own


def _select_off(scanned, step: int | None, on_step: int | None, model: str | None) -> DumpGroup:
    """The fusion-off group: the step asked for, else the fusion-on run's step if the
    fusion-off dump has it, else its own first step (runs may number steps differently)."""
    if step is not None or on_step is None:
        return select(scanned, step, model)
    try:
        return select(scanned, on_step, model)
    except UsageError:
        return select(scanned, None, model)


def compare_pair(on: DumpedTensor, off: DumpedTensor) -> tuple[Metrics | str, int]:
    """Load and compare one pair; a string is the reason it could not be compared.

    Runs in worker processes: it takes only the (picklable) tensor descriptions
    and returns only the metrics, so no array crosses a process boundary.
    """
    nbytes = on.nbytes + off.nbytes
    try:
        if on.stats or off.stats:
            return compare_statistics(_statistics(on, "fusion-on"), _statistics(off, "fusion-off")), nbytes
        x = _load(on, "fusion-on")
        y = _load(off, "fusion-off")
        return compare_arrays(x, y), nbytes
    except (LayoutError, ValueError, OSError) as exc:
        return str(exc), nbytes


def _statistics(tensor: DumpedTensor, side: str) -> dict[str, float]:
    """A statistics-only tensor's row, or the statistics of a full tensor compared with one."""
    if tensor.stats:
        return dict(tensor.stats)
    return tensor_statistics(_load(tensor, side))


def _load(tensor: DumpedTensor, side: str):
    try:
        return tensor.load()
    except (LayoutError, ValueError, OSError) as exc:
        where = f" ({tensor.source})" if side == "fusion-off" else ""
        raise ValueError(f"{side} {tensor.kind} {tensor.index}{where}: {exc}") from None


def _evaluate(pairs: Sequence[Pair], jobs: int | None, progress: Progress | None) -> list[tuple[Metrics | str, int]]:
    total = sum(pair.on.nbytes + pair.off.nbytes for pair in pairs)
    if jobs is None:
        jobs = 1 if total < PARALLEL_MIN_BYTES else max(1, min(4, os.cpu_count() or 1))
    results: list[tuple[Metrics | str, int]] = []
    done_bytes = 0
    if jobs <= 1 or len(pairs) < 2:
        stream = (compare_pair(pair.on, pair.off) for pair in pairs)
    else:
        from joblib import Parallel, delayed

        # A generator keeps only pre_dispatch tasks in flight; each returns metrics only.
        parallel = Parallel(n_jobs=jobs, return_as="generator", pre_dispatch="2*n_jobs", batch_size=1)
        stream = parallel(delayed(compare_pair)(pair.on, pair.off) for pair in pairs)
    for outcome in stream:
        results.append(outcome)
        done_bytes += outcome[1]
        if progress is not None:
            progress(len(results), len(pairs), done_bytes)
    return results
