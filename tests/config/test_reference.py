"""The configuration reference (docs/configuration.md) names every key the config accepts, and no other.

The table is what users read; a key missing there is a feature nobody finds,
and a key it names that the config refuses is an error the user is told to make.
"""

from __future__ import annotations

import re

from fusion_dd.config.settings import _SCHEMA
from tests.support import REPO

REFERENCE = REPO / "docs" / "configuration.md"


def _table_rows() -> dict[str, str]:
    """``{key: the row's text}`` for every key in the first column of the reference table."""
    text = REFERENCE.read_text(encoding="utf-8")
    section = text[text.index("## Config reference") :]
    end = section.find("\n## ", 5)
    section = section if end < 0 else section[:end]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            for key in re.findall(r"`([A-Za-z_]+(?:\.[A-Za-z_]+)?)`", line.split("|")[1]):
                rows[key] = line
    return rows


def _documented_keys() -> set[str]:
    """Keys as the table writes them: a section's own keys, a nested section (train.slurm) as one row."""
    return {top if sub is None else f"{top}.{name}" for top, sub in _SCHEMA.items() for name in (sub or [None])}


def test_every_schema_key_is_in_the_config_reference() -> None:
    assert _documented_keys() - set(_table_rows()) == set()


def test_the_reference_names_no_key_the_config_rejects() -> None:
    assert set(_table_rows()) - _documented_keys() == set()


def test_a_nested_section_names_each_of_its_keys_in_its_row() -> None:
    rows = _table_rows()
    nested = [(f"{top}.{name}", keys) for top, sub in _SCHEMA.items() if sub for name, keys in sub.items() if keys]
    assert nested, "train.slurm is a nested section"
    for key, keys in nested:
        missing = [name for name in keys if f"`{name}`" not in rows[key]]
        assert missing == [], f"{key}: the reference's row does not name {missing}"
