"""How honest the live estimate is: does its printed range hold the trainings that were really left?

    python benchmarks/bench_estimate.py [--quick] [--no-write]

Each case is a whole search through the CLI, in a fresh temporary directory:

* every ``fusion-dd demo`` scenario (2 workers, the built-in simulated-NPU training);
* the strategy benchmark's planted structures (benchmarks/bench_search.py: OR with
  d = 1, 2, 3 independent culprits, AND = one interacting pair, mixed = one culprit
  plus one pair), on 30 CANN rule names with the suite's fake training
  (tests/fakes/fake_train.py), on 1 and on 2 devices, culprit positions from seeds.

Afterwards the journal is cut after every finished training (each point where the
live view computes a new estimate) and ``fusion_dd.coordinator.estimate.estimate`` is asked what
is left. The truth at that point: the trainings the search launched later plus those
running then (all of them, localization included: they all cost time and budget).
An update counts as contained when ``low <= truth <= high`` of the printed range; a
"0 left" is wrong when the truth is not 0.

The markdown section is printed and written into benchmarks/RESULTS.md between
``<!-- bench_estimate:begin -->`` and ``<!-- bench_estimate:end -->``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from results_file import replace_section

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fusion_dd.demo import SCENARIOS  # noqa: E402
from fusion_dd.demo.config import default_demo_dir  # noqa: E402
from fusion_dd.coordinator.estimate import estimate  # noqa: E402
from fusion_dd.core.rules import catalog  # noqa: E402
from fusion_dd.store.journal import JOURNAL_NAME, read_records  # noqa: E402
from fusion_dd.store.state import replay  # noqa: E402

BEGIN, END = "<!-- bench_estimate:begin -->", "<!-- bench_estimate:end -->"
FAKE_TRAIN = REPO / "tests" / "fakes" / "fake_train.py"
RULES = [name for name, section in catalog().items() if section.value == "GraphFusion"][:30]
TARGET = 0.80


@dataclass
class Case:
    name: str
    devices: int
    updates: int = 0
    contained: int = 0
    wrong_zero: int = 0
    trainings: int = 0
    errors: list[float] | None = None


def _env() -> dict[str, str]:
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "FUSION_DD_HTML": "0"}


def _cli(*args: str, cwd: Path) -> None:
    subprocess.run([sys.executable, "-m", "fusion_dd.cli", *args], cwd=cwd, env=_env(), capture_output=True,
                   text=True, timeout=900, check=False)


def _counts(records: list[dict]) -> tuple[int, int]:
    """(trainings charged, of them still running) after these records."""
    state = replay(records)
    trials = [trial for trial in state.trials.values() if trial.costs_budget]
    return len(trials), sum(1 for trial in trials if trial.open)


def measure(case: Case, state_dir: Path) -> Case:
    """Every update of one finished search: the printed range against the truth."""
    records = list(read_records(state_dir / JOURNAL_NAME))
    final, _ = _counts(records)
    case.trainings = final
    case.errors = []
    for index, record in enumerate(records):
        if record.get("type") != "trial_finished":
            continue
        prefix = records[: index + 1]
        launched, running = _counts(prefix)
        truth = final - (launched - running)
        found = estimate(prefix, state_dir, now=0.0)
        if found is None:
            continue
        low, high = found.range if found.basis != "done" else (0, 0)
        case.updates += 1
        case.contained += low <= truth <= high
        case.wrong_zero += high == 0 and truth != 0
        case.errors.append(abs(found.trainings_left - truth))
    return case


def demo_case(scenario: str) -> Case:
    with tempfile.TemporaryDirectory() as tmp:
        _cli("demo", "--scenario", scenario, "--jobs", "2", cwd=Path(tmp))
        return measure(Case(f"demo {scenario}", 2), Path(tmp) / default_demo_dir(scenario))


def planted(kind: str, seed: int) -> list[str]:
    """The fake training's arguments for one planted structure (positions from the seed)."""
    rng = random.Random(f"{kind}/{seed}")
    picks = rng.sample(RULES, 3)
    if kind.startswith("OR"):
        return ["--culprits", ",".join(picks[: int(kind[-1])])]
    if kind == "AND":
        return ["--pair", f"{picks[0]}+{picks[1]}"]
    return ["--culprits", picks[0], "--pair", f"{picks[1]}+{picks[2]}"]  # mixed


def fake_case(kind: str, devices: int, seed: int) -> Case:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        document = {
            "rules": {"GraphFusion": RULES},
            "train": {"command": [sys.executable, "-S", str(FAKE_TRAIN), *planted(kind, seed)],
                      "devices": list(range(devices)), "timeout": 120},
            "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
            "search": {"budget": 200},
        }
        (folder / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
        _cli("search", cwd=folder)
        return measure(Case(f"{kind} P={devices} seed {seed}", devices), folder / ".fusion-dd")


def section(cases: list[Case]) -> str:
    updates = sum(case.updates for case in cases)
    contained = sum(case.contained for case in cases)
    wrong_zero = sum(case.wrong_zero for case in cases)
    rows = [
        f"| {case.name} | {case.trainings} | {case.updates} | {case.contained / max(1, case.updates):.0%} | "
        f"{statistics.median(case.errors or [0]):.1f} | {case.wrong_zero} |"
        for case in cases
    ]
    rate = contained / max(1, updates)
    return "\n".join([
        BEGIN,
        "## Estimate of the trainings left (benchmarks/bench_estimate.py)",
        "",
        "Generated by `python benchmarks/bench_estimate.py`: whole searches through the CLI (every demo scenario "
        "on 2 workers; the strategy benchmark's planted structures on 30 rules with the fake training, 1 and 2 "
        "devices), the journal cut after every finished training and the estimate asked at each cut. The truth: "
        "trainings launched later plus those running then. Contained: the printed range (low to likely upper "
        f"bound) holds the truth. Python {platform.python_version()}.",
        "",
        "| case | trainings | updates | range contains the truth | median abs error of 'expected' | wrong '0 left' |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"All updates: {contained} of {updates} contained ({rate:.0%}; target {TARGET:.0%}: "
        f"{'met' if rate >= TARGET else 'NOT met'}); wrong '0 left': {wrong_zero}.",
        END,
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, the default demo scenario only")
    parser.add_argument("--no-write", action="store_true", help="print, do not write benchmarks/RESULTS.md")
    args = parser.parse_args()
    scenarios = ["mixed"] if args.quick else list(SCENARIOS)
    seeds = [0] if args.quick else [0, 1]
    cases = [demo_case(scenario) for scenario in scenarios]
    for kind in ("OR1", "OR2", "OR3", "AND", "mixed"):
        for devices in (1, 2):
            for seed in seeds:
                cases.append(fake_case(kind, devices, seed))
                print(cases[-1].name, cases[-1].contained, "/", cases[-1].updates, file=sys.stderr)
    text = section(cases)
    print(text)
    if not args.no_write:
        replace_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
