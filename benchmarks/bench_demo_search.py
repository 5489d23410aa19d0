"""Time whole `fusion-dd demo` searches, as a user runs them (2 workers by default).

Each scenario runs ``fusion-dd demo --scenario NAME`` in a fresh temporary
directory and reads its ``report.json``: wall time, trainings, rounds, whether
the planted culprit sets were found and the fix verified, and what early
stopping saved (the ``nan`` scenario). The target of the issue: the default
scenario in under 2 minutes on 2 cores.

Usage: ``python benchmarks/bench_demo_search.py [--scenarios mixed,nan] [--no-write]``.
The table replaces the section between ``<!-- bench_demo_search:begin -->`` and
``<!-- bench_demo_search:end -->`` in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import replace_section

from fusion_dd.demo import DEFAULT_SCENARIO, SCENARIOS
from fusion_dd.demo.config import default_demo_dir

BEGIN = "<!-- bench_demo_search:begin -->"
END = "<!-- bench_demo_search:end -->"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
TARGET_SECONDS = 120.0


def run(scenario: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        process = subprocess.run(
            [sys.executable, "-m", "fusion_dd.cli", "demo", "--scenario", scenario],
            cwd=tmp,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - start
        report = json.loads((Path(tmp) / default_demo_dir(scenario) / "report.json").read_text())
    planted = sorted(sorted(culprit) for culprit in SCENARIOS[scenario].planted)
    found = sorted(sorted(rule["name"] for rule in culprit["rules"]) for culprit in report["culprits"])
    return {
        "scenario": scenario,
        "exit": process.returncode,
        "wall": wall,
        "trainings": report["trainings"],
        "rounds": report["rounds"],
        "correct": found == planted,
        "fix_verified": report["fix_verified"],
        "early_stops": report["early_stops"]["trainings"],
        "seconds_saved": report["early_stops"]["seconds_saved"],
    }


def render(rows: list[dict[str, object]]) -> str:
    lines = [
        BEGIN,
        "## Whole demo searches (`fusion-dd demo`)",
        "",
        f"`fusion-dd demo --scenario NAME` in a fresh directory, 2 workers, default strategy. "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs. Target: the default scenario "
        f"({DEFAULT_SCENARIO}) in under {TARGET_SECONDS:.0f} s. Reproduce with `python benchmarks/bench_demo_search.py`.",
        "",
        "| scenario | wall (s) | trainings | rounds | planted sets found | fix verified | early stops | training seconds saved |",
        "|---|---:|---:|---:|---|---|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['scenario']} | {row['wall']:.1f} | {row['trainings']} | {row['rounds']} | "
            f"{'yes' if row['correct'] else 'NO'} | {'yes' if row['fix_verified'] else 'no'} | "
            f"{row['early_stops']} | {row['seconds_saved']:.1f} |"
        )
    default = next((row for row in rows if row["scenario"] == DEFAULT_SCENARIO), None)
    if default is not None:
        met = "yes" if float(default["wall"]) < TARGET_SECONDS and default["correct"] else "NO"  # type: ignore[arg-type]
        lines += ["", f"Target met (default scenario under {TARGET_SECONDS:.0f} s, correct): {met}."]
    lines.append(END)
    return "\n".join(lines)


def write_section(section: str) -> None:
    """Replace this script's section of RESULTS.md, keeping every other section."""
    replace_section(section, BEGIN, END, RESULTS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rows = [run(name) for name in args.scenarios.split(",") if name]
    section = render(rows)
    print(section)
    if not args.no_write:
        write_section(section)
    return 0 if all(row["correct"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
