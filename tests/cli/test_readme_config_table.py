"""The configuration reference (docs/configuration.md) names every key the config accepts.

The table is what users read; a key missing there is a feature nobody finds.
"""

from __future__ import annotations

import re

from fusion_dd.config.settings import _SCHEMA
from tests.support import REPO

REFERENCE = REPO / "docs" / "configuration.md"


def _table_keys() -> set[str]:
    text = REFERENCE.read_text(encoding="utf-8")
    section = text[text.index("## Config reference") :]
    end = section.find("\n## ", 5)
    section = section if end < 0 else section[:end]
    keys: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            keys.update(re.findall(r"`([A-Za-z_]+(?:\.[A-Za-z_]+)?)`", line.split("|")[1]))
    return keys


def test_every_schema_key_is_in_the_readme_config_table() -> None:
    keys = _table_keys()
    expected = {
        top if sub is None else f"{top}.{name}"
        for top, sub in _SCHEMA.items()
        for name in (sub or [None])
    }
    assert expected - keys == set()


def test_the_table_names_no_key_the_config_rejects() -> None:
    allowed = {top for top, sub in _SCHEMA.items() if sub is None}
    allowed |= {f"{top}.{name}" for top, sub in _SCHEMA.items() if sub for name in sub}
    assert _table_keys() - allowed == set()
