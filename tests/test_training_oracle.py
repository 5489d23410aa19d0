"""The training oracle: cache first, launches in order, budget enforced."""

import pytest

from fusion_dd.rules import Rule, Section
from fusion_dd.scoring import Threshold
from fusion_dd.search.oracle import BudgetExhausted, Outcome
from fusion_dd.state import TrialState
from fusion_dd.training_oracle import TrainingOracle

A, B, C, D = (Rule(name, Section.GRAPH) for name in "ABCD")
CULPRIT = "C"


class FakeLab:
    """Trains instantly: accuracy 0.5 when the culprit is on, 0.9 otherwise."""

    def __init__(self, budget):
        self.budget = budget
        self.cache = {}
        self.launched = []

    def launch(self, keys, stop_after):
        done = {}
        for key in keys:
            names, repeat = key
            trial = TrialState(str(len(self.launched)), names, repeat, ("0",), "t", 0.0)
            trial.finished = {"kind": "metric", "value": 0.5 if CULPRIT in names else 0.9}
            self.launched.append(names)
            self.cache[key] = done[key] = trial
            if stop_after is not None and stop_after(trial):
                break
        return done

    def oracle(self):
        return TrainingOracle(
            threshold=Threshold(0.9, 0.04, "max"),
            crash_is_failure=False,
            cached=self.cache.get,
            launch=self.launch,
            remaining_budget=lambda: self.budget - len(self.launched),
        )


def test_first_failing_stops_at_the_first_failure_in_order_and_caches():
    lab = FakeLab(budget=10)
    oracle = lab.oracle()
    configs = [frozenset({A}), frozenset({C}), frozenset({D})]
    assert oracle.first_failing(configs) == 1
    assert lab.launched == [frozenset({"A"}), frozenset({"C"})]
    assert oracle.first_failing(configs) == 1
    assert len(lab.launched) == 2, "cached answers must not launch again"
    assert oracle.smallest_failing == frozenset({C})


def test_cached_failure_means_nothing_after_it_is_launched():
    lab = FakeLab(budget=10)
    oracle = lab.oracle()
    oracle.outcomes([frozenset({B, C})])
    assert oracle.first_failing([frozenset({A}), frozenset({B, C}), frozenset({D})]) == 1
    assert frozenset({"D"}) not in lab.launched


def test_outcomes_and_budget_exhaustion_keep_the_best_so_far():
    lab = FakeLab(budget=2)
    oracle = lab.oracle()
    assert oracle.outcomes([frozenset({A, C}), frozenset({B})]) == [Outcome.FAIL, Outcome.PASS]
    with pytest.raises(BudgetExhausted) as info:
        oracle.outcomes([frozenset({C})])
    assert info.value.smallest_failing == frozenset({A, C})
