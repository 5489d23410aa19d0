"""The search loop: strategy <-> oracle (cache, journal, budget) <-> trainer.

One ``Engine.run`` is one coordinator session of a search. It takes the journal's
lock, replays what earlier sessions finished, adopts trainings that were still
running when an earlier coordinator died, checks the preconditions (baseline
passes, all-on fails), and then lets the all-culprits layer drive the configured
strategy against a ``TrainingOracle``. Every decision is journaled before anything
depends on it, so the session can be killed at any moment and resumed.

The engine decides against three ports (``fusion_dd.coordinator.ports``): a record
sink, a trainer and a budget. A session journals durably, trains through the
configured launcher and spends ``search.budget``; a replay and the estimate hand
in an in-memory sink, a trainer that never trains or answers hypothetically, and
their own budget, and call ``search`` directly. Each job of the search is a module
of its own (references, required passes, guidance, proofs, containers,
localization, endings); this one holds the loop that orders them.

The engine prints nothing: it reports through ``SearchEvents`` so that the CLI
decides between a live terminal display and plain lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..backends import CompilerBackend, backend_for
from ..config.session import context_of
from ..config.settings import SearchConfig
from ..core.errors import UsageError
from ..core.scoring import Preconditions
from ..core.status import ExitCode, SearchStatus
from ..core.hooks import effects_of
from ..core.rules import Rule
from ..report import localize as localization
from ..report.build import finished_report
from ..runner.broken import TrainingBroken
from ..runner.early_stop import LossCurveHook
from ..runner.launcher import Launcher, call_hook
from ..runner.metrics import MetricSpec
from ..runner.registry import launcher_for
from ..runner.speed import SpeedHook
from ..search import STRATEGIES, guided
from ..search.culprits import CulpritSearch, find_culprits
from ..search.lanes import LanePlan, Lanes
from ..search.noise import NoisePolicy
from ..search.oracle import BudgetExhausted, Outcome
from ..store.journal import JOURNAL_NAME
from ..store.records import RecordType
from ..store.state import PROOF_ROLE, ConfigKey, SearchState, TrialState
from .containers import Containers
from .devices import Devices
from .endings import Endings, ReportSnapshots
from .beside_references import first_question_beside_references
from .guidance import Guidance, references_dump
from .localizing import Localizing
from .opening import open_search, refuse_broken_command, refuse_ignored_switch, refuse_spent_budget
from .orphans import Orphans
from .ports import Budget, Context, JournalSink, QuietEvents, RecordSink, SearchEvents, SearchResult
from .ports import SessionBudget, SwitchIgnored, Trainer, TrialPlan
from .proofs import HorizonOutrun, Proofs
from .references import References
from .required import RequiredPasses
from .settling import Settling
from .trainer import LauncherTrainer
from .training_oracle import TrainingOracle

__all__ = ["Engine", "QuietEvents", "SearchEvents", "SearchResult", "SwitchIgnored"]


class Engine:
    """One coordinator session of one search, or (with other ports) its replay."""

    def __init__(
        self,
        config: SearchConfig,
        events: SearchEvents | None = None,
        backend: CompilerBackend | None = None,
        launcher: Launcher | None = None,
        adopt: Sequence[dict[str, Any]] = (),
        running_report: Callable[[list[dict[str, Any]], Path], dict[str, Any]] | None = None,
        *,
        sink: RecordSink | None = None,
        trainer: Trainer | None = None,
        budget: Budget | None = None,
        replaying: bool = False,
    ) -> None:
        """``running_report``: the report of the search so far, rebuilt from its journal records
        (``fusion_dd.coordinator.replay.running_report``, which ``run_search`` passes), written to
        report.json after finished trials so that a dead search never leaves a stale one;
        None: report.json is written at the end only.

        ``sink``, ``trainer``, ``budget``: the ports (default: the journal, the configured
        launcher, ``search.budget``). ``replaying``: decide nothing the journal does not hold
        (the guide) and write no file: a replay's caller decides where its report goes.
        """
        sink = sink if sink is not None else JournalSink(config.state_dir)
        if budget is None:  # the context's config: opening the journal completes it
            budget = SessionBudget(lambda: context.config.search.budget, lambda: sink.state)
        context = Context(config, backend or backend_for(config), events or QuietEvents(), sink, budget)
        self.context = context
        self._sink = sink
        # Journal records of a reference trained before the journal existed (the all-on training of
        # rules.from: all_on, fusion_dd.coordinator.closure): journaled right after search_started of a new search.
        self._adopt = list(adopt)
        self._oracle: TrainingOracle | None = None
        # Fix candidates the search announced (find_culprits' on_fix): trained with dumps when the
        # references are, so that localization needs no training of the fix of its own.
        self._fix_candidates: set[frozenset[str]] = set()
        # What of where this session trains came from the journal (fusion_dd.config.session), said once
        # the session starts: after every refusal, so that a refused session says only why.
        self.context_note: str | None = None
        self.required = RequiredPasses(context)
        self.settling = Settling(context)
        self.references = References(context, self.required, self.settling)
        self.containers = Containers(context)
        self.localizing = Localizing(context, self._launch)
        self.proofs = Proofs(
            context, self.settling, self._launch, self._fix_candidates, lambda: self.references.horizon,
            verdict=self._shown_verdict, required=lambda: frozenset(rule.name for rule in self.required.rules),
        )  # fmt: skip
        self.guidance = Guidance(context, self.required, self.localizing, self._launch, journal_only=replaying)
        self._snapshots = None if replaying else ReportSnapshots(context, running_report)
        self.endings = Endings(context, self.required, self.proofs, self.containers, self._rounds, self._snapshots)
        self.launcher: Launcher | None = None
        self._session: LauncherTrainer | None = None
        self._orphans: Orphans | None = None
        if trainer is None:
            self.launcher = launcher or launcher_for(config)
            self._session = LauncherTrainer(
                context, self.launcher, Devices(context, self.launcher, lambda: self.required.searching),
                self.references, hooks=_hooks(config, context), metric=_metric_spec(config),
                fix_candidates=self._fix_candidates, verdict=self._shown_verdict, on_finished=self._snapshot,
            )  # fmt: skip
            self._orphans = Orphans(context, self._session, self.references.load_baseline_curve)
            trainer = self._session
        self.trainer: Trainer = trainer

    # -- the ports' faces -------------------------------------------------------------------

    @property
    def config(self) -> SearchConfig:
        return self.context.config

    @property
    def state(self) -> SearchState:
        return self.context.state

    @property
    def state_dir(self) -> Path:
        return self.context.state_dir

    def remaining_budget(self) -> int:
        return self.context.remaining_budget()

    def _launch(
        self, keys: Sequence[ConfigKey], stop_after: Callable[[TrialState], bool] | None, role: str | None = None
    ) -> None:
        """Train these keys through the trainer; ``role``: what for, when their keys cannot say (localization)."""
        self.trainer.launch_batch([self._plan(key, role or self.references.role_of(key)) for key in keys], stop_after)

    def _plan(self, key: ConfigKey, role: str) -> TrialPlan:
        names, repeat = key
        # Also a dumped training of its configuration (fusion_dd.analysis.guide): the references for
        # the guide's ranking, a fix candidate for localization (the same training, dumped).
        dumps = repeat == 0 and references_dump(self.config) and (
            role in ("baseline", "all_on") or (role in ("search", PROOF_ROLE) and names in self._fix_candidates)
        )
        speculative = not references_dump(self.config)
        to_end = speculative and self.proofs.trains_to_end(role, names)
        fails_to_end = speculative and self.proofs.fails_to_end(role, names)
        return TrialPlan(key, role, dumps, to_end, fails_to_end)

    def _shown_verdict(self, trial: TrialState) -> Outcome | None:
        """A finished training's verdict for the display, once the threshold is known."""
        oracle = self._oracle
        return oracle.verdict_of(trial) if oracle is not None and oracle.threshold is not None else None

    def _snapshot(self) -> None:
        if self._snapshots is not None:
            self._snapshots.request()

    def _rounds(self) -> int:
        return self._oracle.rounds if self._oracle is not None else 0

    # -- a session ------------------------------------------------------------------------

    def _open(self) -> None:
        assert isinstance(self._sink, JournalSink), "a session journals"
        open_search(self.context, self._sink, self._adopt)

    def run(self) -> SearchResult:
        assert self._session is not None and self._orphans is not None, "a session trains through a launcher"
        try:
            self._open()
            refuse_ignored_switch(self.state_dir, self.state)
            if self.state.finished is not None:
                if self.localizing.pending():
                    # A localize: section and culprits not yet localized (budget, or added since).
                    self.context.events.message("this search has already finished; localizing its culprits")
                    return self._localize_finished()
                self.context.events.message("this search has already finished; showing its answer")
                return self.endings.from_finished()
            refuse_spent_budget(self.config.search.budget, self.state)
            self._launcher_hook("run_started")  # e.g. the local fork server starts meanwhile
            refuse_broken_command(self.config)
            self._session_started()
            self._orphans.adopt()
            return self.search()
        except TrainingBroken as exc:
            return self.endings.stop_broken(exc.broken)
        except SwitchIgnored as exc:
            self.context.append({"type": RecordType.SEARCH_STOPPED, "reason": "switch_ignored"})
            self.endings.stop(SearchStatus.SWITCH_IGNORED, ExitCode.USAGE, None, None, message=str(exc))
            raise UsageError(str(exc)) from None
        except KeyboardInterrupt:
            if not self._sink.opened:
                raise
            self._orphans.stop()  # a stop before the adoption began (pre-flight, session record)
            self.context.append({"type": RecordType.SEARCH_STOPPED, "reason": "interrupted"})
            return self.endings.stop(
                SearchStatus.INTERRUPTED, ExitCode.INTERRUPTED, self.references.known_preconditions(), None
            )
        finally:
            self._launcher_hook("run_ended")
            self._session.pools.close()
            if self._snapshots is not None:
                self._snapshots.close()
            self._sink.close()

    def _session_started(self, purpose: str | None = None) -> None:
        """Journal this session (what it may spend, where it trains) and say where that came from."""
        assert self._session is not None
        record: dict[str, Any] = {"type": RecordType.SESSION_STARTED}
        if purpose is not None:
            record["purpose"] = purpose
        record.update(
            {
                "budget": self.config.search.budget,
                "devices": self._session.devices.of_session(),
                "context": context_of(self.config.train),
                "timeout": self.config.train.timeout,
                "version": __version__,
            }
        )
        self.context.append(record)
        if self.context_note:
            self.context.events.message(self.context_note)

    def _launcher_hook(self, name: str) -> None:
        """``run_started``/``run_ended`` of the launcher, where it has them (optional in the protocol)."""
        # Not DaskLauncher.release(address), which gives a worker back: these names are the seam's own.
        call_hook(self.launcher, name)

    def localize(self) -> SearchResult:
        """``fusion-dd localize``: localize the culprits of a finished search (a session of that search)."""
        assert self._session is not None, "a session trains through a launcher"
        if not (self.state_dir / JOURNAL_NAME).exists():
            raise UsageError(f"{self.state_dir}: no search here; run 'fusion-dd search' first")
        try:
            self._open()
            if self.state.finished is None:
                raise UsageError(
                    f"{self.state_dir}: the search has not finished; finish it with 'fusion-dd resume' "
                    "(with a localize: section in its config it localizes by itself)"
                )
            report = finished_report(self.state)
            culprits, switched_off = localization.culprits_of(report)
            if report.get("status") != SearchStatus.FOUND or not culprits:
                raise UsageError(f"{self.state_dir}: the search found no culprit to localize")
            if self.config.localize is None:
                raise UsageError(
                    f"{self.config.source}: has no localize: section saying how a training dumps its tensors; "
                    "add one (docs/compare.md: Localization after a search) and pass the config with -c"
                )
            if not self.localizing.pending():  # every set localized already: no session, nothing trained
                return self.endings.from_finished()
            return self._localize_finished()
        except SwitchIgnored as exc:
            raise UsageError(str(exc)) from None
        finally:
            self._launcher_hook("run_ended")
            self._session.pools.close()
            self._sink.close()

    def _localize_finished(self, session_started: bool = True) -> SearchResult:
        """Localization as a session of a finished search (journal open, lock held).

        Interrupted, it still writes the finished search's report (with what was
        localized so far) and exits 130: the search's answer is not "interrupted".
        ``session_started``: False right after this session found the answer (its
        session is journaled, its orphans adopted).
        """
        report = finished_report(self.state) if self.state.finished is not None else {}
        culprits, switched_off = localization.culprits_of(report)
        try:
            if session_started:
                assert self._orphans is not None, "a session of its own trains through a launcher"
                self.references.quiet_horizon()  # the search's early passes are over: not this session's news
                self._session_started("localize")
                self._orphans.adopt()
            self.localizing.localize(localization.plan(self.context.rule_by_name, culprits, switched_off))
        except KeyboardInterrupt:
            self.context.events.message("interrupted: localization incomplete")
            return replace(self.endings.from_finished(), exit_code=ExitCode.INTERRUPTED)
        return self.endings.from_finished()

    # -- the search ------------------------------------------------------------------------

    def _new_oracle(self) -> TrainingOracle:
        return TrainingOracle(
            threshold=None,  # known once the references are settled
            crash_is_failure=self.config.score.crash_is_failure,
            cached=self.settling.settled,
            launch=self._launch,
            remaining_budget=self.remaining_budget,
            repeats=self.config.search.confirm != "off",
            realize=self.required.realize,
            answered=lambda trials: self.proofs.check_horizon(trials, self._oracle),
        )

    def search(self) -> SearchResult:
        """The search from the references to its answer or its stop, against the engine's ports."""
        say = self.context.events.message
        self._oracle = self._new_oracle()
        references = self.references
        opening, riders = first_question_beside_references(
            self.context, references, self.settling, self.trainer.lanes(), self._oracle, self._candidates(),
            lambda probe, lanes: self._all_culprits(probe, lanes, None),
        )
        pre, extra = references.settle(self._oracle, riders)
        if (
            pre is not None and not pre.ok and pre.status == SearchStatus.BASELINE_FAILS
            and self.required.baseline_cannot_run(references.keys(references.extra), self.settling)
        ):  # fmt: skip
            try:
                found = self.required.find(self.settling, self._launch)
            except BudgetExhausted:
                pre = None
            else:
                if found:
                    self.required.keep_on(found)
                    references.restart_baseline()
                    pre, extra = references.settle(self._oracle)
        if pre is None:
            self.context.append({"type": RecordType.SEARCH_STOPPED, "reason": "budget_exhausted"})
            return self.endings.stop(
                SearchStatus.BUDGET_EXHAUSTED, ExitCode.BUDGET, references.known_preconditions(), None
            )
        for warning in pre.warnings:
            say(f"warning: {warning}")
        if not pre.ok:
            return self.endings.finish(pre.status, pre, None)
        assert pre.threshold is not None
        say(pre.message)
        lanes = LanePlan(
            current=self.trainer.lanes,
            recorded=self.state.lanes,
            on_new=lambda index, width: self.context.append(
                {"type": RecordType.QUESTION, "index": index, "width": width, "time": None,
                 **({"opening": True} if index == 0 and opening is not None else {})}, durable=False
            ),  # no time: nobody reads it, and a search asks about as many questions as it trains
            opening=opening,
        )
        result = self._find_culprits(pre, lanes, extra)
        oracle = self._oracle
        assert oracle is not None
        if not result.exhausted and not result.no_failure and self.containers.rules_of:
            try:
                result = self.containers.look_inside(result, oracle)
            except BudgetExhausted:
                result = replace(result, exhausted=True, smallest_failing=oracle.smallest_failing)
        if not result.exhausted and not result.no_failure and self.config.fix.prefer == "speed":
            result = self.proofs.prefer_speed(result, oracle)
        if result.exhausted:
            self.context.append({"type": RecordType.SEARCH_STOPPED, "reason": "budget_exhausted"})
            return self.endings.stop(SearchStatus.BUDGET_EXHAUSTED, ExitCode.BUDGET, pre, result)
        if result.no_failure:  # asked again during the search, all candidates on did not fail
            return self.endings.finish(SearchStatus.NO_FAILURE, pre, result)
        finished = self.endings.finish(SearchStatus.FOUND, pre, result)
        if self.config.localize is not None and result.culprit_sets:
            # The answer is journaled first: localization is a session's work on a finished
            # search, and an interrupt during it must not take the answer with it.
            return self._localize_finished(session_started=False)
        return finished

    def _find_culprits(self, pre: Preconditions, lanes: LanePlan, extra: dict[str, int]) -> CulpritSearch:
        """The all-culprits layer, round after round until full trainings back its answer (or the budget ends)."""
        while True:
            oracle = self._prepare_oracle(pre, lanes, extra)
            try:
                result = self._all_culprits(
                    oracle, lanes, lambda candidate: self._fix_candidates.add(frozenset(rule.name for rule in candidate))
                )
            except HorizonOutrun as outrun:
                self.proofs.revise_after_outrun(outrun)
                self.settling.round += 1  # early passes missed damage: search again without them
                continue
            if self.required.rules:  # the fix keeps the required passes on, like every configuration trained
                result = replace(result, fix=result.fix | self.required.rules)
            if result.exhausted or result.no_failure:
                return result
            proof = self.proofs.prove_fix(result, oracle)
            if proof:
                proof = self.proofs.prove_culprits(result, oracle)
            if proof is None:  # the budget leaves no room for the full trainings
                return replace(result, exhausted=True, smallest_failing=oracle.smallest_failing)
            if proof:
                return result
            self.settling.round += 1  # a full training contradicted early verdicts: search again without them

    def _candidates(self) -> list[Rule]:
        """The rules the search is about: every rule but the required passes and the rules inside containers."""
        excluded = self.required.rules
        return [rule for rule in self.context.rules if rule not in excluded and rule not in self.containers.inner]

    def _all_culprits(self, oracle: Any, lanes: Lanes, on_fix: Callable[[frozenset[Rule]], None] | None) -> CulpritSearch:
        """One run of the all-culprits layer against ``oracle``, as the search runs it."""
        guidance = self.guidance
        strategy = guided(
            guidance.prior(), STRATEGIES[self.config.search.strategy], partners=guidance.partners(),
            refine=guidance.refine if guidance.refines() else None,
        )  # fmt: skip
        return find_culprits(
            self._candidates(),
            oracle,
            strategy,
            parallelism=lanes,
            noise=NoisePolicy(self.config.search.confirm, self.config.search.max_trainings, self.config.search.fix_trainings),
            choose_off=self._switch_off_chooser(),
            on_fix=on_fix,
        )

    def _prepare_oracle(self, pre: Preconditions, lanes: LanePlan, extra: dict[str, int]) -> TrainingOracle:
        """The oracle for one round of the search: the journal's answers, repeats counted afresh.

        A later round asks its questions from the start again (every answer
        still cached, except the early passes it no longer trusts), so its
        repeats are counted from zero like a resumed session's.
        """
        if self.settling.round > 0:
            self._oracle = self._new_oracle()
        oracle = self._oracle
        assert oracle is not None and pre.threshold is not None
        oracle.threshold = pre.threshold
        oracle.margin = self.references.margin(pre)
        oracle.lanes = lanes
        score = self.config.score
        if score.baseline_metric is None:
            oracle.note_asked(frozenset(), score.baseline_repeats + extra["baseline"])
        if score.all_on_metric is None:
            oracle.note_asked(frozenset(self.context.rules), score.all_on_repeats + extra["all_on"])
        return oracle

    def _switch_off_chooser(self) -> Any:
        """The backend's choice of the rule to switch off in an interacting set.

        Fed with how often each rule fused in the all-on training, as its
        artifact hooks journaled it when it ended: an input of a decision, so it
        comes from the journal, never from a file read again on resume. A
        journal of an older version has no such facts: then the backend chooses
        without counts.
        """
        rules, by_name = self.context.rules, self.context.rule_by_name
        all_on = self.state.cache().get((frozenset(rule.name for rule in rules), 0))
        counts = effects_of(all_on.finished.get("artifacts")) if all_on is not None and all_on.finished else {}
        effects = {by_name[name]: count for name, count in counts.items() if name in by_name}
        return self.context.backend.chooser(effects)


def _hooks(config: SearchConfig, context: Context) -> list[Any]:
    """What reads a training's files when it ends: the backend's artifacts, the loss curve, the speed."""
    hooks: list[Any] = list(context.backend.hooks(context.rules))
    if config.early_stop is not None and config.early_stop.active and config.score.baseline_metric is None:
        hooks.append(LossCurveHook(config.early_stop.step_pattern, config.early_stop.read_output))
    if config.metric.speed_pattern is not None:
        hooks.append(SpeedHook(re.compile(config.metric.speed_pattern)))
    return hooks


def _metric_spec(config: SearchConfig) -> MetricSpec:
    return MetricSpec.from_text(config.metric.pattern, config.metric.key, config.metric.goal, config.metric.loss_pattern)
