"""Which search a state directory belongs to: its id beside the journal, a foreign journal refused."""

from __future__ import annotations

import pytest

from fusion_dd.core.errors import UsageError
from fusion_dd.store.identity import (
    IDENTITY_NAME,
    check_journal_belongs,
    journaled_id,
    new_search_id,
    record_state_dir_id,
    state_dir_id,
)


def test_ids_are_random_and_journaled_ids_are_read_back():
    assert new_search_id() != new_search_id()
    assert journaled_id({"type": "search_started", "search_id": "abc"}) == "abc"
    assert journaled_id({"type": "search_started"}) is None  # a journal written before ids
    assert journaled_id(None) is None


def test_a_state_dir_records_the_journals_id_and_refuses_another_searchs_journal(tmp_path):
    journal = tmp_path / "journal.jsonl"
    check_journal_belongs(tmp_path, journal, None)  # an old journal: nothing to record
    assert state_dir_id(tmp_path) is None
    check_journal_belongs(tmp_path, journal, "aaaa")  # no record yet: the journal's id is kept
    assert state_dir_id(tmp_path) == "aaaa"
    check_journal_belongs(tmp_path, journal, "aaaa")
    with pytest.raises(UsageError, match=r"journal of search bbbb, but this state directory belongs to search aaaa"):
        check_journal_belongs(tmp_path, journal, "bbbb")
    with pytest.raises(UsageError, match="without an id"):
        check_journal_belongs(tmp_path, journal, None)


def test_an_unreadable_id_file_is_one_line_naming_it(tmp_path):
    (tmp_path / IDENTITY_NAME).write_text("{not json")
    with pytest.raises(UsageError, match=IDENTITY_NAME):
        state_dir_id(tmp_path)
    record_state_dir_id(tmp_path, "cccc")
    assert state_dir_id(tmp_path) == "cccc"
