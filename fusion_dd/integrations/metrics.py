"""``report_metric``: one JSON line per call, durable before the call returns.

fusion-dd reads the last record of ``FUSION_DD_METRICS_FILE`` when a trial ends,
and a trial may be killed at any moment (timeout, cancel), so each record is one
``write`` on an ``O_APPEND`` descriptor followed by ``fsync``: a reader sees whole
lines, and several ranks appending to one file do not interleave within a line.
NaN and infinity are written as JSON's ``NaN``/``Infinity`` extensions because a
NaN loss is exactly what a precision search must see.
"""

from __future__ import annotations

import json
import os
from typing import Any

METRICS_ENV = "FUSION_DD_METRICS_FILE"


def report_metric(step: Any = None, **values: Any) -> None:
    """Append ``{"step": step, **values}`` to the metrics file; no-op outside fusion-dd.

    Values may be Python numbers or anything with ``.item()``/``.numpy()`` (numpy,
    torch and TensorFlow scalars).
    """
    path = os.environ.get(METRICS_ENV, "").strip()
    if not path:
        return
    record: dict[str, Any] = {}
    if step is not None:
        record["step"] = _plain("step", step)
    for name, value in values.items():
        record[name] = _plain(name, value)
    data = (json.dumps(record) + "\n").encode("utf-8")
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = 0
        while written < len(data):
            written += os.write(descriptor, data[written:])
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _plain(name: str, value: Any) -> Any:
    """A JSON-ready scalar from a Python, numpy, torch or TensorFlow value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "numpy") and not hasattr(value, "item"):
        value = value.numpy()
    if hasattr(value, "item"):
        try:
            return _plain(name, value.item())
        except (ValueError, RuntimeError):
            pass
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"report_metric: {name}={value!r} is not a number; pass a scalar"
        ) from None
