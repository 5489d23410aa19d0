"""Benchmark what a resume costs as a search grows: journal bytes, replay time and memory.

    python benchmarks/bench_resume.py [--only NAME,...] [--no-write]

The journals are written by the real engine in-process with instant trainings
(``bench_coordinator._build_journal``: the records are the engine's own; only the
processes are skipped). Every time is a ratio to ``fusion-dd --help`` run right
beside the command (the machine's speed drifts), each command a fresh process as
a user starts it:

* ``bytes``: journal bytes per trial of a search of about 1,300 trials over 1,024
  candidates (60 lone culprits and 20 interacting pairs), everything included (the rule list once, the
  answer at the end).
* ``finished``: ``fusion-dd resume`` of that finished search (it shows the answer).
* ``replay``: ``fusion-dd resume`` of the same journal with its last record
  (``search_finished``) cut off: every question replayed from the journal's cache,
  nothing trained; wall time and the peak resident memory of the process.
* ``resume-5000``: the same for a search of about 5,000 trials over 512 candidates
  (20 lone culprits and 180 pairs).

The markdown section is printed and written into benchmarks/RESULTS.md between
``<!-- bench_resume:begin -->`` and ``<!-- bench_resume:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_coordinator import _build_journal, _cli, _compile_bytecode, _env, _names
from results_file import replace_section

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "RESULTS.md"
BEGIN, END = "<!-- bench_resume:begin -->", "<!-- bench_resume:end -->"
NAMES = ("bytes", "finished", "replay", "resume-5000")

# As measured before configurations were journaled as masks (the journal of a 1,312-trial search).
BEFORE = {"bytes": "~20 KB", "finished": "3.4x", "replay": "27.5 s, 448 MB", "resume_5000": "-"}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """One run of a command as its own process: wall seconds, CPU seconds (user + system), the result."""
    start, used = time.perf_counter(), _cpu()
    done = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, check=False)
    return time.perf_counter() - start, _cpu() - used, done


def _paired(argv: list[str], cwd: Path, runs: int) -> dict[str, Any]:
    """``runs`` runs of a command, each right after a run of ``fusion-dd --help``: medians and ratios.

    The machine is shared and its speed drifts over seconds; a ratio of two
    medians taken a minute apart measures the drift as much as the command.
    Each pair sees the same moment, so the ratio is the median of the pairs'.
    """
    walls, cpus, help_walls, help_cpus = [], [], [], []
    done = None
    for _ in range(runs):
        wall, cpu, _ = _run([*_cli(), "--help"], cwd)
        help_walls.append(wall)
        help_cpus.append(cpu)
        wall, cpu, done = _run(argv, cwd)
        walls.append(wall)
        cpus.append(cpu)
    assert done is not None
    return {
        "resume": statistics.median(walls), "help": statistics.median(help_walls),
        "ratio": statistics.median(w / h for w, h in zip(walls, help_walls)),
        "cpu_ratio": statistics.median(c / h for c, h in zip(cpus, help_cpus)),
        "exit": done.returncode,
    }


def _help_now(cwd: Path, runs: int = 3) -> tuple[float, float]:
    """``fusion-dd --help`` just before a single measured run: median wall and CPU seconds."""
    times = [_run([*_cli(), "--help"], cwd)[:2] for _ in range(runs)]
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)


def _peak(argv: list[str], cwd: Path) -> tuple[float, float, float, subprocess.CompletedProcess[str]]:
    """Wall and CPU seconds and peak memory (MB) of one run, the memory read from /proc while it runs (VmHWM)."""
    # Its output goes to files, not pipes: nothing reads a pipe while the process runs, and the
    # summary of a search of hundreds of culprit sets fills one (the process would block on it).
    out_file, err_file = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    start, used = time.perf_counter(), _cpu()
    process = subprocess.Popen(argv, cwd=cwd, env=_env(), stdout=out_file, stderr=err_file)
    peak_kb = 0
    status = Path(f"/proc/{process.pid}/status")
    while process.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak_kb = max(peak_kb, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.01)
    process.wait()
    elapsed = time.perf_counter() - start
    out_file.seek(0)
    err_file.seek(0)
    out, err = out_file.read().decode("utf-8", "replace"), err_file.read().decode("utf-8", "replace")
    return elapsed, _cpu() - used, peak_kb / 1024, subprocess.CompletedProcess(argv, process.returncode, out, err)


def _cut_end(directory: Path) -> None:
    journal = directory / ".fusion-dd" / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "search_finished"
    journal.write_bytes(b"".join(lines[:-1]))  # as if stopped right before the end


def _search(work: Path, name: str, candidates: int, singles: int, pairs: int, seed: int) -> tuple[Path, dict[str, Any]]:
    """A finished search over ``candidates`` rules with planted lone culprits and interacting pairs.

    The mix sets the size: group testing finds lone culprits in far fewer trainings
    than a pair costs, so pairs are what make a journal of thousands of trials.
    """
    directory = work / name
    directory.mkdir()
    names = _names(candidates)
    picks = random.Random(seed).sample(names, singles + 2 * pairs)
    planted = picks[:singles] + [f"{a}+{b}" for a, b in zip(picks[singles::2], picks[singles + 1::2])]
    started = time.perf_counter()
    report = _build_journal(directory, names, planted, budget=100_000)
    report["_built"] = time.perf_counter() - started
    return directory, report


def _replay_row(directory: Path, trials: int, report: dict[str, Any]) -> dict[str, Any]:
    """One replay of a journal with its end cut off, against ``--help`` run just before it."""
    help_wall, help_cpu = _help_now(directory)
    elapsed, cpu, peak, done = _peak([*_cli(), "resume"], directory)
    again = json.loads((directory / ".fusion-dd" / "report.json").read_text(encoding="utf-8"))
    return {
        "trials": trials, "resume": elapsed, "help": help_wall, "ratio": elapsed / help_wall,
        "cpu_ratio": cpu / help_cpu, "peak_mb": peak, "exit": done.returncode,
        "same": again["trainings"] == report["trainings"] and again["switched_off"] == report["switched_off"],
    }


def bench_large(work: Path, wanted: set[str]) -> dict[str, dict[str, Any]]:
    directory, report = _search(work, "n1024", 1024, 60, 20, 1024)
    journal = directory / ".fusion-dd" / "journal.jsonl"
    rows: dict[str, dict[str, Any]] = {}
    trials = report["trainings"]
    rows["bytes"] = {"trials": trials, "bytes": journal.stat().st_size, "per_trial": journal.stat().st_size / trials}
    if "finished" in wanted:
        rows["finished"] = {"trials": trials, **_paired([*_cli(), "resume"], directory, 7)}
    if "replay" in wanted:
        _cut_end(directory)
        rows["replay"] = _replay_row(directory, trials, report)
    return rows


def bench_5000(work: Path) -> dict[str, Any]:
    directory, report = _search(work, "n512", 512, 20, 180, 5000)
    _cut_end(directory)
    row = _replay_row(directory, report["trainings"], report)
    row["bytes"] = (directory / ".fusion-dd" / "journal.jsonl").stat().st_size
    return row


def _version(distribution: str) -> str:
    """The installed version of a dependency: typer's decides what a command costs before it runs."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def _mark(ok: bool) -> str:
    return "met" if ok else "**not met**"


def render(rows: dict[str, dict[str, Any]], load: tuple[float, float]) -> str:
    helps = sorted(row["help"] for row in rows.values() if "help" in row)
    help_range = f"{helps[0] * 1000:.0f} to {helps[-1] * 1000:.0f} ms" if helps else "-"
    lines = [
        BEGIN,
        "## Resume at size (`benchmarks/bench_resume.py`)",
        "",
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, typer {_version('typer')}, "
        "load average "
        f"{load[0]:.1f} before / {load[1]:.1f} after (the machine is shared); trivial trainings. The unit of the "
        "ratios is `fusion-dd --help` run beside each command (the finished search: 7 pairs of `--help` then "
        "`resume`, the median of the pairs' ratios; a replay: the median of 3 `--help` runs just before it), "
        f"since the machine's speed drifts within a minute; `--help` took {help_range} wall. Wall against wall, "
        "CPU (user + system) against CPU; a target counts as met on either.",
        "",
        "| case | target | before | now | |",
        "|---|---|---|---|---|",
    ]
    if "bytes" in rows:
        r = rows["bytes"]
        lines.append(
            f"| journal bytes per trial, n = 1,024 ({r['trials']} trials, {r['bytes'] / 1e6:.2f} MB) | ≤ 1 KB "
            f"| {BEFORE['bytes']} | {r['per_trial']:.0f} B | {_mark(r['per_trial'] <= 1024)} |"
        )
    if "finished" in rows:
        r = rows["finished"]
        lines.append(
            f"| `resume` of the finished search (7 pairs) | ≤ 1.5x | {BEFORE['finished']} "
            f"| {r['ratio']:.2f}x wall ({r['resume']:.2f} s), {r['cpu_ratio']:.2f}x CPU "
            f"| {_mark(min(r['ratio'], r['cpu_ratio']) <= 1.5 and r['exit'] == 0)} |"
        )
    if "replay" in rows:
        r = rows["replay"]
        ok = min(r["ratio"], r["cpu_ratio"]) <= 3 and r["peak_mb"] <= 150 and r["same"] and r["exit"] == 0
        lines.append(
            f"| `resume` replaying it, its end cut off | ≤ 3x, ≤ 150 MB | {BEFORE['replay']} "
            f"| {r['ratio']:.2f}x wall ({r['resume']:.2f} s), {r['cpu_ratio']:.2f}x CPU, {r['peak_mb']:.0f} MB "
            f"| {_mark(ok)} |"
        )
    if "resume-5000" in rows:
        r = rows["resume-5000"]
        ok = min(r["ratio"], r["cpu_ratio"]) <= 3 and r["same"] and r["exit"] == 0
        lines.append(
            f"| `resume` replaying a {r['trials']}-trial search, n = 512, its end cut off "
            f"({r['bytes'] / 1e6:.2f} MB journal) | ≤ 3x | {BEFORE['resume_5000']} "
            f"| {r['ratio']:.2f}x wall ({r['resume']:.2f} s), {r['cpu_ratio']:.2f}x CPU, {r['peak_mb']:.0f} MB "
            f"| {_mark(ok)} |"
        )
    lines += [
        "",
        "A replayed search reaches the same answer (same trainings, same switched-off rules) as the one that "
        "wrote the journal; each command is a fresh process started as a user starts it.",
        END,
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(NAMES), help=f"comma-separated subset of {', '.join(NAMES)}")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    _compile_bytecode()
    load_before = os.getloadavg()[0]
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as temp:
        work = Path(temp)
        if wanted & {"bytes", "finished", "replay"}:
            rows.update(bench_large(work, wanted))
        if "resume-5000" in wanted:
            rows["resume-5000"] = bench_5000(work)
    section = render(rows, (load_before, os.getloadavg()[0]))
    print(section)
    print(json.dumps(rows, indent=2, default=str), file=sys.stderr)
    if not args.no_write:
        replace_section(section, BEGIN, END, RESULTS)


if __name__ == "__main__":
    main()
