"""Every launcher keeps the same training contract: one suite, run against each.

The engine cannot tell launchers apart, so what it relies on is tested once and
run against each of them: a metric is read, a crash keeps its exit code, NaN is a
precision failure, a cancel and a timeout stop a running training, and the
training sees its switch file and its variables. The local launcher runs the fake
training (``tests/fakes/fake_train.py``) as a supervised process group; the
in-process launcher runs Python functions that behave the same way.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from fusion_dd.runner.inprocess import InProcessLauncher, TrialContext
from fusion_dd.runner.launcher import LocalLauncher, TrialRequest, TrialResult
from fusion_dd.runner.metrics import MetricSpec
from tests.support.fake_training import fake_trial_spec
from tests.support.processes import eventually

METRIC = MetricSpec(pattern=re.compile(r"accuracy[=:]\s*(\S+)"))
SWITCH = '{"Switch": {"GraphFusion": {"ALL": "off", "SoftmaxFusionPass": "on"}}}'


def _steps(context: TrialContext, losses: list[float]) -> None:
    for step, loss in enumerate(losses, start=1):
        context.print(f"step {step} loss {loss:.4f}")
        context.report(step=step, loss=loss)


def healthy(context: TrialContext) -> None:
    _steps(context, [1.0, 0.5, 0.25])
    context.print("accuracy: 0.75")


def crashing(context: TrialContext) -> int:
    _steps(context, [1.0])
    return 3


def diverging(context: TrialContext) -> None:
    _steps(context, [1.0, math.nan])
    context.print("accuracy: 0.75")


def slow(context: TrialContext) -> None:
    _steps(context, [1.0])
    context.stop.wait(60)


def telling(context: TrialContext) -> None:
    for name in ("FUSION_DD_TRIAL_DIR", "FUSION_DD_SWITCH_FILE", "ASCEND_DEVICE_ID"):
        context.print(f"env {name}={context.env[name]}")
    context.print("accuracy: 0.75")


#: Each behaviour as the fake training's options and as a function.
BEHAVIOURS: dict[str, tuple[list[str], Callable[[TrialContext], int | None]]] = {
    "healthy": (["--accuracy", "0.75", "--steps", "3"], healthy),
    "crashing": (["--steps", "1", "--exit-code", "3"], crashing),
    "diverging": (["--nan", "--steps", "2", "--accuracy", "0.75"], diverging),
    "slow": (["--steps", "1", "--hang"], slow),
    "telling": (
        ["--accuracy", "0.75", "--print-env", "FUSION_DD_TRIAL_DIR", "--print-env", "FUSION_DD_SWITCH_FILE",
         "--print-env", "ASCEND_DEVICE_ID"],
        telling,
    ),
}

#: The Slurm launcher runs the same fake training as a Slurm job (on a real Slurm, else skipped).
LAUNCHERS = ["local", "inprocess", pytest.param("slurm", marks=pytest.mark.cluster)]


def _launcher(kind: str, tmp_path: Path, function: Callable[[TrialContext], int | None]):
    if kind == "local":
        return LocalLauncher()
    if kind == "inprocess":
        return InProcessLauncher(function)
    from fusion_dd.config.settings import SlurmConfig
    from fusion_dd.runner.slurm_launcher import SlurmLauncher
    from tests.runner.test_slurm_launcher import slurm_refusal

    refusal = slurm_refusal()
    if refusal is not None:
        pytest.skip(refusal)
    return SlurmLauncher(SlurmConfig(max_jobs=1, mem="200M", cpus_per_task=1), tmp_path)


def _start(kind: str, tmp_path: Path, behaviour: str, **overrides):
    options, function = BEHAVIOURS[behaviour]
    spec = fake_trial_spec(tmp_path, "0001", *options, switch_text=SWITCH, device=("3",), **overrides)
    request = TrialRequest(spec=spec, metric=METRIC)
    launcher = _launcher(kind, tmp_path, function)
    try:
        return launcher.start(request), spec.trial_dir
    finally:
        if kind == "local":
            launcher.run_ended()


def _run(kind: str, tmp_path: Path, behaviour: str, **overrides) -> tuple[TrialResult, Path]:
    handle, trial_dir = _start(kind, tmp_path, behaviour, **overrides)
    return handle.wait(), trial_dir


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_the_metric_of_a_healthy_training_is_read(kind: str, tmp_path: Path) -> None:
    result, _ = _run(kind, tmp_path, "healthy")
    assert (result.cancelled, result.kind, result.value, result.exit_code) == (False, "metric", 0.75, 0)


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_crash_keeps_its_exit_code(kind: str, tmp_path: Path) -> None:
    result, _ = _run(kind, tmp_path, "crashing")
    assert (result.kind, result.exit_code, result.reason) == ("crash", 3, "exit code 3")
    assert any("step 1" in line for line in result.log_tail)


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_nan_loss_is_a_precision_failure(kind: str, tmp_path: Path) -> None:
    result, _ = _run(kind, tmp_path, "diverging")
    assert result.kind == "nonfinite"


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_cancel_stops_a_running_training(kind: str, tmp_path: Path) -> None:
    handle, trial_dir = _start(kind, tmp_path, "slow", grace=5.0)
    log = trial_dir / "output.log"  # a cluster job writes it once it runs
    assert eventually(lambda: log.exists() and "step 1 " in log.read_text(), within=60)
    cancel = threading.Event()
    cancel.set()
    result = handle.wait(cancel)
    assert result.cancelled


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_training_past_its_timeout_is_stopped(kind: str, tmp_path: Path) -> None:
    result, _ = _run(kind, tmp_path, "slow", timeout=1.0, grace=5.0)
    assert (result.cancelled, result.kind, result.reason) == (False, "timeout", "timed out after 1 s")


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_the_training_sees_its_switch_file_and_variables(kind: str, tmp_path: Path) -> None:
    result, trial_dir = _run(kind, tmp_path, "telling")
    assert result.kind == "metric"
    output = (trial_dir / "output.log").read_text()
    resolved = trial_dir.resolve()
    assert f"env FUSION_DD_TRIAL_DIR={resolved}" in output
    assert f"env FUSION_DD_SWITCH_FILE={resolved / 'fusion_switch.cfg'}" in output
    if kind == "slurm":
        # A Slurm job's device is the one Slurm granted (none here: no gres asked), never the slot's name.
        assert "env ASCEND_DEVICE_ID=<unset>" in output
    else:
        assert "env ASCEND_DEVICE_ID=3" in output
    assert json.loads((trial_dir / "fusion_switch.cfg").read_text()) == json.loads(SWITCH)
