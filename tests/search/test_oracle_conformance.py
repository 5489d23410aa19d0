"""One conformance suite for every RepeatOracle: the simulated one and the training one.

The repeat bookkeeping documented in fusion_dd/search/oracle.py (``RepeatOracle``)
is what makes resume an exact replay: repeat indices are counted per run, so a
new run over the same finished trainings asks exactly the (configuration, repeat)
pairs the first run asked, and trains only those that never finished. Every test
here runs against ``SimulatedOracle`` (fusion_dd/testing/simulate.py) and against
``TrainingOracle`` (fusion_dd/coordinator/training_oracle.py) driven by an in-memory journal
and launcher (tests/support/oracle.py), with one device: both must give the same
answers, list the same trainings and train the same pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.core.rules import Rule
from fusion_dd.search.lanes import LanePlan
from fusion_dd.search.oracle import BudgetExhausted, Observation, Outcome, supports_repeats
from fusion_dd.testing.simulate import NoiseModel, SimulatedOracle, flip_noise, or_model
from tests.support.oracle import MARGIN, NEAR_FAIL, NEAR_PASS, TrainingLab, rules

A, B, C, D = rules("A", "B", "C", "D")
UNIVERSE = (A, B, C, D)
F = frozenset
Key = tuple[frozenset[str], int]


def names(config: frozenset[Rule]) -> frozenset[str]:
    return frozenset(rule.name for rule in config)


class SimulatedHarness:
    """Sessions of SimulatedOracle, each preloaded with what the earlier ones trained (resume)."""

    kind = "simulated"

    def __init__(self, test: Callable, noise: NoiseModel | None = None) -> None:
        self._test, self._noise = test, noise
        self._sessions: list[SimulatedOracle] = []

    def session(self, budget: int | None = None) -> SimulatedOracle:
        oracle = SimulatedOracle(self._test, 1, budget, noise=self._noise, repeats=True)
        if self._sessions:
            oracle.preload(self._sessions[-1].journal())
        self._sessions.append(oracle)
        return oracle

    def launched(self) -> list[Key]:
        return [(names(config), repeat) for oracle in self._sessions for config, repeat in oracle.launched]


class TrainingHarness:
    """Sessions of TrainingOracle over one in-memory journal (the engine's resume, without processes)."""

    kind = "training"

    def __init__(self, test: Callable, noise: NoiseModel | None = None) -> None:
        self.lab = TrainingLab(UNIVERSE, test, noise=noise)

    def session(self, budget: int | None = None) -> Any:
        return self.lab.oracle(budget)

    def launched(self) -> list[Key]:
        return list(self.lab.launched)


HARNESSES = {"simulated": SimulatedHarness, "training": TrainingHarness}


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Builds a harness of the parametrized kind: ``harness(test, noise=None)``."""
    return HARNESSES[request.param]


def alternating(config: frozenset, repeat: int, outcome: Outcome) -> Outcome:
    """Even repeats pass, odd repeats fail: every repeat index is visible in the answers."""
    return Outcome.PASS if repeat % 2 == 0 else Outcome.FAIL


def near_on_repeat_one(config: frozenset, repeat: int, outcome: Outcome) -> Observation:
    """Repeat 1 of every configuration lands near the limit (and fails)."""
    if repeat == 1:
        return Observation(repeat, Outcome.FAIL, True)
    return Observation(repeat, outcome, False)


def test_both_offer_repeats() -> None:
    assert supports_repeats(SimulatedHarness(or_model([C])).session())
    assert supports_repeats(TrainingHarness(or_model([C])).session())
    assert not supports_repeats(TrainingLab(UNIVERSE, or_model([C])).oracle(repeats=False))


def test_outcomes_answer_repeat_zero_once_and_from_the_cache_after(harness) -> None:
    lab = harness(or_model([C]))
    oracle = lab.session()
    assert oracle.outcomes([F({A}), F({C}), F({A})]) == [Outcome.PASS, Outcome.FAIL, Outcome.PASS]
    assert lab.launched() == [(F({"A"}), 0), (F({"C"}), 0)]
    assert oracle.outcomes([F({C}), F({A})]) == [Outcome.FAIL, Outcome.PASS]
    assert len(lab.launched()) == 2, "a cached answer was trained again"
    assert oracle.trials(F({C})) == [Observation(0, Outcome.FAIL, False)]
    assert oracle.trials(F({B})) == []
    assert oracle.smallest_failing == F({C})


def test_first_failing_trains_in_list_order_up_to_the_first_failure(harness) -> None:
    lab = harness(or_model([C]))
    oracle = lab.session()
    assert oracle.first_failing([F({A}), F({B}), F({C, D}), F({D}), F({C})]) == 2
    assert lab.launched() == [(F({"A"}), 0), (F({"B"}), 0), (F({"C", "D"}), 0)]
    assert oracle.first_failing([F({A}), F({D})]) is None
    assert lab.launched()[-1] == (F({"D"}), 0) and len(lab.launched()) == 4


def test_a_cached_failure_ends_first_failing_before_anything_after_it(harness) -> None:
    lab = harness(or_model([C]))
    oracle = lab.session()
    oracle.outcomes([F({B, C})])
    assert oracle.first_failing([F({A}), F({B, C}), F({D})]) == 1
    assert (F({"D"}), 0) not in lab.launched()


def test_first_failing_counts_as_asked_only_the_answers_the_caller_consumed(harness) -> None:
    lab = harness(or_model([C]))
    lab.session().outcomes([F({D})])  # an earlier run trained D
    oracle = lab.session()
    trained = len(lab.launched())
    assert oracle.first_failing([F({A}), F({C}), F({D})]) == 1
    assert oracle.trials(F({D})) == [], "D's cached answer was not consumed: it is not asked in this run"
    assert [o.repeat for o in oracle.trials(F({A}))] == [0] and [o.repeat for o in oracle.trials(F({C}))] == [0]
    assert oracle.retest([F({D})]) == [Outcome.PASS]  # repeat 0 of D, from the journal
    assert len(lab.launched()) == trained + 2  # A and C, nothing for D
    assert [o.repeat for o in oracle.trials(F({D}))] == [0]


def test_retest_asks_the_next_repeat_and_a_config_listed_twice_gets_two(harness) -> None:
    lab = harness(lambda config: False, alternating)
    oracle = lab.session()
    assert oracle.outcomes([F({A})]) == [Outcome.PASS]
    assert oracle.retest([F({A}), F({B}), F({A})]) == [Outcome.FAIL, Outcome.PASS, Outcome.PASS]
    assert lab.launched() == [(F({"A"}), 0), (F({"A"}), 1), (F({"B"}), 0), (F({"A"}), 2)]
    assert [(o.repeat, o.outcome) for o in oracle.trials(F({A}))] == [
        (0, Outcome.PASS), (1, Outcome.FAIL), (2, Outcome.PASS)
    ]
    assert oracle.outcomes([F({A}), F({B})]) == [Outcome.PASS, Outcome.PASS]  # repeat 0 again, cached
    assert oracle.retest([F({B})]) == [Outcome.FAIL]  # B's repeat 1
    assert len(lab.launched()) == 5


def test_near_threshold_is_kept_per_training(harness) -> None:
    lab = harness(or_model([C]), near_on_repeat_one)
    oracle = lab.session()
    oracle.outcomes([F({A})])
    oracle.retest([F({A}), F({A})])
    assert [(o.repeat, o.outcome, o.near_threshold) for o in oracle.trials(F({A}))] == [
        (0, Outcome.PASS, False), (1, Outcome.FAIL, True), (2, Outcome.PASS, False)
    ]


def test_an_unresolved_training_is_answered_as_unresolved(harness) -> None:
    lab = harness(lambda config: Outcome.UNRESOLVED if D in config else C in config)
    oracle = lab.session()
    assert oracle.outcomes([F({D}), F({C})]) == [Outcome.UNRESOLVED, Outcome.FAIL]
    assert oracle.first_failing([F({D}), F({C, D}), F({C})]) == 2
    assert oracle.trials(F({D})) == [Observation(0, Outcome.UNRESOLVED, False)]


def test_repeats_count_toward_the_budget_and_the_best_answer_survives(harness) -> None:
    lab = harness(or_model([C]))
    oracle = lab.session(budget=3)
    oracle.outcomes([F({A, C}), F({C})])
    oracle.retest([F({C})])
    with pytest.raises(BudgetExhausted) as caught:
        oracle.retest([F({C})])
    assert caught.value.smallest_failing == F({C})
    assert len(lab.launched()) == 3
    assert [o.repeat for o in oracle.trials(F({C}))] == [0, 1], "an unanswered retest must not count as asked"
    with pytest.raises(BudgetExhausted):
        oracle.first_failing([F({B})])


# --- replay: what resume rests on ---------------------------------------------------------

SCRIPT: list[tuple[str, list[frozenset[Rule]]]] = [
    ("outcomes", [F({A, B}), F({C, D})]),
    ("first_failing", [F({A}), F({B}), F({C}), F({D})]),
    ("retest", [F({C}), F({C}), F({A, B})]),
    ("first_failing", [F({D}), F({C, D}), F({A})]),
    ("retest", [F({D}), F({C, D})]),
    ("outcomes", [F({A}), F({B, C})]),
    ("retest", [F({A}), F({C})]),
]
NOISY = flip_noise(0.3, seed=5)


def run_script(oracle: Any, script: Sequence[tuple[str, list]]) -> list[Any]:
    """Ask every question in order; the answers and, per configuration, the trainings asked."""
    answers: list[Any] = [getattr(oracle, method)(configs) for method, configs in script]
    asked = sorted({names(c) for _, configs in script for c in configs}, key=sorted)
    trials = {tuple(sorted(n)): oracle.trials(frozenset(r for r in UNIVERSE if r.name in n)) for n in asked}
    return [answers, trials]


def test_a_new_run_over_the_same_journal_asks_the_same_and_trains_nothing(harness) -> None:
    lab = harness(or_model([C]), NOISY)
    first = run_script(lab.session(), SCRIPT)
    trained = lab.launched()
    assert len(trained) == len(set(trained))
    assert run_script(lab.session(), SCRIPT) == first
    assert lab.launched() == trained


@pytest.mark.parametrize("stop_after", range(0, 14))
def test_an_interrupted_run_resumed_trains_each_pair_once_and_answers_the_same(harness, stop_after: int) -> None:
    uninterrupted = harness(or_model([C]), NOISY)
    expected = run_script(uninterrupted.session(), SCRIPT)
    everything = uninterrupted.launched()
    assert len(everything) == 13, "the sweep of stop points must cover every training of the script"

    lab = harness(or_model([C]), NOISY)
    try:
        run_script(lab.session(budget=stop_after), SCRIPT)
    except BudgetExhausted:
        pass
    assert len(lab.launched()) == stop_after
    assert run_script(lab.session(), SCRIPT) == expected
    assert sorted(lab.launched(), key=repr) == sorted(everything, key=repr)
    assert len(set(lab.launched())) == len(lab.launched()), "a (configuration, repeat) was trained twice"


# --- the two implementations side by side -------------------------------------------------

configs = st.frozensets(st.sampled_from(UNIVERSE), max_size=4)
questions = st.lists(
    st.tuples(st.sampled_from(["outcomes", "first_failing", "retest"]), st.lists(configs, min_size=1, max_size=4)),
    min_size=1,
    max_size=8,
)


def transcript(oracle: Any, script: Sequence[tuple[str, list]]) -> list[Any]:
    """Every answer (or the budget running out, with the best answer so far), then every config's trainings."""
    seen: list[Any] = []
    for method, batch in script:
        try:
            seen.append(getattr(oracle, method)(batch))
        except BudgetExhausted as stop:
            seen.append(("exhausted", stop.smallest_failing))
    for config in sorted({c for _, batch in script for c in batch}, key=sorted):
        seen.append((sorted(config), oracle.trials(config)))
    return seen


@settings(max_examples=150, deadline=None)
@given(
    script=questions,
    culprits=st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=2),
    seed=st.integers(0, 3),
    budget=st.one_of(st.none(), st.integers(0, 12)),
)
def test_simulated_and_training_oracle_agree_on_every_question(script, culprits, seed, budget) -> None:
    noise = flip_noise(0.25, seed=seed)
    simulated, training = SimulatedHarness(or_model(culprits), noise), TrainingHarness(or_model(culprits), noise)
    assert transcript(simulated.session(budget), script) == transcript(training.session(budget), script)
    assert simulated.launched() == training.launched()


# --- what only the training oracle has: reference runs and the margin -----------------------


def test_reference_trainings_noted_as_asked_shift_the_next_repeat() -> None:
    lab = TrainingLab(UNIVERSE, lambda config: False, noise=alternating)
    everything = F(UNIVERSE)
    references = lab.oracle()  # an earlier session trained all-on twice, as the references do
    references.outcomes([everything])
    references.retest([everything])
    assert lab.launched == [(names(everything), 0), (names(everything), 1)]
    oracle = lab.oracle()
    oracle.note_asked(everything, 2)
    oracle.note_asked(everything, 1)  # never lowers the count
    assert [o.repeat for o in oracle.trials(everything)] == [0, 1]
    assert oracle.retest([everything]) == [Outcome.PASS]  # repeat 2, trained now
    assert lab.launched[-1] == (names(everything), 2)


@pytest.mark.parametrize(
    ("value", "margin", "near"),
    [
        (NEAR_PASS, MARGIN, True),
        (NEAR_FAIL, MARGIN, True),
        (0.75 + MARGIN + 0.01, MARGIN, False),
        (NEAR_PASS, 0.0, False),
        (None, MARGIN, False),
    ],
)
def test_near_threshold_is_a_metric_within_the_margin_of_the_limit(value, margin, near) -> None:
    lab = TrainingLab(UNIVERSE, lambda config: False)
    oracle = lab.oracle(margin=margin)
    lab.launch([(F({"A"}), 0)], None)
    trial = lab.cache[(F({"A"}), 0)]
    trial.finished = {"kind": "metric", "value": value} if value is not None else {"kind": "timeout", "value": None}
    assert oracle.near_threshold(trial) is near


# --- prefetch: the next question's idle devices train what comes after it -------------------


def two_device_sessions(test: Callable, budget: int | None = None) -> list[tuple[Any, Callable[[], list[Key]]]]:
    """A simulated and a training oracle, each on two devices, with its log of trainings."""
    simulated = SimulatedOracle(test, 2, budget, repeats=True)
    lab = TrainingLab(UNIVERSE, test)
    training = lab.oracle(budget)
    training.lanes = LanePlan(current=lambda: 2)
    return [
        (simulated, lambda: [(names(config), repeat) for config, repeat in simulated.launched]),
        (training, lambda: list(lab.launched)),
    ]


@pytest.mark.parametrize("kind", [0, 1], ids=["simulated", "training"])
def test_prefetch_trains_on_the_idle_device_of_the_next_question_only(kind: int) -> None:
    oracle, launched = two_device_sessions(or_model([A]))[kind]
    assert oracle.outcomes([F({A})]) == [Outcome.FAIL]
    oracle.prefetch([F({A, B})])
    assert oracle.retest([F({A})]) == [Outcome.FAIL]  # repeat 1, and A+B on the idle device
    assert launched() == [(names(F({A})), 0), (names(F({A})), 1), (names(F({A, B})), 0)]
    rounds = oracle.rounds
    assert oracle.outcomes([F({A, B})]) == [Outcome.FAIL]  # answered by the prefetched training
    assert (len(launched()), oracle.rounds) == (3, rounds)
    assert [o.repeat for o in oracle.trials(F({A, B}))] == [0]  # asked now, so it counts as asked now

    oracle.prefetch([F({C})])
    oracle.outcomes([F({B}), F({D})])  # no idle device: C is not trained
    oracle.outcomes([F({D})])  # cached: nothing is trained, and C was for the question before
    assert names(F({C})) not in {config for config, _ in launched()}
    oracle.prefetch([F({C})])
    assert oracle.first_failing([F({B, C, D})]) is None  # a failure may cancel what comes after it: no rider
    assert names(F({C})) not in {config for config, _ in launched()}


@pytest.mark.parametrize("kind", [0, 1], ids=["simulated", "training"])
def test_the_budget_goes_to_the_question_before_a_prefetched_configuration(kind: int) -> None:
    oracle, launched = two_device_sessions(or_model([A]), budget=2)[kind]
    oracle.outcomes([F({A})])
    oracle.prefetch([F({A, B})])
    assert oracle.retest([F({A})]) == [Outcome.FAIL]  # answered, not exhausted
    assert launched() == [(names(F({A})), 0), (names(F({A})), 1)]
    with pytest.raises(BudgetExhausted):
        oracle.outcomes([F({A, B})])


@pytest.mark.parametrize("kind", [0, 1], ids=["simulated", "training"])
def test_a_configuration_prefetched_twice_trains_its_repeat_beside_its_first_training(kind: int) -> None:
    oracle, launched = two_device_sessions(or_model([A]))[kind]
    oracle.prefetch([F({A}), F({A})])
    assert oracle.outcomes([F({A})]) == [Outcome.FAIL]  # repeat 0, and repeat 1 on the idle device
    assert launched() == [(names(F({A})), 0), (names(F({A})), 1)]
    rounds = oracle.rounds
    assert oracle.retest([F({A})]) == [Outcome.FAIL]  # repeat 1: answered by the prefetched training
    assert (len(launched()), oracle.rounds) == (2, rounds)
    assert [o.repeat for o in oracle.trials(F({A}))] == [0, 1]
    oracle.prefetch([F({A}), F({A})])
    oracle.outcomes([F({B})])  # both pairs trained already: nothing rides along
    assert launched()[2:] == [(names(F({B})), 0)]


@pytest.mark.parametrize("kind", [0, 1], ids=["simulated", "training"])
def test_an_oracle_without_repeats_prefetches_only_first_trainings(kind: int) -> None:
    oracle, launched = two_device_sessions(or_model([A]))[kind]
    oracle.supports_repeats = False
    oracle.prefetch([F({B}), F({B})])
    oracle.outcomes([F({A})])
    assert launched() == [(names(F({A})), 0), (names(F({B})), 0)]
