"""The search's first question, computed before any answer and trained beside the references.

The oracle here is the simulated one the benchmarks use, with the engine's
first round (``references_round``): the two references and, from three devices
on, the first question beside them.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.search import STRATEGIES, find_culprits
from fusion_dd.search.first_question import first_question, opening_width
from fusion_dd.search.lanes import LanePlan, Lanes, eager
from fusion_dd.search.oracle import Outcome
from fusion_dd.testing.simulate import SimulatedOracle, references_round, sets_model
from tests.search.search_helpers import fails, is_one_minimal_failing


def test_the_first_question_rides_only_where_idle_devices_train_guesses() -> None:
    assert [opening_width(devices, 2) for devices in (1, 2, 3, 4, 8)] == [None, None, 1, 2, 6]
    assert opening_width(8, 0) == 8  # both references given as metrics: every device is idle
    assert opening_width(3, 3) is None  # a reference trained twice: no device left


def test_the_opening_plan_sizes_only_the_first_question_and_only_it_is_eager() -> None:
    lanes = LanePlan(lambda: 8, opening=6)
    assert (lanes.width(), eager(lanes)) == (6, True)
    lanes.advance()
    assert (lanes.width(), eager(lanes)) == (8, False)
    assert not eager(LanePlan(lambda: 8)) and not eager(8)
    replayed = LanePlan(lambda: 8, recorded=[6, 8], opening=6)  # the journal's widths win
    assert replayed.width() == 6
    replayed.advance()
    assert replayed.width() == 8


class _FirstAsked(SimulatedOracle[int]):
    """A simulated oracle that remembers its first question after the references."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.questions: list[list[frozenset[int]]] = []

    def outcomes(self, configs):  # type: ignore[no-untyped-def]
        self.questions.append([frozenset(c) for c in configs])
        return super().outcomes(configs)

    def first_failing(self, configs):  # type: ignore[no-untyped-def]
        self.questions.append([frozenset(c) for c in configs])
        return super().first_failing(configs)


def _search(universe: list[int], name: str = "bisect"):  # type: ignore[no-untyped-def]
    def run(oracle: object, lanes: Lanes):  # type: ignore[no-untyped-def]
        return find_culprits(universe, oracle, STRATEGIES[name], parallelism=lanes)  # type: ignore[arg-type]

    return run


def test_the_probe_computes_exactly_the_question_the_search_then_asks_first() -> None:
    universe = list(range(64))
    run = _search(universe)
    known = {frozenset(): Outcome.PASS, frozenset(universe): Outcome.FAIL}
    wave = first_question(lambda probe: run(probe, LanePlan(lambda: 8, opening=6)), known, repeats=True)
    assert len(wave) == 6, "the opening question fills the six devices the references leave idle"
    oracle = _FirstAsked(sets_model([{40}]), parallelism=8, repeats=True)
    oracle.outcomes([frozenset(), frozenset(universe)])  # the references, as the engine asks them
    oracle.lanes = LanePlan(lambda: 8, opening=6)
    run(oracle, oracle.lanes)
    assert oracle.questions[1] == wave


def test_a_search_with_nothing_to_ask_has_no_first_question() -> None:
    known = {frozenset(): Outcome.PASS, frozenset({7}): Outcome.FAIL}
    assert first_question(lambda probe: _search([7])(probe, 8), known, repeats=True) == []


def test_the_first_question_beside_the_references_saves_a_round_and_changes_no_answer() -> None:
    universe = list(range(256))
    run = _search(universe)
    plain = SimulatedOracle(sets_model([{100}, {200}]), parallelism=4, repeats=True)
    plain.outcomes([frozenset(), frozenset(universe)])
    before = run(plain, 4)
    riding = SimulatedOracle(sets_model([{100}, {200}]), parallelism=4, repeats=True)
    lanes = references_round(riding, universe, run, beside=True)
    assert (riding.trainings, riding.rounds) == (4, 1), "the references and two probes, one round"
    after = run(riding, lanes)
    assert [c.rules for c in after.culprit_sets] == [c.rules for c in before.culprit_sets]
    assert after.fix == before.fix and after.fix_verified
    assert riding.rounds == plain.rounds - 1
    assert len(set(riding.launched)) == len(riding.launched), "no (configuration, repeat) is trained twice"


def test_on_two_devices_the_first_round_is_the_references_alone() -> None:
    universe = list(range(32))
    run = _search(universe)
    oracle = SimulatedOracle(sets_model([{5}]), parallelism=2, repeats=True)
    assert references_round(oracle, universe, run, beside=True) == 2
    assert oracle.calls == [frozenset(), frozenset(universe)]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(4, 80),
    devices=st.integers(3, 12),
    picks=st.lists(st.lists(st.integers(0, 79), min_size=1, max_size=2), min_size=1, max_size=3),
    name=st.sampled_from(["bisect", "ddmin"]),
)
def test_riding_beside_the_references_finds_what_the_plain_search_finds(
    n: int, devices: int, picks: list[list[int]], name: str
) -> None:
    """Same planted sets and the same verified fix with the first question beside the references; nothing trained twice."""
    universe = list(range(n))
    sets = [frozenset(x % n for x in pick) for pick in picks]
    run = _search(universe, name)
    plain = SimulatedOracle(sets_model(sets), parallelism=devices, repeats=True)
    plain.outcomes([frozenset(), frozenset(universe)])
    before = run(plain, devices)
    riding = SimulatedOracle(sets_model(sets), parallelism=devices, repeats=True)
    after = run(riding, references_round(riding, universe, run, beside=True))
    model = sets_model(sets)
    assert after.fix_verified and before.fix_verified and not fails(model, after.fix)
    assert all(is_one_minimal_failing(model, c.rules) for c in after.culprit_sets)
    assert len(set(riding.launched)) == len(riding.launched), "no (configuration, repeat) is trained twice"


def test_by_default_the_first_round_is_the_references_alone_on_any_number_of_devices() -> None:
    """The default (early passes possible) keeps the first question after the references."""
    universe = list(range(32))
    run = _search(universe)
    oracle = SimulatedOracle(sets_model([{5}]), parallelism=8, repeats=True)
    assert references_round(oracle, universe, run) == 8
    assert oracle.calls == [frozenset(), frozenset(universe)]
