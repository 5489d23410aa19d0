"""Fixtures for the CANN artifact tests: the shared real files and dump writers.

The writers produce graph dumps shaped like real ones (unknown fields, enum
names, nested ``func`` attributes) so that the readers are tested against what
GE and atc write, not against what our own schema would print.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO

SHARED_ASCEND = REPO / ".." / "shared" / "fixtures" / "ascend"


@pytest.fixture
def ascend_fixtures() -> Path:
    """The real CANN files of ``../shared/fixtures/ascend``; skip when absent."""
    if not SHARED_ASCEND.is_dir():
        pytest.skip("../shared/fixtures/ascend is not available")
    return SHARED_ASCEND.resolve()


@dataclass
class OpSpec:
    """One op of a test graph and its fusion provenance."""

    name: str
    type: str = "Conv2D"
    pass_name: list[str] = field(default_factory=list)
    pass_name_ub: str | None = None
    fusion_scope: int | None = None
    originals: list[str] = field(default_factory=list)
    original_types: list[str] = field(default_factory=list)


def _quote(text: str) -> str:
    return json.dumps(text)


def _list_attr(key: str, strings: list[str], indent: str) -> list[str]:
    inner = indent + "      "
    lines = [f"{indent}attr {{", f'{indent}  key: "{key}"', f"{indent}  value {{", f"{indent}    list {{"]
    lines += [f"{inner}s: {_quote(s)}" for s in strings]
    lines += [f"{inner}val_type: VT_LIST_STRING", f"{indent}    }}", f"{indent}  }}", f"{indent}}}"]
    return lines


def _scalar_attr(key: str, field_name: str, value: str, indent: str) -> list[str]:
    return [
        f"{indent}attr {{",
        f'{indent}  key: "{key}"',
        f"{indent}  value {{",
        f"{indent}    {field_name}: {value}",
        f"{indent}  }}",
        f"{indent}}}",
    ]


def proto_text(ops: list[OpSpec], graph_name: str = "test_graph") -> str:
    """A ``ModelDef`` in protobuf text format, with fields our schema does not know."""
    lines = ["graph {", f"  name: {_quote(graph_name)}"]
    for op in ops:
        lines += ["  op {", f"    name: {_quote(op.name)}", f"    type: {_quote(op.type)}"]
        lines += ['    input: "x:0"']
        lines += _scalar_attr("_fe_imply_type", "i", "6", "    ")
        lines += [
            "    attr {",
            '      key: "aipp"',
            "      value {",
            "        func {",
            '          attr { key: "crop" value { b: false } }',
            "        }",
            "      }",
            "    }",
        ]
        if op.pass_name:
            lines += _list_attr("pass_name", op.pass_name, "    ")
        if op.pass_name_ub is not None:
            lines += _scalar_attr("pass_name_ub", "s", _quote(op.pass_name_ub), "    ")
        if op.fusion_scope is not None:
            lines += _scalar_attr("fusion_scope", "i", str(op.fusion_scope), "    ")
        lines += _list_attr("_datadump_original_op_names", op.originals, "    ")
        if op.original_types:
            lines += _list_attr("_datadump_original_op_types", op.original_types, "    ")
        lines += [
            "    has_out_attr: true",
            "    output_desc {",
            "      dtype: DT_FLOAT16",
            "      shape { dim: 1 dim: 16 }",
            '      layout: "NC1HWC0"',
            '      attr { key: "_datadump_origin_name" value { s: "conv1" } }',
            '      attr { key: "shape_range" value { list_list_int { } } }',
            '      device_type: "NPU"',
            "      real_dim_cnt: 2",
            "    }",
            "  }",
        ]
    lines += ["}", 'attr { key: "soc_version" value { s: "Ascend910B" } }', ""]
    return "\n".join(lines)


def _json_list(strings: list[str], val_type: Any) -> dict[str, Any]:
    listed: dict[str, Any] = {"val_type": val_type}
    if strings:
        listed["s"] = strings
    return {"list": listed}


def mode5_json(ops: list[OpSpec], graph_name: str = "test_graph", int_val_type: bool = False) -> str:
    """The JSON ``atc --mode=5`` writes: attr arrays, enum names, plain strings."""
    val_type: Any = 1 if int_val_type else "VT_LIST_STRING"
    raw_ops = []
    for op in ops:
        attrs: list[dict[str, Any]] = [
            {"key": "_is_custom_op", "value": {"b": False}},
            {"key": "ub_atomic_params", "value": {"list": {"i": [0, 0], "val_type": "VT_LIST_INT"}}},
            {"key": "broken_attr", "value": None},
        ]
        if op.pass_name:
            attrs.append({"key": "pass_name", "value": _json_list(op.pass_name, val_type)})
        if op.pass_name_ub is not None:
            attrs.append({"key": "pass_name_ub", "value": {"s": op.pass_name_ub}})
        if op.fusion_scope is not None:
            attrs.append({"key": "fusion_scope", "value": {"i": op.fusion_scope}})
        attrs.append({"key": "_datadump_original_op_names", "value": _json_list(op.originals, val_type)})
        if op.original_types:
            attrs.append(
                {"key": "_datadump_original_op_types", "value": _json_list(op.original_types, val_type)}
            )
        raw_ops.append(
            {
                "name": op.name,
                "type": op.type,
                "attr": attrs,
                "input": ["x:0"],
                "output_desc": [{"dtype": "DT_FLOAT16", "device_type": "NPU"}],
            }
        )
    document = {
        "name": "test_model",
        "version": 2,
        "attr": [{"key": "soc_version", "value": {"s": "Ascend910B"}}],
        "graph": [{"name": graph_name, "op": raw_ops}],
    }
    return json.dumps(document, indent=1)


def fusion_result_text(graphs: dict[str, dict[str, dict[str, int]]]) -> str:
    """``{graph: {section: {pass: effect_times}}}`` as the compiler writes it (strings)."""
    document = {
        graph: {
            section: {
                name: {"match_times": str(max(effect, 1)), "effect_times": str(effect)}
                for name, effect in passes.items()
            }
            for section, passes in sections.items()
        }
        for graph, sections in graphs.items()
    }
    return json.dumps(document, indent=4)


# A small network used by several tests: a graph-fusion chain, a UB kernel of two
# ops whose first op also lists a graph pass, and an op that only lost its name.
SAMPLE_OPS = [
    OpSpec(
        "conv1_bn",
        "Conv2D",
        pass_name=["ConvBatchnormFusionPass", "ConvScaleFusionPass"],
        originals=["conv1", "bn1", "scale1"],
        original_types=["Convolution", "BatchNorm", "Scale"],
    ),
    OpSpec(
        "mul_square",
        "Sub",
        pass_name=["MulSquareFusionPass", "TbeReduceElemwiseFusionPass"],
        pass_name_ub="TbeReduceElemwiseFusionPass",
        fusion_scope=7,
        originals=["sub1", "mul1"],
    ),
    OpSpec(
        "mean",
        "ReduceMeanD",
        pass_name=["TbeReduceElemwiseFusionPass"],
        pass_name_ub="TbeReduceElemwiseFusionPass",
        fusion_scope=7,
        originals=["mean1"],
    ),
    OpSpec("relu", "Relu", fusion_scope=-3, originals=[]),
]


@pytest.fixture(scope="session")
def dumps() -> Any:
    """The writers above, for tests (importing a conftest by name is fragile)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        OpSpec=OpSpec,
        proto_text=proto_text,
        mode5_json=mode5_json,
        fusion_result_text=fusion_result_text,
        SAMPLE_OPS=SAMPLE_OPS,
    )
