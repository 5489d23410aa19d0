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

    def _run(self, configs: Sequence[frozenset[Rule]], stop_on_failure: bool) -> None:
        """Train the distinct uncached configurations, in order, as far as the budget allows."""
        needed: list[ConfigKey] = []
        for config in configs:
            key = _key(config)
            if key not in needed and self._cached(key) is None:
                needed.append(key)
        if not needed:
            return
        needed = needed[: max(0, self._remaining_budget())]
        if not needed:
            return
        stop_after = (lambda trial: self.verdict_of(trial) is Outcome.FAIL) if stop_on_failure else None
        self.rounds += 1
        self._launch(needed, stop_after)

    def first_failing(self, configs: Sequence[frozenset[Rule]]) -> int | None:
        configs = [frozenset(config) for config in configs]
        # Only the configurations before the first cached failure can change the answer.
        prefix = configs
        for index, config in enumerate(configs):
            if self._known(config) is Outcome.FAIL:
                prefix = configs[:index]
                break
        self._run(prefix, stop_on_failure=True)
        for index, config in enumerate(configs):
            verdict = self._known(config)
            if verdict is None:
                raise BudgetExhausted(self.smallest_failing)
            if verdict is Outcome.FAIL:
                return index
        return None

    def outcomes(self, configs: Sequence[frozenset[Rule]]) -> list[Outcome]:
        configs = [frozenset(config) for config in configs]
        self._run(configs, stop_on_failure=False)
        verdicts = [self._known(config) for config in configs]
        if any(verdict is None for verdict in verdicts):
            raise BudgetExhausted(self.smallest_failing)
        return [verdict for verdict in verdicts if verdict is not None]


def _key(config: frozenset[Rule]) -> ConfigKey:
    return (frozenset(rule.name for rule in config), 0)
