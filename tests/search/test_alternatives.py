"""Other minimum fixes and the fastest passing one (fusion_dd/search/alternatives.py)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

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


def _every_combination(sets: list[frozenset[int]], chosen: frozenset[int], limit: int) -> list[frozenset[int]]:
    """The definition, tried combination by combination: the oracle for small cases."""
    rules = sorted({rule for culprit in sets for rule in culprit}, key=str)
    found = []
    for combination in itertools.combinations(rules, len(chosen)):
        candidate = frozenset(combination)
        if candidate != chosen and all(candidate & culprit for culprit in sets):
            found.append(candidate)
            if len(found) >= limit:
                break
    return found


@given(
    st.lists(st.frozensets(st.integers(0, 11), min_size=1, max_size=3), min_size=1, max_size=5),
    st.frozensets(st.integers(0, 11), max_size=5),
    st.integers(1, 6),
)
def test_the_same_fixes_in_the_same_order_as_every_combination_tried(
    sets: list[frozenset[int]], chosen: frozenset[int], limit: int
) -> None:
    assert minimum_hitting_sets(sets, chosen, limit) == _every_combination(sets, chosen, limit)


def test_alternatives_of_a_large_fix_are_found_where_trying_combinations_in_order_finds_none() -> None:
    # 60 lone culprits and 20 pairs: a fix of 80 rules among 100. The first hundred
    # thousand combinations in name order all leave some lone culprit on.
    names = [f"r{number:03d}" for number in range(100)]
    sets = [frozenset([name]) for name in names[:60]] + [frozenset(names[i : i + 2]) for i in range(60, 100, 2)]
    chosen = frozenset(names[:60] + names[60::2])
    found = minimum_hitting_sets(sets, chosen, limit=3)
    assert [sorted(fix - chosen) for fix in found] == [["r099"], ["r097"], ["r097", "r099"]]
    assert all(len(fix) == 80 and all(fix & culprit for culprit in sets) for fix in found)


def test_a_fix_of_more_rules_than_the_recursion_limit_is_walked() -> None:
    sets = [frozenset([number]) for number in range(3000)]
    assert minimum_hitting_sets(sets, frozenset(range(3000)), limit=3) == []


def test_the_fastest_passing_fix_wins_and_the_chosen_one_keeps_ties_and_unknowns() -> None:
    c, d, e = frozenset("C"), frozenset("D"), frozenset("E")
    assert fastest(c, 80.0, [(d, True, 98.0)]) == d
    assert fastest(c, 80.0, [(d, False, 99.0), (e, True, 90.0)]) == e  # a failing fix is never handed over
    assert fastest(c, 98.0, [(d, True, 98.0)]) == c
    assert fastest(c, None, [(d, True, 98.0)]) == c and fastest(c, 80.0, [(d, True, None)]) == c
