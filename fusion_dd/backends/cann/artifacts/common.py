"""Small helpers shared by the artifact readers."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ....core.errors import UsageError
from ....core.rules import Rule
from ....core.safe_read import read_bytes


def read_text(path: Path, what: str, limit: int) -> str:
    """A regular file's text of at most ``limit`` bytes, or a one-line UsageError naming it.

    ``safe_read`` refuses FIFOs, devices, directories and oversized files before
    reading; a file that is not UTF-8 is not any artifact fusion-dd reads.
    """
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(
            f"{path}: not a UTF-8 text file; expected a {what} "
            "(GE dumps are protobuf text, atc --mode=5 writes JSON)"
        ) from None


def sort_rules(rules: Iterable[Rule]) -> list[Rule]:
    """GraphFusion before UBFusion, then by name: the order of ``fusion_switch.cfg``."""
    return sorted(set(rules), key=lambda rule: (rule.section.value, rule.name))
