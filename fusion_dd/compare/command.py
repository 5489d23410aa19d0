"""What ``fusion-dd compare`` does, kept out of ``cli.py`` (which only parses arguments)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from ..core.errors import UsageError
from .api import Comparison, compare_dumps, load_graph_dumps
from .metrics import Thresholds
from .render import csv_text, json_text, text_lines, write_reports

FORMATS = ("text", "json", "csv")



def run_compare(
    on: Path,
    off: Path,
    graph_on: Path | None,
    graph_off: Path | None,
    out: Path | None,
    output_format: str,
    step: int | None,
    model: str | None,
    jobs: int | None,
    cosine: float,
    max_abs: float,
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
    *,
    cosine_floor: float = 0.9,
    abs_ceiling: float = 1.0,
    rel: float = 0.05,
    converters: Path | None = None,
) -> int:
    """Run one comparison and print it; 0 when a comparison was made (even with problems)."""
    if output_format not in FORMATS:
        raise UsageError(f"--format: {output_format!r} is not one of {', '.join(FORMATS)}")
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs: must be at least 1")
    for flag, value in (("--cosine", cosine), ("--cosine-floor", cosine_floor)):
        if not -1.0 <= value <= 1.0:
            raise UsageError(f"{flag}: {value} is not a cosine; give a number from -1 to 1")
    for flag, value in (("--max-abs", max_abs), ("--abs-ceiling", abs_ceiling), ("--rel", rel)):
        if not value >= 0.0:
            raise UsageError(f"{flag}: {value} must be a number of at least 0")
    if converters is not None:
        _use_converters(converters)
    if out is not None:
        _check_out(out)  # before the comparison, which may take minutes: not only at its end
    if _same_folder(on, off):
        print(
            f"fusion-dd: warning: --on and --off are the same folder ({on}): every tensor is compared with "
            "itself; give the fusion-on run's dump and the fusion-off run's",
            file=stderr,
        )
    graphs = [load_graph_dumps([path]) if path is not None else None for path in (graph_on, graph_off)]
    progress = _Progress(stderr)
    comparison = compare_dumps(
        on, off, graphs[0], graphs[1], step=step, model=model,
        thresholds=Thresholds(cosine=cosine, max_abs=max_abs, cosine_floor=cosine_floor, max_abs_ceiling=abs_ceiling,
                              mean_rel=rel),
        jobs=jobs, progress=progress,
    )  # fmt: skip
    progress.done()
    if output_format == "json":
        stdout.write(json_text(comparison))
    elif output_format == "csv":
        stdout.write(csv_text(comparison))
    else:
        for line in text_lines(comparison):
            print(line, file=stdout)
    if out is not None:
        for path in write_reports(comparison, out):
            print(f"wrote {path}", file=stderr)
    return 0 if comparison.pairs else _nothing_compared(comparison)


def _same_folder(on: Path, off: Path) -> bool:
    """Whether both sides name one folder (a typo, or a copied command line not edited)."""
    try:
        return on.resolve() == off.resolve()
    except OSError:
        return False


def _check_out(out: Path) -> None:
    """``--out`` must be a folder that exists or can be created, and written into."""
    from ..store.atomic import unwritable_ancestor

    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is a file; give a folder for compare.csv and compare.json")
    blocker = next((folder for folder in out.parents if folder.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise UsageError(f"--out {out}: {blocker} is a file, so no folder can be made there; give another folder")
    existing = unwritable_ancestor(out)
    if existing is not None:
        raise UsageError(f"--out {out}: {existing} is not writable (read-only or no permission); give another folder")


def _use_converters(folder: Path) -> None:
    """Make the converters in ``folder`` visible to this process and its workers."""
    import os

    from ..backends.cann.artifacts.converters import ENV, check_folder

    if not folder.is_dir():
        raise UsageError(f"--converters {folder}: not a directory; give the folder holding convert_<FROM>_to_<TO>.py files")
    if not check_folder(folder):
        raise UsageError(f"--converters {folder}: no convert_<FROM>_to_<TO>.py file in it")
    os.environ[ENV] = os.pathsep.join(filter(None, [str(folder.resolve()), os.environ.get(ENV, "")]))


def _nothing_compared(comparison: Comparison) -> int:
    raise UsageError(
        f"{comparison.on_dir} and {comparison.off_dir}: no tensor could be paired and compared "
        f"({len(comparison.problems)} problems; see above or in compare.json)"
    )


class _Progress:
    """``compared 120/4000 tensors, 1.2 GiB`` on stderr: live on a terminal, every 10 s elsewhere."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = bool(getattr(stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.last = self.start
        self.shown = False

    def __call__(self, done: int, total: int, nbytes: int) -> None:
        now = time.monotonic()
        interval = 0.5 if self.live else 10.0
        if now - self.last < interval and done != total:
            return
        if not self.live and now - self.start < interval:
            return
        self.last = now
        text = f"compared {done}/{total} tensors, {nbytes / (1 << 20):.0f} MiB, {now - self.start:.0f} s"
        if self.live:
            self.stream.write("\r" + text + "\033[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.live and self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
