"""The trials of ``report.json``: each one's entry, shared by the report and localization's additions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..core.scoring import Threshold
from ..store.state import SearchState, TrialState


def json_number(value: float | None) -> float | str | None:
    """A metric as JSON can hold it: a non-finite one (nan, inf) as its text."""
    if value is None or math.isfinite(value):
        return value
    return str(value)


def _sorted_names(config: frozenset[str], memo: dict[frozenset[str], list[str]] = {}) -> list[str]:  # noqa: B006
    """A configuration's rule names, sorted; memoized, since trials share configurations (repeats,
    retries; replay decodes equal masks to one frozenset) and sorting a thousand names is not free.
    The list is shared: callers serialize it, never change it."""
    found = memo.get(config)
    if found is None:
        if len(memo) >= 1 << 14:
            memo.clear()
        found = memo[config] = sorted(config)
    return found


def trial_entry(trial: TrialState, threshold: Threshold | None, crash_is_failure: bool) -> dict[str, Any]:
    """One trial as ``report.json`` lists it: configuration, placement, outcome, metric, log.

    ``threshold`` gives the outcome (pass or fail); without one (a report of
    trials added later, by ``fusion-dd localize``) the outcome is left out.
    """
    entry: dict[str, Any] = {
        "trial_id": trial.trial_id,
        "role": trial.role,
        "configuration": _sorted_names(trial.config),
        "repeat": trial.repeat,
        "attempt": trial.attempt,
        "device": ",".join(trial.device),
        "trial_dir": trial.trial_dir,
    }
    placement = (trial.launch or {}).get("placement") or {}
    if placement.get("worker"):
        # A cluster launcher journaled where the trial ran: the device id the training saw
        # (the slot it was given is the worker's name), with host and worker apart.
        entry.update(device=",".join(placement.get("device") or ()), host=placement.get("host"),
                     worker=placement.get("worker_name") or placement.get("worker"))
    if placement.get("slurm_job_id"):
        entry["slurm_job_id"] = str(placement["slurm_job_id"])  # the trial's own Slurm job (train.launcher: slurm)
    measurement = trial.measurement
    if measurement is not None and trial.finished is not None:
        outcome = None
        if threshold is not None:
            outcome = threshold.verdict(measurement, crash_is_failure).value
        entry.update(
            outcome=outcome,
            kind=measurement.kind,
            metric=json_number(measurement.value),
            reason=measurement.reason,
            duration=trial.finished.get("duration"),
            log=trial.log,
        )
    elif trial.cancelled is not None:
        entry.update(outcome="cancelled", reason=trial.cancelled.get("reason", ""))
    else:
        entry.update(outcome="running")
    return entry


def switch_counts(state: SearchState) -> dict[str, int]:
    """How many finished trials proved (through fusion_result.json) that their switch file was applied, and not."""
    counts: dict[str, int] = {}
    for trial in state.trials.values():
        if trial.finished is not None:
            status = trial.finished.get("switch_check", "unverified")
            counts[status] = counts.get(status, 0) + 1
    return counts


def trial_steps(trial: TrialState) -> int | None:
    """How many steps a finished training ran: its early stop's step, else the last step it reported."""
    finished = trial.finished or {}
    stop = finished.get("early_stop") or {}
    if isinstance(stop.get("step"), int):
        return int(stop["step"])
    facts = trial.facts("loss_curve")
    if isinstance(facts.get("last_step"), int):
        return int(facts["last_step"])
    curve = facts.get("curve")
    if isinstance(curve, list) and curve and isinstance(curve[-1], list) and isinstance(curve[-1][0], int):
        return int(curve[-1][0])
    return None


def search_cost(state: SearchState) -> dict[str, Any]:
    """What the finished trainings cost: their count, training-steps, full-training equivalents, device-seconds."""
    finished = [trial for trial in state.trials.values() if trial.finished is not None]
    steps = [trial_steps(trial) for trial in finished]
    baseline = state.cache().get((frozenset(), 0))
    length = trial_steps(baseline) if baseline is not None and baseline.finished is not None else None
    known = [value for value in steps if value is not None]
    device_seconds = sum(
        float(trial.finished.get("duration") or 0.0) * max(len(trial.device), 1)
        for trial in finished
        if trial.finished is not None
    )
    # A reference that printed its curve where the config does not read it says how to read it (LossCurveHook).
    advice = next((text for trial in finished if isinstance(text := trial.facts("loss_curve").get("advice"), str)), None)
    stopped = [(trial, seconds) for trial in state.trials.values() if (seconds := cancelled_seconds(trial)) is not None]
    cancelled_seconds_total = sum(seconds * max(len(trial.device), 1) for trial, seconds in stopped)
    return {
        "trainings": len(finished),
        "training_steps": sum(known) if known else None,
        "steps_unknown": len(steps) - len(known),
        "steps_per_full_training": length,
        "full_training_equivalents": round(sum(known) / length, 2) if known and length else None,
        "device_seconds": round(device_seconds + cancelled_seconds_total, 1),
        "cancelled": len(stopped),
        "cancelled_device_seconds": round(cancelled_seconds_total, 1),
        **({"steps_advice": advice} if advice and len(known) < len(steps) else {}),
    }


def _end_seen(cancel: dict[str, Any]) -> bool:
    """Whether the coordinator saw a cancelled training end, so that its cancellation time is its end.

    A training found orphaned by a later session says it was not (``end_seen``);
    journals written before that key existed marked those records alone with
    ``launched``.
    """
    if "end_seen" in cancel:
        return bool(cancel["end_seen"])
    return "launched" not in cancel


def cancelled_seconds(trial: TrialState) -> float | None:
    """How long a cancelled training held its devices; None when it did not run or nobody saw it end.

    A training the coordinator stopped (an interrupt, a speculative one no
    question needed) ran from its launch to its cancellation, both journaled:
    accelerator time spent, which the cost must show. One that was lost (the
    coordinator died meanwhile) ended at a time nobody recorded, and one that
    never launched cost nothing.
    """
    cancel = trial.cancelled
    if trial.finished is not None or cancel is None or trial.launch is None or not trial.costs_budget:
        return None
    if not _end_seen(cancel):
        return None
    began, ended = trial.launch.get("time", trial.started_at), cancel.get("time")
    if not isinstance(began, (int, float)) or not isinstance(ended, (int, float)):
        return None
    return max(0.0, float(ended) - float(began))


def reference_words(report: Mapping[str, Any], role: str) -> str | None:
    """A reference's result in words: its metric, or why it has none and what that counted as.

    A reference whose training stopped on a NaN loss, crashed or timed out has no
    metric, and the summary must still say what it did: "fails (stopped early
    at step 40: loss nan)" tells a user why the search went on, where a blank
    line would hide it. None when no training of it finished.
    """
    value = report.get(role)
    if value is not None:
        return str(value)
    runs = [entry for entry in report.get("trials") or [] if entry.get("role") == role and "kind" in entry]
    if not runs:
        return None
    last = runs[-1]
    reason = last.get("reason") or last.get("kind")
    verdict = {"fail": "fails", "pass": "passes"}.get(str(last.get("outcome")), "no usable metric")
    if verdict != "no usable metric":
        return f"{verdict}, no metric ({reason})"
    return f"no usable metric ({reason})"
