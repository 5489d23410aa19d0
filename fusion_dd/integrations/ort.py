"""ONNX Runtime: one changed line hands a session fusion-dd's disabled optimizers.

fusion-dd gives each trial the names of the optimizers to switch off in
``FUSION_DD_DISABLED_OPTIMIZERS`` (joined by ``;``)::

    from fusion_dd.integrations import ort_session_kwargs
    session = ort.InferenceSession(path, so, providers=providers, **ort_session_kwargs())

or, where a ``SessionOptions`` is built anyway::

    from fusion_dd.integrations import ort_session_options
    ort_session_options(so)   # sets optimization.disable_specified_optimizers

Outside fusion-dd both do nothing (an empty dict, an untouched ``so``), so the
script keeps working unchanged. Inside fusion-dd they also switch ONNX
Runtime's log to info level, whose ``GraphTransformer <name> modified: 0|1``
lines (one per transformer run, at session creation only) are fusion-dd's
proof of which optimizers ran and fired; they land in the trial's output.log.
onnxruntime is imported only to raise its log level, never otherwise.
"""

from __future__ import annotations

import os
from typing import Any

DISABLED_ENV = "FUSION_DD_DISABLED_OPTIMIZERS"
SESSION_OPTION = "optimization.disable_specified_optimizers"
TRIAL_ENV = "FUSION_DD_TRIAL_DIR"
INFO = 1  # ONNX Runtime's severity: 0 verbose, 1 info, 2 warning


def disabled_optimizers() -> list[str] | None:
    """The optimizers fusion-dd switches off in this trial; None outside fusion-dd."""
    value = os.environ.get(DISABLED_ENV)
    if value is None:
        return None
    return [name for name in (part.strip() for part in value.split(";")) if name]


def _log_info() -> None:
    """Raise ONNX Runtime's default log to info (it logs the transformer lines at session creation)."""
    if not os.environ.get(TRIAL_ENV):
        return
    try:
        import onnxruntime
    except ImportError:
        return
    onnxruntime.set_default_logger_severity(INFO)


def ort_session_kwargs() -> dict[str, Any]:
    """``{"disabled_optimizers": [...]}`` for ``InferenceSession(..., **ort_session_kwargs())``; {} outside fusion-dd."""
    names = disabled_optimizers()
    if names is None:
        return {}
    _log_info()
    return {"disabled_optimizers": names}


def ort_session_options(so: Any) -> Any:
    """Set the disabled optimizers (and the info log) on a ``SessionOptions``; returns it. Untouched outside fusion-dd."""
    names = disabled_optimizers()
    if names is None:
        return so
    if names:
        so.add_session_config_entry(SESSION_OPTION, ";".join(names))
    if os.environ.get(TRIAL_ENV):
        so.log_severity_level = INFO
    return so
