"""The CANN backend (Ascend's graph compiler): see :mod:`fusion_dd.backends.cann.backend`.

``switch`` (fusion_switch.cfg) and ``autofuse`` (AUTOFUSE_FLAGS) are light and
used by the demo training too; the backend itself reads CANN's artifacts (YAML,
protobuf), so it is imported only when asked for.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("CannBackend", "FusionResultHook"):
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
