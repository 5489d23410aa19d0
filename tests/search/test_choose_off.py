"""Which rule of an interacting set is switched off: the one whose loss costs the least fusion."""

from fusion_dd.core.rules import Rule, Section
from fusion_dd.search.choose_off import choose_off_by_effect, default_choose_off

CAST = Rule("CastRemoveFusionPass", Section.GRAPH)
VAR = Rule("ZReduceMeanVarianceFusionPass", Section.GRAPH)
ELTWISE = Rule("TbeEltwiseFusionPass", Section.UB)


def test_the_rule_that_fused_fewest_places_is_switched_off():
    choose = choose_off_by_effect({CAST: 12, VAR: 2})
    rule, reason = choose(frozenset({CAST, VAR}))
    assert rule == VAR
    assert "fewest places" in reason and "CastRemoveFusionPass (12)" in reason


def test_ties_and_missing_counts_fall_back_to_the_default_choice():
    pair = frozenset({CAST, ELTWISE})
    assert choose_off_by_effect({CAST: 3, ELTWISE: 3})(pair) == default_choose_off(pair)
    assert choose_off_by_effect({CAST: 3})(pair) == default_choose_off(pair)


def test_a_tie_among_the_fewest_is_broken_by_the_default_preference():
    rule, _ = choose_off_by_effect({CAST: 1, ELTWISE: 1, VAR: 5})(frozenset({CAST, ELTWISE, VAR}))
    assert rule == default_choose_off(frozenset({CAST, ELTWISE}))[0]
