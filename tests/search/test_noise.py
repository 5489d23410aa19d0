"""Trustworthy verdicts on noisy trainings: the noise guard inside the all-culprits layer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.search import STRATEGIES, NoiseGuard, NoisePolicy, find_culprits
from fusion_dd.search import noise, votes
from fusion_dd.search.lanes import SPECULATION_WIDTH
from fusion_dd.search.noise import Revised
from fusion_dd.search.oracle import Observation, Outcome
from fusion_dd.testing.simulate import (
    SimulatedOracle,
    any_of,
    flip_noise,
    masked_model,
    or_model,
    sets_model,
)
from tests.search.search_helpers import is_one_minimal_failing

F = frozenset
STRATEGY_NAMES = sorted(STRATEGIES)


def flip(outcome: Outcome) -> Outcome:
    return Outcome.PASS if outcome is Outcome.FAIL else Outcome.FAIL


def scheduled_flips(keys):
    """Flips exactly the listed (configuration, repeat) trainings: a seeded schedule, spelt out."""
    chosen = {(F(c), r) for c, r in keys}

    def noise(config, repeat, outcome):
        return flip(outcome) if (config, repeat) in chosen else outcome

    return noise


def kth_flip(k: int, exempt):
    """Flips the k-th training launched (the references exempt), whatever it is."""
    count = [0]

    def noise(config, repeat, outcome):
        if config in exempt:
            return outcome
        count[0] += 1
        return flip(outcome) if count[0] - 1 == k else outcome

    return noise


def sets_of(result) -> list[list]:
    return sorted(sorted(c.rules) for c in result.culprit_sets)


def launched_in_repeat_order(oracle: SimulatedOracle) -> bool:
    """Each configuration's trainings were launched as repeat 0, 1, 2, ... in that order."""
    seen: dict = {}
    for config, repeat in oracle.launched:
        if repeat != seen.get(config, 0):
            return False
        seen[config] = repeat + 1
    return True


# -- a flaky training on a seeded schedule ---------------------------------------------


def test_a_falsely_failing_probe_is_caught_and_listed_as_flaky() -> None:
    # The culprit is rule 40 of 64: the first probe, rules 0..31, truly passes. Its
    # first training is reported FAIL, which sends plain bisect into a long walk
    # through configurations that all pass.
    probe = F(range(32))
    model = or_model([40])
    plain = SimulatedOracle(model, repeats=True, noise=scheduled_flips([(probe, 0)]))
    unguarded = find_culprits(range(64), plain, STRATEGIES["bisect"], noise=NoisePolicy(confirm="off"))
    assert sets_of(unguarded) != [[40]]

    oracle = SimulatedOracle(model, noise=scheduled_flips([(probe, 0)]))
    result = find_culprits(range(64), oracle, STRATEGIES["bisect"])
    assert sets_of(result) == [[40]] and result.fix_verified and result.fix == F(range(64)) - {40}
    assert result.flaky and result.replays >= 1
    (evidence,) = [i for i in result.inconsistencies if i.kind == "flaky"]
    assert evidence.configs == (probe,) and evidence.verdicts == (Outcome.PASS,)
    outcomes = [o.outcome for o in evidence.observations[0]]
    assert outcomes[0] is Outcome.FAIL and outcomes.count(Outcome.PASS) >= 2
    assert "decided PASS by majority" in evidence.explanation
    clean = SimulatedOracle(model)
    find_culprits(range(64), clean, STRATEGIES["bisect"])
    # One flip costs the re-trainings that expose it plus a third witness for each final
    # claim (culprit, fix) of a run that has shown noise: far below the unguarded search.
    assert oracle.trainings < plain.trainings and oracle.trainings <= 3 * clean.trainings + 2
    assert launched_in_repeat_order(oracle)


def test_a_falsely_passing_probe_becomes_a_recorded_contradiction() -> None:
    probe = F(range(48))  # contains the culprit 40: truly fails, reported PASS once
    oracle = SimulatedOracle(or_model([40]), noise=scheduled_flips([(probe, 0)]))
    result = find_culprits(range(64), oracle, STRATEGIES["bisect"])
    assert sets_of(result) == [[40]] and result.fix_verified and result.flaky
    kinds = {i.kind for i in result.inconsistencies}
    assert "flaky" in kinds
    assert any(probe in i.configs for i in result.inconsistencies)


def test_a_fix_that_falsely_fails_does_not_invent_a_second_culprit() -> None:
    fix = F(range(64)) - {40}
    oracle = SimulatedOracle(or_model([40]), noise=scheduled_flips([(fix, 0)]))
    result = find_culprits(range(64), oracle, STRATEGIES["bisect"])
    assert sets_of(result) == [[40]] and result.fix == fix and result.fix_verified
    assert result.flaky and any(i.configs == (fix,) for i in result.inconsistencies)


@pytest.mark.parametrize("culprit", [5, 40, 63])
def test_a_culprit_that_falsely_passes_alone_is_not_reported_as_a_pair(culprit: int) -> None:
    oracle = SimulatedOracle(or_model([culprit]), noise=scheduled_flips([(F({culprit}), 0)]))
    result = find_culprits(range(64), oracle, STRATEGIES["bisect"])
    assert sets_of(result) == [[culprit]] and result.fix_verified and result.flaky
    assert not or_model([culprit])(result.fix)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_flips_at_five_percent_on_a_fixed_seed(name: str) -> None:
    wrong = 0
    for seed in range(40):
        culprit = (seed * 37) % 64
        noise = flip_noise(0.05, seed=seed, exempt=[F(), F(range(64))])
        oracle = SimulatedOracle(or_model([culprit]), noise=noise)
        result = find_culprits(range(64), oracle, STRATEGIES[name])
        wrong += sets_of(result) != [[culprit]] or not result.fix_verified
        assert launched_in_repeat_order(oracle)
        assert result.flaky == any(i.kind == "flaky" for i in result.inconsistencies)
    assert wrong <= 1


# -- repeats, replay and resume -----------------------------------------------------------


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@pytest.mark.parametrize("parallelism", [1, 3])
def test_resume_asks_exactly_the_same_configuration_repeat_pairs(name: str, parallelism: int) -> None:
    model = any_of(or_model([7, 40]), sets_model([{20, 21}]))
    noise = flip_noise(0.1, seed=11, exempt=[F(), F(range(64))])
    full = SimulatedOracle(model, parallelism=parallelism, noise=noise)
    expected = find_culprits(range(64), full, STRATEGIES[name], parallelism=parallelism)
    assert expected.flaky and any(repeat > 0 for _, repeat in full.launched)  # the run did use repeats
    for stop_after in (1, full.trainings // 3, full.trainings // 2, full.trainings - 1):
        first = SimulatedOracle(model, parallelism=parallelism, noise=noise, budget=stop_after)
        partial = find_culprits(range(64), first, STRATEGIES[name], parallelism=parallelism)
        assert partial.exhausted
        resumed = SimulatedOracle(model, parallelism=parallelism, noise=noise)
        resumed.preload(first.journal())  # what the journal remembers, keyed by (configuration, repeat)
        result = find_culprits(range(64), resumed, STRATEGIES[name], parallelism=parallelism)
        assert result == expected
        assert resumed.asked == full.asked
        assert not set(first.launched) & set(resumed.launched)
        if parallelism == 1:
            assert first.launched + resumed.launched == full.launched


def test_budget_exhaustion_keeps_the_noise_evidence() -> None:
    noise = scheduled_flips([(F(range(32)), 0)])
    full = SimulatedOracle(or_model([40]), noise=noise)
    find_culprits(range(64), full, STRATEGIES["bisect"])
    oracle = SimulatedOracle(or_model([40]), noise=noise, budget=full.trainings - 2)
    result = find_culprits(range(64), oracle, STRATEGIES["bisect"])
    assert result.exhausted and not result.fix_verified and not result.confirmed
    assert result.flaky and result.inconsistencies


# -- no noise: the same answers, and free where no interaction is claimed --------------------


@st.composite
def planted(draw):
    n = draw(st.integers(1, 90))
    universe = draw(st.permutations(list(range(n))))
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    while sum(sizes) > n:
        sizes.pop()
    sizes = sizes or [1]
    picks = iter(draw(st.permutations(universe))[: sum(sizes)])
    return universe, [F(next(picks) for _ in range(size)) for size in sizes]


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@settings(deadline=None, max_examples=40)
@given(case=planted(), parallelism=st.sampled_from([1, 3]))
def test_noise_free_runs_give_the_same_answer_and_pay_only_for_interactions(case, name, parallelism) -> None:
    universe, sets = case
    model = sets_model(sets)
    plain = SimulatedOracle(model, parallelism=parallelism)
    expected = find_culprits(universe, plain, STRATEGIES[name], parallelism=parallelism)
    oracle = SimulatedOracle(model, parallelism=parallelism, repeats=True)
    result = find_culprits(universe, oracle, STRATEGIES[name], parallelism=parallelism)
    assert result.culprit_sets == expected.culprit_sets and result.fix == expected.fix
    assert result.fix_verified and not result.flaky and not result.inconsistencies and result.replays == 0
    if all(len(s) == 1 for s in sets):
        # Independent culprits only: nothing is re-trained but the fix (its second training
        # backs "verified") and, rarely (a culprit first in its search's order, with others
        # behind it), a culprit whose necessity no other training shows. On three devices
        # idle ones also train guesses at the next questions (a fix candidate's repeat among
        # them): those never asked cost a training each and change no question.
        used = set(oracle.asked)
        repeats = [(c, r) for c, r in oracle.launched if r and (c, r) in used]
        assert all(r == 1 and (c in sets or c == result.fix) for c, r in repeats)
        assert (result.fix, 1) in repeats or not result.fix
        asked = [k for k in oracle.launched if k[1] == 0 and k in used]
        assert sorted(asked, key=repr) == sorted(set(plain.asked), key=repr)
        if parallelism < SPECULATION_WIDTH:
            assert [k for k in oracle.launched if k[1] == 0] == [(c, 0) for c in plain.calls]
    assert launched_in_repeat_order(oracle)


def test_off_is_the_single_answer_behaviour() -> None:
    model = any_of(or_model([3]), sets_model([{10, 20}]))
    plain = SimulatedOracle(model)
    expected = find_culprits(range(32), plain, STRATEGIES["bisect"])
    oracle = SimulatedOracle(model, repeats=True)
    result = find_culprits(range(32), oracle, STRATEGIES["bisect"], noise=NoisePolicy(confirm="off"))
    assert result == expected and oracle.calls == plain.calls


def test_strict_confirms_every_claim_with_two_agreeing_trainings() -> None:
    plain = SimulatedOracle(or_model([40]))
    find_culprits(range(64), plain, STRATEGIES["bisect"])
    auto = find_culprits(range(64), SimulatedOracle(or_model([40]), repeats=True), STRATEGIES["bisect"])
    assert not auto.confirmed  # the culprit alone and the fix were trained once each
    oracle = SimulatedOracle(or_model([40]), repeats=True)
    result = find_culprits(range(64), oracle, STRATEGIES["bisect"], noise=NoisePolicy(confirm="strict"))
    assert sets_of(result) == [[40]] and result.confirmed and not result.flaky
    assert oracle.trainings == plain.trainings + 2
    assert [r for c, r in oracle.launched if r] == [1, 1]


def test_a_contradiction_resting_on_three_flips_is_trained_until_it_resolves() -> None:
    # {0..23} truly passes (the culprit is 40) but its first three trainings fail: a lead of
    # three, as strong as its passing superset {0..31}. Taken for a genuine non-monotone
    # failure, it sent bisection to ddmin; trained on, the majority of {0..23} comes back.
    low = F(range(24))
    flips = scheduled_flips([(low, 0), (low, 1), (low, 2)])
    oracle = SimulatedOracle(or_model([40]), noise=flips)
    guard = NoiseGuard(oracle, range(64), NoisePolicy())
    guard.outcomes([F(range(32))])
    guard.outcomes([low])
    assert guard.verdict(low) is Outcome.PASS and guard.verdict(F(range(32))) is Outcome.PASS
    flaky = next(i for i in guard.inconsistencies() if i.kind == "flaky" and i.configs == (low,))
    assert len(flaky.observations[0]) > 3 and flaky.verdicts == (Outcome.PASS,)


def test_genuinely_non_monotone_contradictions_are_recorded_not_called_flaky() -> None:
    model = masked_model(9, 3, 13)  # {9} fails, {0..11} passes: a superset of a failing set
    oracle = SimulatedOracle(model, repeats=True)
    result = find_culprits(range(16), oracle, STRATEGIES["bisect"])
    assert result.fix_verified and not result.flaky
    for found in result.culprit_sets:
        assert is_one_minimal_failing(model, found.rules)
    contradictions = [i for i in result.inconsistencies if i.kind == "non-monotone"]
    assert contradictions
    for item in contradictions:
        low, high = item.configs
        assert low < high and item.verdicts == (Outcome.FAIL, Outcome.PASS)
        assert "genuinely non-monotone" in item.explanation
        assert all(len(obs) >= 2 for obs in item.observations)


# -- any single flip -----------------------------------------------------------------------


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@settings(deadline=None, max_examples=30)
@given(data=st.data(), n=st.integers(2, 40))
def test_strict_survives_any_single_flip(data, name: str, n: int) -> None:
    universe = list(range(n))
    size = data.draw(st.integers(1, min(3, n)))
    sets = [F(data.draw(st.permutations(universe))[:size])]
    if size == 1 and n > 2 and data.draw(st.booleans()):
        other = data.draw(st.sampled_from([r for r in universe if r not in sets[0]]))
        sets.append(F({other}))
    model = sets_model(sets)
    clean = SimulatedOracle(model, repeats=True)
    find_culprits(universe, clean, STRATEGIES[name], noise=NoisePolicy(confirm="strict"))
    k = data.draw(st.integers(0, clean.trainings))
    oracle = SimulatedOracle(model, noise=kth_flip(k, {F(), F(universe)}))
    result = find_culprits(universe, oracle, STRATEGIES[name], noise=NoisePolicy(confirm="strict"))
    assert sets_of(result) == sorted(sorted(s) for s in sets)
    assert result.fix_verified and not model(result.fix) and result.confirmed


@settings(deadline=None, max_examples=40)
@given(data=st.data(), n=st.integers(2, 80))
def test_bisect_finds_one_culprit_despite_any_single_flip_at_no_clean_cost(data, n: int) -> None:
    culprit = data.draw(st.integers(0, n - 1))
    clean = SimulatedOracle(or_model([culprit]), repeats=True)
    find_culprits(range(n), clean, STRATEGIES["bisect"])
    k = data.draw(st.integers(0, clean.trainings))
    oracle = SimulatedOracle(or_model([culprit]), noise=kth_flip(k, {F(), F(range(n))}))
    result = find_culprits(range(n), oracle, STRATEGIES["bisect"])
    assert sets_of(result) == [[culprit]] and result.fix_verified


# -- votes ------------------------------------------------------------------------------------


def test_the_noise_layer_names_the_votes_rule_it_follows() -> None:
    assert noise.majority is votes.majority and noise.tally is votes.tally  # the all-culprits layer uses it


def guard_for(readings: dict, universe=range(8), policy=None) -> tuple[NoiseGuard, SimulatedOracle]:
    """A guard over an oracle whose trainings read as scripted per configuration."""
    table = {"F": Outcome.FAIL, "P": Outcome.PASS}

    def noise(config, repeat, outcome):
        script = readings.get(config)
        if script is None:
            return outcome
        mark = script[min(repeat, len(script) - 1)]
        return Observation(repeat, table[mark[0]], mark.endswith("~"))

    oracle = SimulatedOracle(lambda c: False, noise=noise)
    return NoiseGuard(oracle, universe, policy), oracle


def test_a_near_threshold_reading_is_retrained_until_it_is_clear() -> None:
    x = F({1, 2})
    guard, oracle = guard_for({x: ["F~", "P", "P"]})
    assert guard.outcomes([x]) == [Outcome.PASS]
    assert [r for _, r in oracle.launched] == [0, 1, 2]  # F~ alone decides nothing; then P, P outvote it
    z = F({4})
    guard, oracle = guard_for({z: ["P", "F", "P", "P"]})
    assert guard.outcomes([z]) == [Outcome.PASS] and oracle.trainings == 1  # a clear first reading stands
    guard, oracle = guard_for({z: ["F~", "P~", "F", "F"]})
    assert (
        guard.outcomes([z]) == [Outcome.FAIL] and oracle.trainings == 4
    )  # a clear dissent needs a lead of two
    y = F({3})
    guard, oracle = guard_for({y: ["P~", "P~"]})
    assert guard.outcomes([y]) == [Outcome.PASS] and oracle.trainings == 2


def test_retraining_stops_at_the_limit() -> None:
    x = F({1})
    guard, oracle = guard_for({x: ["F~", "P~", "F~", "P~", "F~"]}, policy=NoisePolicy(max_trainings=4))
    assert guard.outcomes([x]) == [Outcome.FAIL]  # four coin tosses at the limit: a tie fails
    assert oracle.trainings == 4 and guard.flaky


def test_policy_is_validated() -> None:
    with pytest.raises(ValueError):
        NoisePolicy(confirm="sometimes")
    with pytest.raises(ValueError):
        NoisePolicy(max_trainings=0)


def test_an_oracle_that_forgets_its_trainings_is_reported() -> None:
    class Forgetful(SimulatedOracle):
        def trials(self, config):
            return []

    with pytest.raises(RuntimeError, match="trials"):
        find_culprits(range(8), Forgetful(or_model([3]), repeats=True), STRATEGIES["bisect"])


class WithoutPrefetch(SimulatedOracle):
    """The simulated oracle as it was before prefetching: the layer's hints are ignored."""

    prefetch = None


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@settings(deadline=None, max_examples=20)
@given(case=planted(), parallelism=st.sampled_from([2, 3]), rate=st.sampled_from([0.0, 0.1, 0.25]), seed=st.integers(0, 99))
def test_prefetching_the_next_fix_candidate_changes_no_answer_and_saves_rounds(case, name, parallelism, rate, seed) -> None:
    """A confirming repeat leaves devices idle; the fix candidate asked after it trains there.

    Answers depend only on what is asked, so the result is the same; without noise the
    candidate is always asked next (the same trainings, fewer rounds; from three devices on
    also guesses that may go unused), with noise a flipped confirmation can leave it
    unasked (one training more, never a round more).
    """
    universe, sets = case
    exempt = [F(), F(universe)]
    runs = []
    for kind in (WithoutPrefetch, SimulatedOracle):
        oracle = kind(sets_model(sets), parallelism=parallelism, noise=flip_noise(rate, seed=seed, exempt=exempt))
        runs.append((find_culprits(universe, oracle, STRATEGIES[name], parallelism=parallelism), oracle))
    (before, plain), (result, prefetching) = runs
    assert result == before
    assert prefetching.rounds <= plain.rounds
    assert set(plain.launched) <= set(prefetching.launched)
    if rate == 0.0 and parallelism < SPECULATION_WIDTH:
        assert sorted(prefetching.launched, key=repr) == sorted(plain.launched, key=repr)
    elif rate == 0.0:
        # Guesses at the next questions ride along too: each one more is a training never asked.
        extra = set(prefetching.launched) - set(plain.launched)
        assert not extra & set(prefetching.asked)


def test_prefetching_the_next_fix_candidate_beside_a_confirming_repeat_never_costs_a_round() -> None:
    universe = list(range(16))
    runs = []
    for kind in (WithoutPrefetch, SimulatedOracle):
        oracle = kind(or_model([3, 11]), parallelism=2, repeats=True)
        # A search per culprit, whose confirming repeat leaves a device idle (group testing asks
        # no such repeat on a clean run, so there is no round to save).
        search = find_culprits(universe, oracle, STRATEGIES["bisect"], parallelism=2, group_testing=False)
        runs.append((search, oracle))
    (before, plain), (result, prefetching) = runs
    assert result == before and {next(iter(c.rules)) for c in result.culprit_sets} == {3, 11}
    assert prefetching.trainings == plain.trainings
    assert prefetching.rounds <= plain.rounds


def _scanned_necessary(guard: NoiseGuard, leaf: frozenset) -> set:
    """``Monotonicity.necessary`` the straightforward way: every passing verdict, as frozensets."""
    passing = [c for c, verdict in guard._votes.settled().items() if verdict is Outcome.PASS]
    return {next(iter(leaf - other)) for other in passing if len(leaf - other) == 1}


@settings(deadline=None, max_examples=40)
@given(
    seed=st.integers(0, 10_000),
    culprits=st.lists(st.integers(0, 11), min_size=1, max_size=3, unique=True),
    questions=st.lists(st.frozensets(st.integers(0, 11), min_size=1, max_size=11), min_size=1, max_size=40),
)
def test_the_guard_keeps_its_bookkeeping_in_place_and_it_matches_a_scan_of_every_verdict(
    seed, culprits, questions
) -> None:
    # A flip changes a verdict; the guard updates its antichains in place (a rebuild from
    # every verdict after each flip made a noisy search of thousands of rules quadratic),
    # and what it keeps must be what a scan of all verdicts says.
    universe = list(range(12))
    noise = flip_noise(0.2, seed=seed, exempt=[F(), F(universe)])
    oracle = SimulatedOracle(or_model(culprits), noise=noise)
    guard = NoiseGuard(oracle, universe, NoisePolicy())
    monotone = guard._monotone
    chains = monotone.antichains()
    for question in questions:
        try:
            guard.outcomes([question])
        except Revised:
            guard.replay()
        assert monotone.antichains() is chains  # never rebuilt
        verdicts = guard._votes.settled()
        assert all(guard.verdict(c) is v for c, v in verdicts.items())
        failing = {c for c, v in verdicts.items() if v is Outcome.FAIL}
        passing = {c for c, v in verdicts.items() if v is Outcome.PASS}
        masks = monotone.masks
        assert sorted(monotone.fail_masks) == sorted(masks.of(c) for c in failing)
        assert sorted(monotone.pass_masks) == sorted(masks.of(c) for c in passing)
        assert sorted(monotone.pass_set) == sorted(masks.of(c) for c in passing)
        assert set(chains.min_fail) == {masks.of(c) for c in failing if not any(o < c for o in failing)}
        assert set(chains.max_pass) == {masks.of(c) for c in passing if not any(o > c for o in passing)}
        for leaf in failing:
            assert monotone.necessary(leaf) == _scanned_necessary(guard, leaf)


def test_a_guard_is_freed_as_soon_as_nothing_refers_to_it_without_a_garbage_collection() -> None:
    """Its votes tell it of each verdict through a weak reference: no cycle keeps a finished
    search's guard (every configuration it trained) alive until the next full collection."""
    import gc
    import weakref

    universe = list(range(16))
    oracle = SimulatedOracle(sets_model([{3}]), noise=None, repeats=True)
    guard = NoiseGuard(oracle, universe)
    guard.outcomes([frozenset({3}), frozenset({1, 2})])
    gone = weakref.ref(guard)
    collecting = gc.isenabled()
    gc.disable()
    try:
        del guard
        assert gone() is None
    finally:
        if collecting:
            gc.enable()


def test_a_third_training_of_the_fix_catches_the_two_flips_that_hide_a_second_culprit() -> None:
    # Two independent culprits: the search finds 10, then asks the fix candidate without it, which
    # truly fails (50). Both of its first trainings flip to a pass and nothing else contradicts them.
    candidate = F(range(64)) - {10}
    model = or_model([10, 50])
    hidden = scheduled_flips([(candidate, 0), (candidate, 1)])
    default = find_culprits(range(64), SimulatedOracle(model, noise=hidden), STRATEGIES["bisect"])
    assert sets_of(default) == [[10]] and default.fix_verified and model(default.fix)  # the limit of two

    oracle = SimulatedOracle(model, noise=hidden)
    result = find_culprits(range(64), oracle, STRATEGIES["bisect"], noise=NoisePolicy(fix_trainings=3))
    assert sets_of(result) == [[10], [50]] and result.fix_verified and not model(result.fix)
    assert result.flaky  # the third training disagreed with the first two


def test_the_fix_s_trainings_on_a_clean_run_are_as_many_as_asked() -> None:
    model = or_model([40])
    for wanted in (2, 3):
        oracle = SimulatedOracle(model, repeats=True)
        result = find_culprits(range(64), oracle, STRATEGIES["bisect"], noise=NoisePolicy(fix_trainings=wanted))
        assert sets_of(result) == [[40]] and result.fix_verified and not result.flaky
        assert len(oracle.trials(result.fix)) == wanted


def test_fix_trainings_is_checked() -> None:
    with pytest.raises(ValueError, match="fix_trainings"):
        NoisePolicy(fix_trainings=1)
    with pytest.raises(ValueError, match="fix_trainings"):
        NoisePolicy(max_trainings=3, fix_trainings=4)


@pytest.mark.parametrize("interacting", [[10, 30], [10, 30, 50]])
def test_strict_backs_every_claim_by_two_trainings_of_its_own(interacting) -> None:
    # Support implied by another configuration (a passing prefix that holds all of a set but one
    # rule) is one more chance for the same flip; strict counts only the claim's own trainings.
    model = sets_model([interacting])
    oracle = SimulatedOracle(model, repeats=True)
    result = find_culprits(range(64), oracle, STRATEGIES["bisect"], noise=NoisePolicy(confirm="strict"))
    assert sets_of(result) == [interacting] and result.confirmed and not result.flaky
    rules = F(interacting)
    claims = [rules, *(rules - {rule} for rule in rules), result.fix]
    for claim in claims:
        own = oracle.trials(claim)
        assert len(own) >= 2 and len({o.outcome for o in own}) == 1, sorted(claim)


def test_the_fix_s_trainings_back_the_pair_rule_it_keeps_on_and_the_other_is_trained_again() -> None:
    # A clean interacting pair: "passes alone" is claimed of both rules. The fix switches one off;
    # the other stays on in it, so the fix's two passing trainings back that rule's claim.
    model = sets_model([[10, 40]])
    oracle = SimulatedOracle(model, repeats=True)
    result = find_culprits(range(64), oracle, STRATEGIES["bisect"])
    assert sets_of(result) == [[10, 40]] and result.fix_verified and not result.flaky
    (off,) = F(range(64)) - result.fix
    (kept,) = F({10, 40}) - {off}
    assert len(oracle.trials(result.fix)) == 2
    assert len(oracle.trials(F({kept}))) == 1  # backed by the fix's trainings
    assert len(oracle.trials(F({off}))) == 2  # no passing fix holds it: its own second training


@settings(deadline=None, max_examples=40)
@given(data=st.data(), n=st.integers(3, 64))
def test_an_interacting_pair_under_any_single_flip_never_hands_over_a_failing_fix_as_verified(data, n: int) -> None:
    pair = F(data.draw(st.permutations(range(n)))[:2])
    model = sets_model([pair])
    clean = SimulatedOracle(model, repeats=True)
    find_culprits(range(n), clean, STRATEGIES["bisect"])
    k = data.draw(st.integers(0, clean.trainings))
    oracle = SimulatedOracle(model, noise=kth_flip(k, {F(), F(range(n))}))
    result = find_culprits(range(n), oracle, STRATEGIES["bisect"])
    assert not (result.fix_verified and model(result.fix))
    assert not result.confirmed or sets_of(result) == [sorted(pair)]
