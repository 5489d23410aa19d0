"""The guided strategy: a prior changes what is asked, never what is answered."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.search import bisect, ddmin, find_culprits
from fusion_dd.search.guided import Guided, blind, fence_size, guided, prior_order
from fusion_dd.search.lanes import LanePlan
from fusion_dd.search.oracle import BudgetExhausted, Outcome
from fusion_dd.testing.simulate import SimulatedOracle, sets_model
from tests.search.search_helpers import is_one_minimal_failing, no_repeats

F = frozenset


@st.composite
def planted(draw):
    """A universe and disjoint culprit sets (independent and interacting), plus a random prior."""
    n = draw(st.integers(2, 80))
    universe = list(range(n))
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    while sum(sizes) > n:
        sizes.pop()
    sizes = sizes or [1]
    picks = iter(draw(st.permutations(universe))[: sum(sizes)])
    sets = [F(next(picks) for _ in range(size)) for size in sizes]
    shuffled = draw(st.permutations(universe))
    return universe, sets, list(shuffled)


def priors(universe: list[int], sets: list[frozenset[int]], shuffled: list[int]) -> dict[str, list[int]]:
    culprits = [rule for s in sets for rule in sorted(s)]
    innocent = [rule for rule in shuffled if rule not in set(culprits)]
    return {
        "correct": culprits + innocent,  # every culprit first
        "misleading": innocent + culprits,  # every culprit last
        "random": shuffled,
        "partial": innocent[:3] + culprits[:1],  # a short suspects list, mostly wrong
    }


def answer(result) -> tuple:
    return (
        sorted(sorted(c.rules) for c in result.culprit_sets),
        sorted(result.fix),
        result.fix_verified,
        sorted(sorted(c.switched_off) for c in result.culprit_sets),
    )


def search(universe, sets, strategy, parallelism: int):
    oracle = SimulatedOracle(sets_model(sets), parallelism=parallelism)
    oracle.outcomes([F(), F(universe)])  # the engine's references
    return oracle, find_culprits(universe, oracle, strategy, parallelism=parallelism)


@pytest.mark.parametrize("base", [bisect, ddmin], ids=["bisect", "ddmin"])
@pytest.mark.parametrize("parallelism", [1, 4])
@settings(deadline=None, max_examples=40)
@given(case=planted())
def test_any_prior_gives_the_unguided_answer(case, base, parallelism: int) -> None:
    universe, sets, shuffled = case
    _, unguided = search(universe, sets, base, parallelism)
    assert unguided.fix_verified
    for label, prior in priors(universe, sets, shuffled).items():
        oracle, result = search(universe, sets, Guided(prior, base), parallelism)
        assert answer(result) == answer(unguided), label
        assert sorted(map(sorted, (c.rules for c in result.culprit_sets))) == sorted(map(sorted, sets))
        assert no_repeats(oracle), label


class Refiner:
    """A deterministic ``refine``: a ranking and partners drawn from the start alone (a seeded shuffle)."""

    def __init__(self, universe: list[int], sets: list[frozenset[int]], seed: int, helpful: bool) -> None:
        self.universe, self.sets, self.seed, self.helpful = universe, sets, seed, helpful
        self.asked: list[frozenset[int]] = []

    def __call__(self, start: frozenset[int]):
        self.asked.append(start)
        rng = random.Random(self.seed * 7919 + sum(start) + len(start))
        inside = sorted(start)
        rng.shuffle(inside)
        if self.helpful:  # the culprits left inside the start first, each one's mates as its partners
            left = [rule for s in self.sets if s <= start for rule in sorted(s)]
            inside = left + [rule for rule in inside if rule not in left]
            partners = {rule: sorted(s - {rule}) + inside[:2] for s in self.sets if s <= start for rule in s}
        else:  # anything at all, outsiders included
            partners = {rule: rng.sample(self.universe, min(3, len(self.universe))) for rule in inside[:4]}
        return inside[:6], partners


@pytest.mark.parametrize("base", [bisect, ddmin], ids=["bisect", "ddmin"])
@pytest.mark.parametrize("parallelism", [1, 3])
@settings(deadline=None, max_examples=40)
@given(case=planted(), seed=st.integers(0, 10**6), helpful=st.booleans())
def test_partners_and_refinement_give_the_unguided_answer(
    case, base, parallelism: int, seed: int, helpful: bool
) -> None:
    """Pairs with partners and per-search rankings change what is asked, never the answer."""
    universe, sets, shuffled = case
    _, unguided = search(universe, sets, base, parallelism)
    rng = random.Random(seed)
    partners = {rule: rng.sample(universe, min(4, len(universe))) for rule in shuffled[:5]}
    if helpful:
        partners.update({rule: sorted(s - {rule}) for s in sets for rule in s})
    for label, prior in priors(universe, sets, shuffled).items():
        refine = Refiner(universe, sets, seed, helpful)
        oracle, result = search(universe, sets, Guided(prior, base, partners=partners, refine=refine), parallelism)
        assert answer(result) == answer(unguided), label
        assert no_repeats(oracle), label
        assert F(universe) not in refine.asked  # the first search has the prior; later ones are refined


@settings(deadline=None, max_examples=25)
@given(case=planted(), seed=st.integers(0, 10**6))
def test_behind_the_noise_guard_partners_and_refinement_give_the_unguided_answer(case, seed: int) -> None:
    """With repeats (the engine's setting), the guard's checks leave the same answer."""
    universe, sets, shuffled = case

    def run(strategy, **options):
        oracle = SimulatedOracle(sets_model(sets), parallelism=2, repeats=True)
        oracle.outcomes([F(), F(universe)])
        return find_culprits(universe, oracle, strategy, parallelism=2, **options)

    # A search per culprit, as Guided does (group testing finds the same answer with fewer
    # trainings, and so fewer of them confirmed).
    unguided = run(bisect, group_testing=False)
    partners = {rule: sorted(s - {rule}) for s in sets for rule in s}
    result = run(Guided(shuffled, partners=partners, refine=Refiner(universe, sets, seed, helpful=True)))
    assert answer(result) == answer(unguided)
    # "confirmed" depends on how many trainings each path happened to make of each claim;
    # "verified" never does: the fix rests on its own two trainings either way.
    assert result.fix_verified == unguided.fix_verified


def test_a_pair_whose_other_rule_is_a_partner_costs_three_questions() -> None:
    """The top suspect passes alone; with its first partner it fails; the partner alone passes: a pair."""
    universe = list(range(256))
    oracle, result = search(universe, [F({5, 200})], Guided([5, 1, 2], partners={5: [200, 7]}), 1)
    # references, {5} alone, {5, 200} (fails), {200} alone (passes: proven 1-minimal), the fix
    assert oracle.calls[2:5] == [F({5}), F({5, 200}), F({200})]
    assert len(oracle.calls) == 6 and oracle.calls[5] in (F(universe) - {5}, F(universe) - {200})
    assert [sorted(c.rules) for c in result.culprit_sets] == [[5, 200]] and result.fix_verified


def test_a_partner_that_fails_alone_is_the_answer_not_the_pair() -> None:
    universe = list(range(64))
    oracle, result = search(universe, [F({30})], Guided([5], partners={5: [30]}), 1)
    assert oracle.calls[2:5] == [F({5}), F({5, 30}), F({30})]
    assert [sorted(c.rules) for c in result.culprit_sets] == [[30]]


def test_misleading_partners_cost_at_most_two_pairs_more() -> None:
    universe = list(range(256))
    oracle, result = search(universe, [F({17})], Guided([1, 2, 3], partners={1: [4, 5, 6, 7]}), 1)
    pairs = [c for c in oracle.calls if len(c) == 2]
    assert pairs == [F({1, 4}), F({1, 5})]  # max(2, P) pairs on one device, then the fence and the search
    asked = oracle.calls[2 : oracle.calls.index(F(universe) - {17})]  # the search's own questions
    assert len(asked) <= blind(256) + 2 + 2
    assert [sorted(c.rules) for c in result.culprit_sets] == [[17]]


def test_a_later_search_is_ranked_by_refine_and_pairs_with_its_partners() -> None:
    """{3} first; inside the failing fix candidate, refine points at 10 with partner 20."""
    universe = list(range(128))
    asked: list[frozenset[int]] = []

    def refine(start):
        asked.append(start)
        return [10, 11], {10: [20]}

    strategy = Guided([3, 4], partners={3: [10, 20]}, refine=refine)
    oracle, result = search(universe, [F({3}), F({10, 20})], strategy, 1)
    assert asked == [F(universe) - {3}]  # once, for the later search only
    later = oracle.calls[oracle.calls.index(F(universe) - {3}) + 1 :]
    assert later[:3] == [F({10}), F({10, 20}), F({20})]  # the static partners of 3 are not used again
    assert sorted(map(sorted, (c.rules for c in result.culprit_sets))) == [[3], [10, 20]]
    assert result.fix_verified


def test_refine_answering_none_keeps_the_prior() -> None:
    universe = list(range(64))
    plain, expected = search(universe, [F({3}), F({40})], Guided([3, 40]), 1)
    oracle, result = search(universe, [F({3}), F({40})], Guided([3, 40], refine=lambda start: None), 1)
    assert oracle.calls == plain.calls and answer(result) == answer(expected)


def test_refine_alone_guides_the_later_searches_and_keeps_the_answer() -> None:
    """No prior, only a refinement: the first search is bisect's, the later one (inside the
    failing fix candidate) asks the refined suspect alone first; the answer is bisect's."""
    universe, sets = list(range(64)), [F({3}), F({40})]
    starts: list[frozenset[int]] = []

    def refine(start: frozenset[int]) -> tuple[list[int], dict]:
        starts.append(start)
        return [40], {}

    plain, expected = search(universe, sets, guided([], bisect), 1)
    oracle, result = search(universe, sets, guided([], bisect, refine=refine), 1)
    assert answer(result) == answer(expected)
    assert starts and all(40 in start and 3 not in start for start in starts)
    # Right after the failing fix candidate, the refined suspect alone; so fewer trainings in all.
    assert oracle.calls[oracle.calls.index(starts[0]) + 1] == F({40})
    assert len(oracle.calls) < len(plain.calls)


@settings(deadline=None, max_examples=40)
@given(n=st.integers(4, 40), data=st.data())
def test_overlapping_sets_stay_one_minimal_with_a_verified_fix(n: int, data) -> None:
    """{a, b} and {b, c}: which one a search meets first may depend on order, but every answer is proven."""
    a, b, c = data.draw(st.permutations(list(range(n))))[:3]
    model = sets_model([{a, b}, {b, c}])
    prior = data.draw(st.permutations(list(range(n))))
    oracle = SimulatedOracle(model)
    result = find_culprits(list(range(n)), oracle, Guided(list(prior)))
    assert result.fix_verified and not model(result.fix)
    assert result.culprit_sets and all(is_one_minimal_failing(model, s.rules) for s in result.culprit_sets)
    assert F(range(n)) - result.fix == {b}


def test_a_culprit_ranked_first_costs_one_question() -> None:
    universe = list(range(256))
    oracle, result = search(universe, [F({200})], Guided([200, 3, 4]), 1)
    # references, {200} alone (found and proven), the fix verification
    assert oracle.calls == [F(), F(universe), F({200}), F(universe) - {200}]
    assert [sorted(c.rules) for c in result.culprit_sets] == [[200]] and result.fix_verified


def test_a_misleading_prior_costs_at_most_two_questions_more_than_blind_bisect() -> None:
    universe = list(range(256))
    oracle, result = search(universe, [F({17})], Guided([1, 2, 3, 4, 5]), 1)
    # the top suspect alone, the fence of the five suspects (it passes), then the budgeted search
    assert oracle.calls[2:4] == [F({1}), F({1, 2, 3, 4, 5})]
    assert F({2}) not in oracle.calls  # the suspects of a passing fence are not asked alone
    asked = oracle.calls[2 : oracle.calls.index(F(universe) - {17})]
    assert len(asked) <= blind(256) + 2
    assert result.fix_verified and [sorted(c.rules) for c in result.culprit_sets] == [[17]]


def test_on_p_devices_the_first_round_asks_the_top_suspect_the_fence_and_the_next_suspects() -> None:
    universe = list(range(256))
    prior = [19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    oracle, result = search(universe, [F({13})], Guided(prior), 8)
    # the top suspect, the fence (2P - 1 = 15 suspects), suspects 2 to 7 alone: one round
    assert oracle.calls[2:10] == [F({19}), F(prior[:15])] + [F({rule}) for rule in prior[1:7]]
    assert oracle.rounds == 3  # references, that round, the fix
    assert result.fix_verified and [sorted(c.rules) for c in result.culprit_sets] == [[13]]


def test_on_p_devices_a_failing_fence_has_its_other_suspects_asked_in_the_next_round() -> None:
    universe = list(range(256))
    prior = list(range(100, 120))
    oracle, result = search(universe, [F({110})], Guided(prior), 4)
    # round 1: {100}, the fence of 7, {101}, {102}; round 2: 103..106 alone; round 3: ...
    assert oracle.calls[2:6] == [F({100}), F(prior[:7]), F({101}), F({102})]
    assert F({110}) not in oracle.calls[:14]
    assert [sorted(c.rules) for c in result.culprit_sets] == [[110]] and result.fix_verified


def test_later_searches_do_not_ask_known_suspects_again() -> None:
    """Three culprits among the top suspects: each suspect is asked alone once in the whole run."""
    universe = list(range(64))
    sets = [F({10}), F({20}), F({30})]
    prior = [10, 1, 2, 3, 20, 4, 5, 30]
    oracle, result = search(universe, sets, Guided(prior), 1)
    singles = [c for c in oracle.calls if len(c) == 1]
    assert singles == [F({r}) for r in prior]  # in rank order, none twice
    assert sorted(map(sorted, (c.rules for c in result.culprit_sets))) == [[10], [20], [30]]


def test_no_prior_is_the_base_strategy_itself() -> None:
    assert guided([], bisect) is bisect and guided(None, bisect) is bisect
    assert isinstance(guided([1], bisect), Guided)


def test_prior_order_puts_suspects_first_and_ignores_strangers() -> None:
    assert prior_order([1, 2, 3, 4], [3, 99, 1, 3]) == [3, 1, 2, 4]


class Session:
    """An oracle over a shared journal (cache + widths), cut by a budget: one coordinator session."""

    def __init__(self, model, cache: dict, widths: list[int], devices: int, budget: int) -> None:
        self.model, self.cache, self.budget = model, cache, budget
        self.trained: list[frozenset[int]] = []
        self.questions: list[tuple[frozenset[int], ...]] = []
        self.lanes = LanePlan(lambda: devices, widths, on_new=lambda index, width: widths.append(width))

    def _answer(self, config: frozenset[int]) -> Outcome:
        if config not in self.cache:
            if len(self.trained) >= self.budget:
                raise BudgetExhausted(None)
            self.trained.append(config)
            self.cache[config] = Outcome.FAIL if self.model(config) else Outcome.PASS
        return self.cache[config]

    def outcomes(self, configs: Sequence[frozenset[int]]) -> list[Outcome]:
        self.lanes.advance()
        self.questions.append(tuple(configs))
        return [self._answer(F(c)) for c in configs]

    def first_failing(self, configs: Sequence[frozenset[int]]) -> int | None:
        self.lanes.advance()
        self.questions.append(tuple(configs))
        for index, config in enumerate(configs):
            if self._answer(F(config)) is Outcome.FAIL:
                return index
        return None


@pytest.mark.parametrize("devices", [1, 3])
def test_an_interrupted_guided_search_resumes_by_exact_replay(devices: int) -> None:
    n = 96
    sets = [F({40}), F({7, 70}), F({88})]
    model = sets_model(sets)
    prior = [5, 88, 6, 40, 70, 7]
    strategy = Guided(prior)

    def run(cache, widths, budget):
        session = Session(model, cache, widths, devices, budget)
        return session, find_culprits(list(range(n)), session, strategy, parallelism=session.lanes)

    whole, expected = run({}, [], 10**6)
    total = len(whole.trained)
    for stop in sorted(random.Random(devices).sample(range(1, total), min(total - 1, 6))):
        cache: dict = {}
        widths: list[int] = []
        first, partial = run(cache, widths, stop)
        assert partial.exhausted
        second, result = run(cache, widths, 10**6)
        assert second.questions == whole.questions  # the same questions, in the same order
        assert answer(result) == answer(expected)
        assert len(first.trained) + len(second.trained) == total  # nothing trained twice


def test_on_fix_is_told_every_fix_candidate_and_changes_no_question() -> None:
    universe = list(range(64))
    sets = [F({5}), F({20, 40})]
    plain, expected = search(universe, sets, bisect, 2)
    told: list[frozenset[int]] = []
    oracle = SimulatedOracle(sets_model(sets), parallelism=2)
    oracle.outcomes([F(), F(universe)])
    result = find_culprits(universe, oracle, bisect, parallelism=2, on_fix=told.append)
    assert oracle.calls == plain.calls and answer(result) == answer(expected)
    assert told and told[-1] == result.fix and all(c in oracle.calls for c in told)


def questions(n: int, culprit_rank: int, prior_size: int | None = None, parallelism: int = 1):
    """The strategy alone (no all-culprits layer): what it asks for one culprit at ``culprit_rank`` (1-based)."""
    universe = list(range(n))
    prior = list(reversed(universe))[: prior_size or n]  # rank r is rule n - r
    oracle = SimulatedOracle(sets_model([{n - culprit_rank}]), parallelism=parallelism)
    assert Guided(prior)(universe, oracle, parallelism=parallelism) == {n - culprit_rank}
    return oracle


def test_blind_is_what_bisect_needs_for_one_culprit() -> None:
    for n in [2, 3, 4, 5, 8, 9, 100, 256, 257]:
        worst = 0
        for culprit in range(n):
            oracle = SimulatedOracle(sets_model([{culprit}]))
            bisect(list(range(n)), oracle)
            worst = max(worst, oracle.trainings)
        assert worst == blind(n), n


def test_the_question_sequence_for_the_first_ranks() -> None:
    """n = 256: the top suspect, the fence of the top 8 (blind(256) - 1), its suspects alone in rank order."""
    top = [F({255})]
    fence = F(range(248, 256))
    assert blind(256) == 9 and fence_size(256, 1, 256) == 8
    assert questions(256, 1).calls == top
    assert questions(256, 2).calls == top + [fence, F({254})]
    assert questions(256, 3).calls == top + [fence, F({254}), F({253})]
    assert questions(256, 8).calls == top + [fence] + [F({rule}) for rule in range(254, 247, -1)]


def test_past_the_fence_the_search_halves_what_the_budget_leaves() -> None:
    """Rank 9 (just past the fence): prefixes of 128, 64, 32, 16 suspects fail, then rank 9 alone."""
    calls = questions(256, 9).calls
    prefixes = [len(c) for c in calls[2:-1]]
    assert calls[:2] == [F({255}), F(range(248, 256))] and prefixes == [128, 64, 32, 16]
    assert calls[-1] == F({247}) and len(calls) == 7  # the budget's spare questions go to the top of the rest


def test_the_last_rank_asks_the_next_fix_candidate_on_the_way() -> None:
    """The two last rules: the prefix without the last one (the fix once the last is found), then it alone."""
    calls = questions(256, 256).calls
    assert calls[-2:] == [F(range(1, 256)), F({0})]
    assert len(calls) <= blind(256) + 2


@pytest.mark.parametrize("n", [*range(2, 40), 64, 100, 129, 256, 300])
def test_one_device_never_costs_more_than_two_questions_over_blind_bisect(n: int) -> None:
    """Every rank, a full prior and a short one: at most blind(n) + 2; inside the fence rank r costs r + 1."""
    fence = fence_size(n, 1, n)
    for prior_size in (n, 3, 1):
        for rank in range(1, n + 1):
            asked = questions(n, rank, prior_size).trainings
            assert asked <= blind(n) + 2, (prior_size, rank)
            if prior_size == n and rank <= fence:
                assert asked == (1 if rank == 1 else rank + 1)


@pytest.mark.parametrize("parallelism", [2, 3, 4, 8])
@pytest.mark.parametrize("n", [5, 17, 40, 100, 256])
def test_p_devices_never_cost_more_than_one_round_over_blind_bisect(n: int, parallelism: int) -> None:
    """The worst rank's rounds against blind bisect's worst culprit; the top P - 1 suspects cost one round."""
    blind_rounds = 0
    for culprit in range(n):
        oracle = SimulatedOracle(sets_model([{culprit}]), parallelism=parallelism)
        bisect(list(range(n)), oracle, parallelism=parallelism)
        blind_rounds = max(blind_rounds, oracle.rounds)
    for rank in range(1, n + 1):
        rounds = questions(n, rank, parallelism=parallelism).rounds
        assert rounds <= blind_rounds + 1, rank
        if rank < parallelism:
            assert rounds == 1


@st.composite
def families(draw):
    """Culprit sets over a small universe, overlapping ones included, and a random prior."""
    n = draw(st.integers(2, 24))
    universe = list(range(n))
    sets = draw(
        st.lists(st.sets(st.sampled_from(universe), min_size=1, max_size=3).map(F), min_size=1, max_size=4)
    )
    prior = draw(st.permutations(universe))
    cut = draw(st.integers(0, n))
    return universe, sets, list(prior)[:cut]


def brute_minimal(model, config: frozenset) -> bool:
    """1-minimal by every subset of one rule less: an oracle that trusts nothing the search inferred."""
    return model(config) and all(not model(config - {rule}) for rule in config)


@pytest.mark.parametrize("parallelism", [1, 2, 5])
@settings(deadline=None, max_examples=60)
@given(case=families())
def test_the_strategy_alone_answers_a_one_minimal_failing_set(case, parallelism: int) -> None:
    """Any monotone family (overlapping and interacting sets), any prior: a brute-force-checked answer."""
    universe, sets, prior = case
    model = sets_model(sets)
    oracle = SimulatedOracle(model, parallelism=parallelism)
    got = Guided(prior)(universe, oracle, parallelism=parallelism)
    assert brute_minimal(model, got)
    assert any(s <= got for s in sets) and got in {F(s) for s in sets}  # minimal in a monotone family: a set
    assert no_repeats(oracle)


@settings(deadline=None, max_examples=60)
@given(n=st.integers(3, 20), seed=st.integers(0, 10**6), data=st.data())
def test_any_predicate_still_gets_a_one_minimal_answer(n: int, seed: int, data) -> None:
    """Not monotone at all: every answer is still 1-minimal by the oracle's own answers."""
    from tests.search.search_helpers import random_predicate

    universe = list(range(n))
    predicate = random_predicate(seed, F(universe))
    prior = data.draw(st.permutations(universe))
    oracle = SimulatedOracle(predicate)
    got = Guided(list(prior))(universe, oracle)
    assert predicate(got) and all(not predicate(got - {rule}) for rule in got if len(got) > 1)


@settings(deadline=None, max_examples=30)
@given(case=families(), parallelism=st.sampled_from([1, 3]))
def test_all_culprits_with_any_prior_match_the_unguided_sets(case, parallelism: int) -> None:
    """Overlapping sets too: the layer finds every planted minimal set the fix needs, guided or not."""
    universe, sets, prior = case
    minimal = {s for s in map(F, sets) if not any(o < s for o in map(F, sets))}
    model = sets_model(sets)
    if model(F()):
        return
    _, unguided = search(universe, sets, bisect, parallelism)
    _, result = search(universe, sets, Guided(prior), parallelism)
    assert result.fix_verified and not model(result.fix)
    assert all(c.rules in minimal for c in result.culprit_sets)
    assert (F(universe) - result.fix) and len(F(universe) - result.fix) == len(F(universe) - unguided.fix)
