"""An in-memory lab behind ``TrainingOracle``: a journal cache and a launcher, no processes.

The training oracle (fusion_dd/coordinator/training_oracle.py) reads finished trainings
through ``cached`` and trains through ``launch``; the engine backs both with
the journal and real supervised trainings. ``TrainingLab`` backs them with a
dict and a function, so the oracle's bookkeeping can be tested on its own and
side by side with the simulated oracle (tests/search/test_oracle_conformance.py).

A training's metric is derived from the verdict the model and the noise give:
``PASS_VALUE``/``FAIL_VALUE`` far from the limit, ``NEAR_PASS``/``NEAR_FAIL``
within ``MARGIN`` of it, and an unresolved verdict is a crash (no metric).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from fusion_dd.core.rules import Rule, Section
from fusion_dd.core.scoring import Threshold
from fusion_dd.search.oracle import Observation, Outcome
from fusion_dd.testing.simulate import NoiseModel, as_outcome
from fusion_dd.store.state import ConfigKey, TrialState
from fusion_dd.coordinator.training_oracle import TrainingOracle

THRESHOLD = Threshold(baseline=1.0, tolerance=0.25, goal="max")  # fails below 0.75
MARGIN = 0.05
PASS_VALUE, FAIL_VALUE = 1.0, 0.5
NEAR_PASS, NEAR_FAIL = 0.76, 0.74


def rules(*names: str, section: Section = Section.GRAPH) -> list[Rule]:
    return [Rule(name, section) for name in names]


class TrainingLab:
    """Trains instantly, in order, and keeps every finished training like a journal.

    ``launched`` logs every (rule names, repeat) trained, in order; ``batches``
    the batches the oracle handed over. ``launch`` honours ``stop_after`` the way
    the engine does with one device: nothing after the first training that
    satisfies it is started.
    """

    def __init__(
        self,
        universe: Iterable[Rule],
        test: Callable[[frozenset[Rule]], Outcome | bool],
        *,
        noise: NoiseModel | None = None,
    ) -> None:
        self.by_name = {rule.name: rule for rule in universe}
        self._test = test
        self._noise = noise
        self.cache: dict[ConfigKey, TrialState] = {}
        self.launched: list[ConfigKey] = []
        self.batches: list[list[ConfigKey]] = []

    def reading(self, names: frozenset[str], repeat: int) -> dict:
        """The trial_finished record of one training of ``names``."""
        config = frozenset(self.by_name[name] for name in names)
        outcome = as_outcome(self._test(config))
        near = False
        if self._noise is not None:
            answer = self._noise(config, repeat, outcome)
            if isinstance(answer, Observation):
                outcome, near = answer.outcome, answer.near_threshold
            else:
                outcome = answer
        if outcome is Outcome.UNRESOLVED:
            return {"kind": "crash", "value": None, "reason": "exit code 3"}
        if outcome is Outcome.FAIL:
            return {"kind": "metric", "value": NEAR_FAIL if near else FAIL_VALUE}
        return {"kind": "metric", "value": NEAR_PASS if near else PASS_VALUE}

    def launch(self, keys: Sequence[ConfigKey], stop_after: Callable[[TrialState], bool] | None) -> None:
        self.batches.append(list(keys))
        for key in keys:
            names, repeat = key
            assert key not in self.cache, f"{sorted(names)} repeat {repeat} was trained twice"
            trial = TrialState(f"{len(self.launched) + 1:04d}", names, repeat, ("0",), "trials/x", 0.0)
            trial.finished = self.reading(names, repeat)
            self.launched.append(key)
            self.cache[key] = trial
            if stop_after is not None and stop_after(trial):
                break

    def oracle(self, budget: int | None = None, *, margin: float = MARGIN, repeats: bool = True) -> TrainingOracle:
        """A new coordinator session over this lab's journal; ``budget`` counts its own launches."""
        start = len(self.launched)

        def remaining() -> int:
            return 10**9 if budget is None else budget - (len(self.launched) - start)

        return TrainingOracle(
            threshold=THRESHOLD,
            crash_is_failure=False,
            cached=self.cache.get,
            launch=self.launch,
            remaining_budget=remaining,
            margin=margin,
            repeats=repeats,
        )
