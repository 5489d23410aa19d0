"""Candidates that close over themselves: a fake compiler whose passes fire only when others are off.

The fake is an "ONNX Runtime" training (it speaks ORT's log lines and reads
FUSION_DD_DISABLED_OPTIMIZERS, no onnxruntime needed): ``A`` fires unless
switched off, ``B`` only once ``A`` is off, ``C`` only once ``B`` is off, and
``CastFloat16Transformer`` always (it cannot be switched off). Each firing
rule adds its error to the printed difference from the unoptimized output.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import yaml

from fake_training import run_fusion_dd
from fusion_dd.closure import close
from fusion_dd.rules import Rule, Section

FAKE = textwrap.dedent(
    '''
    import os
    off = set(filter(None, os.environ.get("FUSION_DD_DISABLED_OPTIMIZERS", "").split(";")))
    fired = []
    if "A" not in off: fired.append("A")
    if "A" in off and "B" not in off: fired.append("B")
    if "B" in off and "C" not in off: fired.append("C")
    fired.append("CastFloat16Transformer")
    for name in ["A", "B", "C", "D", "CastFloat16Transformer"]:
        if name not in off or name == "CastFloat16Transformer":
            print(f"[I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer {name} modified: {int(name in fired)} with status: OK")
    error = {"A": 1, "B": 2, "C": 4}
    print("maxdiff", sum(error.get(name, 0) for name in fired))
    '''
)


def fake_compiler(candidates: list[Rule], number: int) -> tuple[list[str], list[str]]:
    off = {rule.name for rule in candidates}
    fired = ["CastFloat16Transformer"] + [name for name in "ABC" if name not in off and (name == "A" or chr(ord(name) - 1) in off)]
    return fired, [name for name in fired if name in off]


def GROUP(name: str) -> Section | None:
    return None if name == "CastFloat16Transformer" else Section.ONNXRUNTIME


def test_closure_adds_what_fires_once_others_are_off_until_nothing_new_does() -> None:
    closure = close([Rule("A", Section.ONNXRUNTIME)], fake_compiler, GROUP)
    assert [rule.name for rule in closure.added] == ["B", "C"]
    assert [entry["added"] for entry in closure.rounds] == [["B"], ["C"], []]
    assert closure.closed and closure.stuck == ["CastFloat16Transformer"]
    # The closed baseline is fusion-free but for what cannot be switched off.
    assert fake_compiler([Rule(n, Section.ONNXRUNTIME) for n in "ABC"], 9)[0] == ["CastFloat16Transformer"]


def test_closure_stops_after_its_rounds() -> None:
    closure = close([Rule("A", Section.ONNXRUNTIME)], fake_compiler, GROUP, max_rounds=1)
    assert not closure.closed and [rule.name for rule in closure.added] == ["B"]


def write(tmp_path: Path, closure: bool, from_all_on: bool = False) -> None:
    (tmp_path / "train.py").write_text(FAKE)
    rules = {"from": "all_on"} if from_all_on else {"names": ["A"]}
    document = {
        "rules": {"compiler": "onnxruntime", **rules, "closure": closure, "unknown": "ignore"},
        "train": {"command": [sys.executable, "train.py"], "devices": [0, 1], "timeout": 60},
        "metric": {"pattern": r"maxdiff (\S+)", "goal": "min"},
        "score": {"tolerance": 0},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))


def test_a_search_with_closure_starts_from_a_fusion_free_baseline(tmp_path: Path) -> None:
    write(tmp_path, closure=True)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["baseline"] == 0.0  # without closure the baseline would carry B's error
    assert {frozenset(r["name"] for r in c["rules"]) for c in report["culprits"]} == {frozenset({n}) for n in "ABC"}
    assert "closure: 2 rule(s) added to the candidates: B, C" in result.stderr
    assert "CastFloat16Transformer fired in the all-off baseline and cannot be switched off" in result.stderr
    recorded = json.loads((tmp_path / ".fusion-dd" / "closure.json").read_text())
    assert [rule["name"] for rule in recorded["added"]] == ["B", "C"] and recorded["closed"]
    # Resuming the finished search trains nothing again: closure.json holds the candidates.
    again = run_fusion_dd("search", cwd=tmp_path)
    assert again.returncode == 0 and "closure round" not in again.stderr


def test_without_closure_the_baseline_names_what_fired_and_rules_closure_says_what_to_add(tmp_path: Path) -> None:
    write(tmp_path, closure=False)
    result = run_fusion_dd("rules", "--closure", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "names: [A, B, C]" in result.stdout
    assert "CastFloat16Transformer fired in the all-off baseline and cannot be switched off" in result.stderr


def test_candidates_from_the_all_on_training_then_closed(tmp_path: Path) -> None:
    write(tmp_path, closure=True, from_all_on=True)
    dry = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "rules.from: all_on" in dry.stdout
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules.from: all_on: 1 candidate(s): A" in result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert {frozenset(r["name"] for r in c["rules"]) for c in report["culprits"]} == {frozenset({n}) for n in "ABC"}
    assert json.loads((tmp_path / ".fusion-dd" / "from_all_on.json").read_text())["fired"] == ["A", "CastFloat16Transformer"]
