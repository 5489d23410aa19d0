"""Where a search trains, remembered across sessions (fusion_dd/config/session.py): pure functions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fusion_dd.config.settings import parse_config
from fusion_dd.core.errors import UsageError
from fusion_dd.config.session import Given, context_of, hint_flags, journaled_context, remembered

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
