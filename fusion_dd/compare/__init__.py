"""Op-by-op comparison of tensor dumps of a fusion-on and a fusion-off run.

``compare_dumps`` (``api.py``) is the entry point; ``sources`` finds dumped
tensors, ``pairing`` joins them by original op names, ``metrics`` measures each
pair and ``render`` writes the text, CSV and JSON reports. Names are imported
lazily so that the CLI (which needs only ``help``) starts without numpy.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "ComparedPair": "api",
    "Comparison": "api",
    "compare_dumps": "api",
    "load_graph_dumps": "api",
    "Metrics": "metrics",
    "Thresholds": "metrics",
    "compare_arrays": "metrics",
    "FileProblem": "sources",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
