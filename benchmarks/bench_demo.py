"""Time one demo training per scenario, as fusion-dd launches it.

Each run is a fresh ``python -m fusion_dd.demo.train`` process (interpreter start,
imports, compilation, training, evaluation, fusion_result.json) with
``OPENBLAS_NUM_THREADS=1``, so the CPU time is the cost of one trial on one core.
Every scenario is timed with every fusion rule on and with every rule off (the
unfused graph has more ops, so it is the slower case). The budget is 2 s of one
core per training.

Usage: ``python benchmarks/bench_demo.py [--repeats N] [--no-write]``. The results
replace the section between ``<!-- bench_demo:begin -->`` and
``<!-- bench_demo:end -->`` in ``benchmarks/RESULTS.md``; the rest of the file is
kept.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import replace_section

BEGIN = "<!-- bench_demo:begin -->"
END = "<!-- bench_demo:end -->"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
BUDGET_CPU_SECONDS = 2.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


ALL_OFF = '{"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"ALL": "off"}}}\n'


def time_one(argv: list[str], all_off: bool) -> tuple[float, float]:
    """Wall and CPU seconds of one training process."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    for name in ("FUSION_DD_SWITCH_FILE", "FUSION_DD_METRICS_FILE"):
        env.pop(name, None)
    with tempfile.TemporaryDirectory() as trial:
        env["FUSION_DD_TRIAL_DIR"] = trial
        if all_off:
            switch = Path(trial) / "fusion_switch.cfg"
            switch.write_text(ALL_OFF, encoding="utf-8")
            env["FUSION_DD_SWITCH_FILE"] = str(switch)
        cpu_before = _children_cpu()
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, cwd=trial, capture_output=True, text=True)
        wall = time.perf_counter() - start
        cpu = _children_cpu() - cpu_before
    if done.returncode != 0 or "accuracy:" not in done.stdout:
        raise SystemExit(f"training failed ({done.returncode}): {done.stderr.strip()}")
    return wall, cpu


def measure(repeats: int) -> list[dict[str, object]]:
    from fusion_dd.demo import SCENARIOS

    rows = []
    for name, scenario in SCENARIOS.items():
        argv = [sys.executable, "-m", "fusion_dd.demo.train", "--scenario", name]
        for all_off in (False, True):
            samples = [time_one(argv, all_off) for _ in range(repeats)]
            cpus = [cpu for _, cpu in samples]
            row = {
                "scenario": name,
                "rules": "all off" if all_off else "all on",
                "steps": scenario.steps,
                "wall": statistics.median(wall for wall, _ in samples),
                "cpu": statistics.median(cpus),
                "cpu_max": max(cpus),
            }
            rows.append(row)
            print(
                f"{name:10s} {row['rules']:8s} steps={scenario.steps:4d} wall={row['wall']:.2f}s "
                f"cpu={row['cpu']:.2f}s (max {row['cpu_max']:.2f}s)",
                flush=True,
            )
    return rows


def render(rows: list[dict[str, object]], repeats: int) -> str:
    import numpy

    lines = [
        BEGIN,
        "## One demo training (`python -m fusion_dd.demo.train`)",
        "",
        f"A fresh process per run, `OPENBLAS_NUM_THREADS=1`, every fusion rule on or every "
        f'rule off (`"ALL": "off"`); median of {repeats} runs. '
        f"Budget: {BUDGET_CPU_SECONDS:.0f} s of one core per training. "
        f"Python {platform.python_version()}, numpy {numpy.__version__}, "
        f"{os.cpu_count()} CPUs ({platform.machine()}). "
        "Reproduce with `python benchmarks/bench_demo.py`.",
        "",
        "| scenario | rules | steps | wall (s) | CPU (s) | max CPU (s) | within budget |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        ok = "yes" if float(row["cpu_max"]) <= BUDGET_CPU_SECONDS else "NO"
        lines.append(
            f"| {row['scenario']} | {row['rules']} | {row['steps']} | {row['wall']:.2f} "
            f"| {row['cpu']:.2f} "
            f"| {row['cpu_max']:.2f} | {ok} |"
        )
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_section(section: str, path: Path = RESULTS) -> None:
    """Replace this script's section of RESULTS.md, keeping every other section."""
    replace_section(section, BEGIN, END, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rows = measure(args.repeats)
    section = render(rows, args.repeats)
    if not args.no_write:
        write_section(section)
        print(f"updated {RESULTS.name}")
    return 0 if all(float(r["cpu_max"]) <= BUDGET_CPU_SECONDS for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
