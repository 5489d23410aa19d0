"""One training as a supervised subprocess: real processes, driven by tests/fakes/fake_train.py.

Waiting bounds are generous; nothing here asserts how fast anything was.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fusion_dd.backends.cann import CannBackend
from fusion_dd.runner.metrics import MetricSpec, classify, read_metric
from fusion_dd.runner.trial import (
    RunningTrial,
    TrialRun,
    TrialSpec,
    adopt_trial,
    resolve_launch,
    start_trial,
    substitute,
)
from tests.support.fake_training import fake_trial_spec
from tests.support.processes import eventually, group_gone, pid_gone, training_pgid

ACC = MetricSpec.from_text(r"accuracy: (\S+)")
SWITCH_A_ON = json.dumps({"Switch": {"GraphFusion": {"A": "on", "B": "off"}}})
KNOWN = ("switch_file", "trial_dir", "metrics_file", "device", "trial_id")


def make_spec(tmp_path: Path, *fake_args: str, **overrides: object) -> TrialSpec:
    """The fake training's trial ``t0001`` on device 3, with the CANN backend's environment defaults."""
    fields: dict = dict(
        device=("3",),
        timeout=30.0,
        switch_text=SWITCH_A_ON,
        grace=0.5,
        env_defaults=CannBackend().render([], []).env_defaults,
    )
    fields.update(overrides)
    return fake_trial_spec(tmp_path, "t0001", *fake_args, **fields)


def run_trial(spec: TrialSpec) -> TrialRun:
    return start_trial(spec).wait(poll=0.05)


def kind_of(run: TrialRun, spec: MetricSpec = ACC) -> tuple[str, str]:
    return classify(run, read_metric(run, spec))


def wait_for_training_start(trial_dir: Path) -> None:
    def started() -> bool:
        try:
            return "training_pgid" in json.loads((trial_dir / "supervisor.json").read_text())
        except (OSError, ValueError):
            return False

    assert eventually(started)


# --- outcomes ------------------------------------------------------------------


def test_a_healthy_training_passes(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    run = run_trial(spec)
    assert run.succeeded and run.exit_code == 0 and run.signal is None and run.error is None
    assert kind_of(run)[0] == "metric"
    assert read_metric(run, ACC).value == pytest.approx(0.9)
    assert read_metric(run, MetricSpec()).value == pytest.approx(0.9)  # metrics.jsonl too
    assert run.end >= run.start and run.duration >= 0
    directory = spec.trial_dir.resolve()
    assert run.trial_dir == directory and run.log_path == directory / "output.log"
    assert (directory / "fusion_switch.cfg").read_text() == SWITCH_A_ON
    assert "step 5 loss" in run.log_path.read_text()
    assert oct((directory / "launch.json").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "switch, expected",
    [
        ({"GraphFusion": {"A": "on", "B": "off"}}, 0.5),
        ({"GraphFusion": {"A": "off", "B": "off", "C": "off"}}, 0.9),
        ({"GraphFusion": {"A": "off", "B": "off"}}, 0.5),  # C, D unmentioned: both on
        ({"GraphFusion": {"ALL": "off"}}, 0.9),
        ({"GraphFusion": {"B": "off"}}, 0.5),  # A not mentioned: CANN's default, on
        ({"GraphFusion": {"A": "off", "C": "on"}, "UBFusion": {"D": "on"}}, 0.5),  # the pair
        ({"GraphFusion": {"A": "off", "C": "on"}, "UBFusion": {"D": "off"}}, 0.9),
    ],
)
def test_the_fake_degrades_accuracy_from_its_switch_file(
    tmp_path: Path, switch: dict, expected: float
) -> None:
    spec = make_spec(
        tmp_path, "--culprits", "A", "--pair", "C+D",
        switch_text=json.dumps({"Switch": switch}),
    )
    run = run_trial(spec)
    assert kind_of(run)[0] == "metric"
    assert read_metric(run, ACC).value == pytest.approx(expected)


@pytest.mark.parametrize(
    "args, repeat, kind, value",
    [
        (("--culprits", "B,A:crash"), 0, "crash", None),
        (("--culprits", "A", "--pair", "A+B:hang"), 0, "timeout", None),  # worst effect wins
        (("--flip-repeats", "1"), 1, "metric", 0.5),  # healthy, but flaky on repeat 1
        (("--culprits", "A", "--flip-repeats", "1"), 1, "metric", 0.9),
        (("--culprits", "A", "--flip-repeats", "1"), 0, "metric", 0.5),
    ],
)
def test_the_fakes_other_behaviours(
    tmp_path: Path, args: tuple[str, ...], repeat: int, kind: str, value: float | None
) -> None:
    if kind == "timeout":  # the hang pair needs B on as well
        switch = json.dumps({"Switch": {"GraphFusion": {"A": "on", "B": "on"}}})
        run = run_trial(make_spec(tmp_path, *args, switch_text=switch, timeout=1.0, grace=0.2))
    else:
        run = run_trial(make_spec(tmp_path, *args, repeat=repeat))
    assert kind_of(run)[0] == kind
    if kind == "crash":
        assert run.exit_code == 3 and "simulated" in run.log_path.read_text()
    if value is not None:
        assert read_metric(run, ACC).value == pytest.approx(value)


def test_the_fakes_noise_is_reproducible(tmp_path: Path) -> None:
    values = [
        read_metric(run_trial(make_spec(
            tmp_path, "--noise", "0.05", "--seed", "7",
            trial_id=f"n{i}", trial_dir=tmp_path / f"n{i}", repeat=repeat,
        )), ACC).value
        for i, repeat in enumerate((0, 0, 1))
    ]
    assert values[0] == values[1] != values[2]


def test_nan_loss_is_nonfinite_even_with_exit_code_zero(tmp_path: Path) -> None:
    run = run_trial(make_spec(tmp_path, "--culprits", "A:nan"))
    assert run.exit_code == 0
    kind, reason = kind_of(run)
    assert kind == "nonfinite" and "nan" in reason
    assert kind_of(run, MetricSpec())[0] == "nonfinite"


def test_a_crash_is_its_exit_code(tmp_path: Path) -> None:
    run = run_trial(make_spec(tmp_path, "--exit-code", "3"))
    assert (run.exit_code, run.signal, run.succeeded) == (3, None, False)
    # The reason carries the last line the training printed (the fake's stderr goes into output.log).
    assert kind_of(run) == ("crash", "exit code 3; output.log ends 'simulated crash, exit code 3'")


def test_no_metric(tmp_path: Path) -> None:
    run = run_trial(make_spec(tmp_path, "--no-metric"))
    assert run.exit_code == 0
    assert kind_of(run)[0] == "no_metric"
    assert kind_of(run, MetricSpec())[0] == "no_metric"


def test_the_last_of_several_metrics_wins(tmp_path: Path) -> None:
    run = run_trial(make_spec(tmp_path, "--metric-times", "3", "--accuracy", "0.8"))
    assert run.log_path.read_text().count("accuracy:") == 3
    assert read_metric(run, ACC).value == pytest.approx(0.8)
    assert read_metric(run, MetricSpec()).value == pytest.approx(0.8)


def test_a_hang_is_killed_at_the_timeout_with_its_whole_group(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path, "--hang", "--ignore-sigterm", "--spawn-child", timeout=1.0, grace=0.5
    )
    run = run_trial(spec)
    assert run.timed_out and not run.cancelled
    assert run.signal == signal.SIGKILL  # it ignored SIGTERM, so the grace ran out
    assert kind_of(run) == ("timeout", "timed out after 1 s")
    assert eventually(lambda: group_gone(training_pgid(run.trial_dir)))
    child = int(run.log_path.read_text().split("child pid ")[1].split()[0])
    assert eventually(lambda: pid_gone(child))


def test_leftovers_of_a_finished_training_are_killed(tmp_path: Path) -> None:
    run = run_trial(make_spec(tmp_path, "--spawn-child"))  # the child outlives the training
    assert run.exit_code == 0 and kind_of(run)[0] == "metric"
    child = int(run.log_path.read_text().split("child pid ")[1].split()[0])
    assert eventually(lambda: pid_gone(child))
    assert eventually(lambda: group_gone(training_pgid(run.trial_dir)))


def setsid_child(trial_dir: Path) -> int:
    """The pid of the grandchild that left the training's group (printed by the fake)."""
    log = trial_dir / "output.log"
    assert eventually(lambda: "setsid child pid " in log.read_text())
    return int(log.read_text().split("setsid child pid ")[1].split()[0])


@pytest.mark.parametrize("clean_env", [False, True], ids=["marked", "clean environment"])
@pytest.mark.parametrize("ending", ["exit", "timeout", "cancel"])
def test_a_setsid_grandchild_ends_with_its_trial(tmp_path: Path, ending: str, clean_env: bool) -> None:
    """A daemonized worker outside the group is killed before the status is written.

    With a clean environment only its ancestry (re-parented to the subreaper
    supervisor) ties it to the trial.
    """
    args = ["--setsid-child", "--ignore-sigterm"] + (["--clean-env-child"] if clean_env else [])
    if ending != "exit":
        args.append("--hang")
    handle = start_trial(make_spec(tmp_path, *args, timeout=1.0 if ending == "timeout" else 30.0))
    child = setsid_child(handle.trial_dir)
    try:
        if ending == "cancel":
            handle.cancel()
        run = handle.wait(poll=0.05)
        assert (run.exit_code == 0, run.timed_out, run.cancelled) == (
            ending == "exit", ending == "timeout", ending == "cancel"
        )
        assert pid_gone(child), "the setsid grandchild outlived its trial"
    finally:
        if not pid_gone(child):
            os.kill(child, signal.SIGKILL)


def test_a_cancelled_training_gets_one_sigterm_however_long_the_grace(tmp_path: Path) -> None:
    """Some launchers read a second SIGTERM as "abort the clean-up now"."""
    script = "trap 'echo TERM' TERM; echo ready; while :; do sleep 0.05; done"
    handle = start_trial(make_spec(tmp_path, command=["bash", "-c", script], grace=1.5))
    assert eventually(lambda: "ready" in (handle.trial_dir / "output.log").read_text())
    handle.cancel()
    run = handle.wait(poll=0.05)
    assert run.cancelled and run.signal == signal.SIGKILL
    assert run.log_path.read_text().count("TERM") == 1


def test_a_setsid_grandchild_of_a_lost_supervisor_is_killed_on_adoption(tmp_path: Path) -> None:
    handle = start_trial(make_spec(tmp_path, "--hang", "--setsid-child"))
    child = setsid_child(handle.trial_dir)
    try:
        os.kill(handle.pid, signal.SIGKILL)  # type: ignore[arg-type]
        handle._process.wait(timeout=30)  # type: ignore[union-attr]  # reap our child
        assert adopt_trial(handle.trial_dir) is None
        assert eventually(lambda: pid_gone(child))
    finally:
        if not pid_gone(child):
            os.kill(child, signal.SIGKILL)


def test_a_command_that_does_not_exist(tmp_path: Path) -> None:
    run = run_trial(make_spec(tmp_path, command=["fusion-dd-no-such-training-xyz", "--x"]))
    assert run.exit_code is None and run.signal is None
    assert run.error == "command not found: fusion-dd-no-such-training-xyz"
    assert kind_of(run) == ("crash", "command not found: fusion-dd-no-such-training-xyz")


def test_a_working_directory_that_does_not_exist(tmp_path: Path) -> None:
    run = run_trial(make_spec(tmp_path, workdir="missing/dir"))
    assert run.error == f"working directory not found: {tmp_path / 'missing' / 'dir'}"


def test_start_replaces_the_files_of_an_earlier_attempt(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "--no-metric")
    spec.trial_dir.mkdir(parents=True)
    (spec.trial_dir / "status.json").write_text('{"exit_code": 0}')
    (spec.trial_dir / "metrics.jsonl").write_text('{"accuracy": 0.1}\n')
    (spec.trial_dir / "output.log").write_text("accuracy: 0.1\n")
    run = run_trial(spec)
    assert kind_of(run)[0] == "no_metric"
    assert kind_of(run, MetricSpec())[0] == "no_metric"


# --- placeholders and environment ------------------------------------------------


def test_substitute_inside_elements_and_leaves_the_rest() -> None:
    values = {"switch_file": "/s/f.cfg", "device": "4,5"}
    assert substitute("--cfg={switch_file}", values) == "--cfg=/s/f.cfg"
    assert substitute("{device}:{device}", values) == "4,5:4,5"
    assert substitute("awk '{print $1}'", values) == "awk '{print $1}'"
    assert substitute("{unknown} {} {{device}} ${HOME}", values) == "{unknown} {} {device} ${HOME}"  # {{ escapes
    assert substitute("{{device}", values) == "{device}"
    assert substitute('{"a": {"b": 1}}', values) == '{"a": {"b": 1}}'  # JSON is left alone
    assert substitute("{switch_file", values) == "{switch_file"
    assert substitute("x", {"device": "{switch_file}"}) == "x"
    assert substitute("{device}", {"device": "{switch_file}"}) == "{switch_file}"  # no re-scan


_TOKENS = [f"{{{name}}}" for name in KNOWN]


@settings(deadline=None, max_examples=100)
@given(
    st.lists(st.sampled_from(list("ab{}$ _1")) | st.sampled_from(_TOKENS), max_size=12),
    st.text(alphabet="xyz/,-{}", max_size=5),
)
def test_substitute_replaces_exactly_the_known_tokens(pieces: list[str], value: str) -> None:
    # The single characters can never spell a known name, so the known tokens in
    # the text are exactly the token pieces, and nothing else may change.
    text = "".join(pieces)
    assume(not any("{" + token in text for token in _TOKENS))  # {{name} is an escape: see above
    expected = "".join(value if piece in _TOKENS else piece for piece in pieces)
    assert substitute(text, dict.fromkeys(KNOWN, value)) == expected
    assert substitute(text, {name: "{" + name + "}" for name in KNOWN}) == text
    assert substitute(text, {}) == text


def test_the_training_sees_its_placeholders_and_environment(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        "--print-argv", "--print-cwd",
        *[arg for name in (
            "FUSION_DD_SWITCH_FILE", "FUSION_DD_TRIAL_DIR", "FUSION_DD_METRICS_FILE",
            "FUSION_DD_TRIAL_ID", "FUSION_DD_REPEAT", "ASCEND_DEVICE_ID", "ASCEND_WORK_PATH",
            "USER_VAR",
        ) for arg in ("--print-env", name)],
        "--cfg={switch_file}", "{device}", "awk '{print $1}'", "{unknown}", "{trial_id}",
        device=("4", "5"), repeat=2,
        env={"USER_VAR": "{trial_dir}/cache", "OPENBLAS_NUM_THREADS": "1"},
    )
    run = run_trial(spec)
    assert run.exit_code == 0, run.log_path.read_text()
    directory = spec.trial_dir.resolve()
    lines = run.log_path.read_text().splitlines()
    env = dict(line[4:].split("=", 1) for line in lines if line.startswith("env "))
    assert env == {
        "FUSION_DD_SWITCH_FILE": str(directory / "fusion_switch.cfg"),
        "FUSION_DD_TRIAL_DIR": str(directory),
        "FUSION_DD_METRICS_FILE": str(directory / "metrics.jsonl"),
        "FUSION_DD_TRIAL_ID": "t0001",
        "FUSION_DD_REPEAT": "2",
        "ASCEND_DEVICE_ID": "4,5",
        "ASCEND_WORK_PATH": str(directory),
        "USER_VAR": f"{directory}/cache",
    }
    argv = json.loads(next(line[5:] for line in lines if line.startswith("argv ")))
    assert argv[-5:] == [
        f"--cfg={directory / 'fusion_switch.cfg'}", "4,5", "awk '{print $1}'", "{unknown}", "t0001",
    ]
    assert f"cwd {directory}" in lines


def test_ascend_work_path_set_by_the_user_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(tmp_path, env={"ASCEND_WORK_PATH": "/elsewhere"})
    assert resolve_launch(spec)["env"]["ASCEND_WORK_PATH"] == "/elsewhere"
    monkeypatch.setenv("ASCEND_WORK_PATH", "/inherited")
    assert resolve_launch(make_spec(tmp_path))["env"]["ASCEND_WORK_PATH"] == "/inherited"


def test_relative_workdir_is_relative_to_the_base_dir(tmp_path: Path) -> None:
    launch = resolve_launch(make_spec(tmp_path, workdir="runs/{trial_id}"))
    assert launch["workdir"] == str(tmp_path / "runs" / "t0001")
    assert resolve_launch(make_spec(tmp_path, workdir=""))["workdir"] == str(tmp_path)


def test_inherited_environment_and_device_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUSION_DD_TEST_INHERITED", "yes")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3")
    env = resolve_launch(
        make_spec(tmp_path, device=("6", "7"), device_env="ASCEND_RT_VISIBLE_DEVICES")
    )["env"]
    assert env["FUSION_DD_TEST_INHERITED"] == "yes"
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "6,7"


def test_invalid_specs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        make_spec(tmp_path, command=[])
    with pytest.raises(ValueError):
        make_spec(tmp_path, repeat=-1)
    with pytest.raises(ValueError):
        make_spec(tmp_path, timeout=0)


# --- cancellation, supervision, adoption ----------------------------------------------


def test_cancel_through_the_event_kills_the_group(tmp_path: Path) -> None:
    handle = start_trial(make_spec(tmp_path, "--hang", "--spawn-child", grace=1.0))
    wait_for_training_start(handle.trial_dir)
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    try:
        run = handle.wait(cancel=cancel, poll=0.05)
    finally:
        timer.cancel()
    assert run.cancelled and not run.timed_out
    assert run.signal == signal.SIGTERM
    assert kind_of(run) == ("cancelled", "cancelled")
    assert eventually(lambda: group_gone(training_pgid(run.trial_dir)))


def test_cancel_without_waiting_then_wait(tmp_path: Path) -> None:
    handle = start_trial(make_spec(tmp_path, "--hang"))
    wait_for_training_start(handle.trial_dir)
    handle.cancel()
    run = handle.wait(poll=0.05)
    assert run.cancelled
    handle.cancel()  # after the end: a no-op


def test_ctrl_c_to_our_process_group_does_not_reach_the_training(tmp_path: Path) -> None:
    handle = start_trial(make_spec(tmp_path, "--sleep", "0.5"))
    supervisor_pgid = os.getpgid(handle.pid)  # type: ignore[arg-type]
    assert supervisor_pgid != os.getpgrp()
    wait_for_training_start(handle.trial_dir)
    assert training_pgid(handle.trial_dir) not in (os.getpgrp(), supervisor_pgid)
    handle.wait(poll=0.05)


def test_adopt_a_finished_trial(tmp_path: Path) -> None:
    first = run_trial(make_spec(tmp_path))
    adopted = adopt_trial(first.trial_dir)
    assert adopted is not None
    again = adopted.poll()
    assert again is not None and again == first


def test_adopt_a_running_trial_through_a_fresh_handle(tmp_path: Path) -> None:
    original = start_trial(make_spec(tmp_path, "--sleep", "1.0"))
    wait_for_training_start(original.trial_dir)
    adopted = adopt_trial(original.trial_dir)
    assert adopted is not None and adopted.pid == original.pid
    assert adopted.poll() is None
    run = adopted.wait(poll=0.05)
    assert kind_of(run)[0] == "metric"
    assert original.wait(poll=0.05) == run  # the old handle agrees and reaps its child


_COORDINATOR = """
import json, sys, time
from pathlib import Path
from fusion_dd.runner.trial import TrialSpec, start_trial
fields = json.loads(sys.argv[1])
fields["trial_dir"] = Path(fields["trial_dir"])
fields["base_dir"] = Path(fields["base_dir"])
handle = start_trial(TrialSpec(**fields))
print(handle.pid, flush=True)
time.sleep(120)
"""


def test_a_training_survives_the_coordinators_sigkill_and_is_adopted(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "--sleep", "1.0")
    fields = {
        **{k: v for k, v in spec.__dict__.items()},
        "trial_dir": str(spec.trial_dir),
        "base_dir": str(spec.base_dir),
        "command": list(spec.command),
        "device": list(spec.device),
        "env": dict(spec.env),
    }
    coordinator = subprocess.Popen(
        [sys.executable, "-c", _COORDINATOR, json.dumps(fields)],
        stdout=subprocess.PIPE,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    try:
        assert coordinator.stdout is not None
        supervisor_pid = int(coordinator.stdout.readline())
        wait_for_training_start(spec.trial_dir)
    finally:
        coordinator.kill()
        coordinator.wait(timeout=30)
        if coordinator.stdout is not None:
            coordinator.stdout.close()
    adopted = adopt_trial(spec.trial_dir)
    assert adopted is not None and adopted.pid == supervisor_pid
    run = adopted.wait(poll=0.05)
    assert kind_of(run)[0] == "metric"
    assert read_metric(run, ACC).value == pytest.approx(0.9)


def test_adopt_a_dead_trial_returns_none_and_kills_its_orphans(tmp_path: Path) -> None:
    handle = start_trial(make_spec(tmp_path, "--hang", "--spawn-child"))
    wait_for_training_start(handle.trial_dir)
    pgid = training_pgid(handle.trial_dir)
    os.kill(handle.pid, signal.SIGKILL)  # type: ignore[arg-type]
    assert eventually(lambda: pid_gone(handle.pid))  # type: ignore[arg-type]
    handle._process.wait(timeout=30)  # type: ignore[union-attr]  # reap our child
    assert adopt_trial(handle.trial_dir) is None
    assert eventually(lambda: group_gone(pgid))


def test_our_handle_reports_a_supervisor_that_died_without_status(tmp_path: Path) -> None:
    handle = start_trial(make_spec(tmp_path, "--hang"))
    wait_for_training_start(handle.trial_dir)
    pgid = training_pgid(handle.trial_dir)
    os.kill(handle.pid, signal.SIGKILL)  # type: ignore[arg-type]
    run = handle.wait(poll=0.05)
    assert run.error is not None and "supervisor died" in run.error
    assert kind_of(run)[0] == "crash"
    assert eventually(lambda: group_gone(pgid))


def test_adopt_refuses_a_reused_pid_and_missing_directories(tmp_path: Path) -> None:
    trial_dir = tmp_path / "trials" / "t9"
    trial_dir.mkdir(parents=True)
    (trial_dir / "supervisor.json").write_text(json.dumps({"supervisor_pid": os.getpid()}))
    assert adopt_trial(trial_dir) is None  # alive, but it is this test, not a supervisor
    assert adopt_trial(tmp_path / "nowhere") is None


def test_parallel_launches_log_one_line_each(tmp_path: Path) -> None:
    log = tmp_path / "launches.jsonl"
    handles: list[RunningTrial] = []
    for index in range(4):
        spec = make_spec(
            tmp_path, "--launch-log", str(log),
            trial_id=f"t{index}", trial_dir=tmp_path / "trials" / f"t{index}",
            device=(str(index),), repeat=index % 2,
        )
        handles.append(start_trial(spec))
    for handle in handles:
        assert handle.wait(poll=0.05).exit_code == 0
    records = sorted((json.loads(line) for line in log.read_text().splitlines()),
                     key=lambda r: r["trial_id"])
    assert records == [
        {"on": ["A"], "repeat": i % 2, "trial_id": f"t{i}", "device": str(i)} for i in range(4)
    ]


def test_a_spec_is_self_contained_and_its_repeat_reaches_the_training(tmp_path: Path) -> None:
    """A pickled copy of a spec starts the same training (what a launcher elsewhere needs);
    a copy with another repeat number trains with that number in FUSION_DD_REPEAT."""
    spec = make_spec(tmp_path, "--print-env", "FUSION_DD_REPEAT")
    assert pickle.loads(pickle.dumps(spec)) == spec
    again = pickle.loads(pickle.dumps(replace(spec, repeat=2, trial_id="t0002", trial_dir=tmp_path / "t0002")))
    run = run_trial(again)
    assert run.exit_code == 0
    assert "env FUSION_DD_REPEAT=2" in run.log_path.read_text().splitlines()


def test_a_run_record_from_before_early_stopping_still_reads(tmp_path: Path) -> None:
    run = run_trial(make_spec(tmp_path))
    old = {key: value for key, value in run.to_json().items() if key != "early_stop"}
    assert TrialRun.from_json(old) == run and run.early_stop is None


def test_a_status_that_finds_the_disk_full_goes_into_the_space_reserved_for_it(tmp_path, monkeypatch):
    """The supervisor takes the status's space before the training runs; a full disk at its end loses nothing."""
    import errno

    from fusion_dd.runner import supervisor

    supervisor._reserve_status(str(tmp_path))
    assert (tmp_path / supervisor.STATUS_RESERVE_FILE).stat().st_size > 0

    def full(path, document, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(supervisor, "write_json_atomic", full)
    supervisor._write_status(str(tmp_path), {"exit_code": 0, "signal": None, "start": 1.0, "end": 2.0})
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["exit_code"] == 0 and status["disk_full"] is True
    assert not (tmp_path / supervisor.STATUS_RESERVE_FILE).exists()
    # Without a reserve the error goes on, naming the file.
    with pytest.raises(OSError, match="status.json"):
        supervisor._write_status(str(tmp_path), {"exit_code": 0})


def test_a_finished_run_whose_status_says_the_disk_was_full_and_no_metric_is_trained_again(tmp_path):
    from fusion_dd.runner.launcher import TrialRequest, result_of
    from fusion_dd.runner.metrics import MetricSpec

    spec = fake_trial_spec(tmp_path, "0001")
    spec.trial_dir.mkdir(parents=True)
    (spec.trial_dir / "output.log").write_text("loss 0.3\n")
    run = TrialRun(
        trial_id="0001", trial_dir=spec.trial_dir, exit_code=1, signal=None, timed_out=False, cancelled=False,
        duration=1.0, start=1.0, end=2.0, log_path=spec.trial_dir / "output.log",
        metrics_path=spec.trial_dir / "metrics.jsonl", disk_full=True,
    )
    request = TrialRequest(spec=spec, metric=MetricSpec.from_text(r"accuracy: (\S+)"))
    result = result_of(run, request)
    assert result.cancelled and "disk was full" in result.reason
    (spec.trial_dir / "output.log").write_text("accuracy: 0.9\n")
    import dataclasses

    assert result_of(dataclasses.replace(run, exit_code=0), request).kind == "metric"  # complete evidence: taken


def test_a_trial_directory_of_another_search_or_configuration_is_set_aside_not_adopted(tmp_path):
    from fusion_dd.runner.trial import ForeignTrial, adopt_trial, trial_binding

    ours = trial_binding("aaaa", "0001", ["A"], 0, "search")
    trial_dir = tmp_path / "trials" / "0001"
    trial_dir.mkdir(parents=True)
    (trial_dir / "status.json").write_text(json.dumps({"exit_code": 0, "binding": trial_binding("bbbb", "0001", ["A"], 0, "search")}))
    with pytest.raises(ForeignTrial, match="belongs to search bbbb") as raised:
        adopt_trial(trial_dir, ours)
    assert raised.value.moved_to == tmp_path / "trials" / "0001.foreign" and not trial_dir.exists()
    trial_dir.mkdir()
    (trial_dir / "status.json").write_text(json.dumps({"exit_code": 0, "binding": trial_binding("aaaa", "0001", ["B"], 0, "search")}))
    with pytest.raises(ForeignTrial, match="another configuration"):
        adopt_trial(trial_dir, ours)
    assert (tmp_path / "trials" / "0001.foreign.2").is_dir()
    trial_dir.mkdir()
    (trial_dir / "status.json").write_text(json.dumps({"exit_code": 0, "binding": ours}))
    assert adopt_trial(trial_dir, ours) is not None
    # A directory written before bindings: only a search without an id (as old as it) takes it.
    (trial_dir / "status.json").write_text(json.dumps({"exit_code": 0}))
    assert adopt_trial(trial_dir, trial_binding(None, "0001", ["A"], 0, "search")) is not None
    with pytest.raises(ForeignTrial, match="names no search"):
        adopt_trial(trial_dir, ours)


def test_output_past_the_log_limit_keeps_its_head_and_latest_tail_and_marks_the_cut(tmp_path):
    from fusion_dd.runner.supervisor import _LogCap

    log = tmp_path / "output.log"
    cap = _LogCap(str(log), 1000)
    written = b""
    for index in range(30):
        chunk = b"line %04d %s\n" % (index, b"x" * 90)
        written += chunk
        with open(log, "ab") as handle:
            handle.write(chunk)
        cap.check()
        assert log.stat().st_size <= 1000 + len(chunk)
    data = log.read_bytes()
    assert data.startswith(written[:500])
    assert data.endswith(written[-250:])
    mark = data[500:].split(b"\n")[1]
    assert mark.startswith(b"[fusion-dd: ") and b"train.log_limit (1000 bytes)" in mark
    left_out = int(mark.split()[1])
    assert len(data) - len(mark) - 2 + left_out == len(written)  # every byte is kept or counted as cut
