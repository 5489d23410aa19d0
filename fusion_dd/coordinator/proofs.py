"""Full trainings behind an answer that early verdicts gave, and the fix preferred for speed.

Early stopping lets the search decide most questions before a training ends,
but an answer must stand on full trainings: the fix is trained to its end when
only early passes vouch for it, and each culprit set when only early failures
blame it. A full training that contradicts them is journaled as a revision of
the early verdicts it withdraws, and the search asks again in its next round.
With ``fix.prefer: speed`` the other minimum fixes are trained in full too and
the fastest that passes is handed over.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..core.rules import Rule
from ..report.build import trial_speed
from ..search.alternatives import fastest, minimum_hitting_sets
from ..search.culprits import CulpritSearch
from ..search.oracle import Outcome
from ..store.records import RecordType
from ..store.state import ALTERNATIVE_ROLE, EARLY_FAIL, EARLY_KINDS, EARLY_PASS, LOCALIZE_ROLE, PROOF_ROLE
from ..store.state import ConfigKey, TrialState
from .ports import Context, Launch
from .settling import Settling
from .training_oracle import TrainingOracle


#: How a failing training is stopped before its end, at a step its early_stop record names:
#: leaving the baseline's band, the user's divergence limit, a NaN loss.
_STOPPED_FAILING = (EARLY_FAIL, "diverged", "nonfinite")


class HorizonOutrun(Exception):
    """A fix candidate trained to its end failed where early passes could not have seen it."""

    def __init__(self, trial: TrialState, step: int | None) -> None:
        super().__init__(trial.trial_id)
        self.trial = trial
        self.step = step


class Proofs:
    """The full trainings that back a search's answer, over the engine's trainer and budget."""

    def __init__(
        self, context: Context, settling: Settling, launch: Launch, fix_candidates: set[frozenset[str]],
        horizon: Callable[[], int | None], *, verdict: Callable[[TrialState], Outcome | None] = lambda trial: None,
        required: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        """``fix_candidates``: those the search announced (it adds to the set); ``horizon``: the
        references' horizon of early passes, None until known or when there is none;
        ``verdict``: a finished training's verdict, None before the threshold is known;
        ``required``: the names of the passes every configuration keeps on."""
        self._context = context
        self._settling = settling
        self._launch = launch
        self._fix_candidates = fix_candidates
        self._horizon = horizon
        self._verdict = verdict
        self._required = required
        self._several_sets = False  # a fix candidate failed: the answer will have more than one set
        self.alternatives: list[dict[str, Any]] = []  # fix.prefer: speed: the fixes compared, for the report

    def trains_to_end(self, role: str, names: frozenset[str]) -> bool:
        """Whether a fix candidate's first training runs to its end unless its loss leaves the band.

        Every fix handed over needs a full training that passes; an early pass of
        the candidate would cost its horizon and then the full proof besides. Its
        failure still stops early (the search goes on at once), and a failure it
        shows only after the horizon is the evidence that early passes missed
        damage: ``check_horizon`` then ends the round.
        """
        return role == "search" and names in self._fix_candidates and self._early_verdicts()

    def fails_to_end(self, role: str, names: frozenset[str]) -> bool:
        """Whether a training of one rule alone runs to its end when its loss leaves the band.

        Once a fix candidate has failed, the answer will hold several culprit sets,
        and each then needs a full failing training of its own (``prove_culprits``).
        A rule that fails alone is such a set: stopped as an early failure, it
        would be trained again in full at the end; trained on, its failure is the
        proof, which saves one training and the early failure's steps. It still
        passes early at the horizon, as every search training does.
        """
        if role not in ("search", "repeat") or not self._early_verdicts():
            return False
        if len(names - self._required()) != 1:
            return False
        if not self._several_sets:
            self._several_sets = any(
                (trial := self._settling.settled((candidate, 0))) is not None and self._verdict(trial) is Outcome.FAIL
                for candidate in self._fix_candidates
            )  # fmt: skip
        return self._several_sets

    def _early_verdicts(self) -> bool:
        """Whether search trainings may stop early now: a horizon, and no revision of early verdicts yet."""
        return (
            self._context.config.early_stop is not None
            and self._horizon() is not None
            and self._context.state.early_revised_round is None
        )

    def check_horizon(self, trials: Sequence[TrialState], oracle: TrainingOracle | None) -> None:
        """Raise ``HorizonOutrun`` when a fix candidate trained to its end failed where early passes were blind.

        It failed after the horizon (its loss left the band only then: the first
        step outside it, not the later step at which patience stopped it) or at its
        end with its loss inside the band all along: the early passes of the
        configurations inside it could not have seen that damage. Told at the end
        of the question that asked the candidate, so a replay, asking the same
        questions, ends the round at the same point.
        """
        horizon = self._horizon()
        state = self._context.state
        if horizon is None or oracle is None or oracle.threshold is None:
            return
        if any(int(done["round"]) < self._settling.round for done in state.early_revisions):
            return  # this round already searches without early verdicts
        for trial in trials:
            if not state.to_end(trial.trial_id) or trial.finished is None or oracle.verdict_of(trial) is not Outcome.FAIL:
                continue
            kind = trial.finished.get("kind")
            if kind == "metric":  # its loss never left the band, yet it failed
                raise HorizonOutrun(trial, None)
            stop = trial.finished.get("early_stop") or {}
            step = stop.get("departed", stop.get("step"))  # journals before ``departed`` knew only the stop's step
            if kind in _STOPPED_FAILING and isinstance(step, int) and step > horizon:
                raise HorizonOutrun(trial, step)
            # Otherwise seen inside the horizon (an ordinary failure: the early passes stand), or a
            # crash or a timeout, which tells nothing about the horizon.

    def revise_after_outrun(self, outrun: HorizonOutrun) -> None:
        """Journal the revision a fix candidate's late failure calls for, and say it."""
        trial = outrun.trial
        where = (
            f"after the horizon (its loss left the band at step {outrun.step} > {self._horizon()})"
            if outrun.step is not None
            else "at its end, its loss inside the band all along"
        )  # fmt: skip
        self._revise(
            {
                "round": self._settling.round, "config": sorted(trial.config), "trial_id": trial.trial_id,
                "scope": "inside", "reason": f"the fix candidate's full training #{trial.trial_id} failed {where}",
            }
        )  # fmt: skip
        self._context.events.message(
            f"warning: the fix candidate's training #{trial.trial_id} failed {where}: the early passes "
            "cannot see that damage; searching again with full trainings only"
        )

    def prove_fix(self, result: CulpritSearch, oracle: TrainingOracle) -> bool | None:
        """Back the fix by a full training when only early passes vouch for it.

        True: the fix needs no proof (no early pass among its trainings, or a
        full one passed already) or its full training passed. False: the full
        training contradicts the early passes; journaled once as
        ``early_passes_revised``, after which no early pass counts (the noise
        layer's answer to an inconsistency, one level up: the verdicts are
        revised and the search asks again). None: the budget is spent first.
        """
        if not result.fix_verified:
            return True
        say = self._context.events.message
        names = oracle.key_names(result.fix)
        trials: list[TrialState] = []
        while (trial := self._settling.settled((names, len(trials)))) is not None:  # repeats are numbered from 0 on
            trials.append(trial)
        full = [trial for trial in trials if (trial.finished or {}).get("kind") not in EARLY_KINDS]
        if not any((trial.finished or {}).get("kind") == EARLY_PASS for trial in trials):
            return True
        if any(oracle.verdict_of(trial) is Outcome.PASS for trial in full):
            return True
        say("early passes: training the fix to its end, to prove it")
        proof = self.full_training((names, 0), PROOF_ROLE)
        if proof is None:
            return None
        verdict = oracle.verdict_of(proof)
        if verdict is Outcome.PASS:
            say(f"early passes: the fix passed its full training (#{proof.trial_id})")
            return True
        self._revise(
            {
                "round": self._settling.round, "config": sorted(names), "trial_id": proof.trial_id, "scope": "inside",
                "reason": f"the fix's full training #{proof.trial_id} gave {verdict.value} "
                f"({proof.finished.get('reason', '') if proof.finished else ''}) after early passes",
            }
        )  # fmt: skip
        say(
            f"warning: the fix's full training #{proof.trial_id} did not pass although early passes vouched for it: "
            "the damage appears after the horizon; searching again with full trainings only"
        )
        return False

    def _revise(self, record: dict[str, Any]) -> None:
        """Journal one revision of early verdicts, once per round (a replay finds it journaled already)."""
        if not any(int(done["round"]) == record["round"] for done in self._context.state.early_revisions):
            self._context.append({"type": RecordType.EARLY_PASSES_REVISED, **record})

    def prove_culprits(self, result: CulpritSearch, oracle: TrainingOracle) -> bool | None:
        """Back each culprit set's failure by a full training when only early failures blame it.

        One culprit set needs none: the all-on training failed in full and the
        fix, all-on without the set, passed in full. With several sets, a set is
        proven by a full failing training of a configuration that holds it and no
        other set; if there is none, the set alone is trained to its end (the
        trainings of all unproven sets at once). True: every set is proven.
        False: a set's full training passed, so the early failures that blamed it
        are revised and the search asks again. None: the budget is spent first.
        """
        context = self._context
        state = context.state
        sets = [frozenset(rule.name for rule in culprit.rules) for culprit in result.culprit_sets]
        if len(sets) < 2 or not any((trial.finished or {}).get("kind") == EARLY_FAIL for trial in state.trials.values()):
            return True

        def proven(names: frozenset[str]) -> bool:
            return any(
                trial.finished is not None and trial.finished.get("kind") not in EARLY_KINDS
                and trial.role != LOCALIZE_ROLE and names <= trial.config
                and not any(other <= trial.config for other in sets if other != names)
                and oracle.verdict_of(trial) is Outcome.FAIL
                for trial in state.trials.values()
            )  # fmt: skip

        unproven = [names for names in sets if not proven(names)]
        if not unproven:
            return True
        context.events.message(f"early failures: training {len(unproven)} culprit set(s) alone to the end, to prove them")
        while True:
            missing = [(names, 0) for names in unproven if self._settling.full((names, 0)) is None]
            if not missing:
                break
            if context.remaining_budget() < len(missing):
                return None
            self._launch(missing, None, PROOF_ROLE)
        for names in unproven:
            proof = state.full_trial((names, 0))
            assert proof is not None
            verdict = oracle.verdict_of(proof)
            if verdict is Outcome.FAIL:
                continue
            self._revise(
                {
                    "round": self._settling.round, "config": sorted(names), "trial_id": proof.trial_id,
                    "scope": "containing",
                    "reason": f"culprit set {', '.join(sorted(names))} alone gave {verdict.value} in its full training "
                    f"#{proof.trial_id} after early failures",
                }
            )  # fmt: skip
            context.events.message(
                f"warning: the full training #{proof.trial_id} of culprit set {', '.join(sorted(names))} alone did "
                "not fail although early failures blamed it; searching again with full trainings only"
            )
            return False
        context.events.message("early failures: each culprit set failed its full training alone")
        return True

    def full_training(self, key: ConfigKey, role: str) -> TrialState | None:
        """The full-length training that decides this key, trained (as ``role``) if there is none; None: no budget."""
        while True:
            trial = self._settling.full(key)
            if trial is not None:
                return trial
            if self._context.remaining_budget() == 0:
                return None
            self._launch([key], None, role)

    def _speed_of(self, names: frozenset[str]) -> float | None:
        """The median speed of this configuration's full-length trainings (``fusion_dd.runner.speed``)."""
        from_output = self._context.config.metric.speed_pattern is not None
        trials = [
            trial for trial in self._context.state.trials.values()
            if trial.config == names and trial.finished is not None and trial.role != LOCALIZE_ROLE
            and trial.finished.get("kind") != EARLY_PASS
        ]  # fmt: skip
        speeds = [speed for trial in trials if (speed := trial_speed(trial, from_output)) is not None]
        return statistics.median(speeds) if speeds else None

    def prefer_speed(self, result: CulpritSearch, oracle: TrainingOracle) -> CulpritSearch:
        """``fix.prefer: speed``: train the other minimum fixes in full, hand over the fastest that passes.

        Deterministic given the journal (the alternatives in name order, their
        trainings cached), so a resume hands over the same fix.
        """
        say = self._context.events.message
        chosen = frozenset(rule for culprit in result.culprit_sets for rule in culprit.switched_off)
        others = minimum_hitting_sets(
            [culprit.rules for culprit in result.culprit_sets], chosen, self._context.config.fix.max_alternatives,
            key=lambda rule: rule.name,
        )  # fmt: skip
        self.alternatives = []
        if not others:
            return result
        say(f"fix.prefer: speed: training {len(others)} other fix(es) that switch off as few rules")
        universe = result.fix | chosen
        measured: list[tuple[frozenset[Rule], bool, float | None]] = []
        for switched_off in others:
            names = oracle.key_names(universe - switched_off)
            trial = self.full_training((names, 0), ALTERNATIVE_ROLE)
            if trial is None:
                say("fix.prefer: speed: the budget is spent; the alternatives not trained are not compared")
                break
            passed = oracle.verdict_of(trial) is Outcome.PASS
            measured.append((switched_off, passed, self._speed_of(names)))
        chosen_speed = self._speed_of(oracle.key_names(result.fix))
        best = fastest(chosen, chosen_speed, measured)
        self.alternatives = [
            {"switched_off": sorted(rule.name for rule in chosen), "passed": True, "per_second": chosen_speed,
             "picked": best == chosen, "searched": True},
            *({"switched_off": sorted(rule.name for rule in off), "passed": passed, "per_second": speed,
               "picked": best == off, "searched": False} for off, passed, speed in measured),
        ]  # fmt: skip
        if best == chosen:
            return result
        sets = [
            replace(culprit, switched_off=culprit.rules & best, reason=(
                f"{{{', '.join(sorted(rule.name for rule in culprit.rules))}}} ({culprit.kind}): of the fixes that "
                f"switch off as few rules, switching off {', '.join(sorted(rule.name for rule in culprit.rules & best))} "
                "passed its full training and trained fastest (fix.prefer: speed)"))
            for culprit in result.culprit_sets
        ]  # fmt: skip
        singles = {rule for culprit in result.culprit_sets if len(culprit.rules) == 1 for rule in culprit.rules}
        # Switched off without failing alone: a culprit set containing it could hide behind the fix.
        hiding = frozenset(rule for rule in best if rule not in singles)
        return replace(result, fix=universe - best, culprit_sets=sets, may_hide=hiding)
