"""Small helpers shared by the artifact readers."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import UsageError
from ..rules import Rule


def read_text(path: Path, what: str) -> str:
    """A file's text, or a one-line UsageError that names the file and what was expected."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, expected a {what} file") from None
    except UnicodeDecodeError:
        raise UsageError(
            f"{path}: not a UTF-8 text file; expected a {what} "
            "(GE dumps are protobuf text, atc --mode=5 writes JSON)"
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {what} ({exc.strerror})") from None


def sort_rules(rules: Iterable[Rule]) -> list[Rule]:
    """GraphFusion before UBFusion, then by name: the order of ``fusion_switch.cfg``."""
    return sorted(set(rules), key=lambda rule: (rule.section.value, rule.name))
