"""CANN artifacts: what the compiler did, read from the files it leaves behind.

* ``fusion_result.json`` says which fusion passes changed each compiled graph;
* GE graph dumps (protobuf text ``ge_proto_*.txt`` or ``atc --mode=5`` JSON) say
  which passes produced which op and which network layers that op replaced;
* switch files and plain lists are what users already wrote by hand.

From these the package builds the candidate rule set of a search, checks rule
names (CANN silently ignores a misspelled one), maps culprit rules to layers,
and checks that a trial's switch file was really applied.
"""

from .applied import (
    SwitchCheck,
    check_switch_applied,
    find_fusion_results,
    read_trial_results,
)
from .candidates import CandidateSet, SourceInfo, collect_candidates, resolve_sections
from .discover import graph_paths, load_graphs
from .formats import FORMATS, format_rules
from .fusion_result import FusionResult, PassStats, read_fusion_result
from .graph import GraphModel, GraphOp, load_graph, rules_of
from .validate import NameWarning, closest_names, validate_names
from .where import FusedOp, format_locations, layers, rule_locations, ub_kernels, where

__all__ = [
    "FORMATS",
    "CandidateSet",
    "FusedOp",
    "FusionResult",
    "GraphModel",
    "GraphOp",
    "NameWarning",
    "PassStats",
    "SourceInfo",
    "SwitchCheck",
    "check_switch_applied",
    "closest_names",
    "collect_candidates",
    "find_fusion_results",
    "format_locations",
    "format_rules",
    "graph_paths",
    "layers",
    "load_graph",
    "load_graphs",
    "read_fusion_result",
    "read_trial_results",
    "resolve_sections",
    "rule_locations",
    "rules_of",
    "ub_kernels",
    "validate_names",
    "where",
]
