"""Masks and antichains answer exactly what scanning every answer would (fusion_dd.search.masks)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.search import STRATEGIES, NoisePolicy, find_culprits
from fusion_dd.search.bisection import bisect
from fusion_dd.search.masks import Answers, Antichains, Masks, answers_from
from fusion_dd.search.oracle import Outcome
from fusion_dd.testing.simulate import SimulatedOracle, flip_noise, sets_model

F = frozenset
RULES = list("abcdefgh")
configs = st.frozensets(st.sampled_from(RULES), max_size=8)
answers = st.lists(st.tuples(configs, st.booleans()), max_size=25)


def test_a_mask_has_the_bit_of_each_rule_by_its_position_and_strays_get_new_bits() -> None:
    masks = Masks(RULES)
    assert masks.of(F("ac")) == 0b101
    assert masks.of(F()) == 0
    assert masks.of(F({"z"})) == 1 << 8  # outside the universe: inside no configuration of it
    assert masks.rule(8) == "z"
    assert masks.starts_with(RULES) and not masks.starts_with(list("ba"))


def test_a_remembered_mask_is_used_as_given() -> None:
    masks = Masks(RULES)
    masks.remember(F("ab"), 0b11)
    assert masks.of(F("ab")) == 0b11


@settings(deadline=None, max_examples=300)
@given(seen=answers, question=configs, fails=st.booleans())
def test_antichains_see_a_contradiction_exactly_when_a_scan_of_all_answers_does(seen, question, fails) -> None:
    masks = Masks(RULES)
    chains = Antichains()
    for config, failed in seen:
        chains.add(masks.of(config), failed)
    if fails:
        scan = any(question <= config for config, failed in seen if not failed)
    else:
        scan = any(config <= question for config, failed in seen if failed)
    assert chains.contradicts(masks.of(question), fails) == scan


@settings(deadline=None, max_examples=300)
@given(seen=answers)
def test_antichains_hold_exactly_the_minimal_failing_and_maximal_passing_answers(seen) -> None:
    masks = Masks(RULES)
    chains = Antichains()
    for config, failed in seen:
        chains.add(masks.of(config), failed)
    failing = {config for config, failed in seen if failed}
    passing = {config for config, failed in seen if not failed}
    minimal = {masks.of(c) for c in failing if not any(other < c for other in failing)}
    maximal = {masks.of(c) for c in passing if not any(other > c for other in passing)}
    assert set(chains.min_fail) == minimal
    assert set(chains.max_pass) == maximal
    assert all(chains.is_min_fail(mask) for mask in minimal)


def test_answers_rebuild_their_antichains_when_an_answer_changes() -> None:
    known = Answers(Masks(RULES))
    known.note(F("ab"), True)
    known.note(F("abc"), False)  # contradicts: a subset fails
    assert known.antichains.contradicts(known.masks.of(F("ab")), True)
    known.note(F("abc"), True)  # the answer changed
    assert not known.antichains.contradicts(known.masks.of(F("ab")), True)
    snapshot = known.snapshot()
    known.note(F("a"), True)
    assert F("a") not in snapshot and dict(snapshot) == {F("ab"): True, F("abc"): True}


def test_bisect_gives_the_same_answer_from_plain_known_answers_and_from_answers_with_masks() -> None:
    fails = sets_model([{"c"}, {"f", "g"}])
    known = {F("abcdefgh"): Outcome.FAIL, F("abcd"): Outcome.FAIL, F("ab"): Outcome.PASS}
    plain = SimulatedOracle(fails, parallelism=2)
    masked = SimulatedOracle(fails, parallelism=2)
    first = bisect(RULES, plain, parallelism=2, known=known)
    second = bisect(RULES, masked, parallelism=2, known=answers_from(known, Masks(RULES)))
    assert first == second == F("c")
    assert plain.calls == masked.calls


def test_find_culprits_with_noise_is_deterministic_and_right_on_many_culprits() -> None:
    """Hundreds of culprits, flips, the guard on: every culprit is found and a replay asks the same."""
    universe = list(range(300))
    culprits = list(range(0, 300, 3))
    runs = []
    for _ in range(2):
        oracle = SimulatedOracle(
            sets_model([{c} for c in culprits]),
            parallelism=2,
            noise=flip_noise(0.02, seed=7, exempt=[F(), F(universe)]),
        )
        result = find_culprits(universe, oracle, STRATEGIES["bisect"], parallelism=2, noise=NoisePolicy())
        runs.append((oracle.launched, sorted(min(c.rules) for c in result.culprit_sets), result.fix_verified))
    assert runs[0] == runs[1]
    assert runs[0][1] == culprits and runs[0][2]


@settings(deadline=None, max_examples=300)
@given(seen=st.lists(st.tuples(configs, st.sampled_from([True, False, None])), max_size=30))
def test_antichains_taking_back_changed_answers_hold_what_a_rebuild_from_the_answers_left_holds(seen) -> None:
    # None: the configuration loses its answer (as a verdict that becomes UNRESOLVED).
    masks = Masks(RULES)
    chains = Antichains()
    current: dict[int, bool] = {}
    for config, answer in seen:
        mask = masks.of(config)
        if mask in current:
            old = current.pop(mask)
            chains.remove(mask, old, [m for m, failed in current.items() if failed is old])
        if answer is not None:
            current[mask] = answer
            chains.add(mask, answer)
        rebuilt = Antichains()
        for other, failed in current.items():
            rebuilt.add(other, failed)
        assert set(chains.min_fail) == set(rebuilt.min_fail)
        assert len(chains.min_fail) == len(set(chains.min_fail))
        assert set(chains.max_pass) == set(rebuilt.max_pass) and len(chains.max_pass) == len(set(chains.max_pass))
