"""Pairing by original op names for every relation kind, on test-made graphs."""

from __future__ import annotations

from fusion_dd.backends.cann.artifacts.graph import GraphModel, GraphOp
from fusion_dd.compare.pairing import pair_tensors
from fusion_dd.compare.sources import DumpedTensor


def _t(op: str, index: int = 0, order: int = 0, origin: tuple[str, int] | None = None) -> DumpedTensor:
    return DumpedTensor(op=op, op_type="T", index=index, source=f"{op}.{index}", order=(order, op), origin=origin)


def _graph(*ops: GraphOp) -> GraphModel:
    return GraphModel(source="g", name="g", graphs=("g",), ops=ops)


def _op(name: str, originals: tuple[str, ...] = (), origins: tuple = (), inputs: tuple[str, ...] = (), rule: str = "P") -> GraphOp:
    return GraphOp(
        name=name, type="Fused" if originals else "T", graph="g",
        pass_name=(rule,) if originals else (), original_names=originals, output_origins=origins, inputs=inputs,
    )  # fmt: skip


def _pairs(pairing) -> dict[str, tuple[str, int, str]]:
    return {f"{p.on.op}:{p.on.index}": (p.off.op, p.off.index, p.relation) for p in pairing.pairs}


def test_one_to_one() -> None:
    graph = _graph(_op("conv", ("conv_orig",), (("conv_orig", 0),)))
    pairing = pair_tensors([_t("conv")], [_t("conv_orig"), _t("other")], graph)
    assert _pairs(pairing) == {"conv:0": ("conv_orig", 0, "one-to-one")}
    assert pairing.pairs[0].rules == ("P",) and pairing.pairs[0].layers == ("conv_orig",)


def test_many_to_one_compares_the_output_the_origin_names() -> None:
    graph = _graph(_op("bn1/fused", ("bn1/bn", "bn1/relu"), (("bn1/relu", 0),)))
    pairing = pair_tensors([_t("bn1/fused")], [_t("bn1/bn"), _t("bn1/relu")], graph)
    assert _pairs(pairing) == {"bn1/fused:0": ("bn1/relu", 0, "many-to-one")}
    assert pairing.pairs[0].layers == ("bn1/bn", "bn1/relu")
    assert pairing.unpaired_off == ["bn1/bn:0"]


def test_one_to_many_each_output_with_its_own_origin() -> None:
    graph = _graph(
        _op("split/part0", ("split",), (("split", 0),)),
        _op("split/part1", ("split",), (("split", 1),)),
    )
    pairing = pair_tensors([_t("split/part0"), _t("split/part1", order=1)], [_t("split", 0), _t("split", 1)], graph)
    assert _pairs(pairing) == {
        "split/part0:0": ("split", 0, "one-to-many"),
        "split/part1:0": ("split", 1, "one-to-many"),
    }


def test_many_to_many_skips_inner_ops_without_origin() -> None:
    graph = _graph(
        _op("k/inner", ("a", "b"), (None,)),
        _op("k/out1", ("a", "b"), (("b", 0),), inputs=("k/inner:0",)),
        _op("k/out2", ("a", "b", "c"), (("c", 0),), inputs=("k/out1:0",)),
    )
    on = [_t("k/out2", order=0), _t("k/inner", order=1), _t("k/out1", order=2)]
    pairing = pair_tensors(on, [_t("a"), _t("b"), _t("c")], graph)
    assert _pairs(pairing) == {"k/out1:0": ("b", 0, "many-to-many"), "k/out2:0": ("c", 0, "many-to-many")}
    assert [p.on.op for p in pairing.pairs] == ["k/out1", "k/out2"]  # topological, not dump order
    assert pairing.skipped_inner == 1


def test_origins_in_the_dump_header_pair_without_graphs() -> None:
    pairing = pair_tensors([_t("fused_7", origin=("relu", 0))], [_t("relu")])
    assert _pairs(pairing) == {"fused_7:0": ("relu", 0, "by origin")}
    assert pairing.pairs[0].layers == ("relu",)


def test_without_graphs_or_origins_pairs_by_op_name_in_dump_order() -> None:
    pairing = pair_tensors([_t("b", order=2), _t("a", order=1)], [_t("a"), _t("b")])
    assert [(p.on.op, p.off.op, p.relation) for p in pairing.pairs] == [("a", "a", "by name"), ("b", "b", "by name")]


def test_off_side_fused_op_is_found_through_its_origin() -> None:
    graph_off = _graph(_op("off_kernel", ("x", "y"), (("y", 0),)))
    pairing = pair_tensors([_t("y")], [_t("off_kernel")], None, graph_off)
    assert _pairs(pairing) == {"y:0": ("off_kernel", 0, "by name")}


def test_no_counterpart_and_duplicates_are_problems() -> None:
    pairing = pair_tensors([_t("a"), _t("a", order=5), _t("lonely")], [_t("a")])
    reasons = sorted(p.reason.split(" (")[0] for p in pairing.problems)
    assert any("dumped twice" in r for r in reasons)
    assert any(r.startswith("no counterpart in the fusion-off dump") for r in reasons)
    assert [p.on.op for p in pairing.pairs] == ["a"]


def test_a_graph_of_another_model_is_reported_once() -> None:
    graph = _graph(_op("something_else"))
    pairing = pair_tensors([_t("a"), _t("b")], [_t("a"), _t("b")], graph)
    assert len(pairing.pairs) == 2
    assert [p.reason.split(":")[0] for p in pairing.problems] == ["graph does not match the dump"]
