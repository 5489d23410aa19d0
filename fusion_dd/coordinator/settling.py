"""Which finished training decides a configuration, and when it needs another one.

A crash, timeout or missing metric is retried up to ``train.retries`` times
before it stands; an early verdict stands until a full training contradicts an
early verdict it could have led to, after which the search's next round trains
the configuration to its end. Every job that reads an answer from the journal's
cache asks here, so that the search, its proofs and its replay agree on it.
"""

from __future__ import annotations

from ..core.scoring import UNEVALUABLE
from ..store.state import EARLY_KINDS, ConfigKey, TrialState, withdraws
from .ports import Context


class Settling:
    """The journal's answer for a key, in the current round of the search."""

    def __init__(self, context: Context) -> None:
        self._context = context
        # The round of the search: a full training that contradicts an early verdict starts the
        # next round, in which the verdicts it withdraws count no more.
        self.round = 0

    def settled(self, key: ConfigKey) -> TrialState | None:
        """The finished training that decides this key, or None while it needs (another) training.

        A crash, timeout or missing metric is retried up to ``train.retries`` times
        before it stands as UNRESOLVED; a training that exited 125 (it cannot evaluate
        this configuration) stands at once.
        """
        state = self._context.state
        retries = self._context.config.train.retries
        trial = state.cache().get(key)
        if trial is None:
            return None
        if self.early_distrusted(trial):
            full = state.full_trial(key)  # the early pass counts no more: a full training decides
            if full is None:
                return None
            if full.resolved or state.full_attempts(key) > retries:
                return full
            return None
        if trial.resolved or state.attempts(key) > retries:
            return trial
        if trial.finished is not None and trial.finished.get("kind") == UNEVALUABLE:
            return trial  # the training said it cannot evaluate this configuration: a retry says the same
        return None

    def full(self, key: ConfigKey) -> TrialState | None:
        """The full-length training that decides this key, or None while it needs (another) one."""
        state = self._context.state
        trial = state.full_trial(key)
        if trial is not None and (trial.resolved or state.full_attempts(key) > self._context.config.train.retries):
            return trial
        return None

    def early_distrusted(self, trial: TrialState) -> bool:
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
            self.round > int(record["round"]) and withdraws(record, kind, trial.config)
            for record in self._context.state.early_revisions
        )
