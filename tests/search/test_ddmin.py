"""ddmin against plain-function oracles, including a textbook reference run side by side."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.search.ddmin import ddmin, split
from fusion_dd.search.oracle import BudgetExhausted, Outcome
from fusion_dd.testing.simulate import SimulatedOracle, and_model, or_model, sets_model
from tests.search.search_helpers import is_one_minimal_failing, no_repeats, random_predicate

F = frozenset


def textbook_ddmin(test, c: list, n: int = 2) -> list:
    """Zeller & Hildebrandt's recursive ddmin2, written from the paper's definition."""
    if len(c) < 2:
        return c
    chunks = split(c, n)
    for chunk in chunks:
        if test(chunk):
            return textbook_ddmin(test, chunk, 2)
    if n > 2:
        for chunk in chunks:
            complement = [x for x in c if x not in chunk]
            if test(complement):
                return textbook_ddmin(test, complement, max(n - 1, 2))
    if n < len(c):
        return textbook_ddmin(test, c, min(2 * n, len(c)))
    return c


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 100, 1024])
def test_single_culprit_every_size(n: int) -> None:
    for culprit in {0, n // 2, n - 1}:
        oracle = SimulatedOracle(or_model([culprit]))
        assert ddmin(range(n), oracle) == F({culprit})
        assert no_repeats(oracle)
        assert F(range(n)) not in oracle.calls and F() not in oracle.calls


@pytest.mark.parametrize("n", [2, 5, 64, 1024])
@pytest.mark.parametrize("size", [2, 3])
def test_interacting_pairs_and_triples(n: int, size: int) -> None:
    if size > n:
        pytest.skip("not enough rules")
    rng = random.Random(n * 10 + size)
    culprits = rng.sample(range(n), size)
    oracle = SimulatedOracle(and_model(culprits))
    assert ddmin(list(range(n)), oracle) == F(culprits)
    assert no_repeats(oracle)


@settings(deadline=None, max_examples=60)
@given(data=st.data(), n=st.integers(1, 48))
def test_matches_the_textbook_definition_question_by_question(data, n: int) -> None:
    universe = data.draw(st.permutations(list(range(n))))
    sets = data.draw(
        st.lists(st.sets(st.sampled_from(universe), min_size=1, max_size=3), min_size=1, max_size=3)
    )
    model = sets_model(sets)
    asked: list[frozenset] = []
    cache: dict[frozenset, bool] = {}

    def test(config) -> bool:
        key = F(config)
        if key not in cache:
            asked.append(key)
            cache[key] = model(key)
        return cache[key]

    oracle = SimulatedOracle(model)
    result = ddmin(universe, oracle)
    assert result == F(textbook_ddmin(test, universe))
    assert oracle.calls == asked
    assert is_one_minimal_failing(model, result)
    assert no_repeats(oracle)


@settings(deadline=None, max_examples=60)
@given(data=st.data(), n=st.integers(2, 40), size=st.integers(1, 4))
def test_and_model_finds_exactly_the_planted_set(data, n: int, size: int) -> None:
    universe = data.draw(st.permutations(list(range(n))))
    culprits = data.draw(st.sets(st.sampled_from(universe), min_size=min(size, n), max_size=min(size, n)))
    oracle = SimulatedOracle(and_model(culprits))
    assert ddmin(universe, oracle) == F(culprits)


@settings(deadline=None, max_examples=40)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 24))
def test_any_predicate_gives_a_one_minimal_failing_set(seed: int, n: int) -> None:
    model = random_predicate(seed, F(range(n)))
    result = ddmin(range(n), SimulatedOracle(model))
    assert is_one_minimal_failing(model, result)


def test_starts_from_a_given_failing_subset_without_retesting_it() -> None:
    oracle = SimulatedOracle(or_model([3, 9]))
    start = F({9, 10, 11, 12})
    assert ddmin(range(16), oracle, start) == F({9})
    assert start not in oracle.calls
    with pytest.raises(ValueError):
        ddmin(range(4), oracle, F({99}))


def test_unresolved_counts_as_not_failing() -> None:
    def model(config):
        if 5 in config and len(config) < 4:
            return Outcome.UNRESOLVED  # e.g. the network does not compile without its neighbours
        return 5 in config and 6 in config

    result = ddmin(range(8), SimulatedOracle(model))
    assert 5 in result and 6 in result and len(result) >= 4


def test_budget_exhaustion_propagates_with_the_smallest_failure() -> None:
    oracle = SimulatedOracle(or_model([77]), budget=4)
    with pytest.raises(BudgetExhausted) as caught:
        ddmin(range(256), oracle)
    assert 77 in caught.value.smallest_failing
