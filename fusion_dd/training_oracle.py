"""The oracle that answers a strategy's questions with real trainings.

It is the only place where the pure search meets the world: cached answers come
from the journal, the rest are trained in parallel over the device pool, and the
budget is enforced here. Because cached answers are free and the strategies are
deterministic, running a search again from the start replays every finished
training instantly and launches only what was never finished: that is resume.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .rules import Rule
from .scoring import Threshold
from .search.oracle import BudgetExhausted, Outcome
from .state import ConfigKey, TrialState

# Launch a batch of (configuration, repeat) keys, in order; once a finished
# training satisfies ``stop_after`` the later ones may be cancelled. Returns the
# finished trials by key (keys that never finished are absent).
BatchLauncher = Callable[
    [Sequence[ConfigKey], Callable[[TrialState], bool] | None], dict[ConfigKey, TrialState]
]


class TrainingOracle:
    """Oracle[Rule] backed by the journal's cache and a batch launcher."""

    def __init__(
        self,
        *,
        threshold: Threshold,
        crash_is_failure: bool,
        cached: Callable[[ConfigKey], TrialState | None],
        launch: BatchLauncher,
        remaining_budget: Callable[[], int],
    ) -> None:
        self.threshold = threshold
        self.crash_is_failure = crash_is_failure
        self._cached = cached
        self._launch = launch
        self._remaining_budget = remaining_budget
        self.smallest_failing: frozenset[Rule] | None = None
        self.rounds = 0

    # -- verdicts -------------------------------------------------------------

    def verdict_of(self, trial: TrialState) -> Outcome:
        measurement = trial.measurement
        assert measurement is not None, "only finished trials have a verdict"
        return self.threshold.verdict(measurement, self.crash_is_failure)

    def _known(self, config: frozenset[Rule]) -> Outcome | None:
        trial = self._cached(_key(config))
        if trial is None:
            return None
        verdict = self.verdict_of(trial)
        if verdict is Outcome.FAIL:
            self._note_failing(config)
        return verdict

    def _note_failing(self, config: frozenset[Rule]) -> None:
        if self.smallest_failing is None or len(config) < len(self.smallest_failing):
            self.smallest_failing = config

    # -- running --------------------------------------------------------------

    def _run(self, configs: Sequence[frozenset[Rule]], stop_on_failure: bool) -> bool:
        """Train the distinct unsettled configurations, in order, as far as the budget allows.

        Returns False when nothing could be launched (the budget is spent).
        """
        needed: list[ConfigKey] = []
        for config in configs:
            key = _key(config)
            if key not in needed and self._cached(key) is None:
                needed.append(key)
        needed = needed[: max(0, self._remaining_budget())]
        if not needed:
            return False
        stop_after = (lambda trial: self.verdict_of(trial) is Outcome.FAIL) if stop_on_failure else None
        self.rounds += 1
        self._launch(needed, stop_after)
        return True

    def first_failing(self, configs: Sequence[frozenset[Rule]]) -> int | None:
        configs = [frozenset(config) for config in configs]
        while True:
            # Walk in order: the answer is known once every configuration before
            # the first failure is settled. Only those still need training.
            pending: list[frozenset[Rule]] = []
            for index, config in enumerate(configs):
                verdict = self._known(config)
                if verdict is Outcome.FAIL:
                    if not pending:
                        return index
                    break
                if verdict is None:
                    pending.append(config)
            else:
                if not pending:
                    return None
            # A retried training (crash, timeout) may need another round.
            if not self._run(pending, stop_on_failure=True):
                raise BudgetExhausted(self.smallest_failing)

    def outcomes(self, configs: Sequence[frozenset[Rule]]) -> list[Outcome]:
        configs = [frozenset(config) for config in configs]
        while True:
            verdicts = [self._known(config) for config in configs]
            if all(verdict is not None for verdict in verdicts):
                return [verdict for verdict in verdicts if verdict is not None]
            pending = [config for config, verdict in zip(configs, verdicts) if verdict is None]
            if not self._run(pending, stop_on_failure=False):
                raise BudgetExhausted(self.smallest_failing)


def _key(config: frozenset[Rule]) -> ConfigKey:
    return (frozenset(rule.name for rule in config), 0)
