"""The search's cost in accelerator time, as report.json, the summary and the HTML page give it."""

from __future__ import annotations

from fusion_dd.report.html import _cost_facts
from fusion_dd.report.build import _add_cost, cost_lines
from fusion_dd.store.state import replay
from tests.support.states import cancelled, launched, search_started, started, trial


def curve_facts(last_step: int) -> dict:
    return {"artifacts": {"loss_curve": {"last_step": last_step}}}


def test_steps_device_seconds_and_full_training_equivalents() -> None:
    records = [
        search_started(),
        *trial("0001", [], 0.9, role="baseline", duration=100.0, **curve_facts(1000)),
        *trial("0002", ["A", "B"], 0.5, role="all_on", duration=100.0, **curve_facts(1000)),
        *trial("0003", ["A"], None, kind="early_pass", duration=30.0,
               early_stop={"kind": "early_pass", "step": 300, "reason": "passed early"}),
        *trial("0004", ["A"], 0.9, role="proof", duration=100.0, **curve_facts(1000)),
        *trial("0005", ["B"], None, kind="crash", duration=5.0),
    ]  # fmt: skip
    state = replay(records)
    report: dict = {"trials": [{"trial_id": t.trial_id, "outcome": "pass"} for t in state.trials.values()]}
    _add_cost(report, state)
    assert report["cost"] == {
        "trainings": 5, "training_steps": 3300, "steps_unknown": 1, "steps_per_full_training": 1000,
        "full_training_equivalents": 3.3, "device_seconds": 335.0, "cancelled": 0, "cancelled_device_seconds": 0.0,
    }  # fmt: skip
    assert report["early_passes"]["trainings"] == 1 and report["early_passes"]["steps"] == [300]
    assert report["early_passes"]["fix_proven_by"] == ["0004"] and report["early_passes"]["contradicted_by"] == []
    assert [entry["steps"] for entry in report["trials"]] == [1000, 1000, 300, 1000, None]
    summary = "\n".join(cost_lines(report))
    assert "3,300 training-steps (= 3.3 full trainings of 1,000 steps), 335 device-seconds" in summary
    assert "1 training(s) reported no steps" in summary and "proven by full training #0004" in summary
    facts = dict(_cost_facts(report))
    assert facts["cost"].startswith("3,300 training-steps") and "#0004" in facts["early passes"]


def test_a_contradicting_proof_is_no_proof() -> None:
    records = [
        *trial("0001", ["A"], None, kind="early_pass", early_stop={"kind": "early_pass", "step": 30}),
        *trial("0002", ["A"], 0.5, role="proof", **curve_facts(100)),
        {"type": "early_passes_revised", "round": 0, "config": ["A"], "trial_id": "0002", "reason": "it failed"},
    ]
    state = replay(records)
    report: dict = {"trials": [{"trial_id": "0001", "outcome": "pass"}, {"trial_id": "0002", "outcome": "fail"}]}
    _add_cost(report, state)
    assert report["early_passes"]["fix_proven_by"] == [] and report["early_passes"]["contradicted_by"] == ["0002"]
    assert "early verdicts revised: it failed" in "\n".join(cost_lines(report))


def test_a_cancelled_training_that_ran_costs_its_device_time_and_one_lost_or_never_launched_costs_none() -> None:
    # An interrupt, or a speculative training no question needed: it held its device until cancelled.
    # The coordinator's own cancellations carry no "launched" (trainer.record_end); the records of
    # trainings found orphaned by a later session do, and say that nobody saw them end.
    records = [
        search_started(),
        *trial("0001", [], 0.9, role="baseline", duration=100.0, **curve_facts(1000)),
        started("0002", ["A"], time=1000.0), {**launched("0002"), "time": 1000.0},
        {**cancelled("0002", was_launched=None), "time": 1060.0},
        started("0003", ["B"], time=1000.0), {**launched("0003"), "time": 1000.0},
        {**cancelled("0003", reason="lost: the coordinator stopped and the training never finished"), "end_seen": False,
         "time": 9000.0},
        started("0004", ["C"], time=1000.0), {**cancelled("0004", was_launched=False), "end_seen": False, "time": 1001.0},
        # An orphan's record as journals wrote it before "end_seen": "launched" alone marks it.
        started("0005", ["D"], time=1000.0), {**launched("0005"), "time": 1000.0},
        {**cancelled("0005", reason="lost: the coordinator stopped and the training never finished"), "time": 7000.0},
        # Ended on a full disk, seen by the coordinator: its time counts although its reason says "lost".
        started("0006", ["E"], time=2000.0), {**launched("0006"), "time": 2000.0},
        {**cancelled("0006", was_launched=None, reason="lost: the disk was full when the training ended"), "time": 2030.0},
    ]  # fmt: skip
    state = replay(records)
    report: dict = {"trials": [{"trial_id": "0001", "outcome": "pass"}]}
    _add_cost(report, state)
    assert report["cost"]["device_seconds"] == 190.0
    assert report["cost"]["cancelled"] == 2 and report["cost"]["cancelled_device_seconds"] == 90.0
    assert "190 device-seconds (90 of them in 2 cancelled training(s))" in "\n".join(cost_lines(report))
    assert "(90 of them in 2 cancelled training(s))" in dict(_cost_facts(report))["cost"]
