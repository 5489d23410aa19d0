"""Benchmark the search strategies on synthetic failure models.

    python benchmarks/bench_search.py [--quick] [--seeds N] [--no-write]

Every fusion-dd strategy runs inside the all-culprits layer against a
``SimulatedOracle``, so the numbers count what a user pays: trainings launched
(the two precondition runs, every search training and the fix verification
included) and rounds of parallel trainings on P devices. picire 21.8's ``DD``
(the optional ``bench`` extra) runs on the same models for reference, repeated
until no failure remains, with every call to its test counted (its per-iteration
re-check included) plus the same preconditions and fix verification.

The markdown section is printed and written into benchmarks/RESULTS.md between
``<!-- bench_search:begin -->`` and ``<!-- bench_search:end -->``; the rest of
that file is preserved.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from results_file import replace_section

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fusion_dd.search import STRATEGIES, find_culprits  # noqa: E402
from fusion_dd.search.culprits import CulpritSearch  # noqa: E402
from fusion_dd.search.lanes import Lanes  # noqa: E402
from fusion_dd.testing.simulate import (  # noqa: E402
    SimulatedOracle,
    any_of,
    masked_model,
    references_round,
    sets_model,
)

RESULTS = REPO / "benchmarks" / "RESULTS.md"
BEGIN, END = "<!-- bench_search:begin -->", "<!-- bench_search:end -->"
MODELS = ("OR", "AND", "mixed", "non-monotone", "overlap", "all")

Model = Callable[[frozenset[int]], bool]


@dataclass(frozen=True)
class Case:
    """One planted failure: the predicate and the culprit sets a correct answer reports.

    ``expected`` is None for non-monotone cases, whose 1-minimal failing sets are
    not unique; their answers are checked against the predicate instead. ``off``,
    when given, is the only right set of switched-off rules (the minimum hitting
    set); such cases accept any failing 1-minimal sets found, because a set that
    contains a switched-off rule may stay hidden.
    """

    model: Model
    expected: frozenset[frozenset[int]] | None
    log2_space: float
    off: frozenset[int] | None = None


def plant(kind: str, n: int, d: int, seed: int) -> Case | None:
    """Random culprit positions for a model; None where the model needs more rules."""
    rng = random.Random(f"{kind}/{n}/{d}/{seed}")
    if kind == "OR":
        picks = rng.sample(range(n), d)
        sets = [frozenset({p}) for p in picks]
        return Case(sets_model(sets), frozenset(sets), math.log2(math.comb(n, d)))
    if kind == "AND":
        picks = rng.sample(range(n), d)
        return Case(sets_model([picks]), frozenset({frozenset(picks)}), math.log2(math.comb(n, d)))
    if kind == "mixed":  # one independent culprit plus one interacting set of d rules
        if d < 2 or n < d + 1:
            return None
        picks = rng.sample(range(n), d + 1)
        sets = [frozenset({picks[0]}), frozenset(picks[1:])]
        return Case(sets_model(sets), frozenset(sets), math.log2(n * math.comb(n - 1, d)))
    if kind == "non-monotone":  # d culprits, each masked by one rule unless another is on
        if 3 * d > n:
            return None
        picks = rng.sample(range(n), 3 * d)
        parts = [masked_model(*picks[3 * i : 3 * i + 3]) for i in range(d)]
        return Case(any_of(*parts), None, math.log2(math.comb(n, d)))
    if kind == "overlap":  # two interacting pairs sharing one rule: {a, b} and {b, c}
        if d != 2:
            return None
        a, b, c = rng.sample(range(n), 3)
        return Case(sets_model([{a, b}, {b, c}]), None, math.log2(n * math.comb(n - 1, 2)), frozenset({b}))
    if kind == "all":  # every rule fails alone: d = n (asked as d = 1 or d = n; the table shows d = n)
        if d not in (1, n):
            return None
        sets = [frozenset({r}) for r in range(n)]
        return Case(sets_model(sets), frozenset(sets), 0.0)
    raise ValueError(kind)


def correct(case: Case, universe: frozenset[int], result) -> bool:
    """Verified fix, and culprit sets that are exactly the planted ones (or, for a
    non-monotone model, each a failing 1-minimal set by the model itself)."""
    if not result.fix_verified or case.model(result.fix):
        return False
    if case.off is not None and universe - result.fix != case.off:
        return False
    found = [c.rules for c in result.culprit_sets]
    if case.expected is not None:
        return len(found) == len(case.expected) and frozenset(found) == case.expected
    for rules in found:
        if not case.model(rules) or any(case.model(rules - {r}) for r in rules if len(rules) > 1):
            return False
    return universe >= frozenset().union(*found)


def run_strategy(
    name: str, case: Case, n: int, parallelism: int, *, guard: bool = True, group_testing: bool | None = None,
    beside: bool = False,
) -> tuple[int, int, bool]:
    """One search as the CLI runs it by default: the engine's oracle can repeat trainings, so the
    noise guard is on (``confirm: auto``), here on noise-free answers. ``guard=False`` is the
    oracle without repeats (``confirm: off``)."""
    universe = list(range(n))
    oracle = SimulatedOracle(case.model, parallelism=parallelism, repeats=guard)

    def search(asked: object, lanes: Lanes) -> CulpritSearch[int]:
        return find_culprits(universe, asked, STRATEGIES[name], parallelism=lanes, group_testing=group_testing)

    # The engine's precondition round; ``beside``: the search's first question in it (on 3 devices
    # or more), as the engine trains it with early passes off (``early_stop.pass_at: off``).
    result = search(oracle, references_round(oracle, universe, search, beside=beside))
    return oracle.trainings, oracle.rounds, correct(case, frozenset(universe), result)


def run_hwang(case: Case, n: int) -> tuple[int, bool] | None:
    """Hwang's generalized binary splitting (1972), told the number of culprits: the reference.

    Independent culprits only (None for other models). Groups of 2^a rules,
    a = floor(log2((m - d + 1) / d)), are tested alone; a passing group is
    discarded, a failing one halved by testing its first half alone until one
    rule is left, which is taken as the culprit without a test of its own (the
    classic algorithm infers it); once m <= 2d - 2 every rule is tested alone;
    the search stops when d culprits are found. Counted like fusion-dd: the two
    references, every distinct configuration tested, and the fix verification.
    Knowing d is an advantage fusion-dd does not have.
    """
    if case.expected is None or any(len(s) != 1 for s in case.expected):
        return None
    tested: dict[frozenset[int], bool] = {}

    def fails(config: list[int]) -> bool:
        key = frozenset(config)
        if key not in tested:
            tested[key] = bool(case.model(key))
        return tested[key]

    items = list(range(n))
    d = len(case.expected)
    found: list[int] = []
    while items and d > 0:
        if len(items) <= 2 * d - 2:
            found += [rule for rule in items if fails([rule])]
            break
        size = 2 ** int(math.floor(math.log2((len(items) - d + 1) / d)))
        group = items[:size]
        if not fails(group):
            items = items[size:]
            continue
        while len(group) > 1:
            half = group[: len(group) // 2]
            if fails(half):
                group = half
            else:
                items = [rule for rule in items if rule not in half]
                group = group[len(half) :]
        found.append(group[0])
        items.remove(group[0])
        d -= 1
    fix = frozenset(range(n)) - frozenset(found)
    fix_passes = not case.model(fix)
    right = fix_passes and frozenset(frozenset({r}) for r in found) == case.expected
    return 2 + len(tested) + 1, right


def picire_available() -> bool:
    try:
        import picire  # noqa: F401
    except ImportError:
        return False
    return True


def run_picire(case: Case, n: int) -> tuple[int, bool]:
    """picire's sequential DD, repeated until the whole universe minus the switched-off rules passes.

    Counted as our journal counts ours: distinct configurations trained, with one
    cache shared across the rounds (a configuration picire asks again, in a later
    round or as its per-iteration re-check, costs nothing), the two references
    (all off, all on) included. A fresh ``DD`` per round without that cache would
    handicap picire.
    """
    import picire

    universe = list(range(n))
    trained: dict[frozenset[int], bool] = {frozenset(): False, frozenset(universe): True}

    def fails(config: frozenset[int]) -> bool:
        if config not in trained:
            trained[config] = bool(case.model(config))
        return trained[config]

    def test(config, _config_id):
        return picire.Outcome.FAIL if fails(frozenset(config)) else picire.Outcome.PASS

    off: set[int] = set()
    found = []
    current = universe
    fix_passes = False
    for _ in range(n):
        culprit = picire.DD(test)(list(current))
        found.append(frozenset(culprit))
        off.add(min(culprit))
        current = [r for r in universe if r not in off]
        if not fails(frozenset(current)):  # the fix verification
            fix_passes = True
            break
    ok = fix_passes
    if case.expected is not None:
        ok = ok and frozenset(found) == case.expected and len(found) == len(case.expected)
    return len(trained), ok


def fmt(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def bench(ns, ds, ps, seeds, models=MODELS):
    """Rows of the results table: one per (model, n, d, P) that the model supports."""
    names = list(STRATEGIES)
    with_picire = picire_available()
    rows = []
    for kind in models:
        for n in ns:
            for d in ds:
                cases = [plant(kind, n, d, s) for s in range(seeds)]
                if any(c is None for c in cases):
                    continue
                bound = math.ceil(cases[0].log2_space)
                picire_cell = None
                for p in ps:
                    row = {"model": kind, "n": n, "d": n if kind == "all" else d, "P": p, "bound": bound}
                    for name in names:
                        runs = [run_strategy(name, c, n, p) for c in cases]
                        row[name] = (
                            statistics.median(r[0] for r in runs),
                            statistics.median(r[1] for r in runs),
                            all(r[2] for r in runs),
                        )
                    if with_picire and p == 1:
                        runs = [run_picire(c, n) for c in cases]
                        picire_cell = (statistics.median(r[0] for r in runs), all(r[1] for r in runs))
                    row["picire"] = picire_cell if p == 1 else None
                    rows.append(row)
    return names, rows, with_picire


def table(names, rows, with_picire) -> list[str]:
    head = ["model", "n", "d", "P"]
    for name in names:
        head += [f"{name} trainings", f"{name} rounds", f"{name} correct"]
    head += ["picire 21.8 trainings", "picire correct", "lower bound"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["model"], str(row["n"]), str(row["d"]), str(row["P"])]
        for name in names:
            t, r, ok = row[name]
            cells += [fmt(t), fmt(r), "yes" if ok else "**NO**"]
        pic = row["picire"]
        if pic is None:
            cells += ["n/a" if not with_picire else "-", "-"]
        else:
            cells += [fmt(pic[0]), "yes" if pic[1] else "**NO**"]
        cells.append(str(row["bound"]))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def find_row(rows, model, n, d, p):
    for row in rows:
        if (row["model"], row["n"], row["d"], row["P"]) == (model, n, d, p):
            return row
    return None


TARGETS = [
    # (label, model, n, d, P, metric index: 0 trainings / 1 rounds, limit)
    ("one culprit (d=1), trainings", "OR", 256, 1, 1, 0, 12),
    ("OR d=3, all culprits + verified fix, trainings", "OR", 256, 3, 1, 0, 28),
    ("OR d=8, trainings", "OR", 256, 8, 1, 0, 60),
    ("AND d=3, trainings", "AND", 256, 3, 1, 0, 30),
    ("mixed: 1 independent + 1 interacting pair, trainings", "mixed", 256, 2, 1, 0, 31),
    ("AND d=8 among 4096, trainings", "AND", 4096, 8, 1, 0, 108),
    ("OR d=32 among 4096, trainings", "OR", 4096, 32, 1, 0, 320),
    ("one culprit among 256 on P=8, rounds", "OR", 256, 1, 8, 1, 4),
    ("one culprit among 256 on P=16, rounds", "OR", 256, 1, 16, 1, 4),
    ("OR d=3 on P=8, rounds", "OR", 256, 3, 8, 1, 10),
    ("every rule fails alone (d = n = 256), trainings: at most 2n + 2", "all", 256, 256, 1, 0, 514),
]

TARGET_SEEDS = 21


def target_cell(target, seeds: int, with_picire: bool) -> dict:
    """One target, measured on ``seeds`` seeds: the CLI's default beside the references."""
    label, model, n, d, p, metric, limit = target
    cases = [plant(model, n, d, s) for s in range(seeds)]

    def median(runs, index=metric):
        return statistics.median(r[index] for r in runs)

    default = [run_strategy("bisect", c, n, p) for c in cases]
    cell = {
        "default": median(default),
        "default_ok": all(r[2] for r in default),
        "guard_off": median([run_strategy("bisect", c, n, p, guard=False) for c in cases]),
        "per_culprit": median([run_strategy("bisect", c, n, p, group_testing=False) for c in cases]),
        "beside": median([run_strategy("bisect", c, n, p, beside=True) for c in cases]) if p >= 3 else None,
        "hwang": None,
        "picire": None,
        "bound": math.ceil(cases[0].log2_space),
    }
    if p == 1:
        hwang = [run_hwang(c, n) for c in cases]
        if all(h is not None for h in hwang):
            cell["hwang"] = (statistics.median(h[0] for h in hwang), all(h[1] for h in hwang))
        if with_picire and n <= 256 and model != "all":
            runs = [run_picire(c, n) for c in cases]
            cell["picire"] = (statistics.median(r[0] for r in runs), all(r[1] for r in runs))
    return cell


def _target_job(args):
    return target_cell(*args)


def measure_targets(seeds: int, with_picire: bool, processes: int = 2) -> list[dict]:
    """Every target's cell; at most one process beside this one (the machine is shared)."""
    jobs = [(target, seeds, with_picire) for target in TARGETS]
    if processes <= 1:
        return [_target_job(job) for job in jobs]
    import multiprocessing

    with multiprocessing.Pool(processes) as pool:
        return pool.map(_target_job, jobs, chunksize=1)


def targets(cells: list[dict], seeds: int) -> list[str]:
    lines = [
        f"Targets: the CLI's defaults (`bisect`, group testing, `confirm: auto` on an oracle that can repeat "
        f"trainings, no noise), medians over {seeds} seeds; trainings include the 2 references, every "
        "repeat and the fix verification. Beside them, in the same run and counting: guard off "
        "(`confirm: off`), a search per culprit (group testing off), Hwang's generalized binary "
        "splitting told the number of culprits (benchmarks' own implementation, independent culprits "
        "only), picire 21.8 (P=1, n <= 256) and the lower bound (ceil(log2) of the structures). "
        "First question beside the references: the search's first question trained in the references' "
        "round, as with `early_stop.pass_at: off` (the default `auto` keeps it after them, so that it "
        "can pass early; rows on 3 devices or more).",
        "",
        "| target | default | limit | met | guard off | search per culprit | first question beside the references | Hwang (told d) | picire 21.8 | lower bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (label, *_, metric, limit), cell in zip(TARGETS, cells):
        met = cell["default"] <= limit and cell["default_ok"]
        hwang = "-" if cell["hwang"] is None else fmt(cell["hwang"][0]) + ("" if cell["hwang"][1] else " (**wrong**)")
        pic = "-" if cell["picire"] is None else fmt(cell["picire"][0]) + ("" if cell["picire"][1] else " (**wrong**)")
        value = fmt(cell["default"]) + ("" if cell["default_ok"] else " (**wrong answers**)")
        lines.append(
            f"| {label} | {value} | {limit} | {'yes' if met else '**no**'} | {fmt(cell['guard_off'])} | "
            f"{fmt(cell['per_culprit'])} | {'-' if cell['beside'] is None else fmt(cell['beside'])} | {hwang} | {pic} | "
            f"{cell['bound'] if metric == 0 else '-'} |"
        )
    return lines


def comparison(rows, challenger: str, reference: str = "ddmin") -> list[str]:
    """Where the challenger is at least as good: trainings on one device, rounds on several."""
    worse = []
    for row in rows:
        metric = 0 if row["P"] == 1 else 1
        if row[challenger][metric] > row[reference][metric]:
            worse.append(row)
    lines = [
        f"`{challenger}` vs `{reference}` (trainings when P=1, rounds when P>1): "
        f"at least as good on {len(rows) - len(worse)} of {len(rows)} rows."
    ]
    for row in worse:
        lines.append(f"- worse: {row['model']} n={row['n']} d={row['d']} P={row['P']}")
    return lines


def render(names, rows, with_picire, seeds: int, quick: bool, cells: list[dict], target_seeds: int) -> str:
    out = [
        BEGIN,
        "## Search strategies (benchmarks/bench_search.py)",
        "",
        f"Generated by `python benchmarks/bench_search.py{' --quick' if quick else ''}`: "
        f"medians over {seeds} seeds with random culprit positions. Every fusion-dd strategy runs "
        "inside the all-culprits layer (`find_culprits`) with the CLI's defaults (an oracle that can "
        "repeat trainings, so the noise guard is on; no noise); trainings count everything launched: "
        "2 preconditions + search + every repeat + fix verification. picire 21.8 `DD` runs sequentially, repeated "
        "until the fix passes, counted as our journal counts ours: distinct configurations, one "
        "cache shared across its rounds, the 2 preconditions and the fix verifications included; it "
        "is shown on P=1 rows only. Lower bound: "
        "ceil(log2 of the number of possible planted structures) (C(n,d); n*C(n-1,d) for mixed). "
        "mixed = 1 independent culprit + 1 interacting set of d rules; non-monotone = d culprits, "
        "each hidden by a masking rule unless an unmasking rule is also on (answers checked as "
        "failing and 1-minimal by the model); overlap = two pairs sharing one rule, {a, b} and "
        "{b, c} (correct: b alone switched off, every set found failing and 1-minimal; the other "
        "pair may stay hidden behind b, which is why a search can beat the lower bound here: it need "
        "not tell every planted structure apart); all = every rule fails alone (d = n; 2n + 2 "
        "trainings at most).",
        "",
    ]
    if not with_picire:
        out += ["picire is not installed (`pip install picire==21.8`), so its column is n/a.", ""]
    out += targets(cells, target_seeds) + [""] + comparison(rows, "bisect") + [""]
    out += table(names, rows, with_picire) + [END]
    return "\n".join(out) + "\n"


def write_section(text: str, path: Path = RESULTS) -> None:
    """Replace this script's section of RESULTS.md, keeping every other section."""
    replace_section(text, BEGIN, END, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n in {16, 256}, P in {1, 8}, 5 seeds")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 11, quick 5)")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args(argv)
    seeds = args.seeds or (5 if args.quick else 11)
    ns = (16, 256) if args.quick else (16, 64, 256, 1024)
    ps = (1, 8) if args.quick else (1, 4, 8)
    names, rows, with_picire = bench(ns, (1, 2, 3), ps, seeds)
    target_seeds = 5 if args.quick else TARGET_SEEDS
    cells = measure_targets(target_seeds, with_picire)
    text = render(names, rows, with_picire, seeds, args.quick, cells, target_seeds)
    print(text)
    if not with_picire:
        print("note: picire is not importable; its column is n/a", file=sys.stderr)
    if not args.no_write:
        write_section(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
