"""Every launcher keeps the same training contract: one suite, run against each.

The engine cannot tell launchers apart, so what it relies on is tested once and
run against each of them: a metric is read, a crash keeps its exit code, NaN is a
precision failure, a cancel and a timeout stop a running training, and the
training sees its switch file and its variables. The local launcher runs the fake
training (``tests/fakes/fake_train.py``) as a supervised process group; the
in-process launcher runs Python functions that behave the same way; the dask
launcher runs the fake training as a task on a real localhost dask cluster (one
worker, device 3), and the Slurm launcher as a Slurm job (where a Slurm answers).
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

#: The dask launcher runs the same fake training as a task on a localhost dask cluster, the
#: Slurm launcher as a Slurm job (on a real Slurm, else skipped).
LAUNCHERS = [
    "local",
    "inprocess",
    pytest.param("dask", marks=pytest.mark.cluster),
    pytest.param("slurm", marks=pytest.mark.cluster),
]


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory):
    """One worker whose device is 3, the id the other launchers are given."""
    from tests.support.clusters import DaskCluster, dask_refusal

    refusal = dask_refusal()
    if refusal is not None:
        pytest.skip(refusal)
    started = DaskCluster(tmp_path_factory.mktemp("dask"), pid_namespaces=False, devices=("3",))
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def slurm_shared():
    """The machine's Slurm, held shared for the test (``tests.support.clusters.slurm_in_use``)."""
    from tests.support.clusters import slurm_in_use

    with slurm_in_use():
        yield


def _launcher(kind: str, tmp_path: Path, function: Callable[[TrialContext], int | None], fixtures: pytest.FixtureRequest):
    if kind == "local":
        return LocalLauncher()
    if kind == "inprocess":
        return InProcessLauncher(function)
    if kind == "dask":
        from fusion_dd.runner.dask_launcher import DaskLauncher

        cluster = fixtures.getfixturevalue("dask_cluster")
        return DaskLauncher(cluster.address, tmp_path, "ASCEND_DEVICE_ID")
    from fusion_dd.config.settings import SlurmConfig
    from fusion_dd.runner.slurm_launcher import SlurmLauncher
    fixtures.getfixturevalue("slurm_shared")  # skips where Slurm cannot run a search
    return SlurmLauncher(SlurmConfig(max_jobs=1, mem="200M", cpus_per_task=1), tmp_path)


@pytest.fixture
def start(request: pytest.FixtureRequest, tmp_path: Path):
    """``start(kind, behaviour, **overrides)``: the handle of one trial started on ``kind`` and its directory."""
    opened: list = []

    def started(kind: str, behaviour: str, **overrides):
        options, function = BEHAVIOURS[behaviour]
        launcher = _launcher(kind, tmp_path, function, request)
        if kind == "dask":
            opened.append(launcher)
            overrides.setdefault("device", launcher.slots()[0])  # the cluster's device (3), by its slot
        spec = fake_trial_spec(tmp_path, "0001", *options, switch_text=SWITCH, **{"device": ("3",), **overrides})
        try:
            return launcher.start(TrialRequest(spec=spec, metric=METRIC)), spec.trial_dir
        finally:
            if kind == "local":
                launcher.run_ended()

    yield started
    for launcher in opened:
        launcher.close()


@pytest.fixture
def run(start):
    """``run(kind, behaviour, **overrides)``: the result of one trial on ``kind`` and its directory."""

    def ran(kind: str, behaviour: str, **overrides) -> tuple[TrialResult, Path]:
        handle, trial_dir = start(kind, behaviour, **overrides)
        return handle.wait(), trial_dir

    return ran


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_the_metric_of_a_healthy_training_is_read(kind: str, run) -> None:
    result, _ = run(kind, "healthy")
    assert (result.cancelled, result.kind, result.value, result.exit_code) == (False, "metric", 0.75, 0)


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_crash_keeps_its_exit_code(kind: str, run) -> None:
    result, _ = run(kind, "crashing")
    assert (result.kind, result.exit_code) == ("crash", 3)
    # With the last line the training printed (which stream reaches output.log is the launcher's own).
    assert result.reason in (
        "exit code 3; output.log ends 'simulated crash, exit code 3'", "exit code 3; output.log ends 'step 1 loss 1.0000'"
    )
    assert any("step 1" in line for line in result.log_tail)


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_nan_loss_is_a_precision_failure(kind: str, run) -> None:
    result, _ = run(kind, "diverging")
    assert result.kind == "nonfinite"


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_cancel_stops_a_running_training(kind: str, start) -> None:
    handle, trial_dir = start(kind, "slow", grace=5.0)
    log = trial_dir / "output.log"  # a cluster job writes it once it runs
    assert eventually(lambda: log.exists() and "step 1 " in log.read_text(), within=60)
    cancel = threading.Event()
    cancel.set()
    result = handle.wait(cancel)
    assert result.cancelled


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_training_past_its_timeout_is_stopped(kind: str, run) -> None:
    result, _ = run(kind, "slow", timeout=1.0, grace=5.0)
    assert (result.cancelled, result.kind, result.reason) == (False, "timeout", "timed out after 1 s")


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_the_training_sees_its_switch_file_and_variables(kind: str, run) -> None:
    result, trial_dir = run(kind, "telling")
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
