"""Processes through the CLI: signals stop every training, strays die with their trial,
placeholders in shell scripts are quoted. Real subprocesses, generous bounds.

The trainings here are tests/fakes/fake_train.py; a "setsid child" is a grandchild
that left the training's process group and session, like a daemonized worker.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from fusion_dd.core.rules import catalog
from tests.support.fake_training import call_fusion_dd, fake_command, run_fusion_dd, start_fusion_dd
from tests.support.processes import eventually, group_gone, pid_gone, wait_until

GRAPH = [name for name, section in catalog().items() if section.value == "GraphFusion"][:4]
CULPRIT = GRAPH[2]
KILL_GRACE = 1.0  # the supervisor SIGKILLs a training that ignores SIGTERM after this



def start(cwd: Path, *args: str) -> subprocess.Popen[str]:
    """A fusion-dd command in the background, to be signalled or killed."""
    return start_fusion_dd(cwd, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def write_config(
    tmp_path: Path, command: list[str], devices: list[int], state_dir: str | None = None, **sections: dict
) -> Path:
    document: dict = {
        "rules": {"GraphFusion": GRAPH},
        "train": {"command": command, "devices": devices, "timeout": 120, "kill_grace": KILL_GRACE},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 40},
    }
    for key, value in sections.items():
        document.setdefault(key, {}).update(value)
    if state_dir is not None:
        document["state_dir"] = state_dir
    path = tmp_path / "fusion-dd.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def fake(*args: str) -> list[str]:
    return fake_command(*args)


def supervisor_record(trial_dir: Path) -> dict:
    try:
        return json.loads((trial_dir / "supervisor.json").read_text())
    except (OSError, ValueError):
        return {}


def setsid_children(state: Path) -> list[int]:
    """Pids of the setsid grandchildren every training of this search printed."""
    pids: list[int] = []
    for log in sorted(state.glob("trials/*/output.log")):
        pids += [int(pid) for pid in re.findall(r"setsid child pid (\d+)", log.read_text())]
    return pids


def kill_leftovers(state: Path) -> None:
    """Whatever the code under test left behind must not outlive the test."""
    pids = setsid_children(state)
    for trial_dir in state.glob("trials/*"):
        record = supervisor_record(trial_dir)
        pids += [record[key] for key in ("supervisor_pid", "training_pid") if key in record]
    for pid in pids:
        if not pid_gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def interrupt_and_check(
    coordinator: subprocess.Popen[str], sig: int, trial_dir: Path, twice: bool = False, stderr: Path | None = None
) -> None:
    """Signal the coordinator while ``trial_dir``'s training runs; it must stop it and exit 130 in time.

    ``twice``: the signal again during the clean-up (an impatient user); it must not cut it short.
    ``stderr``: the file the coordinator's stderr goes to, when it is not a pipe.
    """
    record = supervisor_record(trial_dir)
    assert "training_pgid" in record, record
    sent = time.monotonic()
    coordinator.send_signal(sig)
    if twice:
        # Once the training was asked to stop (it says it ignores SIGTERM), the clean-up is under way.
        log = trial_dir / "output.log"
        wait_until(lambda: "SIGTERM ignored" in log.read_text(errors="replace"), KILL_GRACE + 30, "never asked to stop")
        assert coordinator.poll() is None, "stopped before its training was killed"
        coordinator.send_signal(sig)
    try:
        _, err = coordinator.communicate(timeout=KILL_GRACE + 60)
    except subprocess.TimeoutExpired:
        coordinator.kill()
        _, err = coordinator.communicate()
        pytest.fail(f"fusion-dd did not stop on signal {sig}: {err}")
    took = time.monotonic() - sent
    if stderr is not None:
        err = stderr.read_text()
    assert coordinator.returncode == 130, err
    assert "Traceback" not in err
    assert took <= KILL_GRACE + 6, f"stopping took {took:.1f} s"
    # At the coordinator's exit, not some time later: nothing of the training is left.
    assert group_gone(record["training_pgid"]), "the training outlived fusion-dd"
    assert pid_gone(record["supervisor_pid"]), "the supervisor outlived fusion-dd"
    for pid in setsid_children(trial_dir.parent.parent):
        assert pid_gone(pid), "a setsid grandchild outlived fusion-dd"
    status = json.loads((trial_dir / "status.json").read_text())
    assert status["cancelled"] is True
    journal = (trial_dir.parent.parent / "journal.jsonl").read_text()
    assert '"trial_cancelled"' in journal and f'"{trial_dir.name}"' in journal
    report = json.loads((trial_dir.parent.parent / "report.json").read_text())
    assert report["status"] == "interrupted"
    outcomes = {trial["trial_id"]: trial["outcome"] for trial in report["trials"]}
    assert outcomes[trial_dir.name] == "cancelled", outcomes


def wait_for_training(trial_dir: Path, coordinator: subprocess.Popen[str]) -> None:
    """Until the fake training in ``trial_dir`` runs its steps: its signal handling and
    children are in place by then (it prints its first step after setting them up)."""

    def started() -> bool:
        assert coordinator.poll() is None, coordinator.communicate()
        log = trial_dir / "output.log"
        return "training_pgid" in supervisor_record(trial_dir) and log.exists() and "step 1 " in log.read_text()

    assert eventually(started, within=120), "the training never started"


# A training that runs alone: one device, or several devices but a batch of one
# (here the all-on reference, the baseline's metric being given).
LONE = {
    "one device": ([0], {}),
    "batch of one": ([0, 1], {"score": {"baseline_metric": 0.9}}),
}


SIGNALS = {"SIGTERM": (signal.SIGTERM, False), "SIGINT": (signal.SIGINT, False), "SIGINT twice": (signal.SIGINT, True)}
CASES = [
    ("one device", "SIGTERM"),
    ("one device", "SIGINT"),
    ("one device", "SIGINT twice"),
    ("batch of one", "SIGTERM"),
    ("batch of one", "SIGINT"),
]


@pytest.mark.parametrize("layout, signals", CASES, ids=[f"{layout}-{signals}" for layout, signals in CASES])
def test_a_signal_stops_a_training_that_runs_alone(tmp_path: Path, layout: str, signals: str) -> None:
    sig, twice = SIGNALS[signals]
    devices, sections = LONE[layout]
    # It ignores SIGTERM: only the supervisor's SIGKILL after kill_grace ends it.
    write_config(
        tmp_path, fake("--sleep", "60", "--ignore-sigterm", "--setsid-child"), devices, **sections
    )
    state = tmp_path / ".fusion-dd"
    coordinator = start(tmp_path, "search")
    try:
        wait_for_training(state / "trials" / "0001", coordinator)
        assert not (state / "trials" / "0002").exists(), "the training was not alone"
        interrupt_and_check(coordinator, sig, state / "trials" / "0001", twice)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.communicate()
        kill_leftovers(state)


@pytest.mark.parametrize("moment", ["at_the_session_start", "in_the_adoption_wait"])
def test_a_signal_stops_an_adopted_training(tmp_path: Path, moment: str) -> None:
    """The resumed coordinator adopts a training the killed one left running; SIGTERM must stop it.

    Signalled as soon as the new session is journaled (the adoption may not have begun)
    and once the coordinator says it waits for the adopted training: either way nothing
    of that training may outlive the coordinator.
    """
    write_config(tmp_path, fake("--sleep", "60", "--ignore-sigterm"), [0])
    state = tmp_path / ".fusion-dd"
    trial_dir = state / "trials" / "0001"
    first = start(tmp_path, "search")
    resumed = None
    try:
        wait_for_training(trial_dir, first)
        first.kill()
        first.communicate(timeout=60)
        assert supervisor_record(trial_dir) and not (trial_dir / "status.json").exists()
        stderr = tmp_path / "resume.stderr"
        with stderr.open("w") as sink:
            resumed = start_fusion_dd(tmp_path, "resume", stdout=subprocess.DEVNULL, stderr=sink)
        journal = state / "journal.jsonl"
        if moment == "at_the_session_start":
            assert eventually(lambda: journal.read_text().count('"session_started"') == 2, within=120)
        else:
            assert eventually(lambda: "adopting 1 training(s)" in stderr.read_text(), within=120), stderr.read_text()
        assert not (state / "trials" / "0002").exists()
        interrupt_and_check(resumed, signal.SIGTERM, trial_dir, stderr=stderr)
    finally:
        for process in (first, resumed):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
        kill_leftovers(state)


def test_sighup_with_two_trainings_running_stops_both_and_exits_130(tmp_path: Path) -> None:
    """A closed terminal or ssh session sends SIGHUP: a clean stop like SIGTERM, nothing left running."""
    write_config(tmp_path, fake("--sleep", "60", "--setsid-child"), [0, 1])
    state = tmp_path / ".fusion-dd"
    coordinator = start(tmp_path, "search")
    try:
        for name in ("0001", "0002"):
            wait_for_training(state / "trials" / name, coordinator)
        records = [supervisor_record(state / "trials" / name) for name in ("0001", "0002")]
        coordinator.send_signal(signal.SIGHUP)
        try:
            out, err = coordinator.communicate(timeout=KILL_GRACE + 60)
        except subprocess.TimeoutExpired:
            coordinator.kill()
            pytest.fail(f"fusion-dd did not stop on SIGHUP: {coordinator.communicate()[1]}")
        assert coordinator.returncode == 130, err
        assert "Traceback" not in err and "fusion-dd resume" in out + err, out + err
        for record in records:
            assert group_gone(record["training_pgid"]), "a training outlived fusion-dd"
            assert pid_gone(record["supervisor_pid"]), "a supervisor outlived fusion-dd"
        for pid in setsid_children(state):
            assert pid_gone(pid), "a setsid grandchild outlived fusion-dd"
        assert json.loads((state / "report.json").read_text())["status"] == "interrupted"
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.communicate()
        kill_leftovers(state)


def test_setsid_grandchildren_do_not_outlive_their_trials(tmp_path: Path) -> None:
    write_config(tmp_path, fake("--culprits", CULPRIT, "--setsid-child"), [0, 1])
    state = tmp_path / ".fusion-dd"
    try:
        result = run_fusion_dd("search", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        report = json.loads((state / "report.json").read_text())
        assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
        children = setsid_children(state)
        assert len(children) == report["trainings"] >= 3
        alive = [pid for pid in children if not pid_gone(pid)]
        assert not alive, f"{len(alive)} of {len(children)} setsid grandchildren outlived the search"
    finally:
        kill_leftovers(state)


SHELL_STATE_DIR = "state $(touch pwned) x"


def shell_command(shell: list[str]) -> list[str]:
    """A training run through a shell script whose placeholders sit unquoted and quoted."""
    training = " ".join(shlex.quote(part) for part in fake("--culprits", CULPRIT))
    script = (
        f"{training} --switch-file {{switch_file}} --launch-log \"{{trial_dir}}/launch.log\""
        f" | tee {{trial_dir}}/tee.log"
    )
    return [*shell, script]


@pytest.mark.parametrize("shell", [["bash", "-c"], ["sh", "-ec"]], ids=["bash -c", "sh -ec"])
def test_placeholders_in_a_shell_script_are_quoted(tmp_path: Path, shell: list[str]) -> None:
    write_config(tmp_path, shell_command(shell), [0, 1], state_dir=SHELL_STATE_DIR)
    state = tmp_path / SHELL_STATE_DIR

    result = run_fusion_dd("search", cwd=tmp_path)
    assert not list(tmp_path.rglob("pwned")), "a state path ran a command"
    assert result.returncode == 0, result.stderr
    report = json.loads((state / "report.json").read_text())
    assert report["status"] == "found", report.get("message")
    assert [rule["name"] for rule in report["culprits"][0]["rules"]] == [CULPRIT]
    for trial in report["trials"]:
        trial_dir = state / "trials" / trial["trial_id"]
        assert "accuracy" in (trial_dir / "tee.log").read_text()
        assert (trial_dir / "launch.log").exists()

    # The dry run shows what really ran (trial 0001's own paths).
    shown = call_fusion_dd("search", "--dry-run", cwd=tmp_path)  # after a real search
    assert shown.returncode == 0, shown.stderr
    (line,) = [line for line in shown.stdout.splitlines() if line.startswith("  ASCEND_DEVICE_ID=0 ")]
    argv = shlex.split(line.split(") ", 1)[1])
    assert shlex.quote(str(state / "trials" / "0001" / "fusion_switch.cfg")) in argv[-1]
    launch = json.loads((state / "trials" / "0001" / "launch.json").read_text())
    assert launch["argv"] == argv


#: The coordinator's peak resident memory allowed while it reads any training output.
COORDINATOR_RSS_BOUND_MB = 150


def test_trainings_printing_300_mb_in_one_line_leave_the_coordinator_under_its_memory_bound(tmp_path: Path) -> None:
    """One training prints 300 MB without a newline, the other a tqdm-style bar rewritten with \\r:
    both finish with their metric read, and the coordinator's own peak RSS stays bounded."""
    import sys

    from tests.support.fake_training import cli_env, wrapper_script

    prelude = (
        "trial = os.environ['FUSION_DD_TRIAL_ID']\n"
        "chunk = (b'x' * 1023 + b' ') * 1024 if trial == '0001' "
        "else b''.join(b'\\r %3d%%|#####     | %d/10000 [00:10<00:12, 9.9it/s]' % (i % 100, i) for i in range(20000))\n"
        "out = sys.stdout.buffer\n"
        "for _ in range(300 * 2**20 // len(chunk) if trial in ('0001', '0002') else 0):\n"
        "    out.write(chunk)\n"
        "out.flush()\n"
    )
    wrapper = wrapper_script(tmp_path / "loud_train.py", prelude)
    command = fake("--launch-log", "launch.log")
    command[command.index(next(part for part in command if part.endswith("fake_train.py")))] = str(wrapper)
    # No cap of output.log (train.log_limit): the coordinator must read all 300 MB.
    write_config(tmp_path, command, [0, 1], search={"budget": 3}, train={"log_limit": None})
    # The coordinator itself, not its children: its own getrusage at exit, printed by a wrapper.
    measure = (
        "import resource, runpy, sys\n"
        "try:\n"
        "    runpy.run_module('fusion_dd.cli', run_name='__main__', alter_sys=True)\n"
        "finally:\n"
        "    print(f'peak-rss-kb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}', file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", measure, "search"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
        timeout=600,
    )
    assert result.returncode == 3, result.stderr[-2000:]  # the budget ran out after the references
    state = tmp_path / ".fusion-dd"
    for name in ("0001", "0002"):
        assert (state / "trials" / name / "output.log").stat().st_size >= 300 * 2**20 - 2**20
    trials = {trial["trial_id"]: trial for trial in json.loads((state / "report.json").read_text())["trials"]}
    assert [trials[name]["kind"] for name in ("0001", "0002")] == ["metric", "metric"], trials
    assert [trials[name]["metric"] for name in ("0001", "0002")] == [0.9, 0.9], trials
    peak_mb = int(re.search(r"peak-rss-kb (\d+)", result.stderr).group(1)) / 1024
    assert peak_mb < COORDINATOR_RSS_BOUND_MB, f"the coordinator peaked at {peak_mb:.0f} MB"


def test_train_log_limit_caps_output_log_keeping_its_head_its_tail_and_the_metric(tmp_path: Path) -> None:
    from tests.support.fake_training import run_fusion_dd, wrapper_script

    prelude = (
        "out = sys.stdout.buffer\n"
        "for index in range(40000):\n"
        "    out.write(b'step %06d %s\\n' % (index, b'.' * 90))\n"
        "    if index % 4000 == 0:\n"
        "        out.flush(); time.sleep(0.3)\n"  # the supervisor looks while the training prints
        "out.flush()\n"
    )
    wrapper = wrapper_script(tmp_path / "chatty_train.py", prelude)
    command = fake("--launch-log", "launch.log")
    command[command.index(next(part for part in command if part.endswith("fake_train.py")))] = str(wrapper)
    write_config(tmp_path, command, [0, 1], search={"budget": 3}, train={"log_limit": "1MB"})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 3, result.stderr[-2000:]
    state = tmp_path / ".fusion-dd"
    log = (state / "trials" / "0001" / "output.log").read_bytes()
    assert len(log) <= 2**20 + 600_000, len(log)  # 4 MB printed; over the limit by at most a look's worth
    assert log.startswith(b"step 000000 ")
    assert b"bytes of output cut here to keep output.log under train.log_limit (1048576 bytes)" in log
    assert b"step 039999 " in log
    trials = {trial["trial_id"]: trial for trial in json.loads((state / "report.json").read_text())["trials"]}
    assert trials["0001"]["kind"] == "metric" and trials["0001"]["metric"] == 0.9
