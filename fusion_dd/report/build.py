"""What a search hands back: ``report.json`` for programs, a summary for people, and the fix cfg.

Everything here is derived from the journal's state plus the search result, so a
report can always be rebuilt from the journal alone.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..config.settings import SearchConfig
from ..config.session import flags_text, resume_flags
from ..core.rules import Rule
from ..core.scoring import Preconditions, Threshold, combine_runs
from ..search.culprits import CulpritSearch
from ..search.oracle import Outcome
from ..store.state import EARLY_KINDS, EARLY_PASS, LOCALIZE_ROLE, SearchState, TrialState
from .trials import json_number as _number, reference_words, search_cost, switch_counts, trial_entry, trial_steps as _trial_steps
from ..store.atomic import dumps_indented, write_bytes_atomic, write_text_atomic
from ..backends import fix_name_of
from ..backends.cann.switch import SwitchFile, render_switch
from ..core.hooks import fired_although_off_of, switch_check_of, known_to_compiler_of, unknown_to_compiler_of

REPORT_NAME = "report.json"
HTML_NAME = "report.html"  # drawn by fusion_dd.report.html
FIX_NAME = "fusion_switch.cfg"  # CANN's; other compilers' fixes are named by fusion_dd.backends.FIX_NAMES
AUTOFUSE_FLAGS_NAME = "autofuse_flags.txt"  # the fix's AUTOFUSE_FLAGS value, when AutoFuse points were candidates


def html_wanted() -> bool:
    """Whether report.html is drawn: ``FUSION_DD_HTML=0`` asks for no page (scripts that only want report.json)."""
    return os.environ.get("FUSION_DD_HTML", "1").strip() != "0"

STATUS_TEXT = {
    "found": "culprits found",
    "budget_exhausted": "budget exhausted before the search finished",
    "baseline_fails": "refused: the baseline (all candidates off) does not pass",
    "no_failure": "refused: all candidates on does not fail",
    "interrupted": "interrupted",
    "switch_ignored": "stopped: the compiler ignored the switch file",
    "too_noisy": "refused: the failure is small against the baseline's run-to-run noise",
    "training_broken": "stopped: the training does not run (no answer about fusion)",
    "running": "running: the report of the search so far",
}


def _by_config(state: SearchState) -> dict[frozenset[str], list[TrialState]]:
    """The finished search trainings of each configuration, in journal order (one pass over all trials)."""
    found: dict[frozenset[str], list[TrialState]] = {}
    for trial in state.trials.values():
        if trial.measurement is not None and trial.role != LOCALIZE_ROLE:  # a dumped training answers no search question
            found.setdefault(frozenset(trial.config), []).append(trial)
    return found


def _backing(
    by_config: Mapping[frozenset[str], Sequence[TrialState]],
    config: frozenset[Rule],
    claim: Outcome,
    threshold: Threshold | None,
    crash_is_failure: bool,
) -> dict[str, int]:
    """How many finished trainings of exactly ``config`` there are, and how many back the claim.

    ``trainings`` counts every finished training of the configuration (repeats
    included), ``support`` those whose verdict is ``claim`` (FAIL for a culprit
    set, PASS for the fix): after noise was seen a claim needs two.
    ``by_config``: :func:`_by_config` of the search, built once per report (a report
    of hundreds of culprit sets scanned every trial for each).
    """
    if threshold is None:
        return {"trainings": 0, "support": 0}
    trials = by_config.get(frozenset(rule.name for rule in config), ())
    verdicts = [threshold.verdict(trial.measurement, crash_is_failure) for trial in trials if trial.measurement is not None]
    return {"trainings": len(verdicts), "support": sum(verdict is claim for verdict in verdicts)}


def _early_passes_of(by_config: Mapping[frozenset[str], Sequence[TrialState]], config: frozenset[Rule]) -> int:
    """Trainings of ``config`` that passed early (``early_stop.pass_at``): a summary never counts them as full ones."""
    trials = by_config.get(frozenset(rule.name for rule in config), ())
    return sum(1 for trial in trials if (trial.finished or {}).get("kind") == EARLY_PASS)


def _inconsistency_json(item: Any) -> dict[str, Any]:
    """The evidence of one disagreement between trainings, for people and programs."""
    return {
        "kind": item.kind,
        "explanation": item.explanation,
        "configurations": [
            {
                "on": sorted(rule.name for rule in config),
                "trainings": [
                    {"repeat": obs.repeat, "outcome": obs.outcome.value, "near_threshold": obs.near_threshold}
                    for obs in observations
                ],
                "verdict": verdict.value,
            }
            for config, observations, verdict in zip(item.configs, item.observations, item.verdicts)
        ],
    }


def _rules_json(rules: frozenset[Rule]) -> list[dict[str, str]]:
    return [rule.to_json() for rule in sorted(rules)]


def required_lines(report: Mapping[str, Any]) -> list[str]:
    """The required passes, told apart from the culprits: they stay on in the fix and everywhere else."""
    required = report.get("required") or {}
    if not required.get("rules"):
        return []
    names = ", ".join(required["rules"])
    lines = [
        f"  required: {names} (not a culprit: with every candidate off the training cannot run, "
        f"#{required.get('trial_id')}: {required.get('reason') or 'crash'}; kept on in every configuration and in the fix)"
    ]
    tail = required.get("log_tail") or []
    if tail:
        lines.append(f"    last {len(tail)} line(s) of {required.get('log')}:")
        lines.extend(f"    | {line}" for line in tail)
    return lines


def build_report(
    *,
    config: SearchConfig,
    state: SearchState,
    status: str,
    preconditions: Preconditions | None,
    result: CulpritSearch | None,
    rounds: int | None,
    message: str | None = None,
    required: frozenset[Rule] = frozenset(),
) -> dict[str, Any]:
    """``required``: the passes kept on in every configuration trained (a culprit set was trained with them)."""
    threshold = preconditions.threshold if preconditions is not None else None
    if message is None:
        refused = preconditions is not None and not preconditions.ok and preconditions.status == status
        message = preconditions.message if refused and preconditions is not None else STATUS_TEXT[status]
    cache = state.cache()
    baseline_measurements = [
        trial.measurement
        for (names, _repeat), trial in sorted(cache.items(), key=lambda item: item[0][1])
        if not names and trial.measurement is not None
    ]
    baseline_runs = [measurement.value for measurement in baseline_measurements]
    if threshold is not None:
        baseline: float | None = threshold.baseline
    elif config.score.baseline_metric is not None:
        baseline = config.score.baseline_metric
    else:
        # A search stopped before its threshold was set still shows what the baseline measured.
        baseline = combine_runs(baseline_measurements).value if baseline_measurements else None
    everything = frozenset(rule.name for rule in config.rules)
    all_on_runs = [
        trial.measurement
        for (names, _repeat), trial in sorted(cache.items(), key=lambda item: item[0][1])
        if names == everything and trial.measurement is not None
    ]
    if config.score.all_on_metric is not None:
        all_on: float | None = config.score.all_on_metric
    else:
        all_on = combine_runs(all_on_runs).value if all_on_runs else None
    report: dict[str, Any] = {
        "status": status,
        "message": message,
        "version": __version__,
        "candidates": [rule.to_json() for rule in config.rules],
        "trainings": state.launched,
        "budget": config.search.budget,
        "rounds": rounds,
        "strategy": config.search.strategy,
        "baseline": _number(baseline),
        "baseline_runs": [_number(value) for value in baseline_runs],
        "all_on": _number(all_on),
        "all_on_runs": [_number(run.value) for run in all_on_runs],
        "threshold": None,
        "culprits": [],
        "switched_off": [],
        "fix_verified": False,
        "fix_config": None,
        "smallest_failing": None,
        "flaky": False,
        "confirmed": False,
        "inconsistencies": [],
    }
    if threshold is not None:
        report["threshold"] = {
            "goal": threshold.goal,
            "baseline": _number(threshold.baseline),
            "tolerance": _number(threshold.tolerance),
            "limit": _number(threshold.limit),
            "tolerance_setting": config.score.tolerance.describe(),
        }
        if threshold.bitwise:
            report["threshold"]["bitwise"] = True
    if result is not None:
        by_config = _by_config(state)
        report["culprits"] = [
            {
                "rules": _rules_json(culprit.rules),
                "kind": culprit.kind,
                "switched_off": sorted(rule.name for rule in culprit.switched_off),
                "reason": culprit.reason,
                **_backing(by_config, culprit.rules | required, Outcome.FAIL, threshold, config.score.crash_is_failure),
            }
            for culprit in result.culprit_sets
        ]
        switched_off = sorted({rule.name for culprit in result.culprit_sets for rule in culprit.switched_off})
        report["switched_off"] = switched_off
        # How the switched-off rules were chosen, and which of them may hide culprit sets.
        report["hitting_set"] = result.hitting_set
        report["may_hide"] = sorted(rule.name for rule in result.may_hide)
        report["fix_verified"] = bool(result.fix_verified)
        fix_backing = _backing(by_config, result.fix, Outcome.PASS, threshold, config.score.crash_is_failure)
        report["fix_verified_by"] = fix_backing["support"]
        report["fix_trainings"] = fix_backing["trainings"]
        report["fix_verified_early"] = _early_passes_of(by_config, result.fix)
        if status == "found":
            report["fix_config"] = fix_name_of(config.compiler)
            if result.fix_verified:
                report["fix_reason"] = "the fix configuration was trained and passes"
            elif result.fix_outcome is Outcome.PASS:
                report["fix_reason"] = (
                    f"the fix configuration passed {fix_backing['support']} of {fix_backing['trainings']} "
                    "training(s); after the noise seen in this search that is not two agreeing trainings"
                )
            else:
                report["fix_reason"] = "the fix configuration was not confirmed by a passing training"
        if result.smallest_failing is not None:
            report["smallest_failing"] = sorted(rule.name for rule in result.smallest_failing)
        report["flaky"] = bool(result.flaky)
        report["confirmed"] = bool(result.confirmed)
        early = sum(1 for trial in state.trials.values() if (trial.finished or {}).get("kind") in EARLY_KINDS)
        if report["confirmed"] and early:
            # Two agreeing trainings means two full ones: an early pass is a speculation until proven.
            report["confirmed"] = False
            report["confirmed_reason"] = (
                f"{early} verdict(s) are early passes (early_stop.pass_at), not full trainings; "
                "the fix itself passed a full training"
            )
        report["inconsistencies"] = [_inconsistency_json(item) for item in result.inconsistencies]
    # Where this session trains (fusion_dd.config.session): the hint, run as printed, goes on there.
    where = flags_text(resume_flags(config.train, config.document))
    if status == "budget_exhausted":
        report["continue_with"] = (
            f"fusion-dd resume --state-dir {display_path(config.state_dir)} "
            f"--budget {larger_budget(config.search.budget, state.launched)}{where}"
        )
    elif status == "interrupted":
        # The budget too: --budget 40 caps the whole search, and the hint shows the cap it goes on with.
        where = flags_text(resume_flags(config.train, config.document, config.search.budget))
        report["continue_with"] = f"fusion-dd resume --state-dir {display_path(config.state_dir)}{where}"
    report["switch_check"], report["warnings"] = _switch_evidence(state, report)
    if status == "training_broken":
        report["warnings"] = []  # trainings that do not run prove nothing about the switch files either
    if preconditions is not None:
        report["warnings"][:0] = list(preconditions.warnings)
    report["warnings"].extend(record["reason"] for record in state.retired_devices)
    if threshold is not None and threshold.baseline_spread is not None:
        report["baseline_spread"] = threshold.baseline_spread
    if config.graphs and report["culprits"]:
        _add_layers(report, config.graphs)
    report["trials"] = [
        trial_entry(trial, threshold, config.score.crash_is_failure) for trial in state.trials.values()
    ]
    # Trainings that exited 125: the training said it cannot evaluate their configuration.
    report["unevaluable"] = [
        {"trial_id": entry["trial_id"], "configuration": entry["configuration"]}
        for entry in report["trials"]
        if entry.get("kind") == "unevaluable"
    ]
    _add_early_stop_savings(report, config, state)
    _add_cost(report, state)
    if (from_output := _curves_from_output(config, state)) is not None:
        report["early_passes"]["curves_from_output"] = from_output
    _add_speed(report, config, state, result)
    if result is not None and result.culprit_sets and config.fix.prefer == "cheapest":
        from ..search.alternatives import minimum_hitting_sets

        chosen = frozenset(rule for culprit in result.culprit_sets for rule in culprit.switched_off)
        others = minimum_hitting_sets(
            [culprit.rules for culprit in result.culprit_sets], chosen, config.fix.max_alternatives,
            key=lambda rule: getattr(rule, "name", str(rule)),
        )  # fmt: skip
        report["other_fixes"] = [sorted(getattr(rule, "name", str(rule)) for rule in other) for other in others]
    return report


#: How many other fixes the summary names; report.json lists them all.
SHOWN_FIXES = 3
#: A fix of more rules than this is said by how it differs, not listed.
SHOWN_NAMES = 8


def _fix_words(names: list[str], fix: list[str] | None) -> str:
    """A fix as the summary says it: by what it changes against ``fix`` (the handed-over or searched one).

    Fixes of a search with many culprit sets share most of their rules (they differ
    in which rule of an interacting set goes off): listing each whole would bury the
    one or two names a user has to compare.
    """
    if not fix:
        return ", ".join(names)
    ours = set(fix)
    instead = [name for name in names if name not in ours]
    if not instead:  # the same fix
        return ", ".join(names) if len(names) <= SHOWN_NAMES else f"the {len(names)} rules of the search's fix"
    kept_on = sorted(ours - set(names))
    if not kept_on:
        return f"{', '.join(instead)} as well"
    return f"{', '.join(instead)} instead of {', '.join(kept_on)}"


def trial_speed(trial: TrialState, from_output: bool) -> float | None:
    """The trial's speed: its ``metric.speed_pattern`` reading, else its steps per second of wall time."""
    from ..runner.speed import steps_per_second

    finished = trial.finished or {}
    if from_output:
        value = ((finished.get("artifacts") or {}).get("speed") or {}).get("per_second")
        return float(value) if isinstance(value, (int, float)) else None
    return steps_per_second(_trial_steps(trial), finished.get("duration"))


def _add_speed(report: dict[str, Any], config: SearchConfig, state: SearchState, result: CulpritSearch | None) -> None:
    """The fix's measured speed against all-on and the baseline, each with the trainings behind it."""
    from ..runner.speed import compare_speeds

    from_output = config.metric.speed_pattern is not None
    everything = frozenset(rule.name for rule in config.rules)
    fix = frozenset(getattr(rule, "name", rule) for rule in result.fix) if result is not None and result.fix else None

    def speeds(names: frozenset[str] | None) -> list[float]:
        if names is None:
            return []
        found = [
            trial_speed(trial, from_output)
            for trial in state.trials.values()
            if trial.config == names and trial.finished is not None and trial.role != LOCALIZE_ROLE
            and trial.finished.get("kind") not in EARLY_KINDS  # full trainings only, as fix.prefer: speed compares
        ]
        return [value for value in found if value is not None]

    unit = "metric.speed_pattern" if from_output else "steps/s of wall time"
    report["speed"] = compare_speeds(speeds(fix), speeds(everything), speeds(frozenset()), unit)


def _add_cost(report: dict[str, Any], state: SearchState) -> None:
    """What the search cost in accelerator time, beside the count of trainings.

    Training-steps: the steps each finished training ran (an early stop's step,
    else the last step it reported), summed. Device-seconds: each training's
    wall time times the devices it held. Full-training equivalents: the steps
    over the baseline's length. Trainings whose steps are unknown (no loss
    reports) are counted in ``steps_unknown``, never guessed.
    """
    finished = [trial for trial in state.trials.values() if trial.finished is not None]
    early_passes = [trial for trial in finished if (trial.finished or {}).get("kind") == "early_pass"]
    report["cost"] = search_cost(state)
    outcomes = {entry["trial_id"]: entry.get("outcome") for entry in report["trials"]}
    early_fails = [trial for trial in finished if (trial.finished or {}).get("kind") == "early_fail"]
    # A full training of a culprit set alone proves it (it should fail); any other proof is the fix's.
    sets = {frozenset(rule["name"] for rule in culprit["rules"]) for culprit in report.get("culprits") or []}
    sets |= {frozenset(record.get("config") or ()) for record in state.early_revisions if record.get("scope") == "containing"}
    # The fix's full trainings: its proofs, and fix candidates trained to their end (their pass is the proof).
    proofs = [
        trial for trial in finished
        if (trial.role == "proof" and trial.config not in sets) or state.to_end(trial.trial_id)
    ]  # fmt: skip
    # A set's proof: trained alone for it, or its rule asked alone where no early failure could stop it.
    set_proofs = [
        trial for trial in finished
        if trial.config in sets and (
            trial.role == "proof"
            or (state.fails_to_end(trial.trial_id) and (trial.finished or {}).get("kind") not in EARLY_KINDS)
        )
    ]  # fmt: skip
    # A fix candidate that fails is the search going on, unless a revision names it (it failed past the horizon).
    named = {record.get("trial_id") for record in state.early_revisions}
    report["early_passes"] = {
        "trainings": len(early_passes),
        "steps": sorted({step for trial in early_passes if (step := _trial_steps(trial)) is not None}),
        # Full trainings of the fix that passed where early passes had vouched for it.
        "fix_proven_by": [trial.trial_id for trial in proofs if outcomes.get(trial.trial_id) == "pass"],
        "contradicted_by": [
            trial.trial_id for trial in proofs
            if outcomes.get(trial.trial_id) != "pass" and (trial.role == "proof" or trial.trial_id in named)
        ]  # fmt: skip
        + [trial.trial_id for trial in set_proofs if outcomes.get(trial.trial_id) != "fail"],
        "revised": [record.get("reason") for record in state.early_revisions],
        # Trainings stopped when their loss left the band before the horizon, and the culprit sets' own proofs.
        "early_fails": len(early_fails),
        "culprits_proven_by": [trial.trial_id for trial in set_proofs if outcomes.get(trial.trial_id) == "fail"],
    }
    for entry in report["trials"]:
        trial = state.trials.get(entry["trial_id"])
        if trial is not None and trial.finished is not None:
            entry["steps"] = _trial_steps(trial)


def _curves_from_output(config: SearchConfig, state: SearchState) -> dict[str, Any] | None:
    """The pattern the trainings' printed loss curves were read with: the config's, or the one the
    baseline's output named (LossCurveHook); None when the curves came from metrics files or nowhere."""
    rule = config.early_stop
    if rule is not None and rule.step_pattern is not None:
        return {"step_pattern": rule.step_pattern.pattern, "source": "config"}
    named = next(
        (facts for trial in state.trials.values()
         if trial.finished is not None and trial.role == "baseline" and "step_pattern" in (facts := trial.facts("loss_curve"))),
        None,
    )  # fmt: skip
    if named is None:
        return None
    return {"step_pattern": named["step_pattern"], "printed": named.get("printed"), "source": "the baseline's output"}


def journaled_answer(report: dict[str, Any], rules: list[Any] | None = None) -> dict[str, Any]:
    """What ``search_finished`` keeps of the final report: all but its list of trials.

    That list is most of a large report (every trial's configuration by rule
    name: megabytes at a thousand candidates) and the journal's trial records
    hold it already; only what the verdicts added is kept, per trial in report
    order: its outcome and, if it was stopped early, the savings. See
    :func:`finished_report`, which puts the list back.
    """
    answer = {key: value for key, value in report.items() if key != "trials"}
    if rules is not None and answer.get("candidates") == rules:
        del answer["candidates"]  # search_started journaled them (``definition.rules``): put back when read
    trials = report.get("trials") or []
    answer["trial_outcomes"] = {entry["trial_id"]: entry.get("outcome") for entry in trials}
    stops = {entry["trial_id"]: entry["early_stop"] for entry in trials if "early_stop" in entry}
    if stops:
        answer["trial_early_stops"] = stops
    return answer


def finished_report(state: SearchState, trials: bool = True) -> dict[str, Any]:
    """The report a finished search journaled, whole: its trials rebuilt from the journal's trial records.

    A journal of an older version embeds the whole report; it is returned as it is.
    ``trials=False``: without the list of trials (every trial's configuration by
    name, most of a large report), for a report shown again whose files are current.
    """
    assert state.finished is not None
    answer = state.finished["report"]
    if "trial_outcomes" not in answer:
        return answer if trials else {key: value for key, value in answer.items() if key != "trials"}
    outcomes = answer["trial_outcomes"]
    stops = answer.get("trial_early_stops") or {}
    report = {key: value for key, value in answer.items() if key not in ("trial_outcomes", "trial_early_stops")}
    if "candidates" not in report:
        report["candidates"] = list((state.definition or {}).get("rules") or [])
    if not trials:
        return report
    trials = []
    for trial_id, outcome in outcomes.items():
        trial = state.trials.get(trial_id)
        if trial is None:
            continue  # a journal missing a record the report had: show what the journal holds
        entry = trial_entry(trial, None, False)
        if "kind" in entry:
            entry["outcome"] = outcome
        if trial_id in stops:
            entry["early_stop"] = stops[trial_id]
        if trial.finished is not None:
            entry["steps"] = _trial_steps(trial)
        trials.append(entry)
    report["trials"] = trials
    return report


def _switch_reason(trial: TrialState) -> str | None:
    """Why a trial's switch file is not known applied: journaled, or (when the engine left it out as
    the same text) the message of its artifacts' switch check."""
    finished = trial.finished
    if finished is None or finished.get("switch_check") in (None, "applied"):
        return None
    reason = finished.get("switch_check_reason")
    if reason is None and "switch_check_reason" not in finished:
        reason = switch_check_of(finished.get("artifacts"))[1]
    return str(reason) if reason else None


def _add_early_stop_savings(report: dict[str, Any], config: SearchConfig, state: SearchState) -> None:
    """Per stopped trial and in total: the steps and seconds a full-length (baseline) training would have run."""
    from ..runner.early_stop import estimate_savings, read_curve

    stopped = {
        trial.trial_id: trial.finished["early_stop"]
        for trial in state.trials.values()
        if trial.finished is not None and trial.finished.get("early_stop")
        and trial.finished.get("kind") not in EARLY_KINDS  # speculative verdicts: report["early_passes"]
    }
    report["early_stops"] = {"trainings": len(stopped), "seconds_saved": 0.0}
    if not stopped:
        return
    baseline = state.cache().get((frozenset(), 0))
    last_step = duration = None
    if baseline is not None and baseline.finished is not None:
        duration = baseline.finished.get("duration")
        last_step = _trial_steps(baseline)
        if last_step is None:  # a journal from before the baseline's curve was journaled
            rule = config.early_stop
            curve = read_curve(config.state_dir / baseline.trial_dir, rule.step_pattern if rule is not None else None)
            last_step = curve[-1][0] if curve else None
    for entry in report["trials"]:
        stop = stopped.get(entry["trial_id"])
        if stop is not None:
            savings = estimate_savings(stop, last_step, duration)
            entry["early_stop"] = {"step": stop.get("step"), "reason": stop.get("reason"), **savings}
            report["early_stops"]["seconds_saved"] += savings["seconds_saved"] or 0.0


def device_seconds_text(cost: Mapping[str, Any]) -> str:
    """"N device-seconds", with the part that cancelled trainings held, which is spent all the same."""
    text = f"{_seconds(cost.get('device_seconds') or 0.0)} device-seconds"
    if cost.get("cancelled"):
        held = _seconds(cost.get("cancelled_device_seconds") or 0.0)
        text += f" ({held} of them in {cost['cancelled']} cancelled training(s))"
    return text


def time_unit(seconds: float) -> tuple[float, str]:
    """The unit a person reads a duration in (its size in seconds, its symbol): hours from 3 h, minutes from 10 min."""
    if seconds >= 3 * 3600:
        return 3600.0, "h"
    if seconds >= 600:
        return 60.0, "min"
    return 1.0, "s"


_DEVICE_TIME = {"h": "device-hours", "min": "device-minutes", "s": "device-seconds"}


def device_time_text(seconds: float) -> str:
    """Device time in the unit a person reads it in: "0.8 device-seconds", "12 device-minutes", "3.1 device-hours"."""
    scale, unit = time_unit(seconds)
    amount = {"h": f"{seconds / scale:,.1f}", "min": f"{seconds / scale:,.0f}"}.get(unit) or _seconds(seconds)
    return f"{amount} {_DEVICE_TIME[unit]}"


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


#: Up to how many rules of the smallest failing configuration are named (more are counted).
NAMED_SMALLEST = 5


def smallest_failing_text(names: Sequence[str]) -> str:
    """"3 rules on: A, B, C": a short failing configuration is where a user looks first, so it is named."""
    count = f"{len(names)} rule{'' if len(names) == 1 else 's'} on"
    return f"{count}: {', '.join(names)}" if len(names) <= NAMED_SMALLEST else count


def cost_lines(report: Mapping[str, Any]) -> list[str]:
    """The summary's lines on what the search cost in accelerator time and what early passes did."""
    cost = report.get("cost") or {}
    lines: list[str] = []
    # An interrupt before any training finished still spent the device time of those it cancelled.
    trainings = cost.get("trainings") or 0
    if trainings or cost.get("cancelled"):
        steps = cost.get("training_steps")
        text = f"  cost: {trainings} training(s)" if trainings else "  cost: no finished training"
        if steps is not None:
            text += f", {steps:,} training-steps"
            if cost.get("full_training_equivalents") is not None:
                text += f" (= {cost['full_training_equivalents']:g} full trainings of {cost['steps_per_full_training']:,} steps)"
        text += f", {device_seconds_text(cost)}"
        if cost.get("steps_unknown"):
            text += f"; {cost['steps_unknown']} training(s) reported no steps"
            if cost.get("steps_advice"):
                text += f" ({cost['steps_advice']})"
        lines.append(text)
    early = report.get("early_passes") or {}
    if early.get("trainings"):
        at = ", ".join(str(step) for step in early.get("steps") or [])
        text = (
            f"  early passes: {early['trainings']} training(s) stopped inside the baseline's band at step {at} "
            "and counted as passes for the search's decisions"
        )
        if early.get("fix_proven_by"):
            text += f"; the fix was proven by full training #{', #'.join(early['fix_proven_by'])}"
        lines.append(text)
    if early.get("early_fails"):
        text = (
            f"  early failures: {early['early_fails']} training(s) stopped when their loss left the baseline's band "
            "before the horizon and counted as failures for the search's decisions"
        )
        if early.get("culprits_proven_by"):
            text += f"; the culprit sets were proven by full training #{', #'.join(early['culprits_proven_by'])}"
        elif report.get("status") == "found":
            text += "; every culprit set's failure is backed by full trainings (with one set: all-on's and the fix's)"
        else:  # the search stopped before it proved anything: its sets so far rest on these failures
            text += "; the search ended before a full training proved any culprit set"
        lines.append(text)
    if early.get("trainings") or early.get("early_fails"):
        for reason in early.get("revised") or []:
            lines.append(
                f"  early verdicts revised: {reason}; the search asked again without the verdicts that led there, "
                "and no training stopped early any more"
            )
    return lines


def _names_in_artifacts(state: SearchState, read: Callable[[Any], Iterable[str]]) -> list[str]:
    """The rule names one artifact fact lists across every finished trial, sorted."""
    return sorted(
        {name for trial in state.trials.values() if trial.finished is not None for name in read(trial.finished.get("artifacts"))}
    )


def _switch_evidence(state: SearchState, report: dict[str, Any]) -> tuple[dict[str, int], list[str]]:
    """How many trials proved (through fusion_result.json) that their switch file was applied."""
    counts = switch_counts(state)
    warnings: list[str] = []
    fired_off = _names_in_artifacts(state, fired_although_off_of)
    if fired_off:
        warnings.append(
            f"{', '.join(fired_off)} fired although switched off: the compiler runs "
            f"{'it' if len(fired_off) == 1 else 'them'} whatever the switches say, so the baseline (all candidates "
            "off) was not free of these rules; a name that is no candidate yet can be added to the candidates"
        )
    confirmed = _names_in_artifacts(state, known_to_compiler_of)
    if confirmed:
        warnings.append(
            f"{', '.join(confirmed)}: not in fusion-dd's list of names, but the compiler's own artifacts name "
            f"{'it' if len(confirmed) == 1 else 'them'}: real in this build, searched like any other"
        )
    unknown = _names_in_artifacts(state, unknown_to_compiler_of)
    if unknown:
        warnings.append(
            f"{', '.join(unknown)}: switched on but absent from the compiler's own log, so unknown to this compiler "
            "(it ignores unknown names silently): the search says nothing about them"
        )
    reasons = [reason for reason in (_switch_reason(trial) for trial in state.trials.values()) if reason]
    # "No training left a fusion_result.json" only when that is what every trial's reason says: an
    # unreadable file, or a compiler without fusion_result.json, is named with its own reason.
    from ..backends.cann.artifacts.applied import NO_RESULT

    specific = [reason for reason in reasons if reason != NO_RESULT]
    if counts and not counts.get("applied"):
        if specific:
            warnings.append(f"no training proved that its switches were applied: {specific[0]}")
        else:
            warnings.append(
                "no training left a fusion_result.json that fusion-dd could check, so it could not verify that the "
                "switch files were applied (see docs/training.md: wiring the switch file, compile caches)"
            )
        baseline, all_on = report.get("baseline"), report.get("all_on")
        if baseline is not None and baseline == all_on:
            warnings.append(
                "suspicious: the baseline and all-on trainings gave identical metrics; the switch file may not "
                "be reaching the compiler"
            )
    return counts, warnings


def _add_layers(report: dict[str, Any], graphs: Sequence[str]) -> None:
    """Name the network layers each culprit rule fused, from graph dumps of an all-on run."""
    from ..backends.cann.artifacts import graph_paths, load_graphs, rule_locations
    from ..core.errors import UsageError

    try:
        locations = rule_locations(load_graphs(graph_paths(graphs)))
    except UsageError as exc:
        report["warnings"].append(f"could not read the graph dumps in rules.graphs: {exc}")
        return
    by_name = {rule.name: fused for rule, fused in locations.items()}
    for culprit in report["culprits"]:
        culprit["where"] = {}
        for rule in culprit["rules"]:
            fused = by_name.get(rule["name"], [])
            culprit["where"][rule["name"]] = {
                "layers": list(dict.fromkeys(layer for op in fused for layer in op.layers())),
                "fused_ops": [op.to_json() for op in fused],
            }


#: A report of more trials than this is written compactly (one line): indented, a search of a
#: thousand trials at a thousand candidates is tens of MB and seconds to write.
COMPACT_TRIALS = 500


#: Stands for the list of trials while the rest of a large report is encoded.
_TRIALS_HOLE = "\x00trials\x00"


def report_chunks(report: dict[str, Any]) -> list[bytes]:
    """report.json's bytes in pieces: indented with sorted keys, or compact (still sorted),
    a trial at a time, when the report is large.

    The same bytes as ``json.dumps(report, sort_keys=True, separators=(",", ":"))``,
    but never the whole of it in one string and again in its bytes: at a thousand
    trials of a thousand candidates that is tens of MB twice, the peak of a resume.
    """
    trials = report.get("trials") or ()
    if len(trials) <= COMPACT_TRIALS:
        return [(dumps_indented(report) + "\n").encode("utf-8")]
    frame = _compact({**report, "trials": _TRIALS_HOLE})
    before, after = frame.split(json.dumps(_TRIALS_HOLE), 1)
    chunks = [(before + "[").encode("utf-8")]
    for number, trial in enumerate(trials):
        chunks.append((("," if number else "") + _compact(trial)).encode("utf-8"))
    chunks.append(("]" + after + "\n").encode("utf-8"))
    return chunks


def _compact(document: Any) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write report.json atomically, unless it already holds these bytes (a finished search shown again)."""
    chunks = report_chunks(report)
    if _holds(path, chunks):
        os.utime(path)  # current as of now: a later run sees it newer than the journal and reads nothing
        return
    write_bytes_atomic(path, chunks)


def _holds(path: Path, chunks: Sequence[bytes]) -> bool:
    """Whether the file's bytes are the chunks', read a chunk at a time."""
    try:
        if path.stat().st_size != sum(map(len, chunks)):
            return False
        with path.open("rb") as file:
            return all(file.read(len(chunk)) == chunk for chunk in chunks)
    except OSError:
        return False


def write_outputs(
    state_dir: Path,
    report: dict[str, Any],
    rules: list[Rule],
    base: SwitchFile | None,
    render: Callable[[list[Rule], list[Rule]], str] | None = None,
) -> tuple[Path, Path | None, Path | None]:
    """Write report.json and, when the search found its answer, the fix cfg (both atomically).

    ``render``: the compiler backend's switch text for (candidates, enabled);
    CANN's switch file by default. The third value: where a fix file that differed
    from the search's (edited by hand) was kept before the search's replaced it.
    """
    report_path = state_dir / REPORT_NAME
    write_report(report_path, report)
    fix_path = kept = None
    if report["status"] == "found":
        off = set(report["switched_off"])
        enabled = [rule for rule in rules if rule.name not in off]
        fix_path = state_dir / (report.get("fix_config") or FIX_NAME)
        text = render(rules, enabled) if render is not None else render_switch(rules, enabled, base)
        kept = _keep_if_edited(fix_path, text)
        write_text_atomic(fix_path, text)
        flags = (report.get("fix_env") or {}).get("AUTOFUSE_FLAGS")
        if flags is not None:
            write_text_atomic(state_dir / AUTOFUSE_FLAGS_NAME, flags + "\n")
    return report_path, fix_path, kept


def edited_fix_note(fix_path: Path, kept: Path) -> str:
    """The line that says a fix file differing from the search's was kept aside, not overwritten."""
    return (
        f"{display_path(fix_path)} differed from the search's fix (edited?): kept as {display_path(kept)}, "
        "and the search's fix written in its place"
    )


def _keep_if_edited(path: Path, text: str) -> Path | None:
    """Move a file that is not ``text`` aside (``NAME.edited``, ``NAME.edited.2``, ...): never overwrite a user's edit."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return None
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        pass  # unreadable as text: not the search's file either, kept like an edit
    aside = next(
        candidate
        for number in itertools.count(1)
        if not (candidate := path.with_name(f"{path.name}.edited" + (f".{number}" if number > 1 else ""))).exists()
    )
    path.rename(aside)
    return aside


def larger_budget(budget: int, launched: int) -> int:
    """The budget a "continue with" hint offers once a budget was spent: half as much again, 10 at least,
    over the larger of the budget and the trainings launched (a budget counts every session's)."""
    spent = max(budget, launched)
    return spent + max(10, spent // 2)


def display_path(path: Path) -> str:
    """A path as a person wants to read it: relative to the working directory when below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _tolerance_text(threshold: dict[str, Any]) -> str:
    """The tolerance once, with its unit: how it was set says which."""
    setting = str(threshold.get("tolerance_setting"))
    value = f"{threshold['tolerance']:.6g}"
    if setting == "auto":
        return f"{value}, auto"
    if setting.endswith("%"):
        return f"{setting} of the baseline = {value}"
    return f"{value} in the metric's units"


def fix_verdict(report: Mapping[str, Any]) -> str:
    """How far the fix is proven, once: the terminal summary and the HTML report both say it so.

    ``verified: trained and passes, 1 of 1 training(s) passed``, or ``NOT verified``
    with the trainings that stand behind it (``fix_reason`` says the same at more length).
    """
    verified = "verified: trained and passes" if report.get("fix_verified") else "NOT verified"
    if report.get("fix_trainings"):
        verified += f", {report.get('fix_verified_by', 0)} of {report['fix_trainings']} training(s) passed"
        early = report.get("fix_verified_early") or 0
        if early:
            # An early pass ran only to the horizon: say which of the passes ran to the end.
            full = report.get("fix_verified_by", 0) - early
            verified += f" ({full} to its end, {early} stopped early at the horizon)"
    elif not report.get("fix_verified"):
        verified += ", no training of it finished"
    return verified


def fix_statement(report: Mapping[str, Any]) -> str:
    """What the fix switches off, in the words of the summary."""
    return f"switched off: {', '.join(report.get('switched_off') or []) or 'nothing'}; every other fusion stays on"


def summary_lines(report: dict[str, Any], state_dir: Path | None = None) -> list[str]:
    """The human-readable end of a search.

    A training that does not run is told once, with its reason, on stderr
    (``broken_lines``): the summary's head then only says what stopped.
    """
    head = STATUS_TEXT["training_broken"] if report.get("status") == "training_broken" else report["message"]
    lines = [f"fusion-dd: {head}"]
    threshold = report.get("threshold")
    base = "baseline (required on, rest off):" if (report.get("required") or {}).get("rules") else "baseline (all candidates off):"
    for role, label in (("baseline", base), ("all_on", "all candidates on:            ")):
        # A reference without a metric is said in words; a training that does not run was told on stderr.
        words = reference_words(report, role) if report.get("status") != "training_broken" else None
        if report.get(role) is not None or words is not None:
            lines.append(f"  {label} {words or report[role]}")
    if threshold and threshold.get("bitwise"):
        lines.append(
            f"  a configuration fails when its metric differs from the baseline's {threshold['baseline']!r} at all "
            "(score.tolerance: 0, bitwise)"
        )
    elif threshold:
        comparison = "<" if threshold["goal"] == "max" else ">"
        lines.append(
            f"  a configuration fails when its metric {comparison} {threshold['limit']:.6g} "
            f"(tolerance {_tolerance_text(threshold)})"
        )
    rounds = report.get("rounds")
    # The trainings count every session of the search, the rounds only this one's: each says its scope
    # (a finished search shown again ran no round in this session, and says none).
    lines.append(
        f"  trainings launched in all: {report['trainings']} of budget {report['budget']}"
        + (f", {rounds} round{'s' if rounds != 1 else ''} this session" if rounds else "")
    )
    culprits = report.get("culprits") or []
    if culprits:
        lines.append("")
        described = [
            ", ".join(f"{rule['name']} ({rule['section']})" for rule in culprit["rules"]) for culprit in culprits
        ]
        width = min(max(len("rules"), *(len(text) for text in described)) + 2, 100)
        lines.append(f"  {'#':<3}{'kind':<13}{'rules':<{width}}switch off")
        for index, (culprit, names) in enumerate(zip(culprits, described), start=1):
            lines.append(f"  {index:<3}{culprit['kind']:<13}{names:<{width}}{', '.join(culprit['switched_off'])}")
        for index, culprit in enumerate(culprits, start=1):
            if culprit["kind"] != "independent" and culprit.get("reason"):
                lines.append(f"  ({index}) {culprit['reason']}")
            elif culprit.get("inside"):
                lines.append(
                    f"  ({index}) a rewrite rule inside {', '.join(culprit['inside'])}, found by searching its rules "
                    "one by one: switch off the rule, the container stays on"
                )
            for name, found in (culprit.get("where") or {}).items():
                layers = ", ".join(found["layers"][:8]) or "no fused op in the graph dumps"
                more = f" (+{len(found['layers']) - 8} more)" if len(found["layers"]) > 8 else ""
                lines.append(f"  ({index}) {name} fused layers: {layers}{more}")
        from .localize import summary_lines as localization_lines

        lines.extend(localization_lines(report))
    if report.get("guide"):
        from ..analysis.guide import summary_lines as guide_lines

        culprit_names = [[rule["name"] for rule in culprit["rules"]] for culprit in culprits]
        lines.extend(["", *("  " + line for line in guide_lines(report["guide"], culprit_names))])
    if report["status"] == "found":
        verified = fix_verdict(report)
        name = report.get("fix_config") or FIX_NAME
        where = display_path(state_dir / name) if state_dir is not None else name
        lines.append("")
        lines.append(f"  fix config ({verified}): {where}")
        lines.append(f"  {fix_statement(report)}")
        for name, value in (report.get("fix_env") or {}).items():
            lines.append(f"  and in the training's environment: export {name}={shlex.quote(value)}")
        if report.get("hitting_set") == "greedy":
            lines.append("  (chosen greedily: too many overlapping culprit sets for an exact search, so fewer may suffice)")
    # What the fix may hide, and other fixes, speak of a fix: said only when the search handed one over.
    if report.get("may_hide") and report["status"] == "found":
        hiding = report["may_hide"]
        lines.append(
            f"  may hide more culprit sets: {', '.join(hiding)} (switched off, so a culprit set that contains "
            f"{'it' if len(hiding) == 1 else 'one of them'} cannot show; the fix holds either way)"
        )
    if report.get("smallest_failing") and report["status"] != "found":
        lines.append(f"  smallest failing configuration so far: {smallest_failing_text(report['smallest_failing'])}")
    if report.get("flaky"):
        lines.append(
            f"  FLAKY: trainings disagreed {len(report.get('inconsistencies') or [])} time(s); the answer rests on "
            "majority votes of repeated trainings (evidence in report.json: inconsistencies)"
        )
    lines.extend(required_lines(report))
    unevaluable = report.get("unevaluable") or []
    if unevaluable:
        shown = ", ".join(f"#{entry['trial_id']} ({len(entry['configuration'])} rules on)" for entry in unevaluable[:5])
        more = f" and {len(unevaluable) - 5} more" if len(unevaluable) > 5 else ""
        lines.append(
            f"  cannot evaluate: {len(unevaluable)} training(s) exited 125, the training's word that it cannot "
            f"evaluate the configuration: {shown}{more}; they stand as unresolved, never as failures"
        )
    early = report.get("early_stops") or {}
    if early.get("trainings"):
        lines.append(
            f"  early stops: {early['trainings']} training(s) stopped once they had failed, "
            f"about {device_time_text(early['seconds_saved'])} saved"
        )
    lines.extend(cost_lines(report))
    searched = next(
        (entry["switched_off"] for entry in report.get("fix_alternatives") or [] if entry.get("searched")), None
    )
    for alternative in report.get("fix_alternatives") or []:
        speed = alternative.get("per_second")
        lines.append(
            f"  fix.prefer: speed: switching off {_fix_words(alternative['switched_off'], searched)}: "
            f"{'passes' if alternative['passed'] else 'does NOT pass'} its full training, "
            f"{'speed unknown' if speed is None else f'{speed:.4g}/s'}"
            f"{' (the search chose it)' if alternative.get('searched') else ''}{' <- handed over' if alternative['picked'] else ''}"
        )
    others = report.get("other_fixes") or []
    if others and report["status"] == "found":
        shown = ", or ".join(_fix_words(names, report.get("switched_off")) for names in others[:SHOWN_FIXES])
        more = f" (and {len(others) - SHOWN_FIXES} more: report.json other_fixes)" if len(others) > SHOWN_FIXES else ""
        lines.append(
            f"  a faster fix may exist: switching off {shown}{more} also defeats every culprit set; "
            "fix.prefer: speed trains such alternatives and hands over the fastest that passes"
        )
    if report.get("status") == "found" and report.get("speed"):
        from ..runner.speed import speed_line

        said = speed_line(report["speed"])
        if said:
            lines.append(said)
    for warning in report.get("warnings") or []:
        lines.append(f"  warning: {warning}")
    if state_dir is not None:
        lines.append(f"  report: {display_path(state_dir / REPORT_NAME)}")
    if report.get("continue_with"):  # last, where a person looks for what to do next
        lines.append(f"  continue with: {report['continue_with']}")
    return lines
