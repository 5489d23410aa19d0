"""The search loop: strategy <-> oracle (cache, journal, budget) <-> executor.

One ``Engine.run`` is one coordinator session of a search. It takes the journal's
lock, replays what earlier sessions finished, adopts trainings that were still
running when an earlier coordinator died, checks the preconditions (baseline
passes, all-on fails), and then lets the all-culprits layer drive the configured
strategy against a ``TrainingOracle``. Every decision is journaled before anything
depends on it, so the session can be killed at any moment and resumed.

The engine prints nothing: it reports through ``SearchEvents`` so that the CLI
decides between a live terminal display and plain lines.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from .. import __version__
from ..config.settings import SearchConfig
from ..core.errors import UsageError
from ..core.status import ExitCode, SearchStatus
from ..runner.early_stop import LossCurveHook, envelope, read_curve
from ..runner.executor import Device, DevicePool, Pools, run_batch
from ..runner.wakeup import CancelEvent
from ..store.journal import JOURNAL_NAME, TRIALS_DIR, Journal
from ..runner.metrics import MetricSpec
from ..report.build import FIX_NAME, REPORT_NAME, build_report, display_path, finished_report, journaled_answer, write_outputs
from ..report.build import write_report
from ..store.snapshots import Snapshots
from ..core.rules import Rule
from ..core.scoring import UNEVALUABLE, Measurement, Preconditions, check_preconditions
from ..search import STRATEGIES, guided
from ..search.culprits import CulpritSearch, find_culprits
from ..search.lanes import LanePlan
from ..search.noise import NoisePolicy
from ..search.oracle import Outcome
from ..store.state import ConfigKey, SearchState, TrialState, definition_changes, replay
from ..runner.trial import ForeignTrial, TrialSpec, trial_binding
from ..store.identity import SEARCH_ID_KEY, check_journal_belongs, journaled_id, new_search_id, record_state_dir_id
from ..runner.launcher import Launcher, TrialRequest, TrialResult
from ..runner.registry import launcher_for
from ..backends import CompilerBackend, backend_for, fix_env_of
from ..core.hooks import effects_of, fired_although_off_of, known_to_compiler_of, switch_check_of, unknown_to_compiler_of
from ..runner.broken import STATUS as TRAINING_BROKEN
from ..runner.broken import BrokenTraining, TrainingBroken, diagnose_references, is_start_error, launched_command
from ..runner.broken import report_details
from .preflight import preflight
from ..config.session import context_of
from .training_oracle import RunsOracle, TrainingOracle, runs
from ..runner.broken import log_tail
from ..search.ddmin import ddmin
from ..search.oracle import BudgetExhausted
from ..analysis import guide as guidance
from ..report import localize as localization
from ..store.state import LOCALIZE_ROLE, LOG_NAME
from ..store.state import EARLY_FAIL, EARLY_KINDS, EARLY_PASS, PROOF_ROLE, withdraws
from ..runner.horizon import departure, horizon
from ..runner.speed import SpeedHook
from ..report.build import trial_speed
from ..search.alternatives import fastest, minimum_hitting_sets
from ..store.state import ALTERNATIVE_ROLE
from ..store.records import RecordType


# A training that ends without a metric this soon after its start did not really
# run; two in a row on one device, while another device trains fine, mean the
# device is broken rather than the configuration.
START_FAILURE_SECONDS = 30.0
START_FAILURES_TO_RETIRE = 2


class SearchEvents(Protocol):
    """What the engine tells its user interface; all methods must be thread-safe."""

    def message(self, text: str) -> None: ...

    def trial_started(self, trial: TrialState) -> None: ...

    def trial_finished(self, trial: TrialState, outcome: Outcome | None) -> None: ...

    def best_so_far(self, config: frozenset[Rule] | None) -> None: ...


class QuietEvents:
    """Events sink that ignores everything (library use and tests)."""

    def message(self, text: str) -> None:
        pass

    def trial_started(self, trial: TrialState) -> None:
        pass

    def trial_finished(self, trial: TrialState, outcome: Outcome | None) -> None:
        pass

    def best_so_far(self, config: frozenset[Rule] | None) -> None:
        pass


@dataclass(frozen=True)
class SearchResult:
    status: str  # a SearchStatus (fusion_dd.core.status)
    exit_code: int
    report: dict[str, Any]
    report_path: Path
    fix_path: Path | None


class SwitchIgnored(Exception):
    """A trial's fusion_result.json shows the compiler did not apply its switch file."""


class Engine:
    """One coordinator session of one search."""

    def __init__(
        self,
        config: SearchConfig,
        events: SearchEvents | None = None,
        backend: CompilerBackend | None = None,
        launcher: Launcher | None = None,
        adopt: Sequence[dict[str, Any]] = (),
        running_report: Callable[[list[dict[str, Any]], Path], dict[str, Any]] | None = None,
    ) -> None:
        """``running_report``: the report of the search so far, rebuilt from its journal records
        (``fusion_dd.coordinator.replay.running_report``, which ``run_search`` passes), written to
        report.json after finished trials so that a dead search never leaves a stale one;
        None: report.json is written at the end only."""
        self.config = config
        self._running_report = running_report
        # Journal records of a reference trained before the journal existed (the all-on training of
        # rules.from: all_on, fusion_dd.coordinator.closure): journaled right after search_started of a new search.
        self._adopt = list(adopt)
        # Whether the trainings an earlier session left running were adopted and waited for
        # (or stopped): until then, a stop must stop them too.
        self._orphans_settled = False
        self.events: SearchEvents = events or QuietEvents()
        self.backend = backend or backend_for(config)
        self.launcher: Launcher = launcher or launcher_for(config)
        self.rules = list(config.rules)
        self._hooks: list[Any] = list(self.backend.hooks(self.rules))
        if config.early_stop is not None and config.early_stop.active and config.score.baseline_metric is None:
            self._hooks.append(LossCurveHook(config.early_stop.step_pattern))
        if config.metric.speed_pattern is not None:
            self._hooks.append(SpeedHook(re.compile(config.metric.speed_pattern)))
        self.rule_by_name = {rule.name: rule for rule in self.rules}
        self.metric_spec = MetricSpec.from_text(
            config.metric.pattern, config.metric.key, config.metric.goal, config.metric.loss_pattern
        )
        self.state = SearchState()
        self._baseline_curve: list[tuple[int, float]] = []  # for the divergence rule of early stopping
        # Early passes (fusion_dd.runner.horizon): the step at which a search training still inside the
        # baseline's band counts as a pass, and the round of the search (a full training that
        # contradicts an early pass starts the next round, in which no early pass counts).
        self._horizon: int | None = None
        self._horizon_said = False
        self._alternatives: list[dict[str, Any]] = []  # fix.prefer: speed: the fixes compared, for the report
        self._round = 0
        self._start_failures: dict[Device, int] = {}
        self._retired: list[Device] = []
        self._in_service: list[Device] = []  # the devices (or a cluster's slots) of the last batch
        self._some_device_works = False
        self._fired_off_said: set[str] = set()  # rules named once per session as firing although off
        self._pool: DevicePool | None = None
        self._journal: Journal | None = None
        self._journal_lock = threading.Lock()
        self._oracle: TrainingOracle | None = None
        self._unreadable_result_said = False
        self._snapshot_failed = False
        self._snapshots = Snapshots(self._snapshot_report)
        self._pre: Preconditions | None = None  # the references' verdict, once measured
        # Re-trainings of a reference beyond its configured repeats (its trainings disagreed).
        self._reference_extra: dict[str, int] = {"baseline": 0, "all_on": 0}
        # Fix candidates the search announced (find_culprits' on_fix): trained with dumps when the
        # references are, so that localization needs no training of the fix of its own.
        self._fix_candidates: set[frozenset[str]] = set()
        # joblib's thread pools, open from the first batch to the end of the run (not one per question).
        self._pools = Pools()
        # What of where this session trains came from the journal (fusion_dd.config.session), said once
        # the session starts: after every refusal, so that a refused session says only why.
        self.context_note: str | None = None
        # Required passes: candidates without which the training cannot run (the all-off baseline
        # crashed or exited 125, all-on ran). Found by ddmin on "does it run", kept on in every
        # configuration after; ``_floor`` is their names, the key of the search's baseline.
        self._required: frozenset[Rule] = frozenset()
        self._floor: frozenset[str] = frozenset()
        self._required_entry: dict[str, Any] | None = None
        self._finding_required = False  # while the required passes are searched for
        # Containers of named rules (ONNX Runtime's rule-based transformers) and their rules among the
        # candidates: the search asks about the containers, and looks inside a culprit one.
        containers = getattr(self.backend, "containers", None)
        self._containers: dict[Rule, list[Rule]] = containers(self.rules) if containers is not None else {}
        self._inner = frozenset(rule for rules in self._containers.values() for rule in rules)

    # -- journal ----------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir

    def _append(self, record: dict[str, Any], durable: bool = True) -> None:
        """Journal a record (durably unless told: see ``Journal.append``) and apply it to the live state, atomically."""
        assert self._journal is not None
        if record.setdefault("time", _now()) is None:
            del record["time"]  # asked for none
        with self._journal_lock:
            self._journal.append(record, durable)
            self.state.apply(record)

    def _open(self) -> None:
        if not (self.state_dir / JOURNAL_NAME).exists():
            self._refuse_trials_without_journal()  # before creating anything there
        self._journal = Journal.open(self.state_dir)
        self.state = replay(self._journal.records())
        if self.state.start_record is not None:
            check_journal_belongs(self.state_dir, self._journal.path, journaled_id(self.state.start_record))
        self.config = self.config.with_started_defaults(self.state.definition)
        definition = self.config.definition()
        if self.state.definition is None:
            self._refuse_trials_without_journal()
        unknown = self._unknown_trial_dirs()
        if unknown:
            shown = ", ".join(f"{TRIALS_DIR}/{name}" for name in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
            self.events.message(
                f"warning: {len(unknown)} trial director{'y' if len(unknown) == 1 else 'ies'} the journal does not "
                f"know ({shown}); left untouched: new trials skip those numbers"
            )
        if self.state.definition is None:
            self._preflight()  # before the search is journaled: a fixed config then starts afresh
            search_id = new_search_id()
            self._append(
                {
                    "type": RecordType.SEARCH_STARTED,
                    SEARCH_ID_KEY: search_id,
                    "definition": definition,
                    "version": __version__,
                    "config_path": str(self.config.source),
                    "config_document": self.config.document,
                }
            )
            record_state_dir_id(self.state_dir, search_id)
            if self._adopt and self._references_dump():
                self.events.message("the all-on training of rules.from: all_on dumped no tensors: all-on trains again")
            elif self._adopt:
                for adopted in self._adopt:
                    self._append(dict(adopted))
                self.events.message("the all-on training of rules.from: all_on is the all-on reference (trial all-on)")
        elif self.state.definition != definition:
            changes = ", ".join(definition_changes(self.state.definition, definition))
            raise UsageError(
                f"{self.state_dir}: holds a search with a different definition (changed: {changes}); "
                "restore the old config, start over with 'fusion-dd search --restart' (moves this state "
                "directory aside, keeping its journal), or use another --state-dir for the new search"
            )

    def _refuse_trials_without_journal(self) -> None:
        """Trial directories but no search in the journal: starting over here would overwrite them."""
        unknown = self._unknown_trial_dirs()
        if unknown:
            raise UsageError(
                f"{self.state_dir}: holds {len(unknown)} trial director{'y' if len(unknown) == 1 else 'ies'} "
                f"under {TRIALS_DIR}/ but no journal of a search, so fusion-dd cannot know what they are "
                "(was the journal deleted?); restore journal.jsonl, or start over with "
                "'fusion-dd search --restart', which moves this state directory aside"
            )

    def _unknown_trial_dirs(self) -> list[str]:
        """Entries under trials/ that no journaled trial owns: never to be reused or overwritten."""
        try:
            entries = sorted(entry.name for entry in (self.state_dir / TRIALS_DIR).iterdir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise UsageError(f"{self.state_dir / TRIALS_DIR}: cannot list the trial directories ({exc})") from None
        known = {Path(trial.trial_dir).name for trial in self.state.trials.values()}
        return [name for name in entries if name not in known]

    def _new_trial_id(self) -> str:
        """The next trial number whose directory does not exist yet (call with the journal lock held).

        A directory the journal does not know may hold results of a search whose
        journal was lost; overwriting it would destroy them silently, so its
        number is skipped (``_open`` said so once).
        """
        number = self.state.next_trial_number()
        while (self.state_dir / TRIALS_DIR / f"{number:04d}").exists():
            number += 1
        return f"{number:04d}"

    # -- trainings -----------------------------------------------------------------

    def _switch_off_chooser(self) -> Any:
        """The backend's choice of the rule to switch off in an interacting set.

        Fed with how often each rule fused in the all-on training, as its
        artifact hooks journaled it when it ended: an input of a decision, so it
        comes from the journal, never from a file read again on resume. A
        journal of an older version has no such facts: then the backend chooses
        without counts.
        """
        all_on = self.state.cache().get((frozenset(rule.name for rule in self.rules), 0))
        counts = effects_of(all_on.finished.get("artifacts")) if all_on is not None and all_on.finished else {}
        effects = {self.rule_by_name[name]: count for name, count in counts.items() if name in self.rule_by_name}
        return self.backend.chooser(effects)

    def _margin(self, pre: Preconditions) -> float:
        """How close to the limit a metric must land to count as a near-threshold verdict (re-trained)."""
        if self.config.score.margin is not None:
            return self.config.score.margin
        spread = pre.threshold.baseline_spread if pre.threshold is not None else None
        return 2.0 * spread if spread else 0.0

    def _settled(self, key: ConfigKey) -> TrialState | None:
        """The finished training that decides this key, or None while it needs (another) training.

        A crash, timeout or missing metric is retried up to ``train.retries`` times
        before it stands as UNRESOLVED; a training that exited 125 (it cannot evaluate
        this configuration) stands at once.
        """
        trial = self.state.cache().get(key)
        if trial is None:
            return None
        if self._early_distrusted(trial):
            full = self.state.full_trial(key)  # the early pass counts no more: a full training decides
            if full is None:
                return None
            if full.resolved or self.state.full_attempts(key) > self.config.train.retries:
                return full
            return None
        if trial.resolved or self.state.attempts(key) > self.config.train.retries:
            return trial
        if trial.finished is not None and trial.finished.get("kind") == UNEVALUABLE:
            return trial  # the training said it cannot evaluate this configuration: a retry says the same
        return None

    def _early_distrusted(self, trial: TrialState) -> bool:
        """Whether this trial's early verdict no longer counts: a full training contradicted it in an earlier round.

        A revision withdraws only the verdicts that could have led to the
        contradicted claim (:func:`fusion_dd.store.state.withdraws`): a failed
        fix, the early passes of configurations inside it; a passing culprit
        set, the early failures of configurations that contain it.
        """
        kind = (trial.finished or {}).get("kind")
        if kind not in EARLY_KINDS:
            return False
        return any(
            self._round > int(record["round"]) and withdraws(record, kind, trial.config)
            for record in self.state.early_revisions
        )

    def remaining_budget(self) -> int:
        return max(0, self.config.search.budget - self.state.launched)

    def _config_rules(self, names: frozenset[str]) -> list[Rule]:
        return [self.rule_by_name[name] for name in sorted(names)]

    def _train(self, key: ConfigKey, role: str, device: Device, cancel: threading.Event) -> TrialState | None:
        """Launch one training on ``device`` and wait for it; None when it was cancelled."""
        names, repeat = key
        with self._journal_lock:
            trial_id = self._new_trial_id()
            record = {
                "type": RecordType.TRIAL_STARTED,
                "trial_id": trial_id,
                "on": self.state.rule_index.encode(names),  # a bit mask of the journaled rule list
                "repeat": repeat,
                "device": list(device),
                # No trial_dir: the usual one, TRIALS_DIR/<id>, is what replay takes when none is said.
                "role": role,
                "time": _now(),
            }
            attempt = self.state.attempts(key) + 1
            if attempt > 1:  # the first is replay's default: a key per record saved
                record["attempt"] = attempt
            if repeat == 0 and self._references_dump() and (
                role in ("baseline", "all_on") or (role in ("search", PROOF_ROLE) and names in self._fix_candidates)
            ):
                # Also a dumped training of its configuration (fusion_dd.analysis.guide): the references for
                # the guide's ranking, a fix candidate for localization (the same training, dumped).
                record["dumps"] = True
            assert self._journal is not None
            # Written before the launch, so a killed coordinator finds it; without an fsync, since a
            # crash of the machine that loses it also ends the training (resume then warns about the
            # trial directory no record names and skips its number). trial_finished syncs it.
            self._journal.append(record, durable=False)
            self.state.apply(record)
            trial = self.state.trials[trial_id]
        self.events.trial_started(trial)
        request = self._request(trial, device)
        try:
            handle = _start(self.launcher, request, cancel)
        except Exception:
            # Nothing runs: say so, so that this trial costs no budget on resume either.
            self._append(
                {"type": RecordType.TRIAL_CANCELLED, "trial_id": trial_id, "reason": "the training could not be started",
                 "launched": False}
            )
            raise
        try:
            launched = {"type": RecordType.TRIAL_LAUNCHED, "trial_id": trial_id, "placement": handle.placement.to_json()}
            # A pid only for a local launch (a Slurm job id is digits too, and no pid); none is no key.
            pid = _pid_of(handle.placement.job_id) if handle.placement.launcher == "local" else None
            if pid is not None:
                launched["supervisor_pid"] = pid
            # The trial's files say it started (ever_started) if a crash loses this.
            self._append(launched, durable=False)
        except BaseException:
            handle.cancel()  # a training that nothing can record must not run on
            handle.wait()
            raise
        result = handle.wait(cancel)
        try:
            return self._record_end(trial, result)
        finally:
            self._watch_device(tuple(device), trial)

    def _request(self, trial: TrialState, device: Sequence[str]) -> TrialRequest:
        """Everything a launcher needs to run this trial, and nothing of the engine."""
        rendered = self.backend.render(self.rules, self._config_rules(trial.config))
        dumps = trial.role == LOCALIZE_ROLE and self.config.localize is not None
        # search.guide: dumps: the references' first training dumps one step too (fusion_dd.analysis.guide).
        guide_dumps = self.state.dumped(trial.trial_id)
        spec = TrialSpec(
            trial_id=trial.trial_id,
            trial_dir=self.state_dir / trial.trial_dir,
            command=self.config.train.command,
            workdir=self.config.train.workdir,
            base_dir=self.config.base_dir,
            env={**self.config.train.env, **rendered.env},
            device=tuple(device),
            device_env=self.config.train.device_env,
            timeout=self.config.train.timeout,
            repeat=trial.repeat,
            switch_text=rendered.switch_text,
            env_defaults=rendered.env_defaults,
            grace=self.config.train.kill_grace,
            log_limit=self.config.train.log_limit,
        )
        if dumps or guide_dumps:
            spec = localization.dumping_spec(spec, self.config.localize)
        spec = replace(
            spec,
            binding=trial_binding(
                journaled_id(self.state.start_record), trial.trial_id, trial.config, trial.repeat, trial.role
            ),
        )
        return TrialRequest(
            spec=spec,
            metric=self.metric_spec,
            hooks=tuple(self._hooks),
            enabled=trial.config,
            role=trial.role,
            early_stop=None if dumps else self._early_stop_for(trial),
            baseline_curve=tuple(self._baseline_curve),
        )

    def _early_stop_for(self, trial: TrialState) -> Any:
        """The early-stop rule for this training: with the horizon for the search's own trainings.

        The references, a fix's proof and (when the references dump for the
        guide) the fix candidates always run to their end; after a full training
        contradicted early verdicts, no training stops early as a pass or an
        early failure (a divergence the user set still stops it).
        """
        rule = self.config.early_stop
        if (
            rule is None
            or self._horizon is None
            or trial.role not in ("search", "repeat")
            or self.state.early_revised_round is not None
            # A fix candidate that dumps for localization (search.guide: dumps) is trained in full: its
            # dump and its verdict serve localization and the answer at once, with no proof after.
            or (trial.config in self._fix_candidates and self._references_dump())
        ):
            return rule
        step = self._horizon
        localize = self.config.localize
        if self.state.dumped(trial.trial_id) and localize is not None and localize.step is not None:
            step = max(step, localize.step + 1)  # its dump of the localized step serves localization
        return replace(rule, pass_step=step, fail_band=True)

    def _devices(self) -> DevicePool:
        """A pool of the devices still in service; the engine retires broken ones from it."""
        # A cluster launcher offers its own slots (dask: one per device worker), else train.devices.
        slots = getattr(self.launcher, "slots", None)
        self._in_service = [tuple(d) for d in (slots() if slots is not None else self.config.train.devices)]
        active = [d for d in self._in_service if d not in self._retired]
        self._pool = DevicePool(active)
        return self._pool

    def _device_count(self) -> int:
        """How many devices train at once: train.devices, or the cluster's device workers."""
        if not self._in_service and getattr(self.launcher, "slots", None) is not None:
            self._devices()
        return len(self._in_service or self.config.train.devices)

    def _session_devices(self) -> list[list[str]]:
        """The devices this session trains on, as ``session_started`` journals them: train.devices, or
        a cluster's own (dask: ``HOST:ID/WORKER`` per device worker), which status, estimate and report read."""
        if getattr(self.launcher, "slots", None) is not None:
            self._devices()
        return [list(entry) for entry in (self._in_service or self.config.train.devices)]

    def _watch_device(self, device: Device, trial: TrialState) -> None:
        """Set a device aside when trainings keep failing to start on it while others train fine."""
        finished = trial.finished
        if finished is None or trial.role == LOCALIZE_ROLE or self._finding_required:
            # A dumping training may end early and without a metric on purpose; while the
            # required passes are looked for, configurations that cannot run crash on any device.
            return
        # A retry of a configuration that crashed before proves nothing against this device: the
        # configuration itself may not run (a pass it cannot compile without); other ones tell.
        failed_to_start = (
            finished["kind"] in ("crash", "no_metric")
            and (finished.get("duration") or 0.0) < START_FAILURE_SECONDS
            and trial.attempt == 1
        )
        with self._journal_lock:
            if not failed_to_start:
                self._start_failures[device] = 0
                self._some_device_works = self._some_device_works or finished["kind"] == "metric"
                return
            self._start_failures[device] = self._start_failures.get(device, 0) + 1
            in_service = self._device_count() - len(self._retired)
            retire = (
                self._start_failures[device] >= START_FAILURES_TO_RETIRE
                and self._some_device_works
                and in_service > 1
                and device not in self._retired
            )
            if retire:
                self._retired.append(device)
        if retire:
            reason = (
                f"device {','.join(device)} set aside: {START_FAILURES_TO_RETIRE} trainings in a row ended "
                f"within {START_FAILURE_SECONDS:.0f} s without a metric (last: {finished.get('reason')}) while "
                "other devices train fine"
            )
            self._append({"type": RecordType.DEVICE_RETIRED, "device": list(device), "reason": reason})
            if self._pool is not None:
                self._pool.retire(device)
            self.events.message(f"warning: {reason}")

    def _record_end(self, trial: TrialState, result: TrialResult) -> TrialState | None:
        if result.cancelled:
            self._append({"type": RecordType.TRIAL_CANCELLED, "trial_id": trial.trial_id, "reason": result.reason or "cancelled"})
            self.events.trial_finished(trial, None)
            return None
        switch_check, switch_reason = switch_check_of(result.artifacts)
        self._warn_unreadable(trial, result.artifacts)
        self._warn_fired_although_off(trial, result.artifacts)
        finished = {
            "type": RecordType.TRIAL_FINISHED,
            "trial_id": trial.trial_id,
            **result.record_fields(),
            # Why it is not "applied" is its artifacts' own message (switch_check_of): journaled once, there.
            "switch_check": switch_check,
        }
        if result.log != LOG_NAME:  # the usual log is TrialState.log's default: no key for it
            finished["log"] = str(Path(trial.trial_dir) / result.log)
        self._append(finished)
        ready = self._oracle is not None and self._oracle.threshold is not None and trial.role != LOCALIZE_ROLE
        outcome = self._oracle.verdict_of(trial) if ready else None
        self.events.trial_finished(trial, outcome)
        if outcome is Outcome.FAIL:
            self.events.best_so_far(frozenset(self._config_rules(trial.config)))
        self._snapshots.request()
        if switch_check == "ignored":
            raise SwitchIgnored(f"trial #{trial.trial_id}: {switch_reason}")
        return trial

    def _snapshot_report(self) -> None:
        """Rewrite report.json after finished trials, so a dead search never leaves a stale one.

        Rebuilt from the journal by the ``running_report`` port (replay, like ``fusion-dd
        report``) on the background thread of :class:`Snapshots`; a failure costs
        the snapshot, never the search.
        """
        if self._running_report is None:
            return
        try:
            assert self._journal is not None
            with self._journal_lock:
                records = list(self._journal.records())
            write_report(self.state_dir / REPORT_NAME, self._running_report(records, self.state_dir))
        except Exception as exc:  # noqa: BLE001 - a report snapshot must never stop a search
            if not self._snapshot_failed:
                self._snapshot_failed = True
                self.events.message(f"warning: could not rewrite {REPORT_NAME} during the search: {exc}")

    def _warn_unreadable(self, trial: TrialState, artifacts: Mapping[str, Mapping[str, Any]]) -> None:
        """A training can leave anything behind (a FIFO, a huge or deeply nested file):
        that only costs the proof, never the search. Said once per session."""
        errors = [facts["error"] for facts in artifacts.values() if "error" in facts]
        if errors and not self._unreadable_result_said:
            self._unreadable_result_said = True
            self.events.message(f"warning: trial #{trial.trial_id}: switch check unverified: {errors[0]}")

    def _warn_fired_although_off(self, trial: TrialState, artifacts: Mapping[str, Mapping[str, Any]]) -> None:
        """Rules that fired although switched off: a warning naming each once per session, never a stop."""
        self._say_once(
            trial, "", fired_although_off_of(artifacts),
            "warning: trial #{trial}: {names} fired although switched off (cannot be switched off: the compiler "
            "runs it whatever the switches say, so 'all off' is not fusion-free for it)",
        )  # fmt: skip
        self._say_once(
            trial, "+", known_to_compiler_of(artifacts),
            "trial #{trial}: the compiler's own artifacts name {names}: not in fusion-dd's list, but real names of "
            "this build (the warning before the search does not apply)",
        )  # fmt: skip
        self._say_once(
            trial, "?", unknown_to_compiler_of(artifacts),
            "warning: trial #{trial}: the compiler's own log does not list {names} although switched on: it ignores "
            "unknown names silently, so switching them proves nothing",
        )  # fmt: skip

    def _say_once(self, trial: TrialState, kind: str, names: Sequence[str], message: str) -> None:
        """``message`` about the names not yet said of this ``kind`` in this session, if any."""
        new = [name for name in names if kind + name not in self._fired_off_said]
        if new:
            self._fired_off_said.update(kind + name for name in new)
            self.events.message(message.format(trial=trial.trial_id, names=", ".join(new)))

    def _launch_batch(
        self, keys: Sequence[ConfigKey], stop_after: Callable[[TrialState], bool] | None, role: str | None = None
    ) -> None:
        """Train these keys over the device pool; results land in the journal.

        ``role``: what the trainings are for, when their keys cannot say (localization).
        """
        pool = self._devices()
        jobs = [
            (lambda device, cancel, key=key: self._train(key, role or self._role(key), device, cancel))
            for key in keys
        ]
        run_batch(
            jobs, pool, stop_after=stop_after, cleanup_timeout=self.config.train.kill_grace + 30, pools=self._pools
        )

    def _role(self, key: ConfigKey) -> str:
        """What a training is for, from its key: the references, a repeat of a question, or a question."""
        names, repeat = key
        if not names or names == self._floor:
            return "baseline"
        if len(names) == len(self.rules):
            return "all_on"
        return "repeat" if repeat else "search"

    def _load_baseline_curve(self) -> None:
        """The baseline's loss curve (the upper envelope of its repeats), once every baseline run finished."""
        rule = self.config.early_stop
        if rule is None or not rule.active or self.config.score.baseline_metric is not None:
            return
        cache = self.state.cache()
        keys = [(self._floor, repeat) for repeat in range(self.config.score.baseline_repeats)]
        if all(key in cache for key in keys):
            self._baseline_curve = envelope(self._curve_of(cache[key], rule.step_pattern) for key in keys)
            self._load_horizon(rule)

    def _load_horizon(self, rule: Any) -> None:
        """The horizon of early passes, from the baseline's curve and the all-on trainings' departure from its band.

        With several all-on trainings the latest departure counts (the safe
        side); an all-on training stopped early counts as departed at its stop.
        """
        score = self.config.score
        cache = self.state.cache()
        everything = frozenset(rule_.name for rule_ in self.rules)
        keys = [(everything, repeat) for repeat in range(score.all_on_repeats)] if score.all_on_metric is None else []
        departures: list[int | None] = []
        for key in keys:
            trial = cache.get(key)
            if trial is None:
                return
            departed = departure(
                self._baseline_curve, self._curve_of(trial, rule.step_pattern), divergence=rule.divergence,
                relative=rule.relative, patience=rule.patience, start_step=rule.start_step,
            )  # fmt: skip
            stop = (trial.finished or {}).get("early_stop") or {}
            if departed is None and isinstance(stop.get("step"), int):
                departed = stop["step"]
            departures.append(departed)
        departed_at = None if not departures or None in departures else max(d for d in departures if d is not None)
        length = self._baseline_curve[-1][0] if self._baseline_curve else None
        self._horizon = horizon(rule.pass_at, length, departed_at)
        if self._horizon is not None and not self._horizon_said and self.state.early_revised_round is None:
            self._horizon_said = True
            self.events.message(
                f"early passes: a search training whose loss stays inside the baseline's band up to step "
                f"{self._horizon} of {length} is stopped there and counts as a pass for the search's decisions; "
                "the fix is proven by a full training (early_stop.pass_at: off trains every configuration to its end)"
            )

    def _curve_of(self, trial: TrialState, step_pattern: Any) -> list[tuple[int, float]]:
        """A baseline's loss curve as its hook journaled it; read from its files only for a journal
        written before curves were journaled."""
        facts = ((trial.finished or {}).get("artifacts") or {}).get("loss_curve")
        if isinstance(facts, dict) and "curve" in facts:
            return [(int(step), float(loss)) for step, loss in facts["curve"]]
        return read_curve(self.state_dir / trial.trial_dir, step_pattern)

    def _adopt_orphans(self) -> None:
        """Trainings an earlier coordinator left running: take their results, never rerun them needlessly.

        A stop (Ctrl-C, SIGTERM) that lands before their wait has begun must still stop
        them: otherwise they would train on with no coordinator, and the next resume
        would adopt them again.
        """
        try:
            self._adopt_and_wait()
        except KeyboardInterrupt:
            self._stop_orphans()
            raise
        finally:
            self._orphans_settled = True

    def _stop_orphans(self) -> None:
        """Adopt whatever an earlier session left running and cancel it, for a stop before its wait.

        Only while no training of this session has started: the open trials are then
        all the earlier session's. A second signal only waits on (``_install_sigterm``).
        """
        if self._orphans_settled:
            return
        self._orphans_settled = True
        handles = [(trial, handle) for trial in self.state.open_trials() if (handle := self._adopt_one(trial))]
        for _, handle in handles:
            handle.cancel()
        stopped = CancelEvent()
        stopped.set()
        for trial, handle in handles:
            self._record_end(trial, handle.wait(stopped))

    def _adopt_one(self, trial: TrialState) -> Any:
        """The handle of an earlier session's training, or None (journaled) when it is gone."""
        request = self._request(trial, trial.device or ())
        placement = trial.launch.get("placement") if trial.launch is not None else None
        try:
            handle = self.launcher.adopt(request, placement)
        except ForeignTrial as foreign:
            # Another search's or another configuration's training: its result is not this trial's.
            self.events.message(f"warning: {foreign}")
            self._append(
                {
                    "type": RecordType.TRIAL_CANCELLED,
                    "trial_id": trial.trial_id,
                    "reason": f"lost: {foreign.problem}",
                    "launched": trial.launch is not None,
                    "set_aside": foreign.moved_to.name if foreign.moved_to is not None else None,
                }
            )
            return None
        if handle is None:
            launched = trial.launch is not None or self.launcher.ever_started(request)
            self._append(
                {
                    "type": RecordType.TRIAL_CANCELLED,
                    "trial_id": trial.trial_id,
                    "reason": "lost: the coordinator stopped and the training never finished"
                    if launched
                    else "never launched: the coordinator stopped before the training's supervisor "
                    "started (costs no budget)",
                    "launched": launched,
                }
            )
        return handle

    def _adopt_and_wait(self) -> None:
        self._load_baseline_curve()
        adopted: list[tuple[TrialState, Any]] = []
        for trial in self.state.open_trials():
            handle = self._adopt_one(trial)
            if handle is not None:
                adopted.append((trial, handle))
        if not adopted:
            return
        self.events.message(
            f"adopting {len(adopted)} training(s) left running by the previous session; waiting for them"
        )
        pool = DevicePool([trial.device or (trial.trial_id,) for trial, _ in adopted])
        jobs = [
            (
                lambda device, cancel, trial=trial, handle=handle: self._record_end(trial, handle.wait(cancel))
            )
            for trial, handle in adopted
        ]
        run_batch(jobs, pool, cleanup_timeout=self.config.train.kill_grace + 30)

    # -- the search ------------------------------------------------------------------

    def _reference_keys(self, extra: dict[str, int] | None = None) -> list[tuple[ConfigKey, str]]:
        """The reference trainings this search needs: (key, role).

        ``extra``: trainings of a reference beyond its configured repeats, asked for
        by ``check_preconditions`` when its trainings disagree (the next repeats).
        """
        score = self.config.score
        extra = extra or {}
        everything = frozenset(rule.name for rule in self.rules)
        keys: list[tuple[ConfigKey, str]] = []
        if score.baseline_metric is None:
            count = score.baseline_repeats + extra.get("baseline", 0)
            keys += [((self._floor, repeat), "baseline") for repeat in range(count)]
        if score.all_on_metric is None:
            count = score.all_on_repeats + extra.get("all_on", 0)
            keys += [((everything, repeat), "all_on") for repeat in range(count)]
        return keys

    def _measure_references(
        self, extra: dict[str, int] | None = None
    ) -> tuple[list[Measurement], list[Measurement]] | None:
        """Baseline (all candidates off) and all-on runs, in parallel; None when the budget ran out."""
        keys = self._reference_keys(extra)
        assert self._oracle is not None
        self._oracle.train_until_settled(
            [key for key, _ in keys], stop_after=is_start_error, before_round=lambda: self._raise_if_broken(keys)
        )
        if any(self._settled(key) is None for key, _ in keys):
            return None
        self._load_baseline_curve()
        return self._reference_measurements(extra)

    def _reference_measurements(
        self, extra: dict[str, int] | None = None
    ) -> tuple[list[Measurement], list[Measurement]] | None:
        """What the references measured (or were given as), None while one still needs training."""
        if any(self._settled(key) is None for key, _ in self._reference_keys(extra)):
            return None
        extra = extra or {}
        score = self.config.score
        everything = frozenset(rule.name for rule in self.rules)
        cache = self.state.cache()

        def measured(names: frozenset[str], repeats: int) -> list[Measurement]:
            runs = [cache[(names, repeat)].measurement for repeat in range(repeats)]
            return [run for run in runs if run is not None]

        if score.baseline_metric is not None:
            baseline = [Measurement("metric", score.baseline_metric, "given as score.baseline_metric")]
        else:
            baseline = measured(self._floor, score.baseline_repeats + extra.get("baseline", 0))
        if score.all_on_metric is not None:
            all_on = [Measurement("metric", score.all_on_metric, "given as score.all_on_metric")]
        else:
            all_on = measured(everything, score.all_on_repeats + extra.get("all_on", 0))
        return baseline, all_on

    def _preflight(self) -> None:
        """Stop before any training when the command cannot run (see fusion_dd.coordinator.preflight)."""
        result = preflight(self.config)
        if result.errors:
            raise TrainingBroken(
                BrokenTraining(
                    f"pre-flight: {result.errors[0]}",
                    command=tuple(result.argv),
                    details={"problems": list(result.errors[1:]), "workdir": result.workdir, "preflight": True},
                )
            )

    def _raise_if_broken(self, keys: Sequence[tuple[ConfigKey, str]]) -> None:
        """Stop when the reference trainings show that the training itself does not run (fusion_dd.runner.broken)."""
        wanted = {key for key, _ in keys}
        since = list(self.state.trials.values())[self.state.broken_before :]
        trials = [trial for trial in since if trial.key in wanted and trial.role != LOCALIZE_ROLE]
        baseline = [self._settled(key) for key, role in keys if role == "baseline"]
        broken = diagnose_references(
            trials,
            [trial for trial in baseline if trial is not None],
            # With the budget spent, the trainings so far are all the evidence there will be.
            all(self._settled(key) is not None for key in wanted) or self.remaining_budget() == 0,
        )
        if broken is not None:
            raise TrainingBroken(broken)

    def _stop_broken(self, broken: BrokenTraining) -> SearchResult:
        """report.json with status training_broken, exit 2; not a finished search: fixed, it may run again."""
        command, workdir = broken.command, broken.details.get("workdir")
        if broken.trial is not None:
            command, workdir = launched_command(self.state_dir / broken.trial.trial_dir)
        details = report_details(broken, self.state_dir, command or self.config.train.command, workdir)
        if self.state.definition is not None:
            self._append({"type": RecordType.SEARCH_STOPPED, "reason": TRAINING_BROKEN, "detail": broken.reason})
        report = self._report(TRAINING_BROKEN, None, None, message=f"stopped: {broken.reason}")
        report[TRAINING_BROKEN] = details
        return self._write(TRAINING_BROKEN, ExitCode.USAGE, report)

    def _settle_references(self) -> tuple[Preconditions | None, dict[str, int]]:
        """Train the references until ``check_preconditions`` decides; (None, ...) when the budget ran out.

        A reference whose trainings disagree gets its next repeat and the check runs
        again (majority, see ``reference_decision``), so one unlucky training never
        refuses the search. Deterministic given the journal: a resume replays it.
        """
        extra = self._reference_extra
        while True:
            references = self._measure_references(extra)
            if references is None:
                return None, extra
            pre = self._preconditions(references)
            if not pre.retrain:
                return pre, extra
            self.events.message(f"warning: {pre.message}")
            for role in pre.retrain:
                extra[role] += 1

    def _refuse_ignored_switch(self) -> None:
        """Trainings whose switch file was ignored make every result in this state directory meaningless."""
        for trial in self.state.trials.values():
            if trial.finished is not None and trial.finished.get("switch_check") == "ignored":
                raise UsageError(
                    f"{self.state_dir}: trial #{trial.trial_id} was trained with its switch file ignored by the "
                    "compiler, so the results here prove nothing; fix the wiring (see docs/training.md) and start "
                    "over with another --state-dir"
                )

    def run(self) -> SearchResult:
        try:
            self._open()
            self._refuse_ignored_switch()
            if self.state.finished is not None:
                if self._localization_pending():
                    # A localize: section and culprits not yet localized (budget, or added since).
                    self.events.message("this search has already finished; localizing its culprits")
                    return self._localize_finished()
                self.events.message("this search has already finished; showing its answer")
                return self._result_from_finished()
            self._launcher_hook("run_started")  # e.g. the local fork server starts meanwhile
            self._preflight()
            self._append(
                {
                    "type": RecordType.SESSION_STARTED,
                    "budget": self.config.search.budget,
                    "devices": self._session_devices(),
                    "context": context_of(self.config.train),
                    "timeout": self.config.train.timeout,
                    "version": __version__,
                }
            )
            self._say_context()
            self._adopt_orphans()
            return self._search()
        except TrainingBroken as exc:
            return self._stop_broken(exc.broken)
        except SwitchIgnored as exc:
            self._append({"type": RecordType.SEARCH_STOPPED, "reason": "switch_ignored"})
            self._stop(SearchStatus.SWITCH_IGNORED, ExitCode.USAGE, None, None, message=str(exc))
            raise UsageError(str(exc)) from None
        except KeyboardInterrupt:
            if self._journal is None:
                raise
            self._stop_orphans()  # a stop before the adoption began (pre-flight, session record)
            self._append({"type": RecordType.SEARCH_STOPPED, "reason": "interrupted"})
            return self._stop(SearchStatus.INTERRUPTED, ExitCode.INTERRUPTED, self._known_preconditions(), None)
        finally:
            self._launcher_hook("run_ended")
            self._pools.close()
            self._snapshots.close()
            if self._journal is not None:
                self._journal.close()

    def _say_context(self) -> None:
        if self.context_note:
            self.events.message(self.context_note)

    def _launcher_hook(self, name: str) -> None:
        """``run_started``/``run_ended`` of the launcher, where it has them (optional in the protocol)."""
        # Not DaskLauncher.release(address), which gives a worker back: these names are the seam's own.
        hook = getattr(self.launcher, name, None)
        if callable(hook):
            hook()

    def _preconditions(
        self, references: tuple[list[Measurement], list[Measurement]]
    ) -> Preconditions:
        """The references' verdict; a reference whose trainings disagree asks for a re-training."""
        baseline, all_on = references
        score = self.config.score
        # confirm "off" keeps single trainings: the configured repeats decide alone.
        limit = 1 if self.config.search.confirm == "off" else self.config.search.max_trainings
        self._pre = check_preconditions(
            baseline,
            all_on,
            tolerance=score.tolerance,
            goal=self.config.metric.goal,
            reference=score.reference,
            crash_is_failure=score.crash_is_failure,
            strict=score.strict,
            baseline_limit=1 if score.baseline_metric is not None else max(limit, score.baseline_repeats),
            all_on_limit=1 if score.all_on_metric is not None else max(limit, score.all_on_repeats),
        )
        return self._pre

    def _known_preconditions(self) -> Preconditions | None:
        """For a report of a search that stopped early: the references' verdict, once they were measured.

        Never trains: a stop must not launch anything. Read from the journal's
        cache, so an interruption during adoption of the last reference still
        reports the baseline, all-on and threshold.
        """
        if self._pre is not None:
            return self._pre
        references = self._reference_measurements(self._reference_extra)
        return self._preconditions(references) if references is not None else None

    def _search(self) -> SearchResult:
        self._oracle = TrainingOracle(
            threshold=None,  # known once the references are settled
            crash_is_failure=self.config.score.crash_is_failure,
            cached=self._settled,
            launch=self._launch_batch,
            remaining_budget=self.remaining_budget,
            repeats=self.config.search.confirm != "off",
            realize=self._realize,
        )
        pre, extra = self._settle_references()
        if pre is not None and not pre.ok and pre.status == SearchStatus.BASELINE_FAILS and self._baseline_cannot_run():
            try:
                found = self._find_required()
            except BudgetExhausted:
                pre = None
            else:
                if found:
                    self._keep_on(found)
                    pre, extra = self._settle_references()
        if pre is None:
            self._append({"type": RecordType.SEARCH_STOPPED, "reason": "budget_exhausted"})
            return self._stop(SearchStatus.BUDGET_EXHAUSTED, ExitCode.BUDGET, self._known_preconditions(), None)
        for warning in pre.warnings:
            self.events.message(f"warning: {warning}")
        if not pre.ok:
            return self._finish(pre.status, pre, None)
        assert pre.threshold is not None
        self.events.message(pre.message)
        lanes = LanePlan(
            current=lambda: self._device_count() - len(self._retired),
            recorded=self.state.lanes,
            on_new=lambda index, width: self._append(
                {"type": RecordType.QUESTION, "index": index, "width": width, "time": None}, durable=False
            ),  # no time: nobody reads it, and a search asks about as many questions as it trains
        )
        assert self._oracle is not None
        prior = self._guide()
        while True:
            self._prepare_oracle(pre, lanes, extra)
            strategy = guided(
                prior, STRATEGIES[self.config.search.strategy], partners=self._partners(),
                refine=self._refine if self._refines() else None,
            )  # fmt: skip
            result = find_culprits(
                [rule for rule in self.rules if rule not in self._required and rule not in self._inner],
                self._oracle,
                strategy,
                parallelism=lanes,
                noise=NoisePolicy(self.config.search.confirm, self.config.search.max_trainings),
                choose_off=self._switch_off_chooser(),
                on_fix=lambda candidate: self._fix_candidates.add(frozenset(rule.name for rule in candidate)),
            )
            if self._required:  # the fix keeps the required passes on, like every configuration trained
                result = replace(result, fix=result.fix | self._required)
            if result.exhausted or result.no_failure:
                break
            proof = self._prove_fix(result)
            if proof is None:  # the budget leaves no room for the fix's full training
                result = replace(result, exhausted=True, smallest_failing=self._oracle.smallest_failing)
                break
            if proof:
                proof = self._prove_culprits(result)
                if proof is None:
                    result = replace(result, exhausted=True, smallest_failing=self._oracle.smallest_failing)
                    break
            if proof:
                break
            self._round += 1  # a full training contradicted early verdicts: search again without them
        if not result.exhausted and not result.no_failure and self._containers:
            try:
                result = self._look_inside(result)
            except BudgetExhausted:
                result = replace(result, exhausted=True, smallest_failing=self._oracle.smallest_failing)
        if not result.exhausted and not result.no_failure and self.config.fix.prefer == "speed":
            result = self._prefer_speed(result)
        if result.exhausted:
            self._append({"type": RecordType.SEARCH_STOPPED, "reason": "budget_exhausted"})
            return self._stop(SearchStatus.BUDGET_EXHAUSTED, ExitCode.BUDGET, pre, result)
        if result.no_failure:  # asked again during the search, all candidates on did not fail
            return self._finish(SearchStatus.NO_FAILURE, pre, result)
        if self.config.localize is not None and result.culprit_sets:
            switched_off = {rule.name for culprit in result.culprit_sets for rule in culprit.switched_off}
            culprits = [[rule.name for rule in culprit.rules] for culprit in result.culprit_sets]
            self._localize(localization.plan(self.rule_by_name, culprits, switched_off))
        return self._finish(SearchStatus.FOUND, pre, result)

    def _look_inside(self, result: CulpritSearch) -> CulpritSearch:
        """Name the rule inside each culprit container: ddmin over its rules, the rest of the set on.

        A culprit set {container, others} fails with all the container's rules on
        and passes with none (without the container, by minimality); ddmin over the
        rules, each question the others plus the container with those rules on,
        gives a 1-minimal set of rules that fail. The finer fix (the container on,
        one rule of each such set off) replaces the coarse one when it was trained
        and passes. Raises ``BudgetExhausted``.
        """
        assert self._oracle is not None
        oracle = self._oracle
        culprits: list[Any] = []
        finer = set(result.fix)
        changed = False
        for culprit in result.culprit_sets:
            containers = [rule for rule in culprit.rules if rule in self._containers]
            if len(containers) != 1:
                culprits.append(culprit)
                continue
            container = containers[0]
            context = frozenset(culprit.rules - {container})
            inner = self._containers[container]
            self.events.message(
                f"{container} is a container of {len(inner)} rewrite rules: searching inside it for the rule"
            )
            found = ddmin(inner, _WithContext(oracle, context), frozenset(inner))
            names = ", ".join(rule.name for rule in inner if rule in found)
            self.events.message(f"inside {container}: {names}")
            off = next(rule for rule in inner if rule in found)
            culprits.append(
                replace(
                    culprit,
                    rules=frozenset(context | found),
                    switched_off=frozenset({off}) if container in culprit.switched_off else culprit.switched_off,
                    reason=(culprit.reason + "; " if culprit.reason else "")
                    + f"found inside {container} (its rules searched one by one): {names}",
                )
            )
            if container in culprit.switched_off:
                finer |= {container, *inner}
                finer.discard(off)
                changed = True
        if not changed:
            return replace(result, culprit_sets=culprits)
        fix = frozenset(finer)
        for culprit in culprits:  # a rule of one container switched off must not stay on for another set
            fix -= culprit.switched_off
        verdict = oracle.outcomes([fix])[0]
        if verdict is not Outcome.PASS:
            self.events.message(
                "warning: the fix with only the rules found inside switched off did not pass; the fix switches "
                "the whole container off"
            )
            return replace(result, culprit_sets=[
                replace(new, switched_off=old.switched_off) for new, old in zip(culprits, result.culprit_sets)
            ])  # fmt: skip
        return replace(result, culprit_sets=culprits, fix=fix, fix_verified=True, fix_outcome=verdict)

    def _realize(self, config: frozenset[Rule]) -> frozenset[Rule]:
        """What is trained for a configuration: the backend's realization, required passes on."""
        config = frozenset(config)
        # The same object when nothing is added: the oracle names a configuration once per object.
        return self.backend.realize(self.rules, config | self._required if self._required else config)

    def _baseline_cannot_run(self) -> bool:
        """The all-off baseline crashed or exited 125 in every training while all-on ran: a required pass."""
        if self._required or self.config.score.baseline_metric is not None or self.config.score.all_on_metric is not None:
            return False
        keys = self._reference_keys(self._reference_extra)
        baseline = [self._settled(key) for key, role in keys if role == "baseline"]
        all_on = [self._settled(key) for key, role in keys if role == "all_on"]
        return bool(baseline) and not any(runs(trial) for trial in baseline) and bool(all_on) and all(runs(t) for t in all_on)

    def _find_required(self) -> frozenset[Rule]:
        """A 1-minimal set of candidates that must stay on for the training to run (ddmin on "it runs").

        Deterministic against the journal's cache, so a resume or a replay finds
        the same set without training again. Raises ``BudgetExhausted``.
        """
        baseline = self._settled((frozenset(), 0))
        assert baseline is not None
        self.events.message(
            f"the baseline (all candidates off, #{baseline.trial_id}) cannot run "
            f"({(baseline.finished or {}).get('reason', 'crash')}) while all candidates on runs: "
            "searching for the candidates that must stay on"
        )
        oracle = RunsOracle(
            threshold=None,
            crash_is_failure=False,
            cached=self._settled,
            launch=self._launch_batch,
            remaining_budget=self.remaining_budget,
            repeats=False,
            realize=lambda config: self.backend.realize(self.rules, config),
        )
        self._finding_required = True
        try:
            required = ddmin(self.rules, oracle, frozenset(self.rules))
        finally:
            self._finding_required = False
        log = Path(baseline.trial_dir) / "output.log"
        self._required_entry = {
            "rules": [rule.name for rule in self.rules if rule in required],
            "trial_id": baseline.trial_id,
            "reason": (baseline.finished or {}).get("reason"),
            "log": str(log),
            "log_tail": log_tail(self.state_dir / log, 5),
        }
        return required

    def _keep_on(self, required: frozenset[Rule]) -> None:
        """From here on the required passes stay on: the baseline is them alone, the search is over the rest."""
        self._required = frozenset(required)
        self._floor = frozenset(rule.name for rule in required)
        self._reference_extra = {"baseline": 0, "all_on": self._reference_extra["all_on"]}
        assert self._required_entry is not None
        error = error_line(self._required_entry["log_tail"])
        self.events.message(
            f"required: {', '.join(self._required_entry['rules'])} must stay on for the training to run"
            + (f" (all off: {error})" if error else "")
            + "; kept on in every configuration, the search goes on among the other candidates"
        )

    def _prepare_oracle(self, pre: Preconditions, lanes: LanePlan, extra: dict[str, int]) -> None:
        """The oracle for one round of the search: the journal's answers, repeats counted afresh.

        A later round asks its questions from the start again (every answer
        still cached, except the early passes it no longer trusts), so its
        repeats are counted from zero like a resumed session's.
        """
        if self._round > 0:
            self._oracle = TrainingOracle(
                threshold=None,
                crash_is_failure=self.config.score.crash_is_failure,
                cached=self._settled,
                launch=self._launch_batch,
                remaining_budget=self.remaining_budget,
                repeats=self.config.search.confirm != "off",
                realize=self._realize,
            )
        assert self._oracle is not None and pre.threshold is not None
        self._oracle.threshold = pre.threshold
        self._oracle.margin = self._margin(pre)
        self._oracle.lanes = lanes
        score = self.config.score
        if score.baseline_metric is None:
            self._oracle.note_asked(frozenset(), score.baseline_repeats + extra["baseline"])
        if score.all_on_metric is None:
            self._oracle.note_asked(frozenset(self.rules), score.all_on_repeats + extra["all_on"])

    def _prove_fix(self, result: CulpritSearch) -> bool | None:
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
        assert self._oracle is not None
        names = self._oracle.key_names(result.fix)
        trials: list[TrialState] = []
        while (trial := self._settled((names, len(trials)))) is not None:  # repeats are numbered from 0 on
            trials.append(trial)
        full = [trial for trial in trials if (trial.finished or {}).get("kind") not in EARLY_KINDS]
        if not any((trial.finished or {}).get("kind") == EARLY_PASS for trial in trials):
            return True
        if any(self._oracle.verdict_of(trial) is Outcome.PASS for trial in full):
            return True
        self.events.message("early passes: training the fix to its end, to prove it")
        proof = self._full_training((names, 0), PROOF_ROLE)
        if proof is None:
            return None
        verdict = self._oracle.verdict_of(proof)
        if verdict is Outcome.PASS:
            self.events.message(f"early passes: the fix passed its full training (#{proof.trial_id})")
            return True
        self._revise(
            {
                "round": self._round, "config": sorted(names), "trial_id": proof.trial_id, "scope": "inside",
                "reason": f"the fix's full training #{proof.trial_id} gave {verdict.value} "
                f"({proof.finished.get('reason', '') if proof.finished else ''}) after early passes",
            }
        )  # fmt: skip
        self.events.message(
            f"warning: the fix's full training #{proof.trial_id} did not pass although early passes vouched for it: "
            "the damage appears after the horizon; searching again with full trainings only"
        )
        return False

    def _revise(self, record: dict[str, Any]) -> None:
        """Journal one revision of early verdicts, once per round (a replay finds it journaled already)."""
        if not any(int(done["round"]) == record["round"] for done in self.state.early_revisions):
            self._append({"type": RecordType.EARLY_PASSES_REVISED, **record})

    def _prove_culprits(self, result: CulpritSearch) -> bool | None:
        """Back each culprit set's failure by a full training when only early failures blame it.

        One culprit set needs none: the all-on training failed in full and the
        fix, all-on without the set, passed in full. With several sets, a set is
        proven by a full failing training of a configuration that holds it and no
        other set; if there is none, the set alone is trained to its end (the
        trainings of all unproven sets at once). True: every set is proven.
        False: a set's full training passed, so the early failures that blamed it
        are revised and the search asks again. None: the budget is spent first.
        """
        assert self._oracle is not None
        sets = [frozenset(rule.name for rule in culprit.rules) for culprit in result.culprit_sets]
        if len(sets) < 2 or not any(
            (trial.finished or {}).get("kind") == EARLY_FAIL for trial in self.state.trials.values()
        ):
            return True

        def proven(names: frozenset[str]) -> bool:
            return any(
                trial.finished is not None and trial.finished.get("kind") not in EARLY_KINDS
                and trial.role != LOCALIZE_ROLE and names <= trial.config
                and not any(other <= trial.config for other in sets if other != names)
                and self._oracle.verdict_of(trial) is Outcome.FAIL
                for trial in self.state.trials.values()
            )  # fmt: skip

        unproven = [names for names in sets if not proven(names)]
        if not unproven:
            return True
        self.events.message(f"early failures: training {len(unproven)} culprit set(s) alone to the end, to prove them")
        while True:
            missing = [
                (names, 0) for names in unproven
                if (trial := self.state.full_trial((names, 0))) is None
                or not (trial.resolved or self.state.full_attempts((names, 0)) > self.config.train.retries)
            ]  # fmt: skip
            if not missing:
                break
            if self.remaining_budget() < len(missing):
                return None
            self._launch_batch(missing, None, PROOF_ROLE)
        for names in unproven:
            proof = self.state.full_trial((names, 0))
            assert proof is not None
            verdict = self._oracle.verdict_of(proof)
            if verdict is Outcome.FAIL:
                continue
            self._revise(
                {
                    "round": self._round, "config": sorted(names), "trial_id": proof.trial_id, "scope": "containing",
                    "reason": f"culprit set {', '.join(sorted(names))} alone gave {verdict.value} in its full training "
                    f"#{proof.trial_id} after early failures",
                }
            )  # fmt: skip
            self.events.message(
                f"warning: the full training #{proof.trial_id} of culprit set {', '.join(sorted(names))} alone did "
                "not fail although early failures blamed it; searching again with full trainings only"
            )
            return False
        self.events.message("early failures: each culprit set failed its full training alone")
        return True

    def _full_training(self, key: ConfigKey, role: str) -> TrialState | None:
        """The full-length training that decides this key, trained (as ``role``) if there is none; None: no budget."""
        while True:
            trial = self.state.full_trial(key)
            if trial is not None and (trial.resolved or self.state.full_attempts(key) > self.config.train.retries):
                return trial
            if self.remaining_budget() == 0:
                return None
            self._launch_batch([key], None, role)

    def _speed_of(self, names: frozenset[str]) -> float | None:
        """The median speed of this configuration's full-length trainings (``fusion_dd.runner.speed``)."""
        from_output = self.config.metric.speed_pattern is not None
        trials = [
            trial for trial in self.state.trials.values()
            if trial.config == names and trial.finished is not None and trial.role != LOCALIZE_ROLE
            and trial.finished.get("kind") != EARLY_PASS
        ]  # fmt: skip
        speeds = [speed for trial in trials if (speed := trial_speed(trial, from_output)) is not None]
        return statistics.median(speeds) if speeds else None

    def _prefer_speed(self, result: CulpritSearch) -> CulpritSearch:
        """``fix.prefer: speed``: train the other minimum fixes in full, hand over the fastest that passes.

        Deterministic given the journal (the alternatives in name order, their
        trainings cached), so a resume hands over the same fix.
        """
        assert self._oracle is not None
        chosen = frozenset(rule for culprit in result.culprit_sets for rule in culprit.switched_off)
        others = minimum_hitting_sets(
            [culprit.rules for culprit in result.culprit_sets], chosen, self.config.fix.max_alternatives,
            key=lambda rule: rule.name,
        )  # fmt: skip
        self._alternatives = []
        if not others:
            return result
        self.events.message(f"fix.prefer: speed: training {len(others)} other fix(es) that switch off as few rules")
        universe = result.fix | chosen
        measured: list[tuple[frozenset[Rule], bool, float | None]] = []
        for switched_off in others:
            names = self._oracle.key_names(universe - switched_off)
            trial = self._full_training((names, 0), ALTERNATIVE_ROLE)
            if trial is None:
                self.events.message("fix.prefer: speed: the budget is spent; the alternatives not trained are not compared")
                break
            passed = self._oracle.verdict_of(trial) is Outcome.PASS
            measured.append((switched_off, passed, self._speed_of(names)))
        chosen_speed = self._speed_of(self._oracle.key_names(result.fix))
        best = fastest(chosen, chosen_speed, measured)
        self._alternatives = [
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

    # -- the guide (fusion_dd.analysis.guide) ----------------------------------------------------------

    def _references_dump(self) -> bool:
        """Whether the references themselves dump: guide on dumps, and dumping changes only the environment.

        ``localize.args`` or ``localize.command`` may cut a training short after the
        dumped step, so then the dumped runs are separate trainings (see ``_dump_ranking``).
        """
        localize = self.config.localize
        return (
            self.config.search.guide == "dumps"
            and localize is not None
            and localize.command is None
            and not localize.args
        )

    def _localizer(self) -> localization.Localizer:
        assert self.config.localize is not None
        return localization.Localizer(
            config=self.config.localize,
            state=lambda: self.state,
            state_dir=self.state_dir,
            launch=lambda keys: self._launch_batch(keys, None, LOCALIZE_ROLE),
            append=self._append,
            remaining_budget=self.remaining_budget,
            message=self.events.message,
        )

    def _guide(self) -> list[Rule]:
        """The search's prior: the journaled ``guide`` record, made once before the first question.

        A search whose questions were asked before any guide record (an older
        version, or one started without a guide) replays them unguided.
        """
        recorded = self.state.guide
        if recorded is None:
            if self.state.lanes:
                return []
            settings = self.config.search
            if not settings.suspects and settings.guide != "dumps":
                return []
            dumps = self._dump_ranking() if settings.guide == "dumps" else None
            self._append(guidance.record(settings.suspects, settings.guide, dumps, refine=self._references_dump()))
            recorded = self.state.guide
            assert recorded is not None
            for line in guidance.summary_lines(recorded):
                self.events.message(line)
        elif list(recorded.get("suspects") or []) != list(self.config.search.suspects):
            self.events.message(
                "warning: search.suspects changed since this search started; its journaled ranking is kept "
                "(a resume replays the same questions; 'fusion-dd search --restart' starts over with the new one)"
            )
        return [self.rule_by_name[name] for name in recorded.get("ranking") or [] if name in self.rule_by_name]

    def _partners(self) -> dict[Rule, list[Rule]]:
        """The journaled partners of the first suspects (``fusion_dd.analysis.guide.partners``), as rules."""
        dumps = (self.state.guide or {}).get("dumps") or {}
        return self._rules_of_partners(dumps.get("partners") or {})

    def _rules_of_partners(self, named: Mapping[str, Sequence[str]]) -> dict[Rule, list[Rule]]:
        by_name = self.rule_by_name
        return {
            by_name[rule]: [by_name[mate] for mate in mates if mate in by_name]
            for rule, mates in named.items()
            if rule in by_name
        }

    def _refines(self) -> bool:
        """Whether later searches are ranked by their fix candidates' dumps.

        As the guide record says (journaled when the search started: the references
        and fix candidates dump as they train, so no extra training): a search
        journaled by a version without refinement replays without it, and a
        resume replays the journaled refinements whatever the config says now.
        """
        guide = self.state.guide
        return bool(guide and guide.get("refine"))

    def _refine(self, start: frozenset[Rule]) -> tuple[list[Rule], dict[Rule, list[Rule]]] | None:
        """A later search's own ranking: its failing start's dump against the baseline's, journaled once."""
        names = tuple(sorted(rule.name for rule in start))
        recorded = self.state.refined.get(names)
        if recorded is None:
            recorded = self._refined_record(names)
            if recorded is None:
                return None
            self._append(recorded)
            if recorded.get("ranking"):
                shown = ", ".join(recorded["ranking"][:4])
                self.events.message(
                    f"guide: the failing fix candidate's dump ranks {len(recorded['ranking'])} suspect(s): {shown}"
                )
        ranking = [self.rule_by_name[name] for name in recorded.get("ranking") or [] if name in self.rule_by_name]
        if not ranking:
            return None
        return ranking, self._rules_of_partners(recorded.get("partners") or {})

    def _refined_record(self, names: tuple[str, ...]) -> dict[str, Any] | None:
        """Compare the start's dumped training with the baseline's; a record with a reason when it cannot."""
        cache = self.state.cache()
        trial, baseline = cache.get((frozenset(names), 0)), cache.get((self._floor, 0))
        record: dict[str, Any] = {"type": RecordType.GUIDE_REFINED, "config": list(names)}
        dumped = self.state.dumped
        if trial is None or baseline is None or not (dumped(trial.trial_id) and dumped(baseline.trial_id)):
            return {**record, "reason": "no dumped training of this configuration"}
        record["trials"] = [trial.trial_id, baseline.trial_id]
        comparison, reason = self._compare_for_guide(trial, baseline)
        if comparison is None:
            return {**record, "reason": reason}
        suspects = list((self.state.guide or {}).get("suspects") or [])  # as journaled, like the first ranking
        made = guidance.refined(comparison, [rule.name for rule in self.rules], names, suspects)
        return {**made, "trials": record["trials"]}

    def _compare_for_guide(self, trial: TrialState, reference: TrialState) -> tuple[Any, str | None]:
        """The dump comparison of two trials, or (None, why not): a failed comparison costs the guide, never the search."""
        try:
            return self._localizer().compare(trial, reference), None
        except UsageError as exc:
            return None, str(exc)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            return None, f"the comparison failed ({type(exc).__name__}: {exc})"

    def _dump_ranking(self) -> dict[str, Any]:
        """Compare the references' dumps and rank the candidates (trains two dumped runs if needed)."""
        names = frozenset(rule.name for rule in self.rules)
        keys = [(self._floor, 0), (names, 0)]
        if self._references_dump():
            trials = [self.state.cache().get(key) for key in keys]
        else:
            cache = self.state.localize_cache()
            needed = [key for key in keys if key not in cache]
            if len(needed) > self.remaining_budget():
                return {"reason": "the budget leaves no room for the two dumped reference trainings"}
            if needed:
                self.events.message("guide: training the two references again with tensor dumps (localize.command/args)")
                self._launch_batch(needed, None, LOCALIZE_ROLE)
            trials = [self.state.localize_cache().get(key) for key in keys]
        off, on = trials
        if off is None or on is None:
            return {"reason": "the dumped reference trainings did not finish"}
        evidence: dict[str, Any] = {"trials": [off.trial_id, on.trial_id]}
        comparison, reason = self._compare_for_guide(on, off)
        if comparison is None:
            return {**evidence, "reason": reason}
        ranking, why = guidance.rank(comparison, [rule.name for rule in self.rules])
        evidence.update({"compared": len(comparison.pairs), "bad": len(comparison.bad), "ranking": ranking,
                         "evidence": why, "partners": guidance.partners(comparison, [r.name for r in self.rules], why)})
        if not ranking:
            evidence["reason"] = (
                f"no candidate rule made an op that differs beyond the thresholds ({len(comparison.pairs)} "
                "tensors compared)"
            )
        return evidence

    # -- localization (fusion_dd.report.localize) ------------------------------------------------

    def _localize(self, targets: Sequence[localization.Target]) -> bool:
        """Dumped trainings and comparisons for these culprit sets; False when the budget ran out."""
        done = self._localizer().run(targets)
        if not done:
            self.events.message("budget exhausted: localization incomplete; the search's answer stands")
        return done

    def localize(self) -> SearchResult:
        """``fusion-dd localize``: localize the culprits of a finished search (a session of that search)."""
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
            return self._localize_finished()
        except SwitchIgnored as exc:
            raise UsageError(str(exc)) from None
        finally:
            self._launcher_hook("run_ended")
            self._pools.close()
            if self._journal is not None:
                self._journal.close()

    def _localization_pending(self) -> bool:
        """A finished search with culprits that a configured localization has not journaled yet."""
        if self.config.localize is None or self.state.finished is None:
            return False
        report = finished_report(self.state)
        culprits, _ = localization.culprits_of(report)
        return report.get("status") == SearchStatus.FOUND and any(key not in self.state.localized for key in culprits)

    def _localize_finished(self) -> SearchResult:
        """Localization as a session of a finished search (journal open, lock held).

        Interrupted, it still writes the finished search's report (with what was
        localized so far) and exits 130: the search's answer is not "interrupted".
        """
        report = finished_report(self.state) if self.state.finished is not None else {}
        culprits, switched_off = localization.culprits_of(report)
        self._append(
            {
                "type": RecordType.SESSION_STARTED,
                "purpose": "localize",
                "budget": self.config.search.budget,
                "devices": self._session_devices(),
                "context": context_of(self.config.train),
                "timeout": self.config.train.timeout,
                "version": __version__,
            }
        )
        self._say_context()
        try:
            self._adopt_orphans()
            self._localize(localization.plan(self.rule_by_name, culprits, switched_off))
        except KeyboardInterrupt:
            self.events.message("interrupted: localization incomplete")
            return replace(self._result_from_finished(), exit_code=ExitCode.INTERRUPTED)
        return self._result_from_finished()

    # -- endings ------------------------------------------------------------------------

    def _report(
        self, status: str, pre: Preconditions | None, result: CulpritSearch | None, message: str | None = None
    ) -> dict[str, Any]:
        report = build_report(
            config=self.config,
            state=self.state,
            status=status,
            preconditions=pre,
            result=result,
            rounds=self._oracle.rounds if self._oracle is not None else 0,
            message=message,
            required=self._required,
        )
        report = localization.attach(report, self.state, self.config.localize is not None, display_path(self.state_dir))
        if self._alternatives:
            report["fix_alternatives"] = list(self._alternatives)
        if self._required_entry is not None:
            report["required"] = dict(self._required_entry)
        container_of = {rule.name: container.name for container, rules in self._containers.items() for rule in rules}
        for culprit in report.get("culprits") or []:
            inside = sorted({container_of[rule["name"]] for rule in culprit["rules"] if rule["name"] in container_of})
            if inside:
                culprit["inside"] = inside  # its rules were found inside these containers
        if self.state.guide is not None:
            report["guide"] = guidance.report_entry(
                self.state.guide, list(self.state.refined.values()), [rule.name for rule in self.rules]
            )
        return report

    def _finish(self, status: str, pre: Preconditions, result: CulpritSearch | None) -> SearchResult:
        report = self._report(status, pre, result)
        if status == SearchStatus.FOUND and result is not None:
            # What the user exports beside the fix cfg (CANN: AUTOFUSE_FLAGS when AutoFuse points are candidates).
            fix_env = fix_env_of(self.backend, self.rules, sorted(result.fix))
            if fix_env:
                report["fix_env"] = dict(fix_env)
        self._append({"type": RecordType.SEARCH_FINISHED, "status": status, "report": journaled_answer(report, (self.state.definition or {}).get("rules"))})
        return self._write(status, ExitCode.OK, report)

    def _stop(
        self,
        status: str,
        exit_code: int,
        pre: Preconditions | None,
        result: CulpritSearch | None,
        message: str | None = None,
    ) -> SearchResult:
        report = self._report(status, pre, result, message)
        return self._write(status, exit_code, report)

    def _switch_text(self, candidates: list[Rule], enabled: list[Rule]) -> str:
        return self.backend.render(candidates, enabled).switch_text

    def _write(self, status: str, exit_code: int, report: dict[str, Any]) -> SearchResult:
        self._snapshots.close()  # a snapshot still being written must not overwrite the final report
        report_path, fix_path = write_outputs(
            self.state_dir, report, self.rules, self.config.base_cfg, self._switch_text
        )
        return SearchResult(status, exit_code, report, report_path, fix_path)

    def _result_from_finished(self) -> SearchResult:
        assert self.state.finished is not None
        # Localizations journaled after the search finished (fusion-dd localize) join its answer.
        report = localization.attach(
            finished_report(self.state), self.state, self.config.localize is not None, display_path(self.state_dir)
        )
        journal, fix = self.state_dir / JOURNAL_NAME, self.state_dir / (report.get("fix_config") or FIX_NAME)
        if _newer_than(self.state_dir / REPORT_NAME, journal) and (report["status"] != SearchStatus.FOUND or _newer_than(fix, journal)):
            # Written after the journal last changed: this very answer (a finished search shown again).
            self._snapshots.close()
            return SearchResult(report["status"], ExitCode.OK, report, self.state_dir / REPORT_NAME,
                                fix if report["status"] == SearchStatus.FOUND else None)
        return self._write(report["status"], ExitCode.OK, report)


def _start(launcher: Launcher, request: TrialRequest, cancel: threading.Event) -> Any:
    """``launcher.start``, given the cancel event where it takes one: a cluster launcher may wait for
    its task to start, and Ctrl-C must end that wait (the task is then cancelled with the cluster's call)."""
    import inspect

    try:
        takes_cancel = "cancel" in inspect.signature(launcher.start).parameters
    except (TypeError, ValueError):
        takes_cancel = False
    return launcher.start(request, cancel=cancel) if takes_cancel else launcher.start(request)


class _WithContext:
    """An oracle over a container's rules: every question also has ``context`` on (the rest of a culprit set)."""

    def __init__(self, oracle: TrainingOracle, context: frozenset[Rule]) -> None:
        self._oracle = oracle
        self._context = context

    def outcomes(self, configs: Sequence[frozenset[Rule]]) -> list[Outcome]:
        return self._oracle.outcomes([self._context | config for config in configs])

    def first_failing(self, configs: Sequence[frozenset[Rule]]) -> int | None:
        return self._oracle.first_failing([self._context | config for config in configs])


def error_line(lines: Sequence[str]) -> str | None:
    """The line of a log's tail that names the error (its last line mentioning one), else its last line."""
    named = [line.strip() for line in lines if re.search(r"error|exception|failure|fatal", line, re.IGNORECASE)]
    shown = named[-1] if named else (lines[-1].strip() if lines else None)
    return shown[:300] if shown else None


def _pid_of(job_id: str | None) -> int | None:
    """The supervisor pid older readers of ``trial_launched`` look for (local launches only)."""
    return int(job_id) if job_id is not None and job_id.isdigit() else None


def _newer_than(output: Path, source: Path) -> bool:
    """``output`` exists, is not empty, and was written after ``source`` last changed."""
    try:
        written = output.stat()
        return written.st_size > 0 and written.st_mtime_ns >= source.stat().st_mtime_ns
    except OSError:
        return False


def _now() -> float:
    """A journal record's time: to the millisecond, which every reader needs (four bytes a record saved)."""
    return round(time.time(), 3)
