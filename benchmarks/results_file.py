"""benchmarks/RESULTS.md is shared: each benchmark script owns one marked section of it."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def replace_section(section: str, begin: str, end: str, path: Path = RESULTS) -> None:
    """Put ``section`` (which starts with ``begin`` and ends with ``end``) in place of the old one.

    Every other section of the file is kept as it is; a new section is appended.
    """
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    path.write_text(text, encoding="utf-8")
