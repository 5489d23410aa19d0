"""The journal's record types, declared once (fusion_dd/store/records.py)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import fusion_dd
from fusion_dd.store.journal import JOURNAL_NAME, SEALED, Journal, read_records
from fusion_dd.store.records import RecordType
from fusion_dd.store.state import _APPLY, replay

PACKAGE = Path(fusion_dd.__file__).parent


def test_every_declared_type_is_replayed_and_nothing_else_is() -> None:
    assert set(_APPLY) == {kind.value for kind in RecordType} - {SEALED}


def test_no_module_spells_a_record_type_as_a_bare_string() -> None:
    words = {kind.value for kind in RecordType}
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if (
                        isinstance(key, ast.Constant) and key.value == "type"
                        and isinstance(value, ast.Constant) and value.value in words
                    ):  # fmt: skip
                        spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert spelled == []


def test_a_record_written_with_its_type_reads_back_as_the_bare_word(tmp_path: Path) -> None:
    assert json.dumps({"type": RecordType.QUESTION}) == '{"type": "question"}'
    assert f"{RecordType.QUESTION}" == str(RecordType.QUESTION) == "question"
    with Journal.open(tmp_path) as journal:
        journal.append({"type": RecordType.QUESTION, "index": 0, "width": 2})
    (record,) = read_records(tmp_path / JOURNAL_NAME)
    assert type(record["type"]) is str and record["type"] == "question"
    assert replay([record]).lanes == [2]


def test_a_type_of_a_newer_version_changes_nothing() -> None:
    state = replay([{"type": "something_new", "trial_id": "0001"}])
    assert state.trials == {} and state.lanes == []
