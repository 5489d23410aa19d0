"""Benchmark the search strategies against noisy trainings.

    python benchmarks/bench_noise.py [--quick] [--seeds N] [--no-write]

Every strategy runs inside the all-culprits layer (``find_culprits``) against a
``SimulatedOracle`` whose trainings are noisy: each training's outcome flipped
independently with a fixed probability, or a metric one unit on either side of
the threshold plus Gaussian noise (with and without a near-threshold margin,
whose readings count half and are re-trained). Noise is a seeded hash of
(seed, configuration, repeat), so every number here is reproducible.

For each cell: the share of seeds whose answer is exactly right (the planted
culprit sets, and a fix that was verified and truly passes), and the trainings
(and, on several devices, rounds) used relative to the same seeds without
noise, same strategy and policy. The two reference configurations (all off,
all on) are trained once and never flipped: the engine settles them with its own
baseline repeats before the search starts. Policies: ``auto`` (the default),
``strict`` (every final claim on two agreeing trainings), ``off`` (one training
per configuration, what the search did before repeats existed).

A second table re-checks the noise-free targets of bench_search with the noise
layer on (an oracle that supports repeats, no noise): the default settings must
still meet them.

The markdown section is printed and written into benchmarks/RESULTS.md between
``<!-- bench_noise:begin -->`` and ``<!-- bench_noise:end -->``; the rest of that
file is preserved.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from results_file import replace_section

REPO = Path(__file__).resolve().parents[1]
for entry in (REPO, REPO / "benchmarks"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from bench_search import TARGETS, Case, correct, plant

from fusion_dd.search import STRATEGIES, NoisePolicy, find_culprits
from fusion_dd.search.simulate import (
    NoiseModel,
    SimulatedOracle,
    flip_noise,
    flip_probability,
    gaussian_noise,
)

RESULTS = REPO / "benchmarks" / "RESULTS.md"
BEGIN, END = "<!-- bench_noise:begin -->", "<!-- bench_noise:end -->"
POLICIES = ("auto", "strict", "off")
TARGET = {"kind": "OR", "n": 64, "d": 1, "P": 1, "noise": "flips 5%", "correct": 0.98, "ratio": 2.0}


@dataclass(frozen=True)
class Noise:
    """A named way of making trainings unreliable; ``make`` builds it for one seed."""

    label: str
    flip_rate: float
    make: Callable[[int, list[frozenset]], NoiseModel | None]


def flips(rate: float) -> Noise:
    return Noise(f"flips {rate:.0%}", rate, lambda seed, refs: flip_noise(rate, seed=seed, exempt=refs))


def gauss(sigma: float, margin: float) -> Noise:
    label = f"gauss σ={sigma:g}" + (f", margin {margin:g}" if margin else ", no margin")
    return Noise(
        label,
        flip_probability(sigma),
        lambda seed, refs: gaussian_noise(sigma, margin, seed=seed, exempt=refs),
    )


CLEAN = Noise("none", 0.0, lambda seed, refs: None)


@dataclass(frozen=True)
class Run:
    trainings: int
    rounds: int
    correct: bool
    flaky: bool
    confirmed: bool


def run_one(name: str, policy: str, case: Case, n: int, p: int, noise: Noise, seed: int) -> Run:
    universe = list(range(n))
    refs = [frozenset(), frozenset(universe)]
    model = noise.make(seed, refs)
    oracle = SimulatedOracle(case.model, parallelism=p, noise=model, repeats=True)
    oracle.outcomes(refs)  # the engine's reference round
    result = find_culprits(
        universe, oracle, STRATEGIES[name], parallelism=p, noise=NoisePolicy(confirm=policy)
    )
    return Run(
        oracle.trainings,
        oracle.rounds,
        correct(case, frozenset(universe), result),
        result.flaky,
        result.confirmed,
    )


@dataclass(frozen=True)
class Cell:
    """One (case, noise, strategy, policy) over all seeds, next to the same seeds without noise."""

    runs: list[Run]
    clean: list[Run]

    @property
    def correct(self) -> float:
        return sum(r.correct for r in self.runs) / len(self.runs)

    @property
    def ratio(self) -> float:
        return statistics.fmean(r.trainings for r in self.runs) / statistics.fmean(
            r.trainings for r in self.clean
        )

    @property
    def rounds_ratio(self) -> float:
        return statistics.fmean(r.rounds for r in self.runs) / statistics.fmean(r.rounds for r in self.clean)


def measure(kind: str, n: int, d: int, p: int, noises: list[Noise], seeds: int, policies=POLICIES):
    """Cells by (noise label, strategy, policy); the clean runs are shared per (strategy, policy)."""
    cases = [plant(kind, n, d, seed) for seed in range(seeds)]
    cells: dict[tuple[str, str, str], Cell] = {}
    for name in STRATEGIES:
        for policy in policies:
            clean = [run_one(name, policy, c, n, p, CLEAN, 0) for c in cases]
            for noise in noises:
                runs = [run_one(name, policy, c, n, p, noise, 1000 + s) for s, c in enumerate(cases)]
                cells[(noise.label, name, policy)] = Cell(runs, clean)
    return cells


def fmt_cell(cell: Cell, p: int) -> str:
    text = f"{cell.correct:.0%} · {cell.ratio:.2f}x"
    if p > 1:
        text += f" ({cell.rounds_ratio:.2f}x rounds)"
    return text


def noise_table(rows) -> list[str]:
    head = ["case", "noise", "flip rate"] + [f"{name} {policy}" for name in STRATEGIES for policy in POLICIES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (kind, n, d, p), noises, cells in rows:
        for noise in noises:
            cols = [f"{kind} n={n} d={d} P={p}", noise.label, f"{noise.flip_rate:.1%}"]
            cols += [
                fmt_cell(cells[(noise.label, name, policy)], p) for name in STRATEGIES for policy in POLICIES
            ]
            lines.append("| " + " | ".join(cols) + " |")
    return lines


def detail_table(cells, noises, name: str = "bisect", policy: str = "auto") -> list[str]:
    lines = [
        "| noise | correct | trainings mean | median | p95 | max | noise-free mean | ratio | flaky reported | confirmed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for noise in noises:
        cell = cells[(noise.label, name, policy)]
        t = sorted(r.trainings for r in cell.runs)
        p95 = t[min(len(t) - 1, math.ceil(0.95 * len(t)) - 1)]
        lines.append(
            f"| {noise.label} | {cell.correct:.1%} | {statistics.fmean(t):.1f} | {statistics.median(t):g} | {p95} | "
            f"{t[-1]} | {statistics.fmean(r.trainings for r in cell.clean):.1f} | {cell.ratio:.2f}x | "
            f"{sum(r.flaky for r in cell.runs) / len(t):.0%} | {sum(r.confirmed for r in cell.runs) / len(t):.0%} |"
        )
    return lines


def clean_targets(seeds: int) -> tuple[list[str], bool]:
    """bench_search's targets, re-measured with the noise layer on and no noise."""
    lines = [
        "| target | auto (default) | strict | limit | auto meets it |",
        "|---|---|---|---|---|",
    ]
    ok = True
    for label, model, n, d, p, metric, limit in TARGETS:
        cases = [plant(model, n, d, seed) for seed in range(seeds)]
        values = {}
        for policy in ("auto", "strict"):
            runs = [run_one("bisect", policy, c, n, p, CLEAN, 0) for c in cases]
            assert all(r.correct for r in runs), f"wrong answer without noise: {label} ({policy})"
            values[policy] = statistics.median(r.trainings if metric == 0 else r.rounds for r in runs)
        met = values["auto"] <= limit
        ok &= met
        lines.append(
            f"| {label} | {values['auto']:g} | {values['strict']:g} | {limit} | {'yes' if met else '**no**'} |"
        )
    return lines, ok


def render(
    rows, detail, target_cell: Cell, target_seeds: int, clean_lines, clean_ok, seeds, quick, elapsed
) -> str:
    met_correct = target_cell.correct >= TARGET["correct"]
    met_ratio = target_cell.ratio <= TARGET["ratio"]
    out = [
        BEGIN,
        "## Noisy trainings (benchmarks/bench_noise.py)",
        "",
        (
            f"Generated by `python benchmarks/bench_noise.py{' --quick' if quick else ''}` in {elapsed:.0f} s: "
            f"{seeds} seeds per cell (the target row: {target_seeds}). Each cell: share of seeds answered exactly "
            "right (the planted culprit sets and a verified fix that truly passes) · trainings used relative to "
            "the same seeds without noise (same strategy and policy; the 2 reference trainings included, never "
            "flipped: the engine settles them with its baseline repeats). Flip rate = chance that one training "
            "reports the wrong outcome. Gaussian noise: metric 1 above/below the threshold plus N(0, σ); a margin "
            "marks readings that close to the threshold, which count half and are re-trained. Policies: `auto` "
            "(default: re-train contradictions, interaction claims and near-threshold readings; confirm the answer "
            "once noise was seen), `strict` (every final claim on two agreeing trainings), `off` (one training per "
            "configuration)."
        ),
        "",
        (
            f"Target (default strategy `bisect`, policy `auto`, {TARGET['noise']}, OR n={TARGET['n']} "
            f"d={TARGET['d']} P={TARGET['P']}, {target_seeds} seeds):"
        ),
        "",
        "| target | value | limit | met |",
        "|---|---|---|---|",
        (
            f"| correct culprit sets | {target_cell.correct:.1%} | ≥ {TARGET['correct']:.0%} | "
            f"{'yes' if met_correct else '**no**'} |"
        ),
        (
            f"| trainings vs the noise-free run (means) | {target_cell.ratio:.2f}x | ≤ {TARGET['ratio']:g}x | "
            f"{'yes' if met_ratio else '**no**'} |"
        ),
        (
            f"| bench_search's noise-free targets with the noise layer on (below) | "
            f"{'all met' if clean_ok else 'not all met'} | all met | {'yes' if clean_ok else '**no**'} |"
        ),
        "",
        f"`bisect` with `auto` on OR n={TARGET['n']} d=1 P=1, in detail:",
        "",
        *detail,
        "",
        "All strategies and policies (correct · trainings x):",
        "",
        *noise_table(rows),
        "",
        (
            "Noise-free cost of the noise layer on bench_search's targets (`bisect`, n=256, medians, "
            "2 preconditions and the fix verification included; a repeat-capable oracle, no noise):"
        ),
        "",
        *clean_lines,
        END,
    ]
    return "\n".join(out) + "\n"


def write_section(text: str, path: Path = RESULTS) -> None:
    """Replace this script's section of RESULTS.md, keeping every other section."""
    replace_section(text, BEGIN, END, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases and noise levels, 50 seeds")
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per cell (default 100, quick 50; at least 50)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args(argv)
    seeds = args.seeds or (50 if args.quick else 100)
    if seeds < 50:
        parser.error("--seeds must be at least 50")
    started = time.process_time()
    all_noises = [
        flips(0.01),
        flips(0.05),
        flips(0.10),
        gauss(0.6, 0),
        gauss(0.6, 0.3),
        gauss(0.8, 0),
        gauss(0.8, 0.4),
    ]
    if args.quick:
        cases = [("OR", 64, 1, 1), ("AND", 64, 2, 1)]
        noises = [flips(0.05), gauss(0.6, 0.3)]
    else:
        cases = [
            ("OR", 64, 1, 1),
            ("OR", 64, 2, 1),
            ("AND", 64, 2, 1),
            ("mixed", 64, 2, 1),
            ("OR", 256, 1, 1),
            ("OR", 64, 1, 4),
        ]
        noises = all_noises
    rows = [(case, noises, measure(*case, noises, seeds)) for case in cases]
    target_seeds = max(seeds, 50 if args.quick else 300)
    detail_noises = all_noises if not args.quick else noises
    detail_cells = measure("OR", TARGET["n"], 1, 1, detail_noises, target_seeds, policies=("auto",))
    target_cell = detail_cells[(TARGET["noise"], "bisect", "auto")]
    clean_lines, clean_ok = clean_targets(5 if args.quick else 11)
    elapsed = time.process_time() - started
    text = render(
        rows,
        detail_table(detail_cells, detail_noises),
        target_cell,
        target_seeds,
        clean_lines,
        clean_ok,
        seeds,
        args.quick,
        elapsed,
    )
    print(text)
    if not args.no_write:
        write_section(text)
    met = target_cell.correct >= TARGET["correct"] and target_cell.ratio <= TARGET["ratio"] and clean_ok
    print(f"target {'met' if met else 'NOT met'}", file=sys.stderr)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
