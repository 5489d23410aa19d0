"""The demo's public API: scenarios, candidate rules, the training command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fusion_dd.demo import (
    DEFAULT_SCENARIO,
    QUICK_SCENARIO,
    SCENARIOS,
    Scenario,
    candidate_rules,
    train_command,
)
from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import AUTOFUSE_POINTS, Section, catalog


def test_default_scenario_has_an_independent_culprit_and_an_interacting_pair() -> None:
    planted = SCENARIOS[DEFAULT_SCENARIO].planted
    assert sorted(len(culprits) for culprits in planted) == [1, 2]


def test_quick_scenario_is_a_short_single_culprit() -> None:
    quick = SCENARIOS[QUICK_SCENARIO]
    assert len(quick.planted) == 1 and len(quick.planted[0]) == 1
    assert quick.steps < SCENARIOS[DEFAULT_SCENARIO].steps


def test_there_is_a_nan_scenario() -> None:
    assert any("NaN" in scenario.description for scenario in SCENARIOS.values())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_fields(name: str) -> None:
    scenario = SCENARIOS[name]
    assert isinstance(scenario, Scenario) and scenario.name == name
    assert scenario.description and scenario.steps > 0
    assert all(isinstance(culprits, frozenset) and culprits for culprits in scenario.planted)
    assert len(set(scenario.planted)) == len(scenario.planted), "a culprit set planted twice"
    assert scenario.faults, "a scenario without a fault has nothing to find"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_candidates_are_real_cann_rules_in_their_sections(name: str) -> None:
    rules = candidate_rules(name)
    assert 30 <= len(rules) <= 80
    assert len({rule.name for rule in rules}) == len(rules)
    known = catalog()
    for rule in rules:
        if rule.section is Section.AUTOFUSE:  # AutoFuse switch points, not catalog rules
            assert rule.name in AUTOFUSE_POINTS, rule
        else:
            assert known.get(rule.name) is rule.section, rule
    autofuse = {Section.AUTOFUSE} if SCENARIOS[name].autofuse else set()
    assert {rule.section for rule in rules} == {Section.GRAPH, Section.UB} | autofuse
    names = {rule.name for rule in rules}
    for culprits in SCENARIOS[name].planted:
        assert culprits <= names


def test_train_command_has_the_switch_file_placeholder() -> None:
    argv = train_command(DEFAULT_SCENARIO)
    assert argv[0] == sys.executable
    assert argv[1:3] == ["-m", "fusion_dd.demo.train"]
    assert argv[argv.index("--scenario") + 1] == DEFAULT_SCENARIO
    assert argv[argv.index("--fusion-switch") + 1] == "{switch_file}"
    assert "--steps" not in argv and "--noise" not in argv


def test_train_command_forwards_steps_noise_and_python() -> None:
    argv = train_command(QUICK_SCENARIO, steps=7, noise=0.5, python="py")
    assert argv[0] == "py"
    assert argv[argv.index("--steps") + 1] == "7"
    assert float(argv[argv.index("--noise") + 1]) == 0.5


def test_unknown_scenario_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown demo scenario 'nope'"):
        train_command("nope")
    with pytest.raises(UsageError):
        candidate_rules("nope")


def test_imports_stay_light() -> None:
    """Listing scenarios must not import numpy; the training imports no heavy library."""
    code = (
        "import sys\n"
        "import fusion_dd.demo as demo\n"
        "demo.candidate_rules(demo.DEFAULT_SCENARIO)\n"
        "assert 'numpy' not in sys.modules, 'numpy imported'\n"
        "import fusion_dd.demo.train, fusion_dd.demo.trainer\n"
        "heavy = [m for m in ('yaml', 'joblib', 'typer', 'google.protobuf') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
