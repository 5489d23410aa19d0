"""report.json on disk: indented when small, compact when large, never rewritten unchanged (fusion_dd/report/build.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fusion_dd.report.build import COMPACT_TRIALS, report_chunks, write_report
from fusion_dd.store.atomic import write_bytes_atomic

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def _large(extra: dict[str, object], trial: dict[str, object]) -> dict[str, object]:
    return {**extra, "trials": [{**trial, "trial_id": f"{number:04d}"} for number in range(COMPACT_TRIALS + 1)]}


@given(st.dictionaries(st.text(max_size=6), _VALUES, max_size=5), st.dictionaries(st.text(max_size=6), _VALUES, max_size=4))
def test_a_large_report_is_the_compact_sorted_json_of_it_written_in_pieces(
    extra: dict[str, object], trial: dict[str, object]
) -> None:
    report = _large(extra, trial)
    chunks = report_chunks(report)
    assert b"".join(chunks) == (json.dumps(report, sort_keys=True, separators=(",", ":")) + "\n").encode()
    assert len(chunks) == COMPACT_TRIALS + 3  # the frame's two ends and a trial a piece


def test_a_small_report_is_indented_with_sorted_keys() -> None:
    report = {"status": "found", "trials": [{"trial_id": "0001", "outcome": "pass"}]}
    assert b"".join(report_chunks(report)).decode() == json.dumps(report, indent=2, sort_keys=True) + "\n"


def test_the_same_report_is_not_written_again_and_a_changed_one_replaces_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    report = _large({"status": "found"}, {"outcome": "pass", "configuration": ["A", "B"]})
    write_report(path, report)
    first = path.stat().st_ino
    os.utime(path, (0, 0))
    write_report(path, report)
    assert path.stat().st_ino == first and path.stat().st_mtime > 0  # kept, touched
    report["status"] = "budget_exhausted"
    write_report(path, report)
    assert path.stat().st_ino != first and json.loads(path.read_text())["status"] == "budget_exhausted"


def test_an_atomic_write_takes_its_bytes_in_chunks(tmp_path: Path) -> None:
    path = tmp_path / "file"
    write_bytes_atomic(path, [b"ab", b"", b"cd"], durable=False)
    assert path.read_bytes() == b"abcd"
