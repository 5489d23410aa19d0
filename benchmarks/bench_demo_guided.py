"""Every demo scenario searched guided by the references' dumps and unguided: trainings side by side.

Guided is ``fusion-dd demo --scenario NAME`` as a user runs it (dumps on, so
``search.guide: dumps``); unguided is the same demo config with
``search.guide: none`` run by ``fusion-dd search``. Both localize their
culprits, and ``trainings`` counts everything launched (references, the
search, repeats, the fix verification, dumped trainings), as report.json does.

Usage: ``python benchmarks/bench_demo_guided.py [--scenarios mixed,pair] [--no-write]``.
The table replaces the section between ``<!-- bench_demo_guided:begin -->`` and
``<!-- bench_demo_guided:end -->`` in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from results_file import replace_section

from fusion_dd.demo import DEFAULT_SCENARIO, SCENARIOS
from fusion_dd.demo.config import default_demo_dir

BEGIN = "<!-- bench_demo_guided:begin -->"
END = "<!-- bench_demo_guided:end -->"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
DEFAULT_TARGET = 16  # the target for the default scenario, guided, everything counted


def _fusion_dd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fusion_dd.cli", *args],
        cwd=cwd,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
    )


def _summary(report: dict, scenario: str) -> dict[str, object]:
    planted = sorted(sorted(culprit) for culprit in SCENARIOS[scenario].planted)
    found = sorted(sorted(rule["name"] for rule in culprit["rules"]) for culprit in report.get("culprits") or [])
    return {"trainings": report["trainings"], "correct": found == planted and bool(report.get("fix_verified"))}


def run(scenario: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _fusion_dd("demo", "--scenario", scenario, "--jobs", "2", cwd=root)
        state = root / default_demo_dir(scenario)
        guided_report = json.loads((state / "report.json").read_text())
        config = yaml.safe_load((state / "fusion-dd.yaml").read_text())
        config["search"]["guide"] = "none"
        config["state_dir"] = "unguided"
        (root / "unguided.yaml").write_text(yaml.safe_dump(config))
        _fusion_dd("search", "-c", "unguided.yaml", cwd=root)
        unguided_report = json.loads((root / "unguided" / "report.json").read_text())
    guided = _summary(guided_report, scenario)
    unguided = _summary(unguided_report, scenario)
    ranking = (guided_report.get("guide") or {}).get("ranking") or []
    planted = sorted({rule for culprit in SCENARIOS[scenario].planted for rule in culprit})
    ranks = ", ".join(f"{rule} {ranking.index(rule) + 1 if rule in ranking else '-'}" for rule in planted)
    # Later searches ranked again by their failing fix candidate's dump (guide.refined), with partners.
    later = []
    for refined in (guided_report.get("guide") or {}).get("refined") or []:
        again = refined.get("ranking") or []
        mates = {mate for group in (refined.get("partners") or {}).values() for mate in group}
        for rule in planted:
            if rule in again:
                later.append(f"{rule} {again.index(rule) + 1}")
            elif rule in mates:
                later.append(f"{rule} partner")
    return {
        "scenario": scenario, "guided": guided, "unguided": unguided, "ranks": ranks, "suspects": len(ranking),
        "later": ", ".join(later) or "-",
    }


def render(rows: list[dict[str, object]]) -> str:
    lines = [
        BEGIN,
        "## Demo scenarios guided by the references' dumps (benchmarks/bench_demo_guided.py)",
        "",
        "Guided: `fusion-dd demo --scenario NAME --jobs 2` (dumps on, `search.guide: dumps`); unguided: "
        "the same config with `search.guide: none`. Trainings count everything launched (references, "
        "search, repeats of the noise guard, fix verification, dumped trainings of localization). "
        "Rank: where each planted rule sits in the dumps' ranking (- : not a suspect). Later search: "
        "where it sits in the ranking of a later search's own failing fix candidate's dump, or "
        "'partner' when it is among the partners there (the rules of the ops around a suspect's bad op).",
        "",
        "| scenario | unguided trainings | guided trainings | fewer | planted rules' rank (of suspects) "
        "| later search | both correct |",
        "|---|---:|---:|---|---|---|---|",
    ]
    for row in rows:
        guided, unguided = row["guided"], row["unguided"]
        fewer = "yes" if guided["trainings"] < unguided["trainings"] else "**no**"  # type: ignore[index]
        correct = "yes" if guided["correct"] and unguided["correct"] else "**NO**"  # type: ignore[index]
        lines.append(
            f"| {row['scenario']} | {unguided['trainings']} | {guided['trainings']} | {fewer} | "  # type: ignore[index]
            f"{row['ranks']} (of {row['suspects']}) | {row['later']} | {correct} |"
        )
    default = next((row for row in rows if row["scenario"] == DEFAULT_SCENARIO), None)
    if default is not None:
        value = default["guided"]["trainings"]  # type: ignore[index]
        met = "yes" if value <= DEFAULT_TARGET else "**no**"
        lines += ["", f"Target: the default scenario ({DEFAULT_SCENARIO}) guided in at most {DEFAULT_TARGET} "
                  f"trainings, everything counted: {value}, met: {met}."]
    lines.append(END)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rows = [run(name) for name in args.scenarios.split(",") if name]
    section = render(rows)
    print(section)
    if not args.no_write:
        replace_section(section, BEGIN, END, RESULTS)
    return 0 if all(row["guided"]["correct"] for row in rows) else 1  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
