"""Other minimum fixes and the fastest passing one (fusion_dd/search/alternatives.py)."""

from __future__ import annotations

from fusion_dd.search.alternatives import fastest, minimum_hitting_sets

CD = frozenset({"C", "D"})


def test_an_interacting_pair_has_one_other_fix() -> None:
    assert minimum_hitting_sets([CD], frozenset({"C"}), limit=3) == [frozenset({"D"})]


def test_every_culprit_set_is_hit_and_none_is_larger_than_the_chosen_fix() -> None:
    sets = [frozenset({"A"}), CD, frozenset({"E", "F", "G"})]
    found = minimum_hitting_sets(sets, frozenset({"A", "C", "E"}), limit=10)
    assert len(found) == 5 and frozenset({"A", "C", "E"}) not in found
    assert all(len(fix) == 3 and all(fix & culprit for culprit in sets) for fix in found)
    assert found == sorted(found, key=lambda fix: sorted(fix))  # name order: deterministic
    assert minimum_hitting_sets(sets, frozenset({"A", "C", "E"}), limit=2) == found[:2]


def test_a_shared_rule_is_the_only_minimum_fix() -> None:
    assert minimum_hitting_sets([frozenset({"A", "B"}), frozenset({"B", "C"})], frozenset({"B"}), limit=3) == []
    assert minimum_hitting_sets([], frozenset(), limit=3) == [] and minimum_hitting_sets([CD], frozenset("C"), 0) == []


def test_the_fastest_passing_fix_wins_and_the_chosen_one_keeps_ties_and_unknowns() -> None:
    c, d, e = frozenset("C"), frozenset("D"), frozenset("E")
    assert fastest(c, 80.0, [(d, True, 98.0)]) == d
    assert fastest(c, 80.0, [(d, False, 99.0), (e, True, 90.0)]) == e  # a failing fix is never handed over
    assert fastest(c, 98.0, [(d, True, 98.0)]) == c
    assert fastest(c, None, [(d, True, 98.0)]) == c and fastest(c, 80.0, [(d, True, None)]) == c
