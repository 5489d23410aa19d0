"""The all-culprits layer around every registered strategy."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.backends.cann import CannBackend
from fusion_dd.core.rules import Rule, Section
from fusion_dd.search import STRATEGIES, default_choose_off, find_culprits
from fusion_dd.testing.simulate import (
    SimulatedOracle,
    and_model,
    any_of,
    masked_model,
    or_model,
    sets_model,
)
from tests.search.search_helpers import brute_force_minimum, fails, is_one_minimal_failing, no_repeats, random_predicate

F = frozenset
STRATEGY_NAMES = sorted(STRATEGIES)


@st.composite
def planted(draw):
    """A universe in random order with disjoint culprit structures: OR, AND or mixed."""
    n = draw(st.integers(1, 120))
    universe = draw(st.permutations(list(range(n))))
    shape = draw(st.sampled_from(["or", "and", "mixed"]))
    sizes = {
        "or": draw(st.lists(st.just(1), min_size=1, max_size=3)),
        "and": [draw(st.integers(1, 4))],
        "mixed": [1] + draw(st.lists(st.integers(2, 3), min_size=1, max_size=2)),
    }[shape]
    sizes = [s for s in sizes]
    while sum(sizes) > n:
        sizes.pop()
    if not sizes:
        sizes = [1]
    picks = iter(draw(st.permutations(universe))[: sum(sizes)])
    sets = [F(next(picks) for _ in range(size)) for size in sizes]
    return universe, sets


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@pytest.mark.parametrize("parallelism", [1, 4])
@settings(deadline=None, max_examples=40)
@given(case=planted())
def test_finds_exactly_the_planted_sets_and_a_verified_fix(case, name: str, parallelism: int) -> None:
    universe, sets = case
    model = sets_model(sets)
    oracle = SimulatedOracle(model, parallelism=parallelism)
    # The engine's references: the layer may consult the universe's (when a planted
    # set is the whole universe, nothing else shows it fails), never re-train them.
    oracle.outcomes([F(), F(universe)])
    result = find_culprits(universe, oracle, STRATEGIES[name], parallelism=parallelism)
    assert sorted(map(sorted, (c.rules for c in result.culprit_sets))) == sorted(map(sorted, sets))
    for found in result.culprit_sets:
        assert is_one_minimal_failing(model, found.rules)
        assert found.kind == ("independent" if len(found.rules) == 1 else "interacting")
        assert len(found.switched_off) == 1 and found.switched_off <= found.rules and found.reason
    assert result.fix_verified and not result.exhausted and not fails(model, result.fix)
    assert result.fix == F(universe) - F().union(*(c.switched_off for c in result.culprit_sets))
    assert no_repeats(oracle)  # the references included: asked again at most from the cache


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@settings(deadline=None, max_examples=30)
@given(data=st.data(), n=st.integers(6, 80), count=st.integers(1, 2))
def test_non_monotone_masking(data, name: str, n: int, count: int) -> None:
    picks = data.draw(st.permutations(list(range(n))))[: 3 * count]
    model = any_of(*(masked_model(*picks[3 * i : 3 * i + 3]) for i in range(count)))
    oracle = SimulatedOracle(model)
    result = find_culprits(range(n), oracle, STRATEGIES[name])
    assert result.culprit_sets
    for found in result.culprit_sets:
        assert is_one_minimal_failing(model, found.rules)
    assert result.fix_verified and not fails(model, result.fix)
    assert no_repeats(oracle)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@settings(deadline=None, max_examples=30)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 14))
def test_arbitrary_predicates_terminate_with_verified_sets(seed: int, n: int, name: str) -> None:
    model = random_predicate(seed, F(range(n)), density=0.7)
    oracle = SimulatedOracle(model)
    result = find_culprits(range(n), oracle, STRATEGIES[name])
    # Each round finds a set no earlier set is inside; the switched-off set may shrink
    # while it stays a minimum hitting set, so up to n rounds, then it only grows.
    assert 1 <= len(result.culprit_sets) <= 2 * n
    for found in result.culprit_sets:
        assert is_one_minimal_failing(model, found.rules)
    assert result.fix_verified == (not fails(model, result.fix))
    assert result.fix_verified  # switching off rules one by one ends at the passing empty set at worst


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_budget_exhaustion_returns_a_partial_result(name: str) -> None:
    model = or_model([10, 100, 200])
    full = SimulatedOracle(model)
    find_culprits(range(256), full, STRATEGIES[name])
    oracle = SimulatedOracle(model, budget=full.trainings - 3)
    result = find_culprits(range(256), oracle, STRATEGIES[name])
    assert result.exhausted and not result.fix_verified
    assert 1 <= len(result.culprit_sets) < 3
    assert result.smallest_failing is not None and fails(model, result.smallest_failing)
    assert len(result.smallest_failing) == 1

    nothing = find_culprits(range(256), SimulatedOracle(model, budget=0), STRATEGIES[name])
    assert nothing.exhausted and nothing.culprit_sets == [] and nothing.fix == F(range(256))


def test_interacting_set_switches_off_one_rule_chosen_by_the_callback() -> None:
    calls = []

    def choose(rules):
        calls.append(rules)
        rule = max(rules)
        return rule, f"{rule} is the newest pass"

    oracle = SimulatedOracle(and_model([3, 7, 11]))
    result = find_culprits(range(16), oracle, STRATEGIES["bisect"], choose_off=choose)
    (found,) = result.culprit_sets
    assert calls == [F({3, 7, 11})]
    assert found.switched_off == F({11}) and found.reason == "11 is the newest pass"
    assert result.fix == F(range(16)) - {11} and result.fix_verified

    with pytest.raises(ValueError):
        find_culprits(range(16), SimulatedOracle(and_model([3, 7])), STRATEGIES["bisect"], choose_off=lambda r: (99, "x"))


def test_default_choice_is_the_first_by_name_and_knows_no_compiler() -> None:
    """The UBFusion preference is the CANN backend's (tests/backends/test_cann.py), not the search layer's."""
    graph = Rule("ConvBatchnormFusionPass", Section.GRAPH)
    ub = Rule("TbeEltwiseFusionPass", Section.UB)
    rule, reason = default_choose_off(F({graph, ub}))
    assert rule == graph
    assert "TbeEltwiseFusionPass" in reason and "first by name" in reason and "UBFusion" not in reason
    same = default_choose_off(F({Rule("BPass", Section.GRAPH), Rule("APass", Section.GRAPH)}))
    assert same[0].name == "APass"
    assert default_choose_off(F({"b", "a"}))[0] == "a"


def test_rules_as_elements_end_to_end() -> None:
    rules = [Rule(f"Pass{i:02d}", Section.UB if i % 2 else Section.GRAPH) for i in range(20)]
    culprit_pair = F({rules[4], rules[9]})
    oracle = SimulatedOracle(any_of(or_model([rules[15]]), sets_model([culprit_pair])), parallelism=2)
    result = find_culprits(rules, oracle, STRATEGIES["bisect"], parallelism=2, choose_off=CannBackend().chooser({}))
    kinds = {c.rules: c.kind for c in result.culprit_sets}
    assert kinds == {F({rules[15]}): "independent", culprit_pair: "interacting"}
    assert rules[9] not in result.fix and rules[4] in result.fix  # CANN's chooser: the UB rule of the pair goes
    assert result.fix_verified and result.fix_outcome is not None


def test_every_rule_a_culprit_uses_the_known_passing_empty_set() -> None:
    oracle = SimulatedOracle(or_model([0]))
    oracle.outcomes([F(), F([0])])  # the engine's references
    result = find_culprits([0], oracle, STRATEGIES["ddmin"])
    assert result.fix == F() and result.fix_verified and oracle.trainings == 2


def test_later_searches_are_told_what_earlier_ones_learnt() -> None:
    seen = []

    def strategy(universe, oracle, failing=None, *, parallelism=1, known=None, masks=None):
        seen.append(dict(known))
        return STRATEGIES["bisect"](universe, oracle, failing, parallelism=parallelism, known=known, masks=masks)

    oracle = SimulatedOracle(or_model([10, 100, 200]))
    result = find_culprits(range(256), oracle, strategy)
    assert len(result.culprit_sets) == 3 and result.fix_verified
    assert seen[0] == {} and len(seen[1]) > len(seen[0]) and len(seen[2]) > len(seen[1])
    assert all(seen[2][c] == (c & {10, 100, 200} != set()) for c in seen[2])
    assert no_repeats(oracle)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@pytest.mark.parametrize("parallelism", [1, 3])
def test_resume_by_replay_against_the_cache_repeats_no_training(name: str, parallelism: int) -> None:
    model = any_of(or_model([7, 90]), sets_model([{30, 31}]))
    full = SimulatedOracle(model, parallelism=parallelism)
    expected = find_culprits(range(128), full, STRATEGIES[name], parallelism=parallelism)

    for stop_after in (1, full.trainings // 2, full.trainings - 1):
        first = SimulatedOracle(model, parallelism=parallelism, budget=stop_after)
        assert find_culprits(range(128), first, STRATEGIES[name], parallelism=parallelism).exhausted
        resumed = SimulatedOracle(model, parallelism=parallelism)
        resumed.cache.update(first.cache)  # what the journal remembers
        result = find_culprits(range(128), resumed, STRATEGIES[name], parallelism=parallelism)
        assert result == expected
        assert not set(first.calls) & set(resumed.calls)
        if parallelism == 1:
            assert first.calls + resumed.calls == full.calls
        # With several devices a wave cut short by the budget is relaunched with
        # the next configurations filling the free devices, so a few more may run.


# --- overlapping culprit sets: the fewest rules switched off ----------------------------


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@pytest.mark.parametrize("parallelism", [1, 4])
def test_overlapping_pairs_switch_off_only_the_shared_rule_and_report_both(name: str, parallelism: int) -> None:
    oracle = SimulatedOracle(sets_model([{3, 5}, {5, 9}]), parallelism=parallelism)
    result = find_culprits(range(16), oracle, STRATEGIES[name], parallelism=parallelism)
    assert sorted(sorted(c.rules) for c in result.culprit_sets) == [[3, 5], [5, 9]]
    assert result.fix == F(range(16)) - {5} and result.fix_verified
    assert [c.switched_off for c in result.culprit_sets] == [F({5}), F({5})]
    assert all("also defeats" in c.reason for c in result.culprit_sets)
    assert result.hitting_set == "exact" and result.may_hide == F({5})
    assert no_repeats(oracle)


@st.composite
def overlapping(draw):
    """A tiny universe in random order and a few planted sets that may share rules."""
    n = draw(st.integers(2, 7))
    universe = draw(st.permutations(list(range(n))))
    sets = draw(st.lists(st.frozensets(st.sampled_from(universe), min_size=1, max_size=3), min_size=1, max_size=4))
    return universe, sets


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@settings(deadline=None, max_examples=150)
@given(case=overlapping())
def test_the_fix_switches_off_a_minimum_hitting_set(case, name: str) -> None:
    universe, planted_sets = case
    model = sets_model(planted_sets)
    oracle = SimulatedOracle(model)
    oracle.outcomes([F(), F(universe)])  # the engine's references
    result = find_culprits(universe, oracle, STRATEGIES[name])
    found = [c.rules for c in result.culprit_sets]
    off = F(universe) - result.fix
    assert result.fix_verified and not fails(model, result.fix) and result.hitting_set == "exact"
    assert all(rules & off for rules in found)  # every found set is defeated
    assert len(off) == brute_force_minimum(found)  # by the fewest rules...
    assert len(off) == brute_force_minimum(planted_sets)  # ...which are the fewest for every planted set too
    assert all(c.switched_off == c.rules & off and c.reason for c in result.culprit_sets)
    assert result.may_hide == F(rule for rule in off if F({rule}) not in found)
    assert no_repeats(oracle)


def test_hitting_set_ties_follow_the_chooser() -> None:
    # {3, 7} and {11, 12} are independent pairs: each keeps today's chooser's choice.
    choose = lambda rules: (max(rules), "the newest")  # noqa: E731
    oracle = SimulatedOracle(sets_model([{3, 7}, {11, 12}]))
    result = find_culprits(range(16), oracle, STRATEGIES["bisect"], choose_off=choose)
    assert F(range(16)) - result.fix == F({7, 12})
    assert [c.reason for c in result.culprit_sets] == ["the newest", "the newest"]


# --- degenerate inputs: nothing fails, everything fails -------------------------------


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@pytest.mark.parametrize("parallelism", [1, 4])
@pytest.mark.parametrize("n", [1, 2, 16, 256])
@pytest.mark.parametrize("repeats", [False, True], ids=["plain", "noise-guarded"])
def test_a_universe_that_does_not_fail_is_reported_as_such(name: str, parallelism: int, n: int, repeats: bool) -> None:
    # Behind the noise guard (which takes the universe's failure as given) the
    # universe is asked all the same, and refused only by a majority of three.
    oracle = SimulatedOracle(lambda config: False, parallelism=parallelism, repeats=repeats)
    result = find_culprits(range(n), oracle, STRATEGIES[name], parallelism=parallelism)
    assert result.no_failure and result.culprit_sets == [] and not result.fix_verified
    assert result.fix == F(range(n)) and result.fix_outcome is not None and result.fix_outcome.value == "pass"
    assert F(range(n)) in oracle.calls  # the universe itself was asked
    assert oracle.trainings <= 3 * math.ceil(math.log2(n + 1)) + 4 * parallelism


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@pytest.mark.parametrize("parallelism", [1, 4])
@pytest.mark.parametrize("n", [1, 2, 3, 8, 64, 256])
def test_every_rule_failing_alone_costs_at_most_two_trainings_per_rule(name: str, parallelism: int, n: int) -> None:
    oracle = SimulatedOracle(or_model(range(n)), parallelism=parallelism)
    oracle.outcomes([F(), F(range(n))])  # the two references count, as in bench_search
    result = find_culprits(range(n), oracle, STRATEGIES[name], parallelism=parallelism)
    assert sorted(c.rules for c in result.culprit_sets) == sorted(F({r}) for r in range(n))
    assert result.fix == F() and result.fix_verified and not result.may_hide
    assert oracle.trainings <= 2 * n + 2
    if parallelism > 1 and n >= 64:
        assert oracle.rounds <= n // 2  # the devices share the singles


def rounds_of(model, n: int, parallelism: int, **options) -> tuple:
    """The search behind a guard without noise, after the references' round: (result, oracle)."""
    oracle = SimulatedOracle(model, parallelism=parallelism, repeats=True)
    oracle.outcomes([F(), F(range(n))])
    return find_culprits(list(range(n)), oracle, STRATEGIES["bisect"], parallelism=parallelism, **options), oracle


@pytest.mark.parametrize("culprit", [0, 57, 128, 220, 255])
def test_on_sixteen_devices_one_culprit_and_its_verified_fix_take_three_rounds_after_the_references(culprit: int) -> None:
    result, oracle = rounds_of(or_model([culprit]), 256, 16)
    assert [sorted(c.rules) for c in result.culprit_sets] == [[culprit]] and result.fix_verified
    assert oracle.rounds == 4


class Waves(SimulatedOracle):
    """Logs each round's trainings."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.waves: list[list] = []

    def _run_wave(self, wave) -> None:
        self.waves.append(list(wave))
        super()._run_wave(wave)


@pytest.mark.parametrize("parallelism,culprits", [(3, [220]), (3, [18, 92, 243]), (8, [18, 92, 243])])
def test_a_fix_candidate_and_its_repeat_share_a_round(parallelism: int, culprits: list) -> None:
    oracle = Waves(or_model(culprits), parallelism=parallelism, repeats=True)
    oracle.outcomes([F(), F(range(256))])
    result = find_culprits(list(range(256)), oracle, STRATEGIES["bisect"], parallelism=parallelism)
    assert result.fix_verified and sorted(next(iter(c.rules)) for c in result.culprit_sets) == culprits
    assert any({(result.fix, 0), (result.fix, 1)} <= set(wave) for wave in oracle.waves)


def test_on_eight_devices_one_culprit_takes_at_most_five_rounds() -> None:
    """The references, three rounds of prefixes (the last asks the rules alone), the fix's repeat."""
    for culprit in range(0, 256, 13):
        result, oracle = rounds_of(or_model([culprit]), 256, 8)
        assert result.fix_verified and oracle.rounds <= 5


@pytest.mark.parametrize("parallelism", [1, 2])
@settings(deadline=None, max_examples=20)
@given(case=planted())
def test_below_three_devices_nothing_is_trained_on_a_guess(case, parallelism: int) -> None:
    universe, sets = case
    oracle = SimulatedOracle(sets_model(sets), parallelism=parallelism, repeats=True)
    find_culprits(universe, oracle, STRATEGIES["bisect"], parallelism=parallelism)
    assert set(oracle.launched) <= set(oracle.asked)


@pytest.mark.parametrize("parallelism", [3, 8, 16])
@settings(deadline=None, max_examples=20)
@given(case=planted())
def test_guesses_on_idle_devices_change_no_question(case, parallelism: int) -> None:
    """The same questions and answer as an oracle that ignores every guess; fewer rounds or as many."""

    class Ignoring(SimulatedOracle):
        prefetch = None

    universe, sets = case
    runs = []
    for kind in (Ignoring, SimulatedOracle):
        oracle = kind(sets_model(sets), parallelism=parallelism, repeats=True)
        runs.append((find_culprits(universe, oracle, STRATEGIES["bisect"], parallelism=parallelism), oracle))
    (plain_result, plain), (result, guessing) = runs
    assert result == plain_result and guessing.asked == plain.asked
    assert guessing.rounds <= plain.rounds
