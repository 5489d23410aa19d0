"""Benchmark ``fusion-dd compare`` on a large test-made Ascend dump.

    python benchmarks/bench_compare.py [--gib 2] [--dir DIR] [--keep] [--no-write]

Writes a fusion-on and a fusion-off dump of ``--gib`` GiB each (hundreds of op
files: fp16 and fp32 tensors, about a quarter in FRACTAL_NZ and NC1HWC0 with
padding, one planted bad op), then measures in fresh processes:

* ``fusion-dd compare`` (``compare_dumps``) with 1 and 2 worker processes:
  wall time, throughput in MB/s of dump bytes compared (both sides), and the peak
  resident memory of the process and of its largest worker;
* the reference: reading the same tensor bytes with plain ``numpy.fromfile``
  (no decoding, no metrics), the speed of the disk and page cache alone.

The files are read right after being written, so the page cache is warm: the
numbers measure fusion-dd's own cost, not the disk. The section is printed and
written into benchmarks/RESULTS.md between ``<!-- bench_compare:begin -->`` and
``<!-- bench_compare:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import replace_section  # noqa: E402

from fusion_dd.backends.cann.artifacts.dump import TensorToWrite, dump_file_name, write_dump_file  # noqa: E402
from fusion_dd.backends.cann.artifacts.layout import FRACTAL_NZ, NC1HWC0, ND, to_device  # noqa: E402

BEGIN, END = "<!-- bench_compare:begin -->", "<!-- bench_compare:end -->"
MiB = 1 << 20

#: (shape, dtype, format) of the tensors, cycled; about 4 MiB each.
KINDS = (
    ((1024, 2048), np.float16, ND),
    ((512, 2048), np.float32, ND),
    ((8, 250, 1000), np.float16, FRACTAL_NZ),  # 250 -> 256 rows, 1000 -> 1008 columns
    ((16, 100, 36, 36), np.float16, NC1HWC0),  # 100 -> 112 channels
)


def make_dump(root: Path, gib: float, planted: int | None) -> tuple[int, int]:
    """One run's dump under ``root``; returns (files, bytes). ``planted`` op gets a large error."""
    folder = root / "20260101000000" / "0" / "bench" / "1" / "0"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    bases = {i: rng.normal(size=shape).astype(dtype) for i, (shape, dtype, _) in enumerate(KINDS)}
    devices = {}
    total, index = 0, 0
    while total < gib * (1 << 30):
        kind = index % len(KINDS)
        shape, dtype, fmt = KINDS[kind]
        if kind not in devices:
            devices[kind] = to_device(bases[kind], fmt) if fmt != ND else bases[kind]
        data = devices[kind]
        if index == planted:
            data = data + dtype(3.0)
        name = f"layer_{index // 4}/op_{index}"
        path = folder / dump_file_name("Kind%d" % kind, name, index, 0, 1_000_000 + index)
        write_dump_file(path, name, [TensorToWrite(data, fmt, shape, (name, 0))])
        total += path.stat().st_size
        index += 1
    return index, total


_COMPARE = """
import json, resource, sys, time
from fusion_dd.compare import compare_dumps
start = time.perf_counter()
c = compare_dumps(sys.argv[1], sys.argv[2], jobs=int(sys.argv[3]))
seconds = time.perf_counter() - start
from joblib.externals.loky import get_reusable_executor
get_reusable_executor().shutdown(wait=True)  # reap the workers, so that their peak memory is counted
first = c.first_divergence
print(json.dumps({"seconds": seconds, "bytes": c.bytes_read, "pairs": len(c.pairs),
    "first": first.op if first else None, "problems": len(c.problems),
    "rss_self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "rss_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""

_FROMFILE = """
import json, resource, sys, time
import numpy as np
from fusion_dd.compare.sources import scan
start = time.perf_counter()
total = 0
for root in sys.argv[1:3]:
    for group in scan(root).groups.values():
        for t in group.tensors:
            raw = np.fromfile(t.source, dtype=np.uint8, count=t.info.size, offset=t.info.offset)
            total += raw.nbytes
            del raw
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "bytes": total,
    "rss_self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "rss_children": 0}))
"""


def _measure(code: str, *args: str) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=2.0, help="GiB per side (default 2)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the dumps (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the dumps")
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="bench-compare-", dir=args.dir))
    try:
        started = time.perf_counter()
        files, on_bytes = make_dump(base / "on", args.gib, planted=None)
        _, off_bytes = make_dump(base / "off", args.gib, planted=files // 3)
        made = time.perf_counter() - started
        print(f"wrote {files} files per side, {(on_bytes + off_bytes) / (1 << 30):.2f} GiB in all, {made:.0f} s", file=sys.stderr)
        rows = []
        reference = _measure(_FROMFILE, str(base / "on"), str(base / "off"))
        rows.append(("numpy.fromfile (reference: read only)", reference))
        for jobs in (1, 2):
            result = _measure(_COMPARE, str(base / "on"), str(base / "off"), str(jobs))
            assert result["first"] == f"layer_{(files // 3) // 4}/op_{files // 3}", result
            assert result["pairs"] == files and result["problems"] == 0, result
            rows.append((f"fusion-dd compare, {jobs} worker{'s' if jobs > 1 else ''}", result))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    section = _section(rows, files, on_bytes + off_bytes)
    print(section)
    if not args.no_write:
        replace_section(section, BEGIN, END)
    return 0


def _section(rows: list[tuple[str, dict]], files: int, total: int) -> str:
    lines = [
        BEGIN,
        "## Tensor dump comparison (benchmarks/bench_compare.py)",
        "",
        f"Generated by `python benchmarks/bench_compare.py`: a test-made Ascend dump of {files} op files per side, "
        f"{total / (1 << 30):.2f} GiB in all (both sides; fp16/fp32, a quarter each FRACTAL_NZ and NC1HWC0 with "
        "padding), one planted bad op, which every run must name as the first divergence. Page cache warm "
        f"(files read right after writing). Machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}. "
        "MB/s = dump bytes compared (both sides) per second; peak memory = largest resident set of the process "
        "and of any one worker (memory-mapped tensor pages included).",
        "",
        "| reader | seconds | MB/s | peak memory, process (MiB) | peak memory, largest worker (MiB) |",
        "|---|---|---|---|---|",
    ]
    for name, result in rows:
        rate = result["bytes"] / 1e6 / result["seconds"]
        worker = f"{result['rss_children'] / 1024:.0f}" if result["rss_children"] else "-"
        lines.append(f"| {name} | {result['seconds']:.1f} | {rate:.0f} | {result['rss_self'] / 1024:.0f} | {worker} |")
    lines.append(END)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
