"""CANN artifacts: what the compiler did, read from the files it leaves behind.

* ``fusion_result.json`` says which fusion passes changed each compiled graph;
* GE graph dumps (protobuf text ``ge_proto_*.txt`` or ``atc --mode=5`` JSON) say
  which passes produced which op and which network layers that op replaced;
* switch files and plain lists are what users already wrote by hand.

From these the package builds the candidate rule set of a search, checks rule
names (CANN silently ignores a misspelled one), maps culprit rules to layers,
and checks that a trial's switch file was really applied.
"""

import importlib
from typing import Any

# Imported on first use (PEP 562), so that ``from fusion_dd.backends.cann.artifacts import validate_names``
# costs only its own module: the graph and dump readers pull protobuf and numpy, which a
# search that only checks names and reads fusion_result.json never needs (start-up time).
_SUBMODULE_OF = {
    "CandidateSet": "candidates",
    "FORMATS": "formats",
    "FusedOp": "locations",
    "FusionResult": "fusion_result",
    "GraphModel": "graph",
    "GraphOp": "graph",
    "NameWarning": "validate",
    "PassStats": "fusion_result",
    "SourceInfo": "candidates",
    "SwitchCheck": "applied",
    "check_switch_applied": "applied",
    "closest_names": "validate",
    "collect_candidates": "candidates",
    "find_fusion_results": "applied",
    "format_locations": "locations",
    "format_rules": "formats",
    "graph_paths": "discover",
    "layers": "locations",
    "load_graph": "graph",
    "load_graphs": "discover",
    "read_fusion_result": "fusion_result",
    "read_trial_results": "applied",
    "resolve_sections": "candidates",
    "rule_locations": "locations",
    "rules_of": "graph",
    "ub_kernels": "locations",
    "validate_names": "validate",
    "where": "locations",
}


def __getattr__(name: str) -> Any:
    module = _SUBMODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBMODULE_OF))


__all__ = sorted(_SUBMODULE_OF)
