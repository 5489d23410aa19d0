"""GE graph dumps, text and mode-5 JSON: provenance, sections, and clear errors."""

from __future__ import annotations

import re
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.backends.cann.artifacts import load_graph, load_graphs, rules_of
from fusion_dd.backends.cann.artifacts.ge_schema import FIELDS, message_class
from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import Rule, Section

TDNN_GRAPH = {
    "BatchNormPreprocessFusionPass",
    "BatchNormBnInferFusionPass",
    "HostBNFusionPass",
    "MulSquareFusionPass",
    "MatMulBiasAddFusionPass",
}
TDNN_UB = {
    "TbeEltwiseCastFusionPass",
    "AutomaticUbFusion",
    "TbeReduceElemwiseFusionPass",
    "TbeEltwiseFusionPass",
    "TbeFullyconnectionElemwiseDequantFusionPass",
}
SAMPLE_RULES = [
    Rule("ConvBatchnormFusionPass", Section.GRAPH),
    Rule("ConvScaleFusionPass", Section.GRAPH),
    Rule("MulSquareFusionPass", Section.GRAPH),
    Rule("TbeReduceElemwiseFusionPass", Section.UB),
]


def test_real_text_dump_parses_with_unknown_fields(ascend_fixtures):
    model = load_graph(ascend_fixtures / "ge_proto_00026_afterUBMatch.txt")
    assert len(model.graphs) == 1
    assert len(model.ops) == 399
    assert sum(op.fusion_scope is not None for op in model.ops) == 115
    assert not model.has_provenance
    assert model.rules() == []
    originals = {op.original_names for op in model.ops if op.fusion_scope is not None}
    assert ("scale_conv1", "conv1", "bn_conv1") in originals


def test_real_tdnn_json_gives_five_graph_and_five_ub_rules(ascend_fixtures):
    model = load_graph(ascend_fixtures / "tdnn.om.json")
    assert len(model.ops) == 132
    assert sum(bool(op.pass_name) for op in model.ops) == 14
    assert sum(op.pass_name_ub is not None for op in model.ops) == 6
    rules = model.rules()
    assert {rule.name for rule in rules if rule.section is Section.GRAPH} == TDNN_GRAPH
    assert {rule.name for rule in rules if rule.section is Section.UB} == TDNN_UB
    # Listed in pass_name next to MulSquareFusionPass, but it is a UB pass.
    assert Rule("TbeReduceElemwiseFusionPass", Section.GRAPH) not in rules


@pytest.mark.parametrize("form", ["text", "json", "json-int-val-type"])
def test_written_dumps_give_rules_and_layers(tmp_path, dumps, form):
    if form == "text":
        path = tmp_path / "ge_proto_00000001_graph_1_Build.txt"
        path.write_text(dumps.proto_text(dumps.SAMPLE_OPS))
    else:
        path = tmp_path / "model.json"
        path.write_text(dumps.mode5_json(dumps.SAMPLE_OPS, int_val_type=form.endswith("type")))
    model = load_graph(path)
    assert model.graphs == ("test_graph",)
    assert model.rules() == SAMPLE_RULES
    ops = {op.name: op for op in model.ops}
    assert ops["conv1_bn"].original_names == ("conv1", "bn1", "scale1")
    assert ops["conv1_bn"].original_types == ("Convolution", "BatchNorm", "Scale")
    assert ops["mul_square"].pass_name_ub == "TbeReduceElemwiseFusionPass"
    assert ops["mul_square"].fusion_scope == 7
    assert not ops["relu"].fused


def test_ub_evidence_in_one_dump_decides_the_section_in_another(tmp_path, dumps):
    a = tmp_path / "a.json"
    a.write_text(dumps.mode5_json([dumps.OpSpec("x", pass_name=["TbeEltwiseFusionPass"])]))
    b = tmp_path / "b.json"
    b.write_text(
        dumps.mode5_json(
            [dumps.OpSpec("y", pass_name_ub="TbeEltwiseFusionPass", fusion_scope=1)]
        )
    )
    assert load_graph(a).rules() == [Rule("TbeEltwiseFusionPass", Section.GRAPH)]
    assert rules_of(load_graphs([a, b])) == [Rule("TbeEltwiseFusionPass", Section.UB)]


def test_load_graphs_prefers_build_dumps_and_expands_globs(tmp_path, dumps):
    (tmp_path / "ge_proto_00000001_graph_1_Build.txt").write_text(dumps.proto_text(dumps.SAMPLE_OPS))
    (tmp_path / "ge_proto_00000001_graph_1_PreRunBegin.txt").write_text("garbage {")
    assert len(load_graphs([tmp_path])) == 1
    assert len(load_graphs([str(tmp_path / "ge_proto_*_Build.txt")])) == 1
    with pytest.raises(UsageError, match="no file matches"):
        load_graphs([str(tmp_path / "nothing_*.txt")])


NAMES = st.sampled_from(
    ["ConvBatchnormFusionPass", "MatMulBiasAddFusionPass", "TbeEltwiseFusionPass", "AutomaticUbFusion"]
)
OPS = st.lists(
    st.tuples(
        st.lists(NAMES, max_size=3),
        st.one_of(st.none(), NAMES),
        st.lists(st.from_regex(r"[a-z][a-z0-9_/]{0,8}", fullmatch=True), max_size=3),
    ),
    max_size=6,
)


@settings(deadline=None, max_examples=30)
@given(OPS)
def test_text_and_json_forms_agree_with_the_section_rule(tmp_path_factory, dumps, raw_ops):
    ops = [
        dumps.OpSpec(f"op{i}", pass_name=chain, pass_name_ub=ub, fusion_scope=i if ub else None, originals=orig)
        for i, (chain, ub, orig) in enumerate(raw_ops)
    ]
    directory = tmp_path_factory.mktemp("dumps")
    text_path = directory / "ge_proto_1_Build.txt"
    text_path.write_text(dumps.proto_text(ops))
    json_path = directory / "model.json"
    json_path.write_text(dumps.mode5_json(ops))
    ub = {op.pass_name_ub for op in ops if op.pass_name_ub}
    expected = {Rule(name, Section.UB) for name in ub} | {
        Rule(name, Section.GRAPH) for op in ops for name in op.pass_name if name not in ub
    }
    for path in (text_path, json_path):
        model = load_graph(path)
        assert set(model.rules()) == expected
        assert [op.original_names for op in model.ops] == [tuple(op.originals) for op in ops]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('graph {\n  name: "g"\n  op {\n    name: 3\n  }\n}\n', 4),
        ('graph {\n  op {\n    name: "a"\n', 3),
        ('graph {\n  op {\n    attr { key: "pass_name" value { list { s: A } } }\n  }\n}\n', 3),
        ('graph {\n  op { name: "a" }\n}\n}\n', 4),
    ],
)
def test_malformed_text_dump_names_file_and_line(tmp_path, text, line):
    path = tmp_path / "ge_proto_00000001_graph_1_Build.txt"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        load_graph(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: ")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"graph": [\n{"op": [}\n]}', ":2: not valid JSON"),
        ('{"graph": {}}', "graph must be an array"),
        ('{"graph": [{"op": [{"attr": {"key": 1}}]}]}', ""),
        ('{"graph": [{"op": [{"attr": [{"value": {}}]}]}]}', "graph[0].op[0].attr[0] must be an object with a string 'key'"),
        ('{"graph": [{"op": [{"attr": [{"key": "pass_name", "value": {"list": {"s": [1]}}}]}]}]}', "attr[pass_name].list.s must be an array of strings"),
        ('{"graph": [{"op": [{"attr": [{"key": "fusion_scope", "value": {"i": "x"}}]}]}]}', "attr[fusion_scope].i must be an integer"),
        ('{"name": "m"}', "no 'graph' key"),
    ],
)
def test_malformed_mode5_json_names_file_and_place(tmp_path, text, expected):
    path = tmp_path / "model.json"
    path.write_text(text)
    if not expected:  # a map-shaped attr (protobuf JSON mapping) is accepted
        assert load_graph(path).ops[0].pass_name == ()
        return
    with pytest.raises(UsageError) as info:
        load_graph(path)
    assert str(info.value).startswith(str(path))
    assert expected in str(info.value)


def test_binary_or_missing_file_is_a_usage_error(tmp_path):
    path = tmp_path / "ge_proto_1.txt"
    path.write_bytes(b"\x08\xff\xfe\x00")
    with pytest.raises(UsageError, match="not a UTF-8 text file"):
        load_graph(path)
    with pytest.raises(UsageError, match="not found"):
        load_graph(tmp_path / "absent.txt")


def test_shipped_proto_matches_the_python_schema():
    proto = (resources.files("fusion_dd") / "data" / "ge_ir.proto").read_text(encoding="utf-8")
    declared = set()
    message_stack: list[str] = []
    for line in proto.splitlines():
        line = line.split("//")[0].strip()
        if match := re.match(r"message (\w+) \{", line):
            message_stack.append(match.group(1))
        elif line == "}" and message_stack:
            message_stack.pop()
        elif match := re.match(r"(repeated )?(map<string, AttrDef>|\w+) (\w+) = (\d+);", line):
            repeated, type_name, name, number = match.groups()
            kind = "map" if type_name.startswith("map") else type_name
            kind = {"ListValue": "AttrDef.ListValue"}.get(kind, kind)
            declared.add((".".join(message_stack), name, int(number), kind, bool(repeated)))
    assert declared == {(m, f, n, t, r) for m, f, n, t, r, _ in FIELDS}
    assert message_class("ModelDef")().DESCRIPTOR.full_name == "ge.proto.ModelDef"
