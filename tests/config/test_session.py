"""Where a search trains, remembered across sessions (fusion_dd/config/session.py): pure functions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fusion_dd.config.settings import parse_config
from fusion_dd.core.errors import UsageError
from fusion_dd.config.session import Given, context_of, hint_flags, journaled_budget, journaled_context, remembered

DOCUMENT = {
    "rules": {"GraphFusion": ["PadFusionPass"]},
    "train": {"command": ["python3", "train.py"], "devices": [0]},
    "metric": {"pattern": "accuracy: (\\S+)"},
}


def config(**train):
    document = {**DOCUMENT, "train": {**DOCUMENT["train"], **train}}
    return parse_config(document, Path("fusion-dd.yaml"))


def test_a_session_journals_its_devices_and_its_launcher_with_what_reaches_it() -> None:
    assert context_of(config().train) == {"devices": [["0"]], "launcher": {"launcher": "local"}}
    on_dask = config(launcher="dask", scheduler="tcp://h:8786")
    assert context_of(on_dask.train)["launcher"] == {"launcher": "dask", "scheduler": "tcp://h:8786"}
    every = replace(on_dask, train=replace(on_dask.train, devices_given=False))
    assert context_of(every.train)["devices"] is None  # every device worker the cluster offers


def test_the_last_sessions_context_is_the_journals_and_an_old_sessions_plain_devices_count() -> None:
    new = {"type": "session_started", "context": {"devices": [["0"], ["1"]], "launcher": {"launcher": "local"}}}
    old = {"type": "session_started", "devices": [["2"], ["3"]]}
    slots = {"type": "session_started", "devices": [["host:0/worker-0"]]}
    assert journaled_context([new, {"type": "search_finished"}]) == (new["context"], True)
    assert journaled_context([new, old]) == ({"devices": [["2"], ["3"]], "launcher": {"launcher": "local"}}, False)
    assert journaled_context([new, slots]) == (None, False)


def test_the_journal_wins_over_an_unchanged_config_the_command_line_over_the_journal() -> None:
    journaled = {"devices": [["0"], ["1"]], "launcher": {"launcher": "dask", "scheduler": "tcp://h:1"}}
    taken, line = remembered(config(), journaled, DOCUMENT, Given())
    assert taken.train.devices == (("0",), ("1",)) and taken.train.launcher == "dask"
    assert taken.train.scheduler == "tcp://h:1"
    assert line == (
        "resuming on devices 0,1 with the dask launcher (scheduler tcp://h:1) (from the journal); "
        "--devices, --scheduler or --launcher local override"
    )
    mine = replace(config(), train=replace(config().train, devices=(("5",),)))
    kept, line = remembered(mine, journaled, DOCUMENT, Given(devices=True, launcher=True))
    assert kept.train.devices == (("5",),) and kept.train.launcher == "local" and line is None


def test_a_config_changed_against_the_journal_is_refused_naming_both() -> None:
    journaled = {"devices": [["0"], ["1"]], "launcher": {"launcher": "local"}}
    with pytest.raises(UsageError, match=r"train.devices says 2,3, but this search ran on devices 0,1 \(its journal\)"):
        remembered(config(devices=[2, 3]), journaled, DOCUMENT, Given())
    # The same edit with --devices on the command line: the user said which.
    assert remembered(config(devices=[2, 3]), journaled, DOCUMENT, Given(devices=True))[0].train.devices == (
        ("2",), ("3",)
    )


def test_the_hint_carries_what_the_config_does_not_say_itself() -> None:
    assert hint_flags({"devices": [["0"]], "launcher": {"launcher": "local"}}, DOCUMENT) == []
    assert hint_flags({"devices": [["0", "1"], ["2", "3"]], "launcher": {"launcher": "local"}}, DOCUMENT) == [
        "--devices", "0,1;2,3"
    ]
    assert hint_flags({"devices": None, "launcher": {"launcher": "dask", "scheduler": "tcp://h:1"}}, DOCUMENT) == [
        "--scheduler", "tcp://h:1"
    ]


def _budgeted(budget: int | None = None):
    document = {**DOCUMENT, "search": {"budget": budget}} if budget is not None else DOCUMENT
    return parse_config(document, Path("fusion-dd.yaml"))


def test_the_last_sessions_budget_is_the_journals() -> None:
    sessions = [{"type": "session_started", "budget": 40}, {"type": "trial_started"}, {"type": "session_started", "budget": 12}]
    assert journaled_budget(sessions) == 12
    assert journaled_budget([*sessions, {"type": "session_started"}]) is None  # journaled without one
    assert journaled_budget([{"type": "session_started", "budget": True}]) is None
    assert journaled_budget([]) is None


def test_a_resume_keeps_the_last_sessions_budget_unless_the_command_line_or_the_file_says_another() -> None:
    kept, line = remembered(_budgeted(), None, DOCUMENT, Given(), budget=40)
    assert kept.search.budget == 40 and line is None  # no context to say: the engine's line says the rest
    journaled = {"devices": [["0"]], "launcher": {"launcher": "local"}}
    kept, line = remembered(_budgeted(), journaled, DOCUMENT, Given(), budget=40)
    assert kept.search.budget == 40
    assert line == "resuming on devices 0 with a budget of 40 trainings (from the journal); --devices, --budget override"
    given = replace(_budgeted(), search=replace(_budgeted().search, budget=60))
    assert remembered(given, journaled, DOCUMENT, Given(budget=True), budget=40)[0].search.budget == 60
    edited = _budgeted(80)  # search.budget written into the file since the search started
    assert remembered(edited, journaled, DOCUMENT, Given(), budget=40)[0].search.budget == 80
    same = remembered(_budgeted(), journaled, DOCUMENT, Given(), budget=_budgeted().search.budget)
    assert "budget" not in (same[1] or "")


def test_the_hint_always_says_the_budget_it_was_printed_with() -> None:
    local = {"devices": [["0"]], "launcher": {"launcher": "local"}}
    assert hint_flags(local, DOCUMENT, 200) == ["--budget", "200"]
    assert hint_flags(None, DOCUMENT, 40) == ["--budget", "40"]
    assert hint_flags(local, DOCUMENT) == []
