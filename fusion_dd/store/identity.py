"""Which search a state directory, a journal and a trial directory belong to.

A journal copied into another search's state directory (a restored backup of
the wrong run, two searches' files mixed by hand) has the same format and may
have the same definition: without an identity, the trial directories there
would be taken as its trials and their metrics believed. So a search draws a
random id when it starts; it is journaled in ``search_started``, kept beside
the journal in ``STATE/search_id.json``, and written into every trial
directory before its training starts (:func:`fusion_dd.runner.trial.trial_binding`).
A resume whose journal names another search than the state directory refuses;
a trial directory that names another search or another configuration than the
journal is never taken as that trial's outcome.

Journals written before search ids have none: they resume as before, and their
trial directories are checked by configuration only.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.safe_read import SMALL_FILE_BYTES, loads_json, read_text
from .atomic import write_json_atomic

IDENTITY_NAME = "search_id.json"
SEARCH_ID_KEY = "search_id"


def new_search_id() -> str:
    """A random id, unique for every search ever started (64 bits)."""
    return secrets.token_hex(8)


def journaled_id(start_record: dict[str, Any] | None) -> str | None:
    """The search id of a journal's ``search_started`` record (None: written before ids)."""
    if start_record is None:
        return None
    value = start_record.get(SEARCH_ID_KEY)
    return str(value) if value is not None else None


def state_dir_id(state_dir: Path) -> str | None:
    """The id of the search this state directory was made for (None: no record of one)."""
    path = state_dir / IDENTITY_NAME
    if not path.exists():
        return None
    try:
        document = loads_json(read_text(path, IDENTITY_NAME, SMALL_FILE_BYTES), str(path), IDENTITY_NAME)
    except (UsageError, ValueError):
        raise UsageError(
            f"{path}: unreadable search id; restore it, or delete it if this state directory's journal is "
            "its own (the journal's search id is then taken)"
        ) from None
    value = document.get(SEARCH_ID_KEY) if isinstance(document, dict) else None
    if not isinstance(value, str) or not value:
        raise UsageError(f"{path}: holds no '{SEARCH_ID_KEY}'; restore it, or delete it if this state directory's journal is its own")
    return value


def record_state_dir_id(state_dir: Path, search_id: str) -> None:
    """Keep the journal's search id beside it (after the journal has it: the journal is the truth)."""
    path = state_dir / IDENTITY_NAME
    try:
        write_json_atomic(path, {SEARCH_ID_KEY: search_id})
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the search id ({exc.strerror or exc})") from None


def check_journal_belongs(state_dir: Path, journal_path: Path, search_id: str | None) -> None:
    """Refuse a journal of another search than the one this state directory was made for.

    Records the id when the state directory has none yet (a journal written
    before ids has none to record).
    """
    own = state_dir_id(state_dir)
    if own is None:
        if search_id is not None:
            record_state_dir_id(state_dir, search_id)
        return
    if search_id != own:
        theirs = f"search {search_id}" if search_id is not None else "a search without an id (an older fusion-dd)"
        raise UsageError(
            f"{journal_path}: is the journal of {theirs}, but this state directory belongs to search {own} "
            f"({state_dir / IDENTITY_NAME}): the journal was replaced by another search's; restore this "
            "search's journal, or put the journal into a state directory of its own"
        )
