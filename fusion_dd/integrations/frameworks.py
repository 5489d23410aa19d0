"""Handing ``FUSION_DD_SWITCH_FILE`` to each framework the way it expects.

Every helper is a no-op when the variable is unset, so the same script runs
with and without fusion-dd. A helper that cannot apply the file raises instead of
carrying on: a switch file that silently never reaches the compiler makes every
trial train the same network, which is worse than a crash.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

SWITCH_ENV = "FUSION_DD_SWITCH_FILE"
GE_OPTION = "ge.fusionSwitchFile"
_NPU_OPTIMIZER = "NpuOptimizer"


def switch_file() -> str | None:
    """This trial's switch file, or None outside fusion-dd."""
    path = os.environ.get(SWITCH_ENV, "").strip()
    return path or None


def apply_to_tf1_session_config(config: Any) -> str | None:
    """Set ``fusion_switch_file`` on a TF 1.x session config; returns the path applied.

    ``config`` is a ``tf.compat.v1.ConfigProto`` that already holds the
    ``NpuOptimizer`` custom optimizer, or that custom optimizer itself.
    """
    path = switch_file()
    if path is None:
        return None
    custom_op = _npu_custom_op(config)
    custom_op.parameter_map["fusion_switch_file"].s = path.encode("utf-8")
    return path


def _npu_custom_op(config: Any) -> Any:
    if hasattr(config, "parameter_map"):
        return config
    try:
        optimizers = config.graph_options.rewrite_options.custom_optimizers
    except AttributeError:
        raise TypeError(
            f"expected a tf ConfigProto or its NpuOptimizer custom_op, got "
            f"{type(config).__name__}"
        ) from None
    for custom_op in optimizers:
        if custom_op.name == _NPU_OPTIMIZER:
            return custom_op
    raise ValueError(
        "the session config has no NpuOptimizer custom optimizer; add it first: "
        "custom_op = config.graph_options.rewrite_options.custom_optimizers.add(); "
        'custom_op.name = "NpuOptimizer"'
    )


def apply_to_npu_run_config_kwargs(kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``NPURunConfig`` (TF 1.x Estimator) with the switch file.

    The trial's file replaces a ``fusion_switch_file`` the script set itself.
    """
    result = dict(kwargs or {})
    path = switch_file()
    if path is not None:
        result["fusion_switch_file"] = path
    return result


def apply_to_tf2_npu_device(npu_device: Any = None) -> str | None:
    """Set the switch file in TF 2.x ``npu_device.global_options()``; returns the path.

    Call it before ``npu_device.open()``: options are read when the device opens.
    ``npu_device`` is the imported module (imported here when not given).
    """
    path = switch_file()
    if path is None:
        return None
    if npu_device is None:
        npu_device = importlib.import_module("npu_device")
    npu_device.global_options().fusion_switch_file = path
    return path


def apply_to_torchair(config: Any = None) -> Any:
    """Set the switch file on a torchair ``CompilerConfig`` and return the config.

    Without a config a new ``torchair.CompilerConfig()`` is made, so
    ``config = apply_to_torchair()`` is enough for a script that had none.
    """
    if config is None:
        config = importlib.import_module("torchair").CompilerConfig()
    path = switch_file()
    if path is not None:
        config.fusion_config.fusion_switch_file = path
    return config


def apply_to_ge_options(options: Mapping[str, str] | None = None) -> dict[str, str]:
    """GE options (``ge.initialize``, session or graph options) with the switch file.

    MindSpore passes GE options through ``set_context(ascend_config={"ge_options":
    ...})``; whether it honours this option is unconfirmed, so check the trial's
    ``fusion_result.json``.
    """
    result = dict(options or {})
    path = switch_file()
    if path is not None:
        result[GE_OPTION] = path
    return result
