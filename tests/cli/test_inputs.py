"""Hostile artifacts through the CLI: only regular files, bounded in size and nesting.

A FIFO or /dev/zero named by mistake must not block or read forever, a file far
over the size a real artifact has must be refused before it is read, and JSON or
protobuf text nested 100,000 levels deep must not crash the reader. Each ends as
one line naming the file, exit 2. In a search, a trial that leaves such a
``fusion_result.json`` only makes its switch check "unverified".

Each refusal runs end to end through a real ``fusion-dd`` process at least once;
the further cases of a parametrized refusal (other files with the same problem)
call the same ``main`` in-process (``call_fusion_dd``), except where a regression
would block (a FIFO, /dev/zero): those always get a process and its timeout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.artifacts import GRAPH_RULES, OBEDIENT_TRAINING, UB_RULE, fusion_result
from tests.support.fake_training import FAKE_PYTHON, call_fusion_dd, fusion_dd_runner, run_fusion_dd

DEPTH = 100_000
PROMPTLY = 60  # seconds; the old code never returned on a FIFO or /dev/zero


def one_line_error(result, *needles: str) -> str:
    """The single stderr line of a refused input; it names the file and the problem."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


DEEP_JSON = {
    "deep.json": "[" * DEPTH + "]" * DEPTH,
    "deep_objects.json": '{"a": ' * DEPTH + "1" + "}" * DEPTH,
    "fusion_result.json": '{"g": {"graph_fusion": ' + '{"a": ' * DEPTH + "{}" + "}" * DEPTH + "}}",
    "atc.json": '{"graph": [{"op": [{"attr": ' + "[" * DEPTH + "]" * DEPTH + "}]}]}",
    "switch.cfg": '{"Priority": ' + "[" * DEPTH + "]" * DEPTH + "}",
}


@pytest.mark.parametrize("name", sorted(DEEP_JSON))
def test_rules_refuses_deeply_nested_json(tmp_path, name):
    (tmp_path / name).write_text(DEEP_JSON[name])
    result = fusion_dd_runner(name == min(DEEP_JSON))("rules", name, cwd=tmp_path, timeout=PROMPTLY)
    one_line_error(result, name, "nested")


def test_rules_refuses_json_over_the_nesting_bound_that_python_could_parse(tmp_path):
    # 300 levels parse without a RecursionError, but no artifact is nested like that.
    (tmp_path / "deep.json").write_text('{"rules": ' + "[" * 300 + "]" * 300 + "}")
    one_line_error(run_fusion_dd("rules", "deep.json", cwd=tmp_path, timeout=PROMPTLY), "deep.json", "nested")


def test_rules_refuses_deeply_nested_yaml_rule_list(tmp_path):
    (tmp_path / "rules.yaml").write_text("rules: " + "[" * DEPTH + "]" * DEPTH + "\n")
    one_line_error(run_fusion_dd("rules", "rules.yaml", cwd=tmp_path, timeout=PROMPTLY), "rules.yaml", "nested")


def deep_proto(depth: int) -> str:
    """A ModelDef whose op carries a field nested ``depth`` levels deep (unknown to our schema)."""
    return 'graph { name: "g" op { name: "x" type: "Add" ' + "blob { " * depth + "}" * depth + " } }\n"


def test_rules_refuses_deeply_nested_graph_dump(tmp_path):
    (tmp_path / "ge_proto_00000001_graph_1_Build.txt").write_text(deep_proto(DEPTH))
    result = run_fusion_dd("rules", "ge_proto_00000001_graph_1_Build.txt", cwd=tmp_path, timeout=PROMPTLY)
    one_line_error(result, "ge_proto_00000001_graph_1_Build.txt", "nested")
    where = call_fusion_dd("rules", "--where", "X", "ge_proto_00000001_graph_1_Build.txt", cwd=tmp_path)
    one_line_error(where, "ge_proto_00000001_graph_1_Build.txt", "nested")


def test_a_graph_dump_with_moderate_unknown_nesting_still_reads(tmp_path):
    text = deep_proto(40).replace('type: "Add" ', 'type: "Add" attr { key: "pass_name_ub" value { s: "TbeEltwiseFusionPass" } } ')
    (tmp_path / "ge_proto_00000001_graph_1_Build.txt").write_text(text)
    result = run_fusion_dd("rules", "ge_proto_00000001_graph_1_Build.txt", cwd=tmp_path, timeout=PROMPTLY)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["rules"]["UBFusion"] == ["TbeEltwiseFusionPass"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("name", ["fusion_result.json", "rules.txt", "ge_proto_1_Build.txt", "switch.cfg"])
def test_rules_refuses_a_fifo_promptly(tmp_path, name):
    os.mkfifo(tmp_path / name)
    result = run_fusion_dd("rules", name, cwd=tmp_path, timeout=PROMPTLY)
    one_line_error(result, name, "not a regular file")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_rules_refuses_dev_zero_promptly(tmp_path):
    result = run_fusion_dd("rules", "/dev/zero", cwd=tmp_path, timeout=PROMPTLY)
    one_line_error(result, "/dev/zero", "not a regular file")
    where = run_fusion_dd("rules", "--where", "X", "/dev/zero", cwd=tmp_path, timeout=PROMPTLY)
    one_line_error(where, "/dev/zero", "not a regular file")


@pytest.mark.parametrize(
    ("name", "size"),
    [("fusion_result.json", 1 << 30), ("ge_proto_1_Build.txt", 4 << 30), ("rules.txt", 4 << 30)],
)
def test_rules_refuses_a_huge_file_without_reading_it(tmp_path, name, size):
    with open(tmp_path / name, "wb") as handle:
        handle.truncate(size)  # sparse: costs no disk
    result = fusion_dd_runner(name == "fusion_result.json")("rules", name, cwd=tmp_path, timeout=PROMPTLY)
    one_line_error(result, name, "at most")


@pytest.mark.parametrize("problem", ["nested", "at most", "Main priority from 1000 to 1999", "CANN keeps a pass"])
def test_search_refuses_a_hostile_base_cfg(tmp_path, problem):
    base = tmp_path / "base.cfg"
    if problem == "nested":
        base.write_text(DEEP_JSON["switch.cfg"])
    elif problem == "at most":
        with open(base, "wb") as handle:
            handle.truncate(4 << 30)
    elif problem.startswith("Main"):  # FE would refuse every trial's file, which carries it
        base.write_text(json.dumps({"Priority": {"GraphFusion": {"Main": {"OtherPass": "5"}}}}))
    else:  # FE keeps the passes of this list on: the candidate could never be switched off
        base.write_text(json.dumps({"ExceptionalPassOfO1Level": [GRAPH_RULES[0]]}))
    document = {
        "rules": {"GraphFusion": GRAPH_RULES, "base_cfg": "base.cfg"},
        "train": {"command": [sys.executable, "-c", "print('accuracy: 1')"]},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    result = fusion_dd_runner(problem == "nested")("search", "--dry-run", cwd=tmp_path, timeout=PROMPTLY)
    one_line_error(result, "base.cfg" if problem != "CANN keeps a pass" else "rules.base_cfg", problem)
    assert not (tmp_path / ".fusion-dd").exists()


# A training that obeys its switch file but leaves a fusion_result.json nested
# 100,000 levels deep: the compiler's evidence is unreadable, nothing else is wrong.
HOSTILE_TRAINING = OBEDIENT_TRAINING + (
    "with open(os.path.join(os.environ['FUSION_DD_TRIAL_DIR'], 'fusion_result.json'), 'w') as f:\n"
    f"    f.write('{{\"g\": ' * {DEPTH} + '{{}}' + '}}' * {DEPTH})\n"
)


def test_a_deeply_nested_fusion_result_leaves_the_switch_check_unverified(tmp_path):
    sections = {name: "UBFusion" if name == UB_RULE else "GraphFusion" for name in GRAPH_RULES + [UB_RULE]}
    script = tmp_path / "train.py"
    script.write_text(HOSTILE_TRAINING)
    document = {
        "rules": {"GraphFusion": GRAPH_RULES, "UBFusion": [UB_RULE]},
        "train": {"command": [*FAKE_PYTHON, str(script), json.dumps(sections)], "devices": [0, 1]},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 40},
    }
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "nested" in result.stdout + result.stderr  # the reason is shown once
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["switch_check"] == {"unverified": report["trainings"]}
    culprits = {frozenset(rule["name"] for rule in culprit["rules"]) for culprit in report["culprits"]}
    assert culprits == {frozenset({"FixPipeAbilityProcessPass"}), frozenset({"ConvToFullyConnectionFusionPass", UB_RULE})}
    journal = (tmp_path / ".fusion-dd" / "journal.jsonl").read_text()
    assert "nested" in journal  # the reason of each unverified check is kept

    # The all-on trial's file is read again on resume (to choose what to switch off).
    again = run_fusion_dd("resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stderr
    assert json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())["culprits"] == report["culprits"]


def test_rules_still_reads_a_directory_of_artifacts(tmp_path):
    # Where CANN writes it: $ASCEND_WORK_PATH/FE/<pid>/fusion_result.json.
    (tmp_path / "FE" / "4242").mkdir(parents=True)
    fusion_result(tmp_path / "FE" / "4242" / "fusion_result.json", {"FixPipeAbilityProcessPass": "GraphFusion"})
    result = run_fusion_dd("rules", ".", cwd=tmp_path, timeout=PROMPTLY)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["rules"]["GraphFusion"] == ["FixPipeAbilityProcessPass"]


def test_a_deeply_nested_metrics_line_is_an_unreadable_line(tmp_path):
    from fusion_dd.runner.early_stop import ReportReader
    from fusion_dd.runner.metrics import MetricSpec, read_metric
    from fusion_dd.runner.trial import TrialRun

    deep = "[" * DEPTH + "]" * DEPTH
    (tmp_path / "metrics.jsonl").write_text(f'{{"step": 1, "loss": 0.5}}\n{deep}\n{{"step": 2, "loss": 0.4, "accuracy": 0.9}}\n')
    (tmp_path / "output.log").write_text("")
    run = TrialRun(
        trial_id="t1", trial_dir=tmp_path, exit_code=0, signal=None, timed_out=False, cancelled=False,
        duration=1.0, start=0.0, end=1.0, log_path=tmp_path / "output.log",
        metrics_path=tmp_path / "metrics.jsonl", error=None, timeout=None,
    )
    reading = read_metric(run, MetricSpec())
    assert reading.value == 0.9
    assert "1 unreadable lines skipped" in reading.detail
    assert ReportReader(tmp_path).read_all() == [(1, 0.5), (2, 0.4)]


@pytest.mark.parametrize("problem", ["fifo", "/dev/zero", "nested"])
def test_search_refuses_a_config_that_is_not_a_readable_file(tmp_path, problem):
    config = tmp_path / "fusion-dd.yaml"
    if problem == "fifo":
        os.mkfifo(config)
    elif problem == "nested":
        config.write_text("rules: " + "[" * DEPTH + "]" * DEPTH + "\n")
    else:
        config = Path(problem)
    # A FIFO or /dev/zero could block a regression forever: those two get a process and its timeout.
    run = fusion_dd_runner(problem != "nested")
    result = run("search", "--dry-run", "-c", str(config), cwd=tmp_path, timeout=PROMPTLY)
    one_line_error(result, str(config), "nested" if problem == "nested" else "not a regular file")


def test_trial_files_a_training_replaced_read_as_unreadable(tmp_path):
    # The training runs in its trial dir and can overwrite supervisor.json & co.
    from fusion_dd.runner.trial import _read_json

    (tmp_path / "supervisor.json").write_text('{"a": ' * DEPTH + "1" + "}" * DEPTH)
    os.mkfifo(tmp_path / "status.json")
    assert _read_json(tmp_path / "supervisor.json") is None
    assert _read_json(tmp_path / "status.json") is None
    (tmp_path / "supervisor.json").write_text('{"supervisor_pid": 12}')
    assert _read_json(tmp_path / "supervisor.json") == {"supervisor_pid": 12}


def test_safe_read_bounds(tmp_path):
    from fusion_dd.core.errors import UsageError
    from fusion_dd.core.safe_read import MAX_JSON_DEPTH, loads_json, read_bytes

    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    nested = loads_json(at_limit, "x", "thing")
    for _ in range(MAX_JSON_DEPTH - 1):
        assert isinstance(nested, list) and len(nested) == 1
        nested = nested[0]
    assert nested == []
    with pytest.raises(UsageError, match="x: nested more than 100 levels"):
        loads_json("[" + at_limit + "]", "x", "thing")
    # Object pairs count one level per object, not two.
    pairs = loads_json('{"a": ' * MAX_JSON_DEPTH + "1" + "}" * MAX_JSON_DEPTH, "x", "thing", object_pairs_hook=list)
    assert pairs
    (tmp_path / "ten").write_bytes(b"0123456789")
    assert read_bytes(tmp_path / "ten", "thing", 10) == b"0123456789"
    with pytest.raises(UsageError, match="ten: 10 bytes, more than the 9 bytes"):
        read_bytes(tmp_path / "ten", "thing", 9)
    with pytest.raises(UsageError, match="not a regular file \\(a directory\\)"):
        read_bytes(tmp_path, "thing", 10)
    if Path("/proc/self/status").exists():  # size 0 in stat, content when read
        assert b"Name" in read_bytes("/proc/self/status", "thing", 1 << 20)
