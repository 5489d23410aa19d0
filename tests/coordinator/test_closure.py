"""Candidates that close over themselves: a fake compiler whose passes fire only when others are off.

The fake is an "ONNX Runtime" training (it speaks ORT's log lines and reads
FUSION_DD_DISABLED_OPTIMIZERS, no onnxruntime needed): ``A`` fires unless
switched off, ``B`` only once ``A`` is off, ``C`` only once ``B`` is off, and
``CastFloat16Transformer`` always (it cannot be switched off). Each firing
rule adds its error to the printed difference from the unoptimized output.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import yaml

from fusion_dd.coordinator.closure import close
from fusion_dd.core.rules import Rule, Section
from tests.support.fake_training import call_fusion_dd, run_fusion_dd

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
    # A, B, C are in no list of fusion-dd's (rules.unknown: ignore), but the trials' logs list them: said once.
    assert "A, B, C: not in fusion-dd's list of names, but the compiler's own artifacts name them" in result.stdout
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
    as_json = run_fusion_dd("rules", "--closure", "--format", "json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["rules"] == {"compiler": "onnxruntime", "names": ["A", "B", "C"]}


def test_candidates_from_the_all_on_training_then_closed(tmp_path: Path) -> None:
    write(tmp_path, closure=True, from_all_on=True)
    dry = call_fusion_dd("search", "--dry-run", cwd=tmp_path)  # the search below is a real process
    assert dry.returncode == 0 and "rules.from: all_on" in dry.stdout
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules.from: all_on: 1 candidate(s): A" in result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert {frozenset(r["name"] for r in c["rules"]) for c in report["culprits"]} == {frozenset({n}) for n in "ABC"}
    assert json.loads((tmp_path / ".fusion-dd" / "from_all_on.json").read_text())["fired"] == ["A", "CastFloat16Transformer"]
    records = [json.loads(line) for line in (tmp_path / ".fusion-dd" / "journal.jsonl").read_text().splitlines()]
    all_on = [r for r in records if r["type"] == "trial_started" and r["role"] == "all_on"]
    assert [r["trial_id"] for r in all_on] == ["all-on"]  # the training that gave the candidates, not a second one
    assert "is the all-on reference (trial all-on)" in result.stderr


def test_a_rule_closure_added_that_fires_although_switched_off_is_dropped_again() -> None:
    # CANN's "forbidden to close" passes: F fires whatever the switch file says.
    def compiler(candidates: list[Rule], number: int) -> tuple[list[str], list[str]]:
        off = {rule.name for rule in candidates}
        fired = ["F"] + (["B"] if "A" in off and "B" not in off else [])
        return fired, [name for name in fired if name in off]

    closure = close([Rule("A", Section.GRAPH)], compiler, lambda name: Section.GRAPH)
    assert [rule.name for rule in closure.added] == ["B"] and closure.closed
    assert closure.rounds[1]["dropped"] == ["F"] and closure.stuck == ["F"]


# -- XLA: a fake whose passes fire in a pass dump only once others are off -----------------------------

FAKE_XLA = textwrap.dedent(
    '''
    import os, re
    flags = os.environ.get("XLA_FLAGS", "")
    off = set(re.search(r"--xla_disable_hlo_passes=(\\S*)", flags + " --xla_disable_hlo_passes=").group(1).split(","))
    dump = re.search(r"--xla_dump_to=(\\S+)", flags).group(1)
    os.makedirs(dump, exist_ok=True)
    fired = [name for name in ("layout-assignment", "copy-insertion") if True]
    if "algsimp" not in off: fired.append("algsimp")
    if "dot-library-rewriter" not in off: fired.append("dot-library-rewriter")
    if "dot-library-rewriter" in off and "fusion" not in off: fired.append("fusion")
    for seq, name in enumerate(fired):
        open(os.path.join(dump, f"module_0001.jit_f.{seq:04d}.main.after_{name}.before_dce.txt"), "w").close()
    with open(os.path.join(dump, "module_0001.jit_f.debug_options"), "w") as handle:
        handle.write(f'xla_disable_hlo_passes: "{",".join(sorted(off - {""}))}"\\n')
    error = {"algsimp": 1, "dot-library-rewriter": 2, "fusion": 4}
    print("maxdiff", sum(error.get(name, 0) for name in fired))
    '''
)


def write_xla(tmp_path: Path, closure: bool) -> None:
    (tmp_path / "train.py").write_text(FAKE_XLA)
    document = {
        "rules": {"compiler": "xla", "names": ["algsimp"], "closure": closure},
        "train": {"command": [sys.executable, "train.py"], "devices": [0, 1], "timeout": 60},
        "metric": {"pattern": r"maxdiff (\S+)", "goal": "min"},
        "score": {"tolerance": 0},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))


def test_xla_closure_adds_optimizations_and_names_structural_passes(tmp_path: Path) -> None:
    write_xla(tmp_path, closure=True)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "closure: 2 rule(s) added to the candidates: dot-library-rewriter, fusion" in result.stderr
    assert "copy-insertion, layout-assignment fired in the all-off baseline: structural passes" in result.stderr
    assert "cannot be switched off" not in result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["baseline"] == 0.0  # without closure the baseline would carry dot-library-rewriter's error
    assert {frozenset(r["name"] for r in c["rules"]) for c in report["culprits"]} == {
        frozenset({name}) for name in ("algsimp", "dot-library-rewriter", "fusion")
    }


# -- CANN: fusion_result.json of a fake whose rules fire only once others are off ------------------------

FAKE_CANN = textwrap.dedent(
    '''
    import json, os
    switch = json.load(open(os.environ["FUSION_DD_SWITCH_FILE"]))["Switch"]
    off = {name for section in switch.values() for name, value in section.items() if value == "off"}
    fired = {"F": "graph_fusion"}  # forbidden to close: fires whatever the file says
    if "A" not in off: fired["A"] = "graph_fusion"
    if "A" in off and "B" not in off: fired["B"] = "ub_fusion"
    graph = {"graph_fusion": {}, "ub_fusion": {}}
    for name, section in fired.items():
        graph[section][name] = {"match_times": "1", "effect_times": "1"}
    with open(os.path.join(os.environ["ASCEND_WORK_PATH"], "fusion_result.json"), "w") as handle:
        json.dump({"graph_0_0": graph}, handle)
    print("maxdiff", sum({"A": 1, "B": 2}.get(name, 0) for name in fired))
    '''
)


def write_cann(tmp_path: Path, closure: bool, from_all_on: bool = False) -> None:
    (tmp_path / "train.py").write_text(FAKE_CANN)
    rules: dict = {"from": "all_on"} if from_all_on else {"GraphFusion": ["A"]}
    document = {
        "rules": {**rules, "closure": closure, "unknown": "ignore"},
        "train": {"command": [sys.executable, "train.py"], "devices": [0, 1], "timeout": 60},
        "metric": {"pattern": r"maxdiff (\S+)", "goal": "min"},
        "score": {"tolerance": 0},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))


def test_cann_closure_adds_what_fusion_result_json_shows_with_its_section(tmp_path: Path) -> None:
    write_cann(tmp_path, closure=True)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # F fires although closure switched it off in round 2 (CANN cannot close it): dropped, never a stop.
    assert "closure: 1 rule(s) added to the candidates: B" in result.stderr
    assert "F fired in the all-off baseline and cannot be switched off" in result.stderr
    recorded = json.loads((tmp_path / ".fusion-dd" / "closure.json").read_text())
    assert recorded["added"] == [{"name": "B", "section": "UBFusion"}] and recorded["rounds"][1]["dropped"] == ["F"]
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["baseline"] == 0.0
    assert {frozenset(r["name"] for r in c["rules"]) for c in report["culprits"]} == {frozenset({"A"}), frozenset({"B"})}
    assert '"B": "off"' in (tmp_path / ".fusion-dd" / "fusion_switch.cfg").read_text()
    closed = call_fusion_dd("rules", "--closure", cwd=tmp_path)  # a real process in the test above
    assert closed.returncode == 0 and "GraphFusion: [A]" in closed.stdout and "UBFusion: [B]" in closed.stdout


def test_cann_candidates_from_the_all_on_training_which_is_the_all_on_reference(tmp_path: Path) -> None:
    write_cann(tmp_path, closure=True, from_all_on=True)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules.from: all_on: 2 candidate(s): A, F" in result.stderr
    state = tmp_path / ".fusion-dd"
    records = [json.loads(line) for line in (state / "journal.jsonl").read_text().splitlines()]
    started = [r for r in records if r["type"] == "trial_started"]
    # One all-on training in all: the one that gave the candidates, journaled as the all-on reference.
    assert [r["trial_id"] for r in started if r["role"] == "all_on"] == ["all-on"]
    # F fired with every rule on, but fires although switched off too: closure drops it again.
    assert "closure: F fire although switched off: no candidates" in result.stderr
    assert records[0]["definition"]["rules"] == [{"name": "A", "section": "GraphFusion"}, {"name": "B", "section": "UBFusion"}]
    report = json.loads(Path(state / "report.json").read_text())
    assert report["all_on"] == 1.0 and report["baseline"] == 0.0
    assert {frozenset(r["name"] for r in c["rules"]) for c in report["culprits"]} == {frozenset({"A"}), frozenset({"B"})}
    # Resume replays the journal: the records and the trainings before it are not read again.
    for name in ("from_all_on.json", "closure.json"):
        (state / name).unlink()
    shutil.rmtree(state / "closure")
    again = run_fusion_dd("search", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "training once" not in again.stderr and "closure round" not in again.stderr
    assert json.loads(Path(state / "report.json").read_text())["culprits"] == report["culprits"]
    (state / "fusion_switch.cfg").unlink()
    rebuilt = call_fusion_dd("report", cwd=tmp_path)  # from the journal: its candidates, not the config's
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads((state / "fusion_switch.cfg").read_text())["Switch"] == {
        "GraphFusion": {"A": "off"}, "UBFusion": {"B": "off"}
    }


def test_closure_stops_when_the_switches_never_reach_the_compiler(tmp_path: Path) -> None:
    write(tmp_path, closure=True)
    ignoring = FAKE.replace('os.environ.get("FUSION_DD_DISABLED_OPTIMIZERS", "")', '""')  # the session never gets the list
    (tmp_path / "train.py").write_text(ignoring)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "closure round 1: ONNX Runtime ran every optimizer fusion-dd switched off (A)" in result.stderr
    assert "ort_session_kwargs()" in result.stderr and not (tmp_path / ".fusion-dd" / "closure.json").exists()


def test_closure_trainings_run_through_the_configured_launcher_on_its_first_slot(tmp_path: Path, monkeypatch) -> None:
    # A cluster's closure rounds must not train on the coordinator's machine: train.launcher is obeyed.
    from dataclasses import replace

    from fusion_dd.config.settings import load_config
    from fusion_dd.coordinator.closure import train_once
    from fusion_dd.runner import registry as launcher_module
    from fusion_dd.runner.launcher import LocalLauncher

    seen: dict[str, object] = {"devices": [], "closed": 0}

    class Recording(LocalLauncher):
        def slots(self):
            return [("7",), ("8",)]

        def start(self, request):
            seen["devices"].append(request.spec.device)
            return super().start(request)

        def close(self):
            seen["closed"] += 1

    monkeypatch.setattr(launcher_module, "launcher_for", lambda config: Recording())
    write(tmp_path, closure=True)
    config = load_config(tmp_path / "fusion-dd.yaml")
    config = replace(config, train=replace(config.train, launcher="recording"))
    result = train_once(config, [Rule("A", Section.ONNXRUNTIME)], [], tmp_path / "closure-0001", "closure round 1")
    assert result.kind == "metric", result
    assert seen == {"devices": [("7",)], "closed": 1}


def test_a_closure_training_stops_the_local_fork_server_it_started(tmp_path: Path, monkeypatch) -> None:
    # One launcher per closure round: its fork server must end with the round, not run on unwaited.
    from fusion_dd.config.settings import load_config
    from fusion_dd.coordinator.closure import train_once
    from fusion_dd.runner import registry as launcher_module
    from fusion_dd.runner.launcher import LocalLauncher

    launchers: list[LocalLauncher] = []

    def local(config):
        launchers.append(LocalLauncher())
        return launchers[-1]

    monkeypatch.setattr(launcher_module, "launcher_for", local)
    write(tmp_path, closure=True)
    config = load_config(tmp_path / "fusion-dd.yaml")
    result = train_once(config, [Rule("A", Section.ONNXRUNTIME)], [], tmp_path / "closure-0001", "closure round 1")
    assert result.kind == "metric", result
    server = launchers[0]._forkserver._process
    assert server is None, f"the fork server (pid {server.pid}) is still held, running: {server.poll() is None}"
