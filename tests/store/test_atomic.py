"""The one atomic write: whole files for readers, fsynced unless the file means nothing after a crash."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from fusion_dd.store import atomic
from fusion_dd.store.atomic import write_json_atomic


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", counting)
    return calls


@pytest.mark.parametrize("durable, expected_fsyncs", [(True, 2), (False, 0)])
def test_a_write_replaces_the_file_whole_and_fsyncs_only_when_durable(
    tmp_path: Path, fsyncs: list[int], durable: bool, expected_fsyncs: int
) -> None:
    target = tmp_path / "status.json"
    target.write_text("old")
    write_json_atomic(target, {"exit_code": 0}, mode=0o600, durable=durable)
    assert json.loads(target.read_text()) == {"exit_code": 0}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert len(fsyncs) == expected_fsyncs  # the file, then its directory
    assert sorted(path.name for path in tmp_path.iterdir()) == ["status.json"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text('{"old": true}')
    with pytest.raises(TypeError):
        write_json_atomic(target, {"bad": object()})  # not JSON: nothing is written
    assert json.loads(target.read_text()) == {"old": True}
