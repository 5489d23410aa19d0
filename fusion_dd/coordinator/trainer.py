"""Training configurations through the configured launcher, every step journaled before it matters.

A training is journaled as started before its launch (so that a killed
coordinator finds it), as launched with its placement, and as finished with
what its hooks read from its files; the engine's decisions only ever read those
records. This is the trainer of a coordinator session; a replay and the
estimate hand the engine other trainers (``fusion_dd.coordinator.ports``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.hooks import fired_although_off_of, known_to_compiler_of, switch_check_of, unknown_to_compiler_of
from ..report import localize as localization
from ..runner.executor import Device, Pools, run_batch
from ..runner.launcher import Launcher, NotStarted, TrialRequest, TrialResult
from ..runner.metrics import MetricSpec
from ..runner.trial import TrialSpec, trial_binding
from ..search.oracle import Outcome
from ..store.identity import journaled_id
from ..store.journal import TRIALS_DIR
from ..store.records import RecordType
from ..store.state import LOCALIZE_ROLE, LOG_NAME, SearchState, TrialState
from .devices import Devices
from .guidance import references_dump
from .ports import Context, SwitchIgnored, TrialPlan, now
from .references import References


class LauncherTrainer:
    """Trains over the session's devices through a ``Launcher``; results land in the journal."""

    def __init__(
        self,
        context: Context,
        launcher: Launcher,
        devices: Devices,
        references: References,
        *,
        hooks: Sequence[Any],
        metric: MetricSpec,
        fix_candidates: set[frozenset[str]],
        verdict: Callable[[TrialState], Outcome | None],
        on_finished: Callable[[], None],
    ) -> None:
        """``fix_candidates``: the fix candidates the search announced, trained in full when the
        references dump. ``verdict``: a finished training's verdict for the display (None before the
        threshold is known). ``on_finished``: called after every finished training (a report snapshot)."""
        self._context = context
        self.launcher = launcher
        self.devices = devices
        self._references = references
        self.hooks = list(hooks)
        self._metric = metric
        self._fix_candidates = fix_candidates
        self._verdict = verdict
        self._on_finished = on_finished
        self._unreadable_result_said = False
        self._fired_off_said: set[str] = set()  # rules named once per session as firing although off
        # joblib's thread pools, open from the first batch to the end of the run (not one per question).
        self.pools = Pools()

    def lanes(self) -> int:
        return self.devices.in_service()

    def launch_batch(self, plans: Sequence[TrialPlan], stop_after: Callable[[TrialState], bool] | None) -> None:
        """Train these over the device pool; results land in the journal."""
        pool = self.devices.pool()
        jobs = [(lambda device, cancel, plan=plan: self._train(plan, device, cancel)) for plan in plans]
        run_batch(
            jobs, pool, stop_after=stop_after, cleanup_timeout=self._context.config.train.kill_grace + 30,
            pools=self.pools,
        )  # fmt: skip

    def _train(self, plan: TrialPlan, device: Device, cancel: threading.Event) -> TrialState | None:
        """Launch one training on ``device`` and wait for it; None when it was cancelled."""
        key, role = plan.key, plan.role
        names, repeat = key
        context = self._context

        def started(state: SearchState) -> dict[str, Any]:
            record = {
                "type": RecordType.TRIAL_STARTED,
                "trial_id": self._new_trial_id(state),
                "on": state.rule_index.encode(names),  # a bit mask of the journaled rule list
                "repeat": repeat,
                "device": list(device),
                # No trial_dir: the usual one, TRIALS_DIR/<id>, is what replay takes when none is said.
                "role": role,
                "time": now(),
            }
            attempt = state.attempts(key) + 1
            if attempt > 1:  # the first is replay's default: a key per record saved
                record["attempt"] = attempt
            if plan.dumps:
                record["dumps"] = True
            if plan.to_end:
                record["to_end"] = True
            if plan.fails_to_end:
                record["fails_to_end"] = True
            return record

        # Written before the launch, so a killed coordinator finds it; without an fsync, since a
        # crash of the machine that loses it also ends the training (resume then warns about the
        # trial directory no record names and skips its number). trial_finished syncs it.
        trial_id = context.sink.append_built(started, durable=False)["trial_id"]
        trial = context.state.trials[trial_id]
        context.events.trial_started(trial)
        request = self.request(trial, device)
        try:
            handle = _start(self.launcher, request, cancel)
        except NotStarted as stopped:  # the search was stopped while the training waited to start
            self._never_launched(trial_id, str(stopped))
            context.events.trial_finished(trial, None)
            return None
        except Exception:
            self._never_launched(trial_id, "the training could not be started")
            raise
        try:
            launched = {"type": RecordType.TRIAL_LAUNCHED, "trial_id": trial_id, "placement": handle.placement.to_json()}
            # A pid only for a local launch (a Slurm job id is digits too, and no pid); none is no key.
            pid = _pid_of(handle.placement.job_id) if handle.placement.launcher == "local" else None
            if pid is not None:
                launched["supervisor_pid"] = pid
            # The trial's files say it started (ever_started) if a crash loses this.
            context.append(launched, durable=False)
        except BaseException:
            handle.cancel()  # a training that nothing can record must not run on
            handle.wait()
            raise
        result = handle.wait(cancel)
        try:
            return self.record_end(trial, result)
        finally:
            self.devices.watch(tuple(device), trial)

    def _never_launched(self, trial_id: str, reason: str) -> None:
        """Journal a started trial as cancelled before anything ran, so it costs no budget, on resume either."""
        self._context.append({"type": RecordType.TRIAL_CANCELLED, "trial_id": trial_id, "reason": reason, "launched": False})

    def _new_trial_id(self, state: SearchState) -> str:
        """The next trial number whose directory does not exist yet (called with the journal lock held).

        A directory the journal does not know may hold results of a search whose
        journal was lost; overwriting it would destroy them silently, so its
        number is skipped (opening the journal said so once).
        """
        number = state.next_trial_number()
        while (self._context.state_dir / TRIALS_DIR / f"{number:04d}").exists():
            number += 1
        return f"{number:04d}"

    def request(self, trial: TrialState, device: Sequence[str]) -> TrialRequest:
        """Everything a launcher needs to run this trial, and nothing of the engine."""
        context = self._context
        config = context.config
        rendered = context.backend.render(context.rules, context.rules_named(trial.config))
        dumps = trial.role == LOCALIZE_ROLE and config.localize is not None
        # search.guide: dumps: the references' first training dumps one step too (fusion_dd.analysis.guide).
        guide_dumps = context.state.dumped(trial.trial_id)
        spec = TrialSpec(
            trial_id=trial.trial_id,
            trial_dir=context.state_dir / trial.trial_dir,
            command=config.train.command,
            workdir=config.train.workdir,
            base_dir=config.base_dir,
            env={**config.train.env, **rendered.env},
            device=tuple(device),
            device_env=config.train.device_env,
            timeout=config.train.timeout,
            repeat=trial.repeat,
            switch_text=rendered.switch_text,
            env_defaults=rendered.env_defaults,
            grace=config.train.kill_grace,
            log_limit=config.train.log_limit,
        )
        if dumps or guide_dumps:
            spec = localization.dumping_spec(spec, config.localize)
        spec = replace(
            spec,
            binding=trial_binding(
                journaled_id(context.state.start_record), trial.trial_id, trial.config, trial.repeat, trial.role
            ),
        )
        return TrialRequest(
            spec=spec,
            metric=self._metric,
            hooks=tuple(self.hooks),
            enabled=trial.config,
            role=trial.role,
            early_stop=None if dumps else self._early_stop_for(trial),
            baseline_curve=tuple(self._references.baseline_curve),
        )

    def _early_stop_for(self, trial: TrialState) -> Any:
        """The early-stop rule for this training: with the horizon for the search's own trainings.

        The references, a fix's proof and (when the references dump for the
        guide) the fix candidates always run to their end; the other fix
        candidates too, unless their loss leaves the band; one rule alone asked
        once several culprit sets are sure may pass early but never fails early
        (its failure is the proof its set needs); after a full training
        contradicted early verdicts, no training stops early as a pass or an
        early failure (a divergence the user set still stops it).
        """
        config = self._context.config
        rule = self._references.early_stop_rule()
        horizon = self._references.horizon
        if (
            rule is None
            or horizon is None
            or trial.role not in ("search", "repeat")
            or self._context.state.early_revised_round is not None
            # A fix candidate that dumps for localization (search.guide: dumps) is trained in full: its
            # dump and its verdict serve localization and the answer at once, with no proof after.
            or (trial.config in self._fix_candidates and references_dump(config))
        ):
            return rule
        state = self._context.state
        # One rule alone once several culprit sets are sure: a failure it shows is that set's proof.
        fail_band = not state.fails_to_end(trial.trial_id)
        if state.to_end(trial.trial_id):
            return replace(rule, fail_band=fail_band)  # a fix candidate: its pass is the fix's proof
        step = horizon
        localize = config.localize
        if state.dumped(trial.trial_id) and localize is not None and localize.step is not None:
            step = max(step, localize.step + 1)  # its dump of the localized step serves localization
        return replace(rule, pass_step=step, fail_band=fail_band)

    def record_end(self, trial: TrialState, result: TrialResult) -> TrialState | None:
        """Journal how a training ended; None when it was cancelled. Raises ``SwitchIgnored``."""
        context = self._context
        if result.cancelled:
            context.append({"type": RecordType.TRIAL_CANCELLED, "trial_id": trial.trial_id, "reason": result.reason or "cancelled"})
            context.events.trial_finished(trial, None)
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
        context.append(finished)
        outcome = self._verdict(trial) if trial.role != LOCALIZE_ROLE else None
        context.events.trial_finished(trial, outcome)
        if outcome is Outcome.FAIL:
            context.events.best_so_far(frozenset(context.rules_named(trial.config)))
        self._on_finished()
        if switch_check == "ignored":
            raise SwitchIgnored(f"trial #{trial.trial_id}: {switch_reason}")
        return trial

    def _warn_unreadable(self, trial: TrialState, artifacts: Mapping[str, Mapping[str, Any]]) -> None:
        """A training can leave anything behind (a FIFO, a huge or deeply nested file):
        that only costs the proof, never the search. Said once per session."""
        errors = [facts["error"] for facts in artifacts.values() if "error" in facts]
        if errors and not self._unreadable_result_said:
            self._unreadable_result_said = True
            self._context.events.message(f"warning: trial #{trial.trial_id}: switch check unverified: {errors[0]}")

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
            self._context.events.message(message.format(trial=trial.trial_id, names=", ".join(new)))


def _start(launcher: Launcher, request: TrialRequest, cancel: threading.Event) -> Any:
    """``launcher.start``, given the cancel event where it takes one: a cluster launcher may wait for
    its task to start, and Ctrl-C must end that wait (the task is then cancelled with the cluster's call)."""
    import inspect

    try:
        takes_cancel = "cancel" in inspect.signature(launcher.start).parameters
    except (TypeError, ValueError):
        takes_cancel = False
    return launcher.start(request, cancel=cancel) if takes_cancel else launcher.start(request)


def _pid_of(job_id: str | None) -> int | None:
    """The supervisor pid older readers of ``trial_launched`` look for (local launches only)."""
    return int(job_id) if job_id is not None and job_id.isdigit() else None
