"""The planted faults behave as the search needs them to.

For every scenario, with fusion-dd's own scoring rule:
(a) the fix configuration (every candidate on except one rule of each culprit
    set) stays well within the tolerance of the baseline, and so does each benign
    rule alone (checked on the quick scenario, where it is cheap);
(b) each culprit set fails clearly when it is on, whatever the other rules do;
(c) each half of an interacting pair passes without its partner.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from fusion_dd.demo import QUICK_SCENARIO, SCENARIOS
from tests.demo.demo_support import names, prefetch, scoring, train

SCENARIO_NAMES = sorted(SCENARIOS)
#: "Well within" the tolerance: a benign configuration may use a quarter of it.
BENIGN_SHARE = 0.25
#: "Clearly" failing: at least twice the tolerance below the baseline.
FAIL_FACTOR = 2.0


def _culprits_with_random_others(scenario: str) -> list[frozenset[str]]:
    rng = random.Random(scenario)
    configurations = []
    for culprits in SCENARIOS[scenario].planted:
        others = [name for name in names(scenario) if name not in culprits]
        configurations.append(frozenset(culprits | {n for n in others if rng.random() < 0.5}))
    return configurations


def _pair_halves(scenario: str) -> list[frozenset[str]]:
    return [
        frozenset({rule})
        for culprits in SCENARIOS[scenario].planted
        if len(culprits) > 1
        for rule in sorted(culprits)
    ]


def _benign_singles() -> list[frozenset[str]]:
    culprits = set().union(*SCENARIOS[QUICK_SCENARIO].planted)
    return [frozenset({n}) for n in names(QUICK_SCENARIO) if n not in culprits]


@pytest.fixture(scope="module", autouse=True)
def _train_everything_on_two_cores() -> None:
    requests = []
    for scenario in SCENARIO_NAMES:
        configurations = [frozenset(), frozenset(names(scenario))]
        configurations += _fix_configurations(scenario)
        configurations += list(SCENARIOS[scenario].planted)
        configurations += _culprits_with_random_others(scenario)
        configurations += _pair_halves(scenario)
        requests += [(scenario, on) for on in configurations]
    requests += [(QUICK_SCENARIO, on) for on in _benign_singles()]
    prefetch(requests)


def _fix_configurations(scenario: str) -> list[frozenset[str]]:
    everything = set(names(scenario))
    planted = SCENARIOS[scenario].planted
    return [
        frozenset(everything - set(dropped))
        for dropped in itertools.product(*(sorted(culprits) for culprits in planted))
    ]


def _assert_benign(scenario: str, on: frozenset[str], steps: int | None = None) -> None:
    score = scoring(scenario, steps)
    accuracy = train(scenario, on, steps=steps).accuracy
    assert not math.isnan(accuracy)
    assert abs(accuracy - score.baseline) <= BENIGN_SHARE * score.tolerance, (
        f"{scenario}: {accuracy:.4f} vs baseline {score.baseline:.4f} "
        f"(tolerance {score.tolerance:.4f})"
    )


def _assert_fails_clearly(scenario: str, on: frozenset[str]) -> None:
    score = scoring(scenario)
    accuracy = train(scenario, on).accuracy
    assert math.isnan(accuracy) or accuracy < score.baseline - FAIL_FACTOR * score.tolerance, (
        f"{scenario}: {accuracy:.4f} with {sorted(on)}; baseline {score.baseline:.4f}, "
        f"tolerance {score.tolerance:.4f}"
    )


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_all_on_fails_and_the_baseline_learns(scenario: str) -> None:
    score = scoring(scenario)
    assert score.baseline > 0.7
    assert score.fails(score.all_on)


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_fix_configuration_stays_within_tolerance(scenario: str) -> None:
    for on in _fix_configurations(scenario):
        _assert_benign(scenario, on)


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_each_culprit_set_fails_alone(scenario: str) -> None:
    for culprits in SCENARIOS[scenario].planted:
        _assert_fails_clearly(scenario, culprits)


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_each_culprit_set_fails_whatever_the_others_do(scenario: str) -> None:
    for on in _culprits_with_random_others(scenario):
        _assert_fails_clearly(scenario, on)


@pytest.mark.parametrize(
    "scenario",
    [name for name in SCENARIO_NAMES if any(len(c) > 1 for c in SCENARIOS[name].planted)],
)
def test_half_of_an_interacting_pair_passes_alone(scenario: str) -> None:
    for on in _pair_halves(scenario):
        _assert_benign(scenario, on)


def test_nan_scenario_diverges_to_nan() -> None:
    nan_scenario = next(n for n, s in SCENARIOS.items() if "NaN" in s.description)
    result = train(nan_scenario, names(nan_scenario))
    assert math.isnan(result.accuracy)
    assert any(math.isnan(loss) for _, loss in result.losses)


def test_every_benign_rule_alone_stays_within_tolerance() -> None:
    for on in _benign_singles():
        _assert_benign(QUICK_SCENARIO, on)
