"""``fusion-dd compare`` output: a text summary, ``compare.csv`` and ``compare.json``."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from .api import ComparedPair, Comparison

CSV_COLUMNS = (
    "position", "op", "op_type", "tensor", "index", "dtype", "shape", "off_op", "off_index", "relation", "rules", "layers",
    "cosine", "max_abs", "mean_abs", "max_rel", "mean_rel", "accumulated_rel", "rel_euclid", "rmse", "kl_divergence",
    "std_on", "std_off", "within_0001", "within_0005", "elements", "nan_on", "inf_on", "nan_off", "inf_off",
    "bad", "flags", "on_file", "off_file",
)  # fmt: skip


def divergence_line(comparison: Comparison) -> str:
    """``first divergence: op (rules; layers ...): cosine .., max abs ..`` or why there is none."""
    first = comparison.first_divergence
    if first is None:
        return f"first divergence: none ({len(comparison.pairs)} pairs within the thresholds)"
    return f"first divergence: {first.describe()}"


def text_lines(comparison: Comparison, top: int = 10, problems_shown: int = 10) -> list[str]:
    inputs = sum(1 for pair in comparison.pairs if pair.kind == "input")
    lines = [
        f"fusion-on:  {comparison.on_dir} ({comparison.on_selected})",
        f"fusion-off: {comparison.off_dir} ({comparison.off_selected})",
        f"graph: {comparison.graph_source or 'no graph given (pairing by dump origins and op names; no fusion rules known)'}",
        f"compared {len(comparison.pairs)} tensors ({len(comparison.pairs) - inputs} outputs, {inputs} inputs): "
        f"{len(comparison.bad)} bad, {len(comparison.problems)} problems, "
        f"{comparison.skipped_inner} inner fused outputs without origin skipped, "
        f"{comparison.unpaired_inputs} inputs without a counterpart of the same op name not compared",
        divergence_line(comparison),
    ]
    hidden = comparison.hidden_before()
    if hidden:
        ops = list(dict.fromkeys(problem.op for problem in hidden if problem.op))
        where = "before it" if comparison.first_divergence is not None else "anywhere"
        lines.append(
            f"the first divergence may lie earlier: {len(hidden)} fusion-on tensors {where} could not be compared, "
            f"at ops {', '.join(ops[:8])}" + (f" and {len(ops) - 8} more" if len(ops) > 8 else "") + " (see problems)"
        )
    for record in comparison.overflows[:problems_shown]:
        lines.append(f"overflow: {record.file}: {record.reason}")
    if len(comparison.overflows) > problems_shown:
        lines.append(f"  ... and {len(comparison.overflows) - problems_shown} more overflow records")
    worst = [pair for pair in comparison.top(top)]
    if worst:
        lines.append("worst ops:")
        lines.append(f"  {'#':>5}  {'op':<40} {'tensor':<9} {'cosine':>9} {'max abs':>10} {'mean rel':>10}  rules")
        for pair in worst:
            mark = "!" if pair.bad else " "
            lines.append(
                f"{mark} {pair.position:>5}  {_cut(pair.op, 40):<40} {pair.tensor:<9} {_num(pair.metrics.cosine):>9} "
                f"{_num(pair.metrics.max_abs):>10} {_num(pair.metrics.mean_rel):>10}  {' + '.join(pair.rules) or '-'}"
            )
    if comparison.problems:
        lines.append(f"problems ({len(comparison.problems)}; all of them in compare.json):")
        for problem in comparison.problems[:problems_shown]:
            op = f" [{problem.op}]" if problem.op else ""
            lines.append(f"  {problem.file}{op}: {problem.reason}")
        if len(comparison.problems) > problems_shown:
            lines.append(f"  ... and {len(comparison.problems) - problems_shown} more")
    if comparison.notes:
        lines.append(f"notes ({len(comparison.notes)} files read with a remark or not tensor dumps; all in compare.json):")
        for note in comparison.notes[:problems_shown]:
            lines.append(f"  {note.file}: {note.reason}")
        if len(comparison.notes) > problems_shown:
            lines.append(f"  ... and {len(comparison.notes) - problems_shown} more")
    return lines


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3) :]


def _num(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4g}"


def csv_text(comparison: Comparison) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for pair in comparison.pairs:
        writer.writerow(_csv_row(pair))
    return buffer.getvalue()


def _csv_row(pair: ComparedPair) -> list[object]:
    m = pair.metrics
    return [
        pair.position, pair.op, pair.op_type, pair.kind, pair.output, pair.dtype, "x".join(map(str, pair.shape)),
        pair.off_op, pair.off_output, pair.relation, ";".join(pair.rules), ";".join(pair.layers),
        repr(m.cosine), repr(m.max_abs), repr(m.mean_abs), repr(m.max_rel), repr(m.mean_rel), repr(m.accumulated_rel),
        repr(m.rel_euclid), repr(m.rmse), repr(m.kl_divergence), repr(m.std_on), repr(m.std_off),
        repr(m.within_0001), repr(m.within_0005), m.elements, m.nan_on, m.inf_on, m.nan_off, m.inf_off,
        int(pair.bad), ";".join(m.flags), pair.on_file, pair.off_file,
    ]  # fmt: skip


def json_text(comparison: Comparison) -> str:
    return json.dumps(comparison.to_json(), indent=1, allow_nan=False) + "\n"


def write_reports(comparison: Comparison, out: Path) -> list[Path]:
    """Write ``compare.csv`` and ``compare.json`` into ``out`` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compare.csv", out / "compare.json"]
    paths[0].write_text(csv_text(comparison), encoding="utf-8")
    paths[1].write_text(json_text(comparison), encoding="utf-8")
    return paths
