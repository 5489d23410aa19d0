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
all on) are noisy like every other training and go through the engine's own
check (``check_preconditions``, re-training a reference by majority as the engine
does); a refusal counts as a wrong answer. Policies: ``auto`` (the default),
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

from fusion_dd.config.settings import Tolerance
from fusion_dd.core.scoring import Measurement, check_preconditions
from fusion_dd.search import STRATEGIES, NoisePolicy, find_culprits
from fusion_dd.search.oracle import Outcome
from fusion_dd.testing.simulate import (
    NoiseModel,
    SimulatedOracle,
    flip_noise,
    flip_probability,
    gaussian_noise,
)

RESULTS = REPO / "benchmarks" / "RESULTS.md"
BEGIN, END = "<!-- bench_noise:begin -->", "<!-- bench_noise:end -->"
POLICIES = ("auto", "strict", "off")
TARGET = {
    "kind": "OR",
    "n": 64,
    "d": 1,
    "P": 1,
    "noise": "flips 5%",
    "correct": 0.98,  # right: exit 0 with exactly the planted set
    "ratio": 2.0,  # median trainings against the noise-free median
    "wrong_claimed": 0.005,  # wrong answers that claim a verified fix or a confirmed answer
}


@dataclass(frozen=True)
class Noise:
    """A named way of making trainings unreliable; ``make`` builds it for one seed."""

    label: str
    flip_rate: float
    make: Callable[[int], NoiseModel | None]


def flips(rate: float) -> Noise:
    return Noise(f"flips {rate:.0%}", rate, lambda seed: flip_noise(rate, seed=seed))


def gauss(sigma: float, margin: float) -> Noise:
    label = f"gauss σ={sigma:g}" + (f", margin {margin:g}" if margin else ", no margin")
    return Noise(label, flip_probability(sigma), lambda seed: gaussian_noise(sigma, margin, seed=seed))


CLEAN = Noise("none", 0.0, lambda seed: None)


@dataclass(frozen=True)
class Run:
    trainings: int
    rounds: int
    correct: bool  # exactly the planted sets, and a verified fix that truly passes
    flaky: bool
    confirmed: bool
    status: str = "found"  # or the refusal: baseline_fails, no_failure
    right: bool = False  # exit 0 with exactly the planted sets (and a fix that truly passes)
    verified: bool = False  # the answer claimed its fix verified
    fix_fails: bool = False  # the fix it wrote truly fails (the model says so)


def settle_references(oracle: SimulatedOracle, refs: list[frozenset], policy: str) -> str:
    """The engine's reference phase: ``check_preconditions`` on the references' trainings.

    A training that reports PASS reads metric 1.0, one that reports FAIL 0.0, and
    the engine's default tolerance (auto) applies; the references are re-trained,
    as the engine does, for as long as the check asks for it (same limit as the
    engine: ``search.max_trainings``, 1 with confirm "off").
    """
    limit = 1 if policy == "off" else NoisePolicy().max_trainings
    oracle.outcomes(refs)  # the engine's reference round
    while True:
        baseline, all_on = (
            [Measurement("metric", 1.0 if o.outcome is Outcome.PASS else 0.0) for o in oracle.trials(ref)]
            for ref in refs
        )
        pre = check_preconditions(
            baseline,
            all_on,
            tolerance=Tolerance("auto"),
            goal="max",
            baseline_limit=limit,
            all_on_limit=limit,
        )
        if not pre.retrain:
            return pre.status
        oracle.retest([refs[0] if role == "baseline" else refs[1] for role in pre.retrain])


def run_one(
    name: str, policy: str, case: Case, n: int, p: int, noise: Noise, seed: int, fix_trainings: int = 2
) -> Run:
    universe = list(range(n))
    refs = [frozenset(), frozenset(universe)]
    oracle = SimulatedOracle(case.model, parallelism=p, noise=noise.make(seed), repeats=True)
    status = settle_references(oracle, refs, policy)
    if status != "ok":  # a refusal: exit 0 without an answer, always wrong here
        return Run(oracle.trainings, oracle.rounds, False, False, False, status)
    result = find_culprits(
        universe, oracle, STRATEGIES[name], parallelism=p, noise=NoisePolicy(confirm=policy, fix_trainings=fix_trainings)
    )
    found = [c.rules for c in result.culprit_sets]
    right = (
        not result.exhausted
        and not case.model(result.fix)
        and len(found) == len(case.expected)
        and frozenset(found) == case.expected
    )
    return Run(
        oracle.trainings,
        oracle.rounds,
        correct(case, frozenset(universe), result),
        result.flaky,
        result.confirmed,
        "found",
        right,
        result.fix_verified,
        bool(case.model(result.fix)),
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

    @property
    def right(self) -> float:
        """Share of seeds that end with exit 0 and exactly the planted sets (whatever was claimed)."""
        return sum(r.right for r in self.runs) / len(self.runs)

    @property
    def median_ratio(self) -> float:
        return statistics.median(r.trainings for r in self.runs) / statistics.median(
            r.trainings for r in self.clean
        )

    def share(self, test: Callable[[Run], bool]) -> float:
        return sum(1 for r in self.runs if test(r)) / len(self.runs)


def refused(run: Run) -> bool:
    return run.status != "found"


def wrong_claimed(run: Run) -> bool:
    """A wrong answer that claims a verified fix or a confirmed answer: the dangerous kind."""
    return not run.right and (run.verified or run.confirmed)


def measure(
    kind: str,
    n: int,
    d: int,
    p: int,
    noises: list[Noise],
    seeds: int,
    policies=POLICIES,
    strategies=tuple(STRATEGIES),
):
    """Cells by (noise label, strategy, policy); the clean runs are shared per (strategy, policy)."""
    cases = [plant(kind, n, d, seed) for seed in range(seeds)]
    cells: dict[tuple[str, str, str], Cell] = {}
    for name in strategies:
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
        "| noise | right | refused | wrong, claimed verified or confirmed | trainings mean | median | p95 | max "
        "| noise-free mean | median | ratio of medians | flaky reported | confirmed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for noise in noises:
        cell = cells[(noise.label, name, policy)]
        t = sorted(r.trainings for r in cell.runs)
        p95 = t[min(len(t) - 1, math.ceil(0.95 * len(t)) - 1)]
        clean = [r.trainings for r in cell.clean]
        lines.append(
            f"| {noise.label} | {cell.right:.1%} | {cell.share(refused):.1%} | {cell.share(wrong_claimed):.1%} | "
            f"{statistics.fmean(t):.1f} | {statistics.median(t):g} | {p95} | {t[-1]} | "
            f"{statistics.fmean(clean):.1f} | {statistics.median(clean):g} | {cell.median_ratio:.2f}x | "
            f"{sum(r.flaky for r in cell.runs) / len(t):.0%} | {sum(r.confirmed for r in cell.runs) / len(t):.0%} |"
        )
    return lines


def claims_table(rows) -> list[str]:
    """What wrong answers claimed, per case and noise (`bisect`, `auto`)."""
    lines = [
        "| case | noise | seeds | right | refused (baseline_fails / no_failure) | wrong answers | "
        "wrong, fix claimed verified | of which the fix truly fails | wrong, claimed confirmed | "
        "median trainings (noise-free) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (kind, n, d, p), noises, cells in rows:
        for noise in noises:
            cell = cells[(noise.label, "bisect", "auto")]
            runs = cell.runs
            count = len(runs)
            wrong = [r for r in runs if not r.right]
            lines.append(
                f"| {kind} n={n} d={d} P={p} | {noise.label} | {count} | {cell.right:.1%} | "
                f"{sum(r.status == 'baseline_fails' for r in runs)} / {sum(r.status == 'no_failure' for r in runs)} | "
                f"{len(wrong)} | {sum(r.verified for r in wrong)} | {sum(r.verified and r.fix_fails for r in wrong)} | "
                f"{sum(r.confirmed for r in wrong)} | "
                f"{statistics.median(r.trainings for r in runs):g} ({statistics.median(r.trainings for r in cell.clean):g}) |"
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


def target_lines(cell: Cell, limits: bool) -> list[str]:
    """The issue's targets for one noise level; ``limits`` False reports the values only."""
    checks = [
        ("right: exit 0 with exactly the planted set", f"{cell.right:.1%}", cell.right >= TARGET["correct"],
         f"≥ {TARGET['correct']:.0%}"),
        ("median trainings vs the noise-free median", f"{cell.median_ratio:.2f}x",
         cell.median_ratio <= TARGET["ratio"], f"≤ {TARGET['ratio']:g}x"),
        ("wrong and claimed verified or confirmed", f"{cell.share(wrong_claimed):.1%}",
         cell.share(wrong_claimed) <= TARGET["wrong_claimed"], f"≤ {TARGET['wrong_claimed']:.1%}"),
        ("of those: in searches that saw no inconsistency (claims on single trainings)",
         f"{cell.share(lambda r: wrong_claimed(r) and not r.flaky):.1%}", True, "-"),
        ("of those: the fix claimed verified truly fails", f"{cell.share(lambda r: wrong_claimed(r) and r.verified and r.fix_fails):.1%}", True, "-"),
        ("wrong refusals (baseline_fails, no_failure)", f"{cell.share(refused):.1%}", True, "-"),
        ("mean trainings vs the noise-free mean", f"{cell.ratio:.2f}x", True, "-"),
    ]
    lines = ["| target | value | limit | met |", "|---|---|---|---|"] if limits else [
        "| measure | value |", "|---|---|"]
    for label, value, met, limit in checks:
        if limits:
            verdict = "-" if limit == "-" else ("yes" if met else "**no**")
            lines.append(f"| {label} | {value} | {limit} | {verdict} |")
        else:
            lines.append(f"| {label} | {value} |")
    return lines


def target_met(cell: Cell) -> bool:
    return (
        cell.right >= TARGET["correct"]
        and cell.median_ratio <= TARGET["ratio"]
        and cell.share(wrong_claimed) <= TARGET["wrong_claimed"]
    )


def render(
    rows, detail, target_cell: Cell, ten_cell: Cell, target_seeds: int, claims, clean_lines, clean_ok, seeds,
    quick, elapsed,
) -> str:
    out = [
        BEGIN,
        "## Noisy trainings (benchmarks/bench_noise.py)",
        "",
        (
            f"Generated by `python benchmarks/bench_noise.py{' --quick' if quick else ''}` in {elapsed:.0f} s "
            f"(CPU): {seeds} seeds per cell (the target rows: {target_seeds}). Every training is noisy, the two "
            "reference trainings (all off, all on) included: they go through the engine's own reference check "
            "(`check_preconditions` with its majority rule; a training reporting PASS reads metric 1.0, FAIL "
            "0.0, default tolerance), so a reference that trains badly once is re-trained, and a search whose "
            "references are refused counts as wrong. Each cell: share of seeds answered exactly right (the "
            "planted culprit sets and a verified fix that truly passes) · trainings used relative to the same "
            "seeds without noise (means; same strategy and policy; references included). Flip rate = chance "
            "that one training reports the wrong outcome. Gaussian noise: metric 1 above/below the threshold "
            "plus N(0, σ); a margin marks readings that close to the threshold, which count half and are "
            "re-trained. Policies: `auto` (default: re-train contradictions, interaction claims and "
            "near-threshold readings; once noise was seen, every claim on three agreeing trainings of its own), "
            "`strict` (every final claim on two agreeing trainings), `off` (one training per configuration)."
        ),
        "",
        (
            f"Target (default settings: strategy `bisect`, policy `auto`; {TARGET['noise']}, OR n={TARGET['n']} "
            f"d={TARGET['d']} P={TARGET['P']}, {target_seeds} seeds; right = exit 0 with exactly the planted set, "
            "whether or not the fix was claimed verified):"
        ),
        "",
        *target_lines(target_cell, True),
        (
            f"| bench_search's noise-free targets with the noise layer on (below) | "
            f"{'all met' if clean_ok else 'not all met'} | all met | {'yes' if clean_ok else '**no**'} |"
        ),
        "",
        (
            "Until a search sees an inconsistency, most of its claims rest on single trainings (confirming "
            "every claim twice would cost two more trainings per culprit: 14 instead of 12 for one culprit "
            "among 256). What is confirmed on a clean run: each set found by a second or later search, every "
            "searched set once two were found, and both single-rule removals of an interacting pair (its "
            "rules pass alone) on two trainings of their own, the patterns that two aligned flips turn into "
            "a spurious extra set or pair. That costs 4 more trainings for the mixed case (one independent "
            "culprit plus a pair: 36 against the limit of 32 set before noise was handled) and nothing for "
            "one culprit. Three flips that contradict nothing (a prefix, the single, the fix) still give a "
            "wrong answer that claims a verified fix, and after an inconsistency each claim needs three "
            "agreeing trainings of its own, which three flips of the same configuration can still fake."
        ),
        "",
        f"The same at flips 10% ({target_seeds} seeds):",
        "",
        *target_lines(ten_cell, False),
        "",
        f"`bisect` with `auto` on OR n={TARGET['n']} d=1 P=1, in detail ({target_seeds} seeds):",
        "",
        *detail,
        "",
        "What the wrong answers claimed (`bisect`, `auto`; counts of seeds):",
        "",
        *claims,
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


CLAIM_BEGIN, CLAIM_END = "<!-- bench_noise_claims:begin -->", "<!-- bench_noise_claims:end -->"
CLAIM_CASES = [("OR", 64, 1), ("OR", 64, 2), ("AND", 64, 2), ("OR", 256, 1), ("OR", 256, 2), ("AND", 256, 2)]
CLAIM_TARGET = {"right": 0.97, "false_fix": 0.002, "wrong_confirmed": 0.005, "cost": 2.0}
#: The settings for noisy trainings the claim table measures beside the default.
CLAIM_SETTINGS = (
    ("`search.fix_trainings: 3`", "auto"),
    ("`search.confirm: strict` and `search.fix_trainings: 3`", "strict"),
)


def _claim_job(args) -> tuple[Run, Run]:
    kind, n, d, rate, seed, policy, fix_trainings = args
    case = plant(kind, n, d, seed)
    return (
        run_one("bisect", policy, case, n, 1, flips(rate), seed, fix_trainings),
        run_one("bisect", policy, case, n, 1, CLEAN, seed, fix_trainings),
    )


def measure_claims(
    seeds: dict[float, int], processes: int = 2, policy: str = "auto", fix_trainings: int = 2
) -> list[dict]:
    """The final claim under flips, references flippable: one row per case and rate.

    Default settings, but for ``search.confirm`` (``policy``) and ``search.fix_trainings``.
    ``seeds``: per flip rate, how many. Each row is printed to stderr as it is done.
    """
    import multiprocessing

    rows = []
    with multiprocessing.Pool(processes) as pool:
        for rate, count in seeds.items():
            for kind, n, d in CLAIM_CASES:
                jobs = [(kind, n, d, rate, s, policy, fix_trainings) for s in range(count)]
                pairs = pool.map(_claim_job, jobs, chunksize=25)
                runs = [noisy for noisy, _ in pairs]
                clean = [quiet for _, quiet in pairs]
                rows.append({
                    "case": (kind, n, d), "rate": rate, "seeds": count, "fix_trainings": fix_trainings,
                    "right": sum(r.right for r in runs) / count,
                    "false_fix": sum(r.verified and r.fix_fails for r in runs) / count,
                    "wrong_confirmed": sum(wrong_claimed_confirmed(r) for r in runs) / count,
                    "cost": statistics.mean(r.trainings for r in runs) / statistics.mean(r.trainings for r in clean),
                    "clean": statistics.mean(r.trainings for r in clean),
                })
                print(rows[-1], file=sys.stderr, flush=True)
    return rows


def wrong_claimed_confirmed(run: Run) -> bool:
    """Not exactly right, yet the answer says every claim rests on agreeing trainings."""
    return not run.right and run.confirmed


def _claim_met(row: dict) -> bool:
    t = CLAIM_TARGET
    return (
        row["right"] >= t["right"] and row["false_fix"] <= t["false_fix"]
        and row["wrong_confirmed"] <= t["wrong_confirmed"] and row["cost"] <= t["cost"]
    )


def render_claims(rows: list[dict], elapsed: float, stricter: list[tuple[str, list[dict]]] = ()) -> str:
    t = CLAIM_TARGET
    lines = [
        CLAIM_BEGIN,
        "## The final claim under noise (benchmarks/bench_noise.py --claims)",
        "",
        f"Generated by `python benchmarks/bench_noise.py --claims` in {elapsed:.0f} s (wall clock, two "
        "processes, on a shared machine): seeds per row in the table, default settings (`bisect` with group testing, `confirm: auto`), P=1, every training "
        "flipped with the given probability, the two references included (settled by the engine's own "
        "check). OR d=2 = two independent culprits, AND d=2 = one interacting pair. right = exactly the "
        "planted sets and a fix that truly passes; failing fix called verified = the fix handed over "
        "truly fails while the result says verified; wrong, claimed confirmed = not right while "
        "`confirmed` is true; cost = mean trainings against the same seeds without noise (mean clean "
        f"cost beside it). Targets at 5 %: right >= {t['right']:.0%}, failing fix called verified <= "
        f"{t['false_fix']:.1%}, wrong and confirmed <= {t['wrong_confirmed']:.1%}, cost <= {t['cost']:g}x; "
        "10 % is reported without a target.",
        "",
        "| flips | case | n | seeds | right | failing fix called verified | wrong, claimed confirmed | cost | clean trainings (mean) | targets met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        kind, n, d = row["case"]
        verdict = ("yes" if _claim_met(row) else "**no**") if row["rate"] == 0.05 else "-"
        lines.append(
            f"| {row['rate']:.0%} | {kind} d={d} | {n} | {row['seeds']} | {row['right']:.1%} | {row['false_fix']:.2%} | "
            f"{row['wrong_confirmed']:.2%} | {row['cost']:.2f}x | {row['clean']:.1f} | {verdict} |"
        )
    default = {(row["case"], row["rate"]): row for row in rows}
    for setting, variant in stricter:
        lines += [
            "",
            f"The same at 5 % with {setting}, same seeds; clean trainings against the default's:",
            "",
            "| case | n | seeds | right | failing fix called verified | wrong, claimed confirmed | cost | clean trainings (mean) | default's clean | targets met |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in variant:
            kind, n, d = row["case"]
            base = default[(row["case"], row["rate"])]
            lines.append(
                f"| {kind} d={d} | {n} | {row['seeds']} | {row['right']:.1%} | {row['false_fix']:.2%} | "
                f"{row['wrong_confirmed']:.2%} | {row['cost']:.2f}x | {row['clean']:.1f} | "
                f"{base['clean']:.1f} | {'yes' if _claim_met(row) else '**no**'} |"
            )
    if stricter:
        lines += [
            "",
            "Why two trainings of the fix are the default: with two independent culprits, a search that found the "
            "first asks the fix candidate, which truly fails; only trainings of a configuration without the first "
            "culprit can show the second, and bisection asks none but the fix. So every training of the fix must "
            "flip for the false claim: at 5 % flips 1 in 20 with one training, 1 in 400 with two (0.25 %, above the "
            "0.2 % limit whatever else the search does), 1 in 8,000 with three. The third costs one training on "
            "every search, noise or none (one culprit among 256: 14 instead of 13 against the limit of 12; a clean "
            "run may pay at most one training over the guard-off figure, and the second already is that one). "
            "An interacting pair is reported as its later rule alone when that rule's one training alone flipped "
            "to a fail: only another training of a configuration with it and without its partner tells, which "
            "strict pays for (every claim on two trainings of its own). Users whose trainings flip that often set "
            "both; the default stays what a clean run needs.",
        ]
    lines.append(CLAIM_END)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases and noise levels, 50 seeds")
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per cell (default 100, quick 50; at least 50)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    parser.add_argument(
        "--claims", action="store_true",
        help="only the final-claim table (1000 seeds per 5 %% row unless --seeds, a fifth at 10 %%), in its own section",
    )
    args = parser.parse_args(argv)
    if args.claims:
        started_claims = time.time()
        # 1,000 seeds where the targets are (5 %); 10 % is reported on fewer (it costs about twice as much).
        rows = measure_claims({0.05: args.seeds or 1000, 0.10: max(100, (args.seeds or 1000) // 5)})
        # The settings for noisy trainings, measured beside the default on the same seeds.
        stricter = [
            (setting, measure_claims({0.05: args.seeds or 1000}, policy=policy, fix_trainings=3))
            for setting, policy in CLAIM_SETTINGS
        ]
        text = render_claims(rows, time.time() - started_claims, stricter)
        print(text)
        if not args.no_write:
            replace_section(text, CLAIM_BEGIN, CLAIM_END, RESULTS)
        return 0
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
    target_seeds = max(seeds, 200 if args.quick else 1000)
    detail_noises = all_noises if not args.quick else [flips(0.05), flips(0.10)]
    detail_cells = measure(
        "OR", TARGET["n"], 1, 1, detail_noises, target_seeds, policies=("auto",), strategies=("bisect",)
    )
    target_cell = detail_cells[(TARGET["noise"], "bisect", "auto")]
    ten_cell = detail_cells[("flips 10%", "bisect", "auto")]
    claim_noises = [flips(0.05), flips(0.10)]
    claim_rows = [(("OR", 64, 1, 1), claim_noises, detail_cells)]
    claim_seeds = 100 if args.quick else 300
    claim_rows.append(
        (
            ("OR", 256, 2, 1),
            claim_noises,
            measure("OR", 256, 2, 1, claim_noises, claim_seeds, policies=("auto",), strategies=("bisect",)),
        )
    )
    clean_lines, clean_ok = clean_targets(5 if args.quick else 11)
    elapsed = time.process_time() - started
    text = render(
        rows,
        detail_table(detail_cells, detail_noises),
        target_cell,
        ten_cell,
        target_seeds,
        claims_table(claim_rows),
        clean_lines,
        clean_ok,
        seeds,
        args.quick,
        elapsed,
    )
    print(text)
    if not args.no_write:
        write_section(text)
    met = target_met(target_cell) and clean_ok
    print(f"target {'met' if met else 'NOT met'}", file=sys.stderr)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
