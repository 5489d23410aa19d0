"""AutoFuse switch points: AUTOFUSE_FLAGS for every configuration, the user's own flags kept."""

from __future__ import annotations

import itertools

import pytest

from fusion_dd.backends.cann import CannBackend
from fusion_dd.backends.cann.autofuse import parse_flags, realize, render_flags, user_enables_autofuse
from fusion_dd.core.rules import Rule, Section

ELEMWISE, REDUCE, CONCAT = (Rule(name, Section.AUTOFUSE) for name in ("elemwise", "reduce", "concat"))
GRAPH = Rule("ConvToFullyConnectionFusionPass", Section.GRAPH)
POINTS = [ELEMWISE, REDUCE, CONCAT]


def lists(flags: str) -> tuple[bool, set[str], set[str]]:
    items = parse_flags(flags)
    enable = {v for v in items.get("--autofuse_enable_pass", "").split(",") if v}
    disable = {v for v in items.get("--autofuse_disable_pass", "").split(",") if v}
    return items.get("--enable_autofuse") == "true", enable, disable


@pytest.mark.parametrize("on", [set(c) for n in range(4) for c in itertools.combinations(POINTS, n)])
def test_every_configuration_of_the_three_points(on: set[Rule]) -> None:
    enabled, enable, disable = lists(render_flags(POINTS + [GRAPH], on | {GRAPH}, None))
    assert enabled == (ELEMWISE in on)
    assert enable == {r.name for r in on if r is not ELEMWISE}
    assert disable == {r.name for r in (REDUCE, CONCAT) if r not in on}
    assert not enable & disable
    realized = realize(POINTS, on, None)
    assert realized == (on if ELEMWISE in on else on - {REDUCE, CONCAT})  # CANN ignores them with AutoFuse off


def test_the_users_flags_are_kept_and_ours_win() -> None:
    user = "--enable_autofuse=true;--autofuse_enable_pass=reduce,concat;--autofuse_dfx=1;--other=x"
    flags = render_flags([REDUCE], [], user)  # only reduce is a candidate, switched off
    items = parse_flags(flags)
    assert items["--enable_autofuse"] == "true"  # not a candidate: the user's value
    assert items["--autofuse_enable_pass"] == "concat" and items["--autofuse_disable_pass"] == "reduce"
    assert items["--autofuse_dfx"] == "1" and items["--other"] == "x"
    assert list(items)[:1] == ["--enable_autofuse"]  # the user's order stays
    # With elemwise no candidate, the user's switch decides whether reduce can work at all.
    assert realize([REDUCE], [REDUCE], user) == {REDUCE}
    assert realize([REDUCE], [REDUCE], "--enable_autofuse=false") == frozenset()
    assert user_enables_autofuse(user) and not user_enables_autofuse(None)


def test_no_point_among_the_candidates_leaves_autofuse_flags_alone() -> None:
    assert render_flags([GRAPH], [GRAPH], "--enable_autofuse=true") is None
    assert CannBackend(user_env={"AUTOFUSE_FLAGS": "--x=1"}).render([GRAPH], []).env == {}
    rendered = CannBackend(user_env={"AUTOFUSE_FLAGS": "--x=1"}).render([GRAPH, ELEMWISE], [ELEMWISE])
    assert rendered.env == {"AUTOFUSE_FLAGS": "--x=1;--enable_autofuse=true"}
    assert "elemwise" not in rendered.switch_text  # AutoFuse never goes into fusion_switch.cfg


def test_the_pair_elemwise_reduce_switches_off_reduce_and_says_why() -> None:
    rule, reason = CannBackend().chooser({})(frozenset({ELEMWISE, REDUCE}))
    assert rule == REDUCE
    assert "works only with AutoFuse on" in reason
