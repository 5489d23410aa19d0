"""Config keys end to end, through the CLI and the fake training: train.retries,
score.baseline_metric, score.all_on_metric and score.margin.

Small rule sets and one device keep each search to a handful of trainings and
make trial numbers deterministic, so a test can make exactly one training crash.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.support.cli import GRAPH, UB, launches, wrap_fake_train, write_config
from tests.support.fake_training import run_fusion_dd

RULES = {"GraphFusion": GRAPH[:5], "UBFusion": UB[:1]}
CULPRIT = GRAPH[3]
EVERYTHING = tuple(sorted(GRAPH[:5] + UB[:1]))


def report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())


def crashing_config(tmp_path: Path, crashes: int, retries: int) -> None:
    """The fake training on one device; the first ``crashes`` trainings of the culprit alone exit with code 3."""
    prelude = (
        "import json\n"
        "switch = json.load(open(os.environ['FUSION_DD_SWITCH_FILE']))['Switch']\n"
        "on = sorted(name for section in switch.values() for name, state in section.items() if state == 'on')\n"
        f"if on == [{CULPRIT!r}]:\n"
        "    marks = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'crashes')\n"
        "    os.makedirs(marks, exist_ok=True)\n"
        f"    if len(os.listdir(marks)) < {crashes}:\n"
        "        open(os.path.join(marks, os.environ['FUSION_DD_TRIAL_ID']), 'w').close()\n"
        "        sys.exit(3)\n"
    )
    config = wrap_fake_train(tmp_path, "crashing.py", prelude, "--culprits", CULPRIT)
    document = yaml.safe_load(config.read_text())
    document["rules"] = RULES
    document["train"].update(devices=[0], retries=retries)
    config.write_text(yaml.safe_dump(document))


def by_key(found: dict) -> dict[tuple[tuple[str, ...], int], list[dict]]:
    trials: dict[tuple[tuple[str, ...], int], list[dict]] = {}
    for entry in found["trials"]:
        trials.setdefault((tuple(entry["configuration"]), entry["repeat"]), []).append(entry)
    return trials


def test_train_retries_trains_a_crashed_training_again_until_it_gives_a_result(tmp_path: Path) -> None:
    crashing_config(tmp_path, crashes=2, retries=2)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = report(tmp_path)
    assert [[rule["name"] for rule in c["rules"]] for c in found["culprits"]] == [[CULPRIT]]
    attempts = by_key(found)[((CULPRIT,), 0)]
    assert [(t["attempt"], t["kind"], t["outcome"]) for t in attempts] == [
        (1, "crash", "unresolved"), (2, "crash", "unresolved"), (3, "metric", "fail")
    ]
    assert sorted(path.name for path in (tmp_path / "crashes").iterdir()) == [t["trial_id"] for t in attempts[:2]]
    assert all(len(entries) == 1 for key, entries in by_key(found).items() if key != ((CULPRIT,), 0))


def test_train_retries_zero_lets_the_first_crash_stand_as_unresolved(tmp_path: Path) -> None:
    crashing_config(tmp_path, crashes=1, retries=0)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = report(tmp_path)
    attempts = by_key(found)[((CULPRIT,), 0)]
    assert [(t["attempt"], t["kind"], t["outcome"]) for t in attempts] == [(1, "crash", "unresolved")]
    assert all(t["attempt"] == 1 for t in found["trials"]), "nothing may be retried with train.retries: 0"


def test_given_reference_metrics_are_used_instead_of_training_the_references(tmp_path: Path) -> None:
    # The fake trains 0.9 healthy and 0.5 broken; the given metrics differ, so the report shows which it used:
    # tolerance auto = 10% of the given gap, 0.05, and the limit 0.92 - 0.05.
    write_config(tmp_path, "--culprits", CULPRIT, rules=RULES,
                 score={"baseline_metric": 0.92, "all_on_metric": 0.42})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = report(tmp_path)
    assert [[rule["name"] for rule in c["rules"]] for c in found["culprits"]] == [[CULPRIT]]
    assert found["baseline"] == 0.92 and found["all_on"] == 0.42
    assert found["baseline_runs"] == [] and found["all_on_runs"] == []
    assert abs(found["threshold"]["limit"] - 0.87) < 1e-9 and abs(found["threshold"]["tolerance"] - 0.05) < 1e-9
    trained = {on for on, _ in launches(tmp_path)}
    assert () not in trained and EVERYTHING not in trained, "a given reference metric must not be trained"
    assert not {t["role"] for t in found["trials"]} & {"baseline", "all_on"}


def test_score_margin_re_trains_verdicts_that_land_near_the_limit(tmp_path: Path) -> None:
    # Baseline 0.9, tolerance 0.1: the limit is 0.8. Broken trainings read 0.78, 0.02 under it and
    # within the margin; healthy ones read 0.9, outside it. With the default margin (auto, and one
    # baseline training: 0) a clean search like this one repeats nothing.
    write_config(tmp_path, "--culprits", CULPRIT, "--bad-accuracy", "0.78", rules=RULES,
                 score={"tolerance": 0.1, "margin": 0.05})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = report(tmp_path)
    assert [[rule["name"] for rule in c["rules"]] for c in found["culprits"]] == [[CULPRIT]]
    repeated = [on for on, repeat in launches(tmp_path) if repeat > 0 and on not in ((), EVERYTHING)]
    assert repeated, "a failure 0.02 under the limit must be re-trained"
    # The fix is always trained twice ("verified" rests on both); any other pass is outside the margin.
    fix = set(EVERYTHING) - {CULPRIT}
    assert all(CULPRIT in on or set(on) == fix for on in repeated), "a pass 0.1 above the limit is outside the margin"


def test_a_timeout_with_a_unit_is_one_line_that_says_the_unit_and_gives_an_example(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, train={"timeout": "4h"})
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "fusion-dd.yaml" in lines[0] and "train.timeout" in lines[0], lines
    assert "seconds" in lines[0] and "14400" in lines[0], lines[0]
    assert not (tmp_path / ".fusion-dd").exists()  # refused before anything was written
