"""Trainings that do not run, the pre-flight check, and README's own example, through the CLI.

A training that cannot start or never prints a metric must stop the search as
``training_broken`` (exit 2, reason, command and the log's tail on stderr), not be
taken for an answer about fusion (``baseline_fails``, exit 0).

Every test runs ``fusion-dd`` end to end in a real process; where it checks more
cases of the same refusal, the further ones call the CLI's ``main`` in-process
(``call_fusion_dd``: the same output, without an interpreter start each).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import yaml

from tests.support import REPO
from tests.support.cli import CULPRIT, launches, write_config
from tests.support.fake_training import FAKE_PYTHON, FAKE_TRAIN, call_fusion_dd, fake_command, run_fusion_dd, wrapper_script

README = REPO / "README.md"


def report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())


def set_command(config: Path, command: list[str], **train: object) -> None:
    document = yaml.safe_load(config.read_text())
    document["train"]["command"] = command
    document["train"].update(train)
    config.write_text(yaml.safe_dump(document))


def test_a_missing_command_stops_before_any_training(tmp_path):
    config = write_config(tmp_path, "--culprits", CULPRIT)
    set_command(config, ["pythn3", str(FAKE_TRAIN), "--fusion-switch", "{switch_file}"])
    dry = call_fusion_dd("search", "--dry-run", cwd=tmp_path)  # the search below runs in a real process
    assert dry.returncode == 2, dry.stdout + dry.stderr
    assert "command not found: pythn3" in dry.stdout and "training_broken" in dry.stderr
    assert "command not found" not in dry.stderr and "train.command[0]" in dry.stderr  # each problem once
    assert not (tmp_path / ".fusion-dd").exists()

    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "command not found: pythn3" in result.stderr
    both = result.stdout + result.stderr
    assert both.count("command not found: pythn3") == 1  # the refusal told once, not as "stopped:" and "error:"
    assert "stopped: the training does not run" in result.stdout
    assert f"pythn3 {FAKE_TRAIN} --fusion-switch " in result.stderr  # the command line, placeholders resolved
    assert "Traceback" not in result.stderr
    found = report(tmp_path)
    assert found["status"] == "training_broken" and found["trainings"] == 0
    assert "pythn3" in found["training_broken"]["command"]

    # Fixed, the same state directory starts the search: nothing was journaled as its definition.
    set_command(config, fake_command("--launch-log", "launch.log", "--culprits", CULPRIT))
    fixed = run_fusion_dd("search", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert report(tmp_path)["status"] == "found"


def test_a_training_that_exits_before_its_metric_is_broken_not_an_answer(tmp_path):
    config = write_config(tmp_path, "--culprits", CULPRIT)
    wrapper = tmp_path / "train.py"
    wrapper_script(
        wrapper,
        "if os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'broken')):\n"
        "    print('Traceback (most recent call last):')\n"
        "    sys.exit('ImportError: No module named npu_bridge')\n",
    )
    (tmp_path / "broken").write_text("")
    document = yaml.safe_load(config.read_text())
    fake_args = document["train"]["command"][document["train"]["command"].index(str(FAKE_TRAIN)) + 1 :]
    set_command(config, [*FAKE_PYTHON, "train.py", *fake_args], workdir="{trial_dir}")
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    found = report(tmp_path)
    assert found["status"] == "training_broken"
    assert 1 <= found["trainings"] <= 4
    assert "exit code 1" in found["training_broken"]["reason"]
    assert "ImportError: No module named npu_bridge" in result.stderr  # the log's tail
    assert str(tmp_path / "train.py") in result.stderr  # the command, train.py taken from beside the config
    assert "baseline_fails" not in result.stdout + result.stderr

    # Fixed outside the config, the next search trains the references again and answers.
    (tmp_path / "broken").unlink()
    fixed = run_fusion_dd("search", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert report(tmp_path)["status"] == "found"
    assert [rule["name"] for rule in report(tmp_path)["culprits"][0]["rules"]] == [CULPRIT]


def test_a_metric_pattern_that_never_matches_is_a_broken_training(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, metric={"pattern": r"val_acc=(\S+)"})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    found = report(tmp_path)
    assert found["status"] == "training_broken"
    assert found["trainings"] <= 4
    assert "val_acc" in found["training_broken"]["reason"]
    assert re.search(r"\| accuracy: 0\.[59]", result.stderr)  # what the training printed instead
    tail = [line for line in result.stderr.splitlines() if line.startswith("    | ")]
    assert 0 < len(tail) <= 20
    assert "after a change of fusion-dd.yaml, run `fusion-dd search --restart`" in result.stderr

    # The pattern corrected in the config: that is another search; the refusal says what to run.
    write_config(tmp_path, "--culprits", CULPRIT)
    refused = call_fusion_dd("search", cwd=tmp_path)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "stopped because the training was broken, and the config changed since (changed: metric.pattern)" in refused.stderr
    assert "'fusion-dd search --restart'" in refused.stderr
    restarted = run_fusion_dd("search", "--restart", cwd=tmp_path)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert report(tmp_path)["status"] == "found"


def test_a_baseline_that_times_out_is_a_broken_training(tmp_path):
    write_config(tmp_path, "--hang", "--steps", "1", train={"timeout": 1, "kill_grace": 1, "retries": 0})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    found = report(tmp_path)
    assert found["status"] == "training_broken"
    assert "timed out" in found["training_broken"]["reason"] and "train.timeout" in found["training_broken"]["reason"]
    assert found["trainings"] == 2


def test_a_training_that_cannot_start_is_not_retried(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/nonexistent/interpreter\necho accuracy: 0.9\n")
    script.chmod(0o755)
    write_config(tmp_path)
    set_command(tmp_path / "fusion-dd.yaml", ["./train.sh"], devices=[0])
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    found = report(tmp_path)
    assert found["status"] == "training_broken"
    assert "interpreter" in found["training_broken"]["reason"]
    assert found["trainings"] == 1, "a training that cannot start must not be retried"


def test_a_relative_script_arg_is_checked_by_the_preflight(tmp_path):
    config = write_config(tmp_path)
    set_command(config, [sys.executable, "missing_train.py"], workdir="{trial_dir}")
    dry = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 2
    assert "train.command[1]: script missing_train.py not found beside the config" in dry.stdout
    assert "train.command[1]" in dry.stderr and "missing_train.py" not in dry.stderr  # named once, not repeated


def readme_example() -> str:
    """The first ```yaml block under '## Searching your own training' in README.md."""
    text = README.read_text()
    section = text.split("## Searching your own training", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert match, "README: no yaml block under '## Searching your own training'"
    lines = match.group(1).splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines) + "\n"


# A training as README step 1 asks for: it reads the switch file it is given and
# prints its final metric. SoftmaxFusionPass switched on breaks its accuracy.
EXAMPLE_TRAIN = """\
import json, sys
path = sys.argv[sys.argv.index("--fusion-switch") + 1]
switch = json.load(open(path))["Switch"]
on = {name for section in switch.values() for name, state in section.items() if name != "ALL" and state == "on"}
print("step 1 loss 0.5")
print("accuracy: %s" % (0.41 if "SoftmaxFusionPass" in on else 0.76))
"""


def test_the_readme_example_runs_as_is(tmp_path):
    example = readme_example()
    document = yaml.safe_load(example)
    assert document["train"]["command"][:2] == ["python", "train.py"]
    assert document["train"]["workdir"] == "{trial_dir}"
    (tmp_path / "fusion-dd.yaml").write_text(example)
    (tmp_path / "train.py").write_text(EXAMPLE_TRAIN)
    # Only what cannot run here is adapted, from outside the file: two devices,
    # and `python` is this test's interpreter.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    dry = call_fusion_dd("search", "--dry-run", "--devices", "0,1", cwd=tmp_path, env={"PATH": path})
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"python {tmp_path / 'train.py'} --fusion-switch" in dry.stdout
    result = run_fusion_dd("search", "--devices", "0,1", cwd=tmp_path, env={"PATH": path})
    assert result.returncode == 0, result.stdout + result.stderr
    found = report(tmp_path)
    assert found["status"] == "found"
    assert [rule["name"] for culprit in found["culprits"] for rule in culprit["rules"]] == ["SoftmaxFusionPass"]
    assert found["fix_verified"] is True


def test_init_with_a_relative_script_writes_no_trap(tmp_path):
    (tmp_path / "train.py").write_text(EXAMPLE_TRAIN)
    (tmp_path / "rules.txt").write_text("ConvBatchnormFusionPass\nSoftmaxFusionPass\nTbeEltwiseFusionPass\n")
    made = call_fusion_dd("init", "--from", "rules.txt", "--command", "python train.py --fusion-switch {switch_file}", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    result = run_fusion_dd("search", "--budget", "20", cwd=tmp_path, env={"PATH": path})
    assert result.returncode == 0, result.stdout + result.stderr
    assert [rule["name"] for rule in report(tmp_path)["culprits"][0]["rules"]] == ["SoftmaxFusionPass"]


def test_a_foreign_or_root_state_dir_is_refused(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "weights.bin").write_text("precious")
    result = run_fusion_dd("search", "--state-dir", "data", cwd=tmp_path)
    assert result.returncode == 2
    assert "--state-dir" in result.stderr and "not empty (weights.bin)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(path.name for path in foreign.iterdir()) == ["weights.bin"]
    for root in ("/", str(Path.home())):
        refused = call_fusion_dd("search", "--dry-run", "--state-dir", root, cwd=tmp_path)
        assert refused.returncode == 2 and ("filesystem root" in refused.stderr or "home directory" in refused.stderr)
    assert not launches(tmp_path)


def test_command_line_budget_and_devices_are_validated(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)
    budget = run_fusion_dd("search", "--budget", "2", cwd=tmp_path)
    assert budget.returncode == 2 and "--budget: must be at least 3" in budget.stderr
    devices = call_fusion_dd("search", "--devices", "0,,1", cwd=tmp_path)
    assert devices.returncode == 2 and "--devices: empty device id" in devices.stderr
    assert not (tmp_path / ".fusion-dd").exists() and not launches(tmp_path)


def test_device_ids_are_checked_against_the_compilers_device_variable(tmp_path):
    """CANN's ASCEND_DEVICE_ID takes chip numbers: gpu0 is one line and exit 2, from the command
    line and from the config alike; ONNX Runtime's CUDA_VISIBLE_DEVICES takes GPU UUIDs too."""
    write_config(tmp_path, "--culprits", CULPRIT)
    given = call_fusion_dd("search", "--devices", "gpu0,gpu1", cwd=tmp_path)
    assert given.returncode == 2
    assert given.stderr.strip().splitlines() == [
        "fusion-dd: error: --devices: invalid device id 'gpu0' for ASCEND_DEVICE_ID (CANN): give a chip number as "
        "npu-smi info lists it, e.g. 0,1"
    ]
    write_config(tmp_path, "--culprits", CULPRIT, train={"devices": ["npu0"]})
    written = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert written.returncode == 2 and "fusion-dd.yaml: train.devices: invalid device id 'npu0'" in written.stderr
    assert "Traceback" not in written.stderr and not (tmp_path / ".fusion-dd").exists() and not launches(tmp_path)
    ort = tmp_path / "ort"
    ort.mkdir()
    (ort / "fusion-dd.yaml").write_text(yaml.safe_dump({
        "rules": {"compiler": "onnxruntime", "names": ["AttentionFusion"]},
        "train": {"command": [sys.executable, "train.py"], "devices": ["GPU-8f2a6c1e-0b3d-4e5f-9a7b-1c2d3e4f5a6b", 1]},
    }))
    (ort / "train.py").write_text("print('accuracy 1')\n")
    uuid = call_fusion_dd("search", "--dry-run", cwd=ort)
    assert uuid.returncode == 0, uuid.stderr
    named = call_fusion_dd("search", "--dry-run", "--devices", "cuda:0", cwd=ort)
    assert named.returncode == 2 and "invalid device id 'cuda:0' for CUDA_VISIBLE_DEVICES" in named.stderr


def test_dry_run_shows_the_trial_directory_each_device_gets(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)
    dry = call_fusion_dd("search", "--dry-run", "--devices", "0,1,2", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    for number, device in enumerate("012", start=1):
        at = next(index for index, line in enumerate(lines) if line.startswith(f"  ASCEND_DEVICE_ID={device} (in "))
        assert lines[at + 1] == f"    trial directory: .fusion-dd/trials/{number:04d}"


def test_a_metric_named_like_an_accuracy_with_goal_min_is_a_warning_naming_metric_goal(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, metric={"goal": "min"})
    dry = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "warning:" in dry.stderr and "metric.goal: min" in dry.stderr and "set metric.goal: max" in dry.stderr
    # The search itself: all candidates on (0.5) is "better" than the baseline (0.9) for goal min,
    # so it refuses, and the summary says why in terms of metric.goal (not "within the tolerance").
    searched = run_fusion_dd("search", cwd=tmp_path)
    assert searched.returncode == 0, searched.stderr
    assert "within the tolerance" not in searched.stdout
    assert "warning: metric.goal: min (lower is better)" in searched.stdout
    assert "disagree" not in searched.stdout + searched.stderr  # the baseline runs agreed
    loss = tmp_path / "loss"
    loss.mkdir()
    write_config(loss, "--culprits", CULPRIT, metric={"pattern": r"loss\s+(\S+)", "goal": "min"})
    fine = call_fusion_dd("search", "--dry-run", cwd=loss)
    assert fine.returncode == 0 and "metric.goal" not in fine.stderr


def test_a_slurm_section_that_no_launcher_reads_is_a_warning_naming_the_launcher_to_set(tmp_path):
    # Usually a forgotten train.launcher: the trainings would run here instead of on the cluster.
    write_config(tmp_path, "--culprits", CULPRIT, train={"slurm": {"partition": "debug"}})
    local = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    assert "warning:" in local.stderr and "train.slurm is set, but the trainings run on this machine" in local.stderr
    assert "set train.launcher: slurm (or --launcher slurm)" in local.stderr
    chosen = call_fusion_dd("search", "--dry-run", "--launcher", "slurm", cwd=tmp_path)
    assert "train.slurm" not in chosen.stderr
    write_config(tmp_path, "--culprits", CULPRIT, train={"scheduler": "tcp://127.0.0.1:8786", "launcher": "slurm"})
    dask = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert "train.scheduler is set, but the trainings run with the slurm launcher" in dask.stderr


def test_unknown_rule_names_are_an_error_unless_rules_unknown_says_otherwise(tmp_path):
    write_config(tmp_path, rules={"GraphFusion": ["SoftmaxFusionPas"], "UBFusion": []})
    error = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert error.returncode == 2
    assert "rules.GraphFusion[0]: SoftmaxFusionPas" in error.stderr and "SoftmaxFusionPass" in error.stderr
    assert "rules.unknown: warn" in error.stderr
    write_config(tmp_path, rules={"GraphFusion": ["SoftmaxFusionPas"], "UBFusion": [], "unknown": "warn"})
    warned = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert "warning: SoftmaxFusionPas" in warned.stderr


def test_thousands_of_unknown_names_give_bounded_output(tmp_path):
    names = [f"MadeUpFusionPass{index}" for index in range(5000)]
    write_config(tmp_path, rules={"GraphFusion": names, "UBFusion": []})
    error = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert error.returncode == 2
    assert len(error.stderr.strip().splitlines()) == 1
    assert "and 4,999 more unknown name(s)" in error.stderr
    write_config(tmp_path, rules={"GraphFusion": names, "UBFusion": [], "unknown": "warn"})
    warned = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    lines = [line for line in warned.stderr.splitlines() if "warning" in line]
    assert 1 < len(lines) <= 21
    assert "and 4,990 more names unknown to the catalog" in warned.stderr
    write_config(tmp_path, rules={"GraphFusion": names, "UBFusion": [], "unknown": "ignore"})
    ignored = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert "MadeUpFusionPass1 " not in ignored.stderr


def test_names_from_artifacts_are_validated_like_listed_names(tmp_path):
    for bad in ["", "Conv Fusion", "Conv\u0000Fusion"]:
        (tmp_path / "fusion_result.json").write_text(
            json.dumps({"graph_0": {"graph_fusion": {bad: {"match_times": "1", "effect_times": "1"}}}})
        )
        write_config(tmp_path, rules={"from": ["fusion_result.json"]})
        run = run_fusion_dd if bad == "" else call_fusion_dd  # one name through a real process
        result = run("search", "--dry-run", cwd=tmp_path)
        assert result.returncode == 2, (bad, result.stdout)
        assert "fusion_result.json: rule name" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
