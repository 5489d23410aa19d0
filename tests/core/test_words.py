"""Enums of bare words (fusion_dd/core/words.py): what the journal and report.json rely on."""

from __future__ import annotations

import json

from fusion_dd.core.status import SearchStatus
from fusion_dd.store.records import RecordType


def test_a_word_is_its_value_in_every_way_a_file_or_a_message_uses_it() -> None:
    for member in (SearchStatus.FOUND, RecordType.TRIAL_STARTED):
        value = member.value
        assert member == value and hash(member) == hash(value) and value in {member}
        assert str(member) == f"{member}" == f"{member:s}" == value
        assert f"{member:>20}" == f"{value:>20}"
        assert json.dumps({"k": member}) == json.dumps({"k": value})
