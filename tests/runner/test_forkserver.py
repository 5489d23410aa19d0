"""Supervisors forked by the fork server: the same trials, found, cancelled and adopted as before.

Real processes driven by tests/fakes/fake_train.py; waiting bounds are generous
and nothing here asserts how fast anything was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusion_dd.runner import forkserver
from fusion_dd.runner.forkserver import ForkServer
from fusion_dd.runner.launcher import LocalLauncher
from fusion_dd.runner.trial import _is_our_supervisor, adopt_trial, start_trial, supervisor_env
from tests.support.fake_training import fake_trial_spec
from tests.support.processes import eventually, pid_gone

pytestmark = pytest.mark.skipif(not forkserver.usable(), reason="no fork, /proc or pidfds here")

@pytest.fixture
def server() -> ForkServer:
    served = ForkServer(supervisor_env())
    yield served
    served.close()


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_a_forked_supervisor_runs_the_training_and_is_known_by_its_record_not_its_command_line(
    tmp_path: Path, server: ForkServer
) -> None:
    running = start_trial(fake_trial_spec(tmp_path, "t1", "--steps", "2", "--accuracy", "0.75"), server)
    record = json.loads((running.trial_dir / "supervisor.json").read_text())
    # The answer came after supervisor.json named the process: a resumed coordinator can find it.
    assert record["supervisor_pid"] == running.pid
    assert isinstance(record["supervisor_start_ticks"], int)
    assert "fusion_dd.runner.forkserver" in cmdline(running.pid)
    assert str(running.trial_dir) not in cmdline(running.pid)
    run = running.wait(poll=0.05)
    assert run.exit_code == 0 and run.error is None
    # The supervisor's own record (with its training) came after the server's, never before.
    final = json.loads((running.trial_dir / "supervisor.json").read_text())
    assert final["supervisor_pid"] == running.pid and isinstance(final["training_pid"], int)
    assert "accuracy: 0.75" in (running.trial_dir / "output.log").read_text()
    assert (running.trial_dir / "supervisor.log").read_text() == ""
    assert eventually(lambda: pid_gone(running.pid))


def test_a_pid_whose_start_time_differs_is_not_the_supervisor(tmp_path: Path) -> None:
    trial_dir = tmp_path / "t"
    trial_dir.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = int(Path(f"/proc/{other.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19])
        for recorded, ours in ((ticks, True), (ticks - 1, False), (None, False)):
            (trial_dir / "supervisor.json").write_text(
                json.dumps({"supervisor_pid": other.pid, "supervisor_start_ticks": recorded})
            )
            assert _is_our_supervisor(other.pid, trial_dir.resolve()) is ours
    finally:
        other.kill()
        other.wait()
    assert _is_our_supervisor(other.pid, trial_dir.resolve()) is False  # gone (a zombie reaped)


def test_a_forked_supervisor_is_cancelled_like_a_started_one(tmp_path: Path, server: ForkServer) -> None:
    running = start_trial(fake_trial_spec(tmp_path, "t2", "--hang"), server)
    assert eventually(lambda: "step" in (running.trial_dir / "output.log").read_text())
    running.cancel()
    run = running.wait(poll=0.05)
    assert run.cancelled
    assert eventually(lambda: pid_gone(running.pid))


def test_supervisors_outlive_the_server_and_a_new_coordinator_adopts_them(tmp_path: Path, server: ForkServer) -> None:
    """What a SIGKILL of the coordinator does to the server: it ends; its trainings do not."""
    running = start_trial(fake_trial_spec(tmp_path, "t3", "--steps", "3", "--sleep", "1.5"), server)
    process = server._process
    assert process is not None
    process.kill()
    process.wait()
    adopted = adopt_trial(running.trial_dir)
    assert adopted is not None and adopted.pid == running.pid
    run = adopted.wait(poll=0.05)
    assert run.exit_code == 0 and not run.cancelled
    # The next trial gets a new server.
    again = start_trial(fake_trial_spec(tmp_path, "t4", "--steps", "1"), server)
    assert again.wait(poll=0.05).exit_code == 0
    assert server._process is not None and server._process.pid != process.pid


def test_without_the_fork_server_supervisors_are_started_as_interpreters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(forkserver.DISABLE_ENV, "0")
    assert not forkserver.usable()
    served = ForkServer(supervisor_env())
    assert served.spawn(str(tmp_path)) is None
    running = start_trial(fake_trial_spec(tmp_path, "t5", "--steps", "2", "--sleep", "0.5"), served)
    assert eventually(lambda: "fusion_dd.runner.supervisor" in cmdline(running.pid))  # once it has exec'd
    assert running.wait(poll=0.05).exit_code == 0


def test_a_server_that_cannot_answer_makes_the_launcher_start_interpreters(tmp_path: Path) -> None:
    served = ForkServer(supervisor_env())
    assert served.spawn(str(tmp_path / "missing")) is None  # refused: no such trial directory
    running = start_trial(fake_trial_spec(tmp_path, "t6", "--steps", "2", "--sleep", "0.5"), served)
    assert eventually(lambda: "fusion_dd.runner.supervisor" in cmdline(running.pid))  # once it has exec'd
    assert running.wait(poll=0.05).exit_code == 0
    served.close()


def test_the_local_launcher_stops_its_server_at_the_end_of_a_run_and_starts_a_new_one_when_needed(tmp_path: Path) -> None:
    launcher = LocalLauncher()
    first = start_trial(fake_trial_spec(tmp_path, "t7", "--steps", "1"), launcher._forkserver)
    assert first.wait(poll=0.05).exit_code == 0
    process = launcher._forkserver._process
    assert process is not None
    launcher.run_ended()
    assert process.wait(timeout=30) == 0  # it saw the end of its requests and exited
    second = start_trial(fake_trial_spec(tmp_path, "t8", "--steps", "2", "--sleep", "0.5"), launcher._forkserver)
    assert "fusion_dd.runner.forkserver" in cmdline(second.pid)
    assert launcher._forkserver._process is not None and launcher._forkserver._process.pid != process.pid
    assert second.wait(poll=0.05).exit_code == 0
    launcher.run_ended()


def test_a_forked_supervisor_ignores_the_coordinators_terminal(tmp_path: Path, server: ForkServer) -> None:
    """Own session: a Ctrl-C sent to the coordinator's process group never reaches it."""
    running = start_trial(fake_trial_spec(tmp_path, "t9", "--steps", "2", "--sleep", "0.5"), server)
    # (the server answers once it wrote supervisor.json; the child calls setsid right after)
    assert eventually(lambda: os.getsid(running.pid) == running.pid)
    assert os.getpgid(running.pid) != os.getpgid(0)
    assert running.wait(poll=0.05).exit_code == 0


def test_a_server_that_died_is_replaced_and_our_ends_of_its_pipes_are_closed(tmp_path: Path, server: ForkServer) -> None:
    first = start_trial(fake_trial_spec(tmp_path, "t10", "--steps", "1"), server)
    assert first.wait(poll=0.05).exit_code == 0
    dead = server._process
    assert dead is not None
    dead.kill()
    dead.wait(timeout=30)
    second = start_trial(fake_trial_spec(tmp_path, "t11", "--steps", "1"), server)
    assert second.wait(poll=0.05).exit_code == 0
    assert server._process is not None and server._process.pid != dead.pid
    assert dead.stdin is not None and dead.stdin.closed and dead.stdout is not None and dead.stdout.closed
