"""Group testing for the independent culprits left after the first one (fusion_dd.search.splitting)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.search import STRATEGIES, find_culprits
from fusion_dd.search.oracle import Outcome
from fusion_dd.testing.simulate import SimulatedOracle, masked_model, or_model, sets_model
import fusion_dd.search.splitting as splitting
from fusion_dd.search.splitting import expected_left, first_wave, group_size, split
from tests.search.search_helpers import fails, is_one_minimal_failing, no_repeats

F = frozenset
bisect = STRATEGIES["bisect"]


class Asker:
    """A tiny oracle for ``split``: a model, every question logged."""

    def __init__(self, model) -> None:
        self.model = model
        self.asked: list[frozenset] = []

    def __call__(self, configs):
        self.asked.extend(configs)
        return [bool(self.model(F(c))) for c in configs]


def run_split(model, rules, clean=0, found=1, width=1):
    asker = Asker(model)
    told: list = []
    result = split(rules, clean, asker, lambda rule, dense: told.append(rule), found=found, width=lambda: width)
    return result, told, asker


def search(model, universe, parallelism=1, repeats=False, **options):
    oracle = SimulatedOracle(model, parallelism=parallelism, repeats=repeats)
    oracle.outcomes([F(), F(universe)])  # the engine's references
    return find_culprits(universe, oracle, bisect, parallelism=parallelism, **options), oracle


def sets_of(result) -> list[list]:
    return sorted(sorted(c.rules) for c in result.culprit_sets)


# -- the pieces ---------------------------------------------------------------------------


def test_group_size_is_hwangs_choice() -> None:
    assert group_size(256, 8) == 16  # 2^floor(log2(249 / 8))
    assert group_size(256, 1) == 256  # one culprit left: the whole rest is one group
    assert group_size(10, 6) == 1  # denser than one in two: ask each rule alone
    assert group_size(7, 0) == 7


def test_the_estimate_is_at_least_one_while_a_failure_is_known_and_never_more_than_the_rules_left() -> None:
    assert expected_left(1, 200, 50, more_known=True) == 1.0
    assert expected_left(1, 200, 50, more_known=False) < 0.25
    assert expected_left(5, 60, 3, more_known=False) <= 3.0
    assert expected_left(2, 2, 30, more_known=False) == 30.0  # every rule examined failed alone


def test_split_finds_every_independent_culprit_and_ends_on_the_passing_fix() -> None:
    rules = list(range(100))
    result, told, asker = run_split(or_model([7, 8, 60, 99]), rules)
    assert result.culprits == told == [7, 8, 60, 99] and result.fix_passes and result.failing is None
    assert F(set(rules) - {7, 8, 60, 99}) in asker.asked  # the fix candidate was its last question
    assert asker.asked[-1] == F(set(rules) - {7, 8, 60, 99})


def test_a_pair_split_across_groups_is_handed_back_as_a_failing_prefix() -> None:
    rules = list(range(64))
    result, told, _ = run_split(sets_model([{3, 50}]), rules)
    assert told == [] and not result.fix_passes
    assert result.failing is not None and {3, 50} <= result.failing and fails(sets_model([{3, 50}]), result.failing)


def test_the_clean_prefix_is_never_asked_about_again() -> None:
    rules = list(range(40))
    result, told, asker = run_split(or_model([30]), rules, clean=20)
    assert told == [30] and result.fix_passes
    assert all(not config or max(config) >= 20 for config in asker.asked)


def test_dense_culprits_are_asked_alone_once_each() -> None:
    rules = list(range(1, 32))  # rule 0 was the first search's culprit
    result, told, asker = run_split(or_model(range(32)), rules, clean=0, found=1, width=4)
    assert told == rules and result.fix_passes
    assert sorted(asker.asked, key=sorted) == sorted((F({r}) for r in rules), key=sorted)


# -- inside find_culprits ------------------------------------------------------------------


@st.composite
def singles(draw):
    n = draw(st.integers(2, 300))
    d = draw(st.integers(2, min(8, n)))
    return n, sorted(draw(st.permutations(list(range(n))))[:d])


@settings(deadline=None, max_examples=60)
@given(case=singles(), parallelism=st.sampled_from([1, 3, 8]))
def test_independent_culprits_are_all_found_for_no_more_than_a_search_each(case, parallelism: int) -> None:
    n, culprits = case
    model = or_model(culprits)
    result, oracle = search(model, list(range(n)), parallelism)
    assert sets_of(result) == [[c] for c in culprits]
    assert all(c.kind == "independent" for c in result.culprit_sets)
    assert result.fix_verified and not fails(model, result.fix) and no_repeats(oracle)
    # A bisection per culprit costs about log2(n) + 2 (boundary, proof, fix candidate): on one
    # device in trainings, on several in rounds. Group testing may pay a few more when the
    # first culprit sits early (the density it suggests is too high, so the groups start small).
    cost = oracle.trainings if parallelism == 1 else oracle.rounds
    assert cost <= 2 + len(culprits) * (math.ceil(math.log2(n)) + 2) + 1 + 3


@st.composite
def structures(draw):
    """Singles, interacting sets and overlapping sets, anywhere in a universe in random order."""
    n = draw(st.integers(4, 90))
    universe = draw(st.permutations(list(range(n))))
    picks = draw(st.permutations(universe))
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    sets, at = [], 0
    for size in sizes:
        if at + size > n:
            break
        sets.append(F(picks[at : at + size]))
        at += size
    if draw(st.booleans()) and len(sets) >= 1 and len(sets[0]) >= 2 and at < n:
        sets.append(F({next(iter(sorted(sets[0]))), picks[at]}))  # overlaps the first set
    return universe, sets or [F({picks[0]})]


@settings(deadline=None, max_examples=80)
@given(case=structures(), parallelism=st.sampled_from([1, 4]))
def test_group_testing_keeps_every_answer_sound_whatever_the_structure(case, parallelism: int) -> None:
    universe, sets = case
    model = sets_model(sets)
    result, oracle = search(model, universe, parallelism)
    before, _ = search(model, universe, parallelism, group_testing=False)
    assert result.fix_verified and not fails(model, result.fix) and no_repeats(oracle)
    for found in result.culprit_sets:
        assert is_one_minimal_failing(model, found.rules)
    if not any(a != b and a & b for a in sets for b in sets):
        # Disjoint sets: the answer is the planted sets, as a search per culprit finds.
        assert sets_of(result) == sorted(map(sorted, sets)) == sets_of(before)
    # The fewest rules off either way (overlaps may hide a set behind a shared rule).
    assert len(universe) - len(result.fix) == len(universe) - len(before.fix)


@pytest.mark.parametrize(
    "sets",
    [
        [{0}, {1}],  # adjacent, first
        [{254}, {255}],  # adjacent, last
        [{0}, {255}],  # first and last
        [{0}, {10, 11, 12, 13}],  # a 4-way AND behind a single
        [{5}, {6, 200}],  # a pair starting right after the single
        [{5}, {100}, {101, 102}, {101, 103}],  # overlapping pairs after two singles
    ],
)
@pytest.mark.parametrize("parallelism", [1, 8])
def test_edge_cases_are_answered_exactly(sets, parallelism: int) -> None:
    model = sets_model(sets)
    result, oracle = search(model, list(range(256)), parallelism)
    assert result.fix_verified and not fails(model, result.fix) and no_repeats(oracle)
    for found in result.culprit_sets:
        assert is_one_minimal_failing(model, found.rules)
    planted = sorted(map(sorted, sets))
    if [101, 102] in planted:
        assert sorted(set(range(256)) - result.fix) == [5, 100, 101]
    else:
        assert sets_of(result) == planted


def test_a_masked_culprit_after_a_single_still_ends_on_a_verified_fix() -> None:
    masked = masked_model(40, 41, 42)
    model = lambda config: 3 in config or masked(config)  # noqa: E731
    result, _ = search(model, list(range(64)))
    assert result.fix_verified and not model(result.fix)
    assert all(is_one_minimal_failing(model, c.rules) for c in result.culprit_sets)


def test_a_clean_run_behind_the_guard_costs_one_training_more_than_without() -> None:
    model = or_model([20, 90, 170])
    plain, bare = search(model, list(range(256)))
    guarded, oracle = search(model, list(range(256)), repeats=True)
    assert sets_of(guarded) == sets_of(plain) and guarded.fix == plain.fix
    assert oracle.trainings == bare.trainings + 1
    assert [key for key in oracle.launched if key[1]] == [(guarded.fix, 1)]


@settings(deadline=None, max_examples=40)
@given(data=st.data(), n=st.integers(4, 64))
def test_with_any_single_flip_a_verified_fix_truly_passes(data, n: int) -> None:
    """The claim the user acts on survives any one flipped training, two culprits planted."""
    culprits = sorted(data.draw(st.permutations(list(range(n))))[:2])
    model = or_model(culprits)
    clean, counted = search(model, list(range(n)), repeats=True)
    k = data.draw(st.integers(0, counted.trainings))
    seen = [0]

    def noise(config, repeat, outcome):
        if config in (F(), F(range(n))):
            return outcome
        seen[0] += 1
        if seen[0] - 1 != k:
            return outcome
        return Outcome.PASS if outcome is Outcome.FAIL else Outcome.FAIL

    oracle = SimulatedOracle(model, noise=noise)
    result = find_culprits(range(n), oracle, bisect)
    if result.fix_verified:
        assert not model(result.fix)


@settings(deadline=None, max_examples=60)
@given(case=singles(), clean=st.integers(0, 40), found=st.integers(1, 3), devices=st.sampled_from([1, 2, 3, 8]))
def test_first_wave_is_what_split_asks_first(case, clean: int, found: int, devices: int) -> None:
    n, culprits = case
    rules = list(range(n))
    clean = min(clean, culprits[0])  # rules[:clean] passes
    asker = Asker(or_model(culprits))
    first: list[list[frozenset]] = []

    def ask(configs):
        if not first:
            first.append([F(c) for c in configs])
        return asker(configs)

    split(rules, clean, ask, lambda rule, dense: None, found=found, width=lambda: devices)
    assert first_wave(rules, clean, found=found, devices=devices) == [c for c in first[0] if c != F(rules)]


@pytest.mark.parametrize("devices", [3, 7, 8, 12])
@pytest.mark.parametrize("culprit", range(40, 47))
def test_a_failing_segment_whose_rules_fit_the_devices_is_settled_in_one_round(culprit: int, devices: int) -> None:
    """Seven rules between a passing and a failing prefix: on seven devices or more, each alone at once."""
    asker = Asker(or_model([culprit]))
    rounds: list[list[frozenset]] = []

    def ask(configs):
        rounds.append([F(c) for c in configs])
        return asker(configs)

    rules = list(range(64))
    found, clean, failing = splitting._boundary(rules, 40, 47, ask, lambda: devices)
    assert found == culprit and failing is None and F(rules[:clean]).isdisjoint({culprit})
    assert (len(rounds) == 1) is (devices >= 7)
    assert all(len(batch) <= devices for batch in rounds)


def test_a_segment_whose_rules_fit_but_none_fails_alone_is_handed_back_failing() -> None:
    asker = Asker(sets_model([{41, 45}]))
    culprit, _, failing = splitting._boundary(list(range(64)), 40, 47, asker, lambda: 8)
    assert culprit is None and failing is not None and {41, 45} <= failing and asker.model(failing)


def test_what_follows_a_rule_asked_alone_rides_along_with_it() -> None:
    """On eight devices, beside the last culprit alone: the fix candidate that follows it, and its repeat."""
    asker = Asker(or_model([5, 50]))
    told: list[list[frozenset]] = []
    announced: list[frozenset] = []
    rules = [rule for rule in range(64) if rule != 5]  # 5 found before, and off
    result = split(
        rules, 6, asker, lambda rule, dense: None, found=1, width=lambda: 8,
        announce=announced.append, ride=lambda configs: told.append(list(configs)), repeats=True,
    )  # fmt: skip
    assert result.culprits == [50] and result.fix_passes
    fix = F(rules) - {50}
    assert any(configs.count(fix) == 2 for configs in told)  # beside {50} alone: the fix, twice
    assert fix in announced


def test_below_three_devices_nothing_rides_along() -> None:
    told: list = []
    split(list(range(6, 64)), 0, Asker(or_model([50])), lambda rule, dense: None, found=1, width=lambda: 2,
          ride=told.append, repeats=True)  # fmt: skip
    assert told == []
