"""Trainings an earlier coordinator left running: their results are taken, never trained again needlessly.

A coordinator may die (killed, crashed, its machine rebooted) while trainings
run under their own supervisors. The next session adopts each open trial through
the launcher and waits for it, or journals it as lost (or as never launched, at
no cost of budget) when it is gone. A stop that lands before that wait has
begun must still stop them: otherwise they would train on with no coordinator,
and the next resume would adopt them again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..runner.executor import DevicePool, run_batch
from ..runner.trial import ForeignTrial
from ..runner.wakeup import CancelEvent
from ..store.records import RecordType
from ..store.state import TrialState
from .ports import Context
from .trainer import LauncherTrainer


class Orphans:
    """The open trials of earlier sessions, adopted once per session."""

    def __init__(self, context: Context, trainer: LauncherTrainer, load_baseline_curve: Callable[[], None]) -> None:
        """``load_baseline_curve``: called before adopting, since an adopted training's request carries it."""
        self._context = context
        self._trainer = trainer
        self._load_baseline_curve = load_baseline_curve
        # Whether the trainings an earlier session left running were adopted and waited for
        # (or stopped): until then, a stop must stop them too.
        self._settled = False

    def adopt(self) -> None:
        """Wait for the trainings an earlier session left running, journaling how each ended."""
        try:
            self._adopt_and_wait()
        except KeyboardInterrupt:
            self.stop()
            raise
        finally:
            self._settled = True

    def stop(self) -> None:
        """Adopt whatever an earlier session left running and cancel it, for a stop before its wait.

        Only while no training of this session has started: the open trials are then
        all the earlier session's. A second signal only waits on (``_install_sigterm``).
        """
        if self._settled:
            return
        self._settled = True
        handles = [(trial, handle) for trial in self._context.state.open_trials() if (handle := self._adopt_one(trial))]
        for _, handle in handles:
            handle.cancel()
        stopped = CancelEvent()
        stopped.set()
        for trial, handle in handles:
            self._trainer.record_end(trial, handle.wait(stopped))

    def _adopt_one(self, trial: TrialState) -> Any:
        """The handle of an earlier session's training, or None (journaled) when it is gone."""
        context, launcher = self._context, self._trainer.launcher
        request = self._trainer.request(trial, trial.device or ())
        placement = trial.launch.get("placement") if trial.launch is not None else None
        try:
            handle = launcher.adopt(request, placement)
        except ForeignTrial as foreign:
            # Another search's or another configuration's training: its result is not this trial's.
            context.events.message(f"warning: {foreign}")
            context.append(
                {
                    "type": RecordType.TRIAL_CANCELLED,
                    "trial_id": trial.trial_id,
                    "reason": f"lost: {foreign.problem}",
                    "launched": trial.launch is not None,
                    "end_seen": False,
                    "set_aside": foreign.moved_to.name if foreign.moved_to is not None else None,
                }
            )
            return None
        if handle is None:
            launched = trial.launch is not None or launcher.ever_started(request)
            context.append(
                {
                    "type": RecordType.TRIAL_CANCELLED,
                    "trial_id": trial.trial_id,
                    "reason": "lost: the coordinator stopped and the training never finished"
                    if launched
                    else "never launched: the coordinator stopped before the training's supervisor "
                    "started (costs no budget)",
                    "launched": launched,
                    "end_seen": False,
                }
            )
        return handle

    def _adopt_and_wait(self) -> None:
        self._load_baseline_curve()
        adopted: list[tuple[TrialState, Any]] = []
        for trial in self._context.state.open_trials():
            handle = self._adopt_one(trial)
            if handle is not None:
                adopted.append((trial, handle))
        if not adopted:
            return
        self._context.events.message(
            f"adopting {len(adopted)} training(s) left running by the previous session; waiting for them"
        )
        pool = DevicePool([trial.device or (trial.trial_id,) for trial, _ in adopted])
        jobs = [
            (
                lambda device, cancel, trial=trial, handle=handle: self._trainer.record_end(trial, handle.wait(cancel))
            )
            for trial, handle in adopted
        ]
        run_batch(jobs, pool, cleanup_timeout=self._context.config.train.kill_grace + 30)
