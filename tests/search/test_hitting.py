"""The fewest rules that defeat every culprit set: exact search, ties, greedy fallback."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.search.hitting import all_minimum, components, minimum_hitting_set
from tests.search.search_helpers import brute_force_minimum

F = frozenset


def first(candidates):
    return candidates[0]


families = st.lists(st.frozensets(st.integers(0, 7), min_size=1, max_size=4), min_size=1, max_size=7)


@settings(deadline=None, max_examples=300)
@given(sets=families)
def test_the_exact_answer_meets_every_set_and_is_as_small_as_brute_force(sets) -> None:
    result = minimum_hitting_set(sets, range(8), first)
    assert result.exact
    assert all(group & result.rules for group in sets)
    assert len(result.rules) == brute_force_minimum(sets)


@settings(deadline=None, max_examples=200)
@given(sets=families)
def test_every_minimum_is_enumerated_once_for_the_tie_break(sets) -> None:
    from itertools import combinations

    size = brute_force_minimum(sets)
    rules = sorted(F().union(*sets))
    expected = {F(pick) for pick in combinations(rules, size) if all(g & set(pick) for g in sets)}
    found = all_minimum(sets, {r: r for r in range(8)})
    assert found is not None and len(found) == len(set(found)) and set(found) == expected


def test_overlapping_pairs_need_only_the_shared_rule() -> None:
    assert minimum_hitting_set([F("ab"), F("bc")], "abc", first).rules == F("b")


def test_ties_go_to_the_preference_per_component() -> None:
    seen = []

    def prefer(candidates):
        seen.append(list(candidates))
        return candidates[-1]

    result = minimum_hitting_set([F("ab"), F("cd"), F("de")], "abcde", prefer)
    assert result.rules == F("bd") and result.exact
    assert seen == [[F("a"), F("b")]]  # {c,d},{d,e} has one minimum: d


def test_components_group_sets_that_share_rules() -> None:
    assert components([F("ab"), F("cd"), F("bx"), F("y")]) == [[F("ab"), F("bx")], [F("cd")], [F("y")]]


def test_beyond_the_node_limit_greedy_answers_and_says_so() -> None:
    # Every pair of 12 rules: the exact search is big; the answer must still meet every set.
    rules = range(12)
    sets = [F({a, b}) for a in rules for b in rules if a < b]
    result = minimum_hitting_set(sets, rules, first, node_limit=50)
    assert not result.exact and all(group & result.rules for group in sets)
    assert len(result.rules) == 11  # greedy drops redundant rules: here that is the minimum too
    assert minimum_hitting_set(sets, rules, first).exact


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        minimum_hitting_set([F()], "ab", first)
    with pytest.raises(ValueError):
        minimum_hitting_set([F("z")], "ab", first)
