"""A reference without a metric, said in words (fusion_dd.report.trials.reference_words)."""

from __future__ import annotations

from pathlib import Path

from fusion_dd.report.build import device_time_text, summary_lines
from fusion_dd.report.trials import reference_words


def _stopped_on_nan(role: str = "all_on") -> dict:
    return {"role": role, "kind": "nonfinite", "outcome": "fail", "metric": None,
            "reason": "stopped early at step 40: loss nan"}


def test_a_metric_is_said_as_it_is() -> None:
    assert reference_words({"all_on": 0.312, "trials": [_stopped_on_nan()]}, "all_on") == "0.312"


def test_a_reference_without_a_metric_says_its_verdict_and_why() -> None:
    report = {"all_on": None, "trials": [{"role": "baseline", "kind": "metric", "outcome": "pass"}, _stopped_on_nan()]}
    assert reference_words(report, "all_on") == "fails, no metric (stopped early at step 40: loss nan)"
    crashed = {"role": "baseline", "kind": "crash", "outcome": "unresolved", "reason": "exit code 1"}
    assert reference_words({"baseline": None, "trials": [crashed]}, "baseline") == "no usable metric (exit code 1)"


def test_the_last_finished_training_of_a_reference_speaks_for_it() -> None:
    retried = [{"role": "all_on", "kind": "crash", "outcome": "unresolved", "reason": "exit code 1"}, _stopped_on_nan()]
    assert reference_words({"trials": retried}, "all_on").startswith("fails, no metric")
    running = {"role": "all_on", "outcome": "running"}  # no verdict yet: nothing to say
    assert reference_words({"trials": [running]}, "all_on") is None
    assert reference_words({"trials": []}, "all_on") is None


def test_the_summary_says_what_the_all_on_training_did_without_a_metric(tmp_path: Path) -> None:
    report = {
        "status": "found", "message": "culprits found", "baseline": 0.93, "all_on": None, "trainings": 2, "budget": 9,
        "trials": [{"role": "baseline", "kind": "metric", "outcome": "pass", "metric": 0.93}, _stopped_on_nan()],
    }  # fmt: skip
    lines = summary_lines(report, tmp_path)
    assert "  all candidates on:             fails, no metric (stopped early at step 40: loss nan)" in lines
    broken = {**report, "status": "training_broken", "baseline": None}
    assert not any("all candidates on" in line for line in summary_lines(broken, tmp_path))  # told on stderr


def test_device_time_is_said_in_the_unit_a_person_reads() -> None:
    assert device_time_text(0.764) == "0.8 device-seconds"
    assert device_time_text(95) == "95 device-seconds"
    assert device_time_text(720) == "12 device-minutes"
    assert device_time_text(4 * 3600 + 360) == "4.1 device-hours"
