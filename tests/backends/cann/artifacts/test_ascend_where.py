"""Where each rule acted: fused ops, their layers, UB kernels by fusion_scope."""

from __future__ import annotations

from fusion_dd.backends.cann.artifacts import format_locations, layers, load_graph, rule_locations, ub_kernels, where
from fusion_dd.core.rules import Rule, Section


def test_tdnn_layers_of_graph_and_ub_rules(ascend_fixtures):
    model = load_graph(ascend_fixtures / "tdnn.om.json")
    bn = where(model, "BatchNormBnInferFusionPass")
    assert len(bn) == 7
    assert all(fused.rule == Rule("BatchNormBnInferFusionPass", Section.GRAPH) for fused in bn)
    assert bn[0].original_names[0] == "BatchNormalization_60"
    reduce = where(model, "TbeReduceElemwiseFusionPass")
    assert [fused.rule.section for fused in reduce] == [Section.UB]
    assert layers(reduce) == ["Sub_308", "Mul_309", "ReduceMean_310"]
    dequant = where([model], "TbeFullyconnectionElemwiseDequantFusionPass")
    assert sorted(scope for _, _, scope in ub_kernels(dequant)) == [5, 6]
    locations = rule_locations(model)
    assert len(locations) == 10
    assert {fused.op for fused in locations[Rule("MulSquareFusionPass", Section.GRAPH)]} == {
        "Sub_308Mul_309/SquarePartitionedCall_ReduceMean_310_ReduceMean_163"
    }


def test_written_dump_groups_ub_ops_by_scope_and_maps_chains(tmp_path, dumps):
    path = tmp_path / "ge_proto_00000001_graph_1_Build.txt"
    path.write_text(dumps.proto_text(dumps.SAMPLE_OPS))
    model = load_graph(path)
    locations = rule_locations(model)
    assert list(locations) == [
        Rule("ConvBatchnormFusionPass", Section.GRAPH),
        Rule("ConvScaleFusionPass", Section.GRAPH),
        Rule("MulSquareFusionPass", Section.GRAPH),
        Rule("TbeReduceElemwiseFusionPass", Section.UB),
    ]
    ub_ops = locations[Rule("TbeReduceElemwiseFusionPass", Section.UB)]
    kernels = ub_kernels(ub_ops)
    assert list(kernels) == [(str(path), "test_graph", 7)]
    assert layers(ub_ops) == ["sub1", "mul1", "mean1"]
    # Both passes of the chain produced the conv op.
    assert [f.op for f in locations[Rule("ConvScaleFusionPass", Section.GRAPH)]] == ["conv1_bn"]
    assert where(model, "NoSuchFusionPass") == []
    as_json = ub_ops[0].to_json()
    assert as_json["rule"] == {"name": "TbeReduceElemwiseFusionPass", "section": "UBFusion"}
    assert as_json["fusion_scope"] == 7


def test_text_report_names_layers_types_and_kernels(tmp_path, dumps):
    path = tmp_path / "model.json"
    path.write_text(dumps.mode5_json(dumps.SAMPLE_OPS))
    text = format_locations(rule_locations(load_graph(path)))
    assert "ConvBatchnormFusionPass (GraphFusion): 1 op" in text
    assert "conv1_bn (Conv2D) <- conv1 (Convolution), bn1 (BatchNorm), scale1 (Scale)" in text
    assert "TbeReduceElemwiseFusionPass (UBFusion): 1 UB kernel, 2 ops" in text
    assert "kernel fusion_scope 7" in text
    assert "layers: sub1, mul1, mean1" in text
    missing = format_locations({Rule("X", Section.GRAPH): []})
    assert missing == "X (GraphFusion): did not act in these graphs\n"
    assert format_locations({}) == ""
