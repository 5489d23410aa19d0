"""The references a search is measured against, and the verdict on them before any question is asked.

The baseline (every candidate off, or only the required passes on) must pass
and all candidates on must fail; their trainings give the threshold that every
later verdict uses, and the baseline's loss curve gives early stopping its band
and the horizon of early passes (``fusion_dd.runner.horizon``). A reference
whose trainings disagree gets its next repeat until ``check_preconditions``
decides, so that one unlucky training never refuses the search.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..core.scoring import Measurement, Preconditions, check_preconditions
from ..runner.broken import TrainingBroken, diagnose_references, is_start_error
from ..runner.early_stop import EarlyStopRule, envelope, read_curve
from ..runner.horizon import DEFAULT_FACTOR, departure, horizon, narrow_divergence
from ..store.state import LOCALIZE_ROLE, ConfigKey, TrialState
from .ports import Context
from .required import RequiredPasses
from .settling import Settling
from .training_oracle import TrainingOracle

Measured = tuple[list[Measurement], list[Measurement]]


class References:
    """The reference trainings of one search: their keys, their measurements, their verdict, their curve."""

    def __init__(self, context: Context, required: RequiredPasses, settling: Settling) -> None:
        self._context = context
        self._required = required
        self._settling = settling
        # Re-trainings of a reference beyond its configured repeats (its trainings disagreed).
        self.extra: dict[str, int] = {"baseline": 0, "all_on": 0}
        self.preconditions: Preconditions | None = None  # the references' verdict, once measured
        self.baseline_curve: list[tuple[int, float]] = []  # for the divergence rule of early stopping
        # Early passes (fusion_dd.runner.horizon): the step at which a search training still inside the
        # baseline's band counts as a pass.
        self.horizon: int | None = None
        # The early_stop.step_pattern the baseline's output named (LossCurveHook), when the config gives none:
        # every later training's printed curve is read with it.
        self.step_pattern: str | None = None
        self._printed: str | None = None  # the printed line it was made from
        self._horizon_said = False
        self._divergence_said = False

    def role_of(self, key: ConfigKey) -> str:
        """What a training is for, from its key: the references, a repeat of a question, or a question."""
        names, repeat = key
        if not names or names == self._required.names:
            return "baseline"
        if len(names) == len(self._context.rules):
            return "all_on"
        return "repeat" if repeat else "search"

    def keys(self, extra: dict[str, int] | None = None) -> list[tuple[ConfigKey, str]]:
        """The reference trainings this search needs: (key, role).

        ``extra``: trainings of a reference beyond its configured repeats, asked for
        by ``check_preconditions`` when its trainings disagree (the next repeats).
        """
        score = self._context.config.score
        extra = extra or {}
        everything = frozenset(rule.name for rule in self._context.rules)
        keys: list[tuple[ConfigKey, str]] = []
        if score.baseline_metric is None:
            count = score.baseline_repeats + extra.get("baseline", 0)
            keys += [((self._required.names, repeat), "baseline") for repeat in range(count)]
        if score.all_on_metric is None:
            count = score.all_on_repeats + extra.get("all_on", 0)
            keys += [((everything, repeat), "all_on") for repeat in range(count)]
        return keys

    def restart_baseline(self) -> None:
        """The baseline changed (required passes kept on): its repeats are counted afresh."""
        self.extra = {"baseline": 0, "all_on": self.extra["all_on"]}

    def settle(
        self, oracle: TrainingOracle, riders: Sequence[ConfigKey] = ()
    ) -> tuple[Preconditions | None, dict[str, int]]:
        """Train the references until ``check_preconditions`` decides; (None, ...) when the budget ran out.

        A reference whose trainings disagree gets its next repeat and the check runs
        again (majority, see ``reference_decision``), so one unlucky training never
        refuses the search. Deterministic given the journal: a resume replays it.
        ``riders`` train beside the references' first round (the search's first question).
        """
        extra = self.extra
        while True:
            references = self._measure(oracle, extra, riders)
            riders = ()
            if references is None:
                return None, extra
            pre = self.verdict(references)
            if not pre.retrain:
                return pre, extra
            self._context.events.message(f"warning: {pre.message}")
            for role in pre.retrain:
                extra[role] += 1

    def _measure(
        self, oracle: TrainingOracle, extra: dict[str, int] | None = None, riders: Sequence[ConfigKey] = ()
    ) -> Measured | None:
        """Baseline (all candidates off) and all-on runs, in parallel; None when the budget ran out."""
        keys = self.keys(extra)
        oracle.train_until_settled(
            [key for key, _ in keys], stop_after=is_start_error, before_round=lambda: self._raise_if_broken(keys),
            riders=riders,
        )
        if any(self._settling.settled(key) is None for key, _ in keys):
            return None
        self.load_baseline_curve()
        return self.measurements(extra)

    def measurements(self, extra: dict[str, int] | None = None) -> Measured | None:
        """What the references measured (or were given as), None while one still needs training."""
        if any(self._settling.settled(key) is None for key, _ in self.keys(extra)):
            return None
        extra = extra or {}
        score = self._context.config.score
        everything = frozenset(rule.name for rule in self._context.rules)
        cache = self._context.state.cache()

        def measured(names: frozenset[str], repeats: int) -> list[Measurement]:
            runs = [cache[(names, repeat)].measurement for repeat in range(repeats)]
            return [run for run in runs if run is not None]

        if score.baseline_metric is not None:
            baseline = [Measurement("metric", score.baseline_metric, "given as score.baseline_metric")]
        else:
            baseline = measured(self._required.names, score.baseline_repeats + extra.get("baseline", 0))
        if score.all_on_metric is not None:
            all_on = [Measurement("metric", score.all_on_metric, "given as score.all_on_metric")]
        else:
            all_on = measured(everything, score.all_on_repeats + extra.get("all_on", 0))
        return baseline, all_on

    def _raise_if_broken(self, keys: Sequence[tuple[ConfigKey, str]]) -> None:
        """Stop when the reference trainings show that the training itself does not run (fusion_dd.runner.broken)."""
        state = self._context.state
        wanted = {key for key, _ in keys}
        since = list(state.trials.values())[state.broken_before :]
        trials = [trial for trial in since if trial.key in wanted and trial.role != LOCALIZE_ROLE]
        baseline = [self._settling.settled(key) for key, role in keys if role == "baseline"]
        broken = diagnose_references(
            trials,
            [trial for trial in baseline if trial is not None],
            # With the budget spent, the trainings so far are all the evidence there will be.
            all(self._settling.settled(key) is not None for key in wanted) or self._context.remaining_budget() == 0,
        )
        if broken is not None:
            raise TrainingBroken(broken)

    def verdict(self, references: Measured) -> Preconditions:
        """The references' verdict; a reference whose trainings disagree asks for a re-training."""
        baseline, all_on = references
        config = self._context.config
        score = config.score
        # confirm "off" keeps single trainings: the configured repeats decide alone.
        limit = 1 if config.search.confirm == "off" else config.search.max_trainings
        self.preconditions = check_preconditions(
            baseline,
            all_on,
            tolerance=score.tolerance,
            goal=config.metric.goal,
            reference=score.reference,
            crash_is_failure=score.crash_is_failure,
            strict=score.strict,
            baseline_limit=1 if score.baseline_metric is not None else max(limit, score.baseline_repeats),
            all_on_limit=1 if score.all_on_metric is not None else max(limit, score.all_on_repeats),
        )
        return self.preconditions

    def known_preconditions(self) -> Preconditions | None:
        """For a report of a search that stopped early: the references' verdict, once they were measured.

        Never trains: a stop must not launch anything. Read from the journal's
        cache, so an interruption during adoption of the last reference still
        reports the baseline, all-on and threshold.
        """
        if self.preconditions is not None:
            return self.preconditions
        references = self.measurements(self.extra)
        return self.verdict(references) if references is not None else None

    def margin(self, pre: Preconditions) -> float:
        """How close to the limit a metric must land to count as a near-threshold verdict (re-trained)."""
        margin = self._context.config.score.margin
        if margin is not None:
            return margin
        spread = pre.threshold.baseline_spread if pre.threshold is not None else None
        return 2.0 * spread if spread else 0.0

    # -- the baseline's curve and the horizon of early passes --------------------------------

    def load_baseline_curve(self) -> None:
        """The baseline's loss curve (the upper envelope of its repeats), once every baseline run finished."""
        config = self._context.config
        rule = config.early_stop
        if rule is None or not rule.active or config.score.baseline_metric is not None:
            return
        cache = self._context.state.cache()
        keys = [(self._required.names, repeat) for repeat in range(config.score.baseline_repeats)]
        if all(key in cache for key in keys):
            if rule.step_pattern is None and rule.read_output:
                named = next(
                    (facts for key in keys if isinstance((facts := cache[key].facts("loss_curve")).get("step_pattern"), str)),
                    None,
                )
                if named is not None:
                    self.step_pattern, self._printed = named["step_pattern"], named.get("printed")
            self.baseline_curve = envelope(self._curve_of(cache[key], rule.step_pattern) for key in keys)
            self._load_horizon(rule)

    def early_stop_rule(self) -> EarlyStopRule | None:
        """The config's early-stop rule, reading printed curves with the pattern the baseline's output named."""
        rule = self._context.config.early_stop
        if rule is None or self.step_pattern is None or rule.step_pattern is not None:
            return rule
        return replace(rule, step_pattern=re.compile(self.step_pattern))

    def quiet_horizon(self) -> None:
        """Say nothing of the horizon: a session that only localizes a finished search asks no question."""
        self._horizon_said = True
        self._divergence_said = True

    def _load_horizon(self, rule: Any) -> None:
        """The horizon of early passes, from the baseline's curve and the all-on trainings' departure from its band.

        With several all-on trainings the latest departure counts (the safe
        side); an all-on training stopped early counts as departed at its stop.
        """
        score = self._context.config.score
        state = self._context.state
        cache = state.cache()
        everything = frozenset(rule_.name for rule_ in self._context.rules)
        keys = [(everything, repeat) for repeat in range(score.all_on_repeats)] if score.all_on_metric is None else []
        departures: list[int | None] = []
        for key in keys:
            trial = cache.get(key)
            if trial is None:
                return
            departed = departure(
                self.baseline_curve, self._curve_of(trial, rule.step_pattern), divergence=rule.divergence,
                relative=rule.relative, patience=rule.patience, start_step=rule.start_step,
            )  # fmt: skip
            stop = (trial.finished or {}).get("early_stop") or {}
            if departed is None and isinstance(stop.get("step"), int):
                departed = stop["step"]
            departures.append(departed)
        departed_at = None if not departures or None in departures else max(d for d in departures if d is not None)
        length = self.baseline_curve[-1][0] if self.baseline_curve else None
        self.horizon = horizon(rule.pass_at, length, departed_at)
        if not self._divergence_said:  # with early passes off too: a divergence band stops trainings either way
            self._divergence_said = True
            narrow = narrow_divergence(self.baseline_curve, rule.divergence, rule.relative)
            if narrow is not None:
                self._context.events.message(f"warning: {narrow}")
        if self._horizon_said or state.early_revised_round is not None or rule.pass_at.off:
            return
        self._horizon_said = True
        if self.step_pattern is not None:
            self._context.events.message(
                f"loss curves: read from output.log ({self._printed!r}) with early_stop.step_pattern "
                f"'{self.step_pattern}'; set early_stop.step_pattern to read them another way, or off"
            )
        if self.horizon is not None:
            self._context.events.message(
                f"early passes: a search training whose loss stays inside the baseline's band up to step "
                f"{self.horizon} of {length} is stopped there and counts as a pass for the search's decisions; "
                "the fix is proven by a full training (early_stop.pass_at: off trains every configuration to its end)"
            )
        else:
            self._context.events.message(f"early passes off: {self._why_no_horizon(rule, length, departed_at, keys)}")

    def _why_no_horizon(self, rule: Any, length: int | None, departed_at: int | None, all_on: Sequence[ConfigKey]) -> str:
        """Why every search training runs to its end although early passes are on: said, never silently off."""
        if length is None:
            cache = self._context.state.cache()
            baseline = [cache.get((self._required.names, repeat)) for repeat in range(self._context.config.score.baseline_repeats)]
            facts = [trial.facts("loss_curve") for trial in baseline if trial]
            advice = next((fact["advice"] for fact in facts if isinstance(fact.get("advice"), str)), None)
            if rule.step_pattern is not None:
                read = "metrics.jsonl or early_stop.step_pattern"
            elif rule.read_output:
                read = "metrics.jsonl, no 'step N ... loss X' line in its output.log"
            else:
                read = "metrics.jsonl; early_stop.step_pattern: off reads no output"
            why = f"the baseline (all candidates off) left no loss curve (no step and loss in its {read})"
            return f"{why}; {advice}" if advice else why  # advice: journals of versions that did not read output
        if not rule.pass_at.auto:
            return f"early_stop.pass_at {rule.pass_at.to_json()} reaches the training's end ({length} steps): nothing to save"
        if not all_on:
            return "score.all_on_metric is given, so no all-on loss curve tells when the damage shows"
        if departed_at is None:
            return (
                "the all-on training's loss never left the baseline's band: its damage shows only in the final "
                "metric, so every search training runs to its end"
            )
        return (
            f"the all-on training's loss left the baseline's band at step {departed_at}; the horizon, "
            f"{DEFAULT_FACTOR:g} times that, would reach the training's end ({length} steps), so stopping early saves nothing"
        )

    def _curve_of(self, trial: TrialState, step_pattern: Any) -> list[tuple[int, float]]:
        """A baseline's loss curve as its hook journaled it; read from its files only for a journal
        written before curves were journaled."""
        facts = trial.facts("loss_curve")
        if "curve" in facts:
            return [(int(step), float(loss)) for step, loss in facts["curve"]]
        return read_curve(self._context.state_dir / trial.trial_dir, step_pattern)
