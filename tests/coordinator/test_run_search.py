"""``run_search``: a library user's whole search, with the outputs the command line writes."""

from __future__ import annotations

import json
import os

from fusion_dd.config.settings import load_config
from fusion_dd.coordinator.run import run_search
from fusion_dd.core.status import ExitCode, SearchStatus
from tests.support.cli import CULPRIT, write_config


def test_run_search_finds_the_culprit_writes_report_fix_and_page_and_closes_the_launcher(tmp_path, monkeypatch):
    from fusion_dd.runner import launcher as launcher_module

    closed = []
    # The local launcher holds nothing to close; a close it is given must still be called once.
    monkeypatch.setattr(launcher_module.LocalLauncher, "close", lambda self: closed.append(self), raising=False)
    monkeypatch.chdir(tmp_path)
    config = load_config(write_config(tmp_path, "--culprits", CULPRIT))
    seen = []
    finished = run_search(config, events_for=lambda prepared: seen.append(prepared) or None)
    assert (finished.result.status, finished.result.exit_code) == (SearchStatus.FOUND, ExitCode.OK)
    report = json.loads(finished.result.report_path.read_text())
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
    assert finished.result.fix_path is not None and finished.result.fix_path.exists()
    assert finished.html is not None and CULPRIT in finished.html.read_text() and finished.html_error is None
    assert len(closed) == 1 and seen == [finished.config]


def test_run_search_without_a_page_when_asked_for_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FUSION_DD_HTML", "0")
    finished = run_search(load_config(write_config(tmp_path, "--culprits", CULPRIT)))
    assert finished.result.status == SearchStatus.FOUND
    assert (finished.html, finished.html_error) == (None, None)


def test_a_finished_search_shown_again_writes_nothing_and_leaves_its_trials_to_report_json(tmp_path, monkeypatch):
    """Its files newer than the journal: shown from the journal's answer, no trial rebuilt, no file
    rewritten; once the journal changes (here: one file is older than it), everything is written again."""
    monkeypatch.chdir(tmp_path)
    config = load_config(write_config(tmp_path, "--culprits", CULPRIT))
    first = run_search(config)
    outputs = [first.result.report_path, first.result.fix_path, first.html]
    written = [path.stat().st_mtime_ns for path in outputs]
    again = run_search(load_config(tmp_path / "fusion-dd.yaml"))
    assert [path.stat().st_mtime_ns for path in outputs] == written
    assert "trials" not in again.result.report
    whole = json.loads(first.result.report_path.read_text())
    # What the session shows counts its own rounds (none); report.json keeps the answer's.
    assert again.result.report["rounds"] == 0 and whole["rounds"] > 0
    assert {key: value for key, value in whole.items() if key not in ("trials", "rounds")} == {
        key: value for key, value in again.result.report.items() if key != "rounds"
    }
    assert again.result.fix_path == first.result.fix_path and again.html == first.html

    journal = config.state_dir / "journal.jsonl"
    old = journal.stat().st_mtime_ns - 10**9
    os.utime(first.html, ns=(old, old))  # the page is older than the journal: it and the report are written again
    third = run_search(load_config(tmp_path / "fusion-dd.yaml"))
    assert third.result.report["trials"] == whole["trials"]
    assert first.html.stat().st_mtime_ns > old and json.loads(first.result.report_path.read_text()) == whole
