"""Framework wiring helpers, tested with fakes shaped like the framework objects."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
from collections import defaultdict

import pytest

from fusion_dd import integrations
from fusion_dd.integrations import (
    apply_to_ge_options,
    apply_to_npu_run_config_kwargs,
    apply_to_tf1_session_config,
    apply_to_tf2_npu_device,
    apply_to_torchair,
    report_metric,
    switch_file,
)

PATH = "trials/0007/fusion_switch.cfg"


class FakeAttrValue:
    def __init__(self) -> None:
        self.s = b""
        self.b = False


class FakeCustomOp:
    """Mimics a RewriterConfig.CustomGraphOptimizer: a name and a parameter_map."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.parameter_map: defaultdict[str, FakeAttrValue] = defaultdict(FakeAttrValue)


def fake_session_config(*names: str) -> types.SimpleNamespace:
    optimizers = [FakeCustomOp(name) for name in names]
    rewrite = types.SimpleNamespace(custom_optimizers=optimizers)
    return types.SimpleNamespace(graph_options=types.SimpleNamespace(rewrite_options=rewrite))


@pytest.fixture
def trial_env(monkeypatch):
    monkeypatch.setenv("FUSION_DD_SWITCH_FILE", PATH)


def test_switch_file_reads_the_environment(monkeypatch):
    monkeypatch.delenv("FUSION_DD_SWITCH_FILE", raising=False)
    assert switch_file() is None
    monkeypatch.setenv("FUSION_DD_SWITCH_FILE", "  ")
    assert switch_file() is None
    monkeypatch.setenv("FUSION_DD_SWITCH_FILE", PATH)
    assert switch_file() == PATH


def test_tf1_session_config_sets_the_npu_optimizer_parameter(trial_env):
    config = fake_session_config("SomethingElse", "NpuOptimizer")
    assert apply_to_tf1_session_config(config) == PATH
    npu = config.graph_options.rewrite_options.custom_optimizers[1]
    assert npu.parameter_map["fusion_switch_file"].s == PATH.encode()
    custom_op = FakeCustomOp("NpuOptimizer")
    apply_to_tf1_session_config(custom_op)
    assert custom_op.parameter_map["fusion_switch_file"].s == PATH.encode()


def test_tf1_without_npu_optimizer_fails_loudly(trial_env):
    with pytest.raises(ValueError, match="no NpuOptimizer"):
        apply_to_tf1_session_config(fake_session_config("Other"))
    with pytest.raises(TypeError, match="ConfigProto"):
        apply_to_tf1_session_config(object())


def test_helpers_do_nothing_outside_fusion_dd(monkeypatch):
    monkeypatch.delenv("FUSION_DD_SWITCH_FILE", raising=False)
    config = fake_session_config("NpuOptimizer")
    assert apply_to_tf1_session_config(config) is None
    assert "fusion_switch_file" not in config.graph_options.rewrite_options.custom_optimizers[0].parameter_map
    assert apply_to_npu_run_config_kwargs({"model_dir": "m"}) == {"model_dir": "m"}
    assert apply_to_tf2_npu_device() is None  # never imports npu_device
    assert apply_to_ge_options() == {}
    torch_config = types.SimpleNamespace(fusion_config=types.SimpleNamespace(fusion_switch_file=None))
    assert apply_to_torchair(torch_config).fusion_config.fusion_switch_file is None


def test_estimator_tf2_torchair_and_ge_options(trial_env, monkeypatch):
    assert apply_to_npu_run_config_kwargs({"model_dir": "m", "fusion_switch_file": "old"}) == {
        "model_dir": "m",
        "fusion_switch_file": PATH,
    }
    options = types.SimpleNamespace(fusion_switch_file=None)
    fake_npu_device = types.SimpleNamespace(global_options=lambda: options)
    assert apply_to_tf2_npu_device(fake_npu_device) == PATH
    assert options.fusion_switch_file == PATH
    # Imported lazily by name when not passed in.
    lazy_options = types.SimpleNamespace(fusion_switch_file=None)
    monkeypatch.setitem(sys.modules, "npu_device", types.SimpleNamespace(global_options=lambda: lazy_options))
    apply_to_tf2_npu_device()
    assert lazy_options.fusion_switch_file == PATH

    class CompilerConfig:
        def __init__(self) -> None:
            self.fusion_config = types.SimpleNamespace(fusion_switch_file=None)

    monkeypatch.setitem(sys.modules, "torchair", types.SimpleNamespace(CompilerConfig=CompilerConfig))
    assert apply_to_torchair().fusion_config.fusion_switch_file == PATH
    assert apply_to_ge_options({"ge.exec.deviceId": "0"}) == {
        "ge.exec.deviceId": "0",
        "ge.fusionSwitchFile": PATH,
    }


def test_importing_integrations_imports_no_framework():
    code = (
        "import sys, fusion_dd.integrations\n"
        "bad = {'tensorflow', 'npu_device', 'torch', 'torchair', 'npu_bridge', 'mindspore'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    env = {"OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    completed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr


class FakeScalar:
    """Shaped like a numpy/torch scalar: has ``.item()``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


class FakeEagerTensor:
    """Shaped like a TensorFlow EagerTensor: ``.numpy()`` but no ``.item()``."""

    def numpy(self) -> FakeScalar:
        return FakeScalar(0.25)


def test_report_metric_appends_json_lines(tmp_path, monkeypatch):
    metrics = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("FUSION_DD_METRICS_FILE", str(metrics))
    report_metric(step=1, loss=FakeScalar(2.5), accuracy=FakeEagerTensor())
    report_metric(loss=float("nan"))
    lines = metrics.read_text().splitlines()
    assert json.loads(lines[0]) == {"step": 1, "loss": 2.5, "accuracy": 0.25}
    assert math.isnan(json.loads(lines[1])["loss"])
    with pytest.raises(TypeError, match="not a number"):
        report_metric(step=2, loss=[1, 2])


def test_report_metric_is_a_no_op_when_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("FUSION_DD_METRICS_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    report_metric(step=1, loss=1.0)
    assert list(tmp_path.iterdir()) == []
    assert integrations.METRICS_ENV == "FUSION_DD_METRICS_FILE"
