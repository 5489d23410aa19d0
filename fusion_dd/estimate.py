"""How many trainings a search probably still needs, and when it will probably finish.

The number comes from the search's own decision layer, not from a formula: the
journal is replayed (``fusion_dd.rebuild``) and the search is then continued in
memory against hypothetical trainings, for a few hypotheses about where the
failure lies, counting the trainings each continuation launches. The basis is
said with the number:

- ``expectation``: the mean over hypotheses "the failure is one rule of the
  smallest failing configuration found so far, and there is no culprit beyond
  what the search has narrowed down" (each rule equally likely; up to
  ``HYPOTHESES`` of them, spread over the configuration). More culprits, or
  noise that asks for repeats, cost more: the budget left is the bound.
- ``typical``: before the references are measured there is no threshold to
  simulate against; the number is the dry run's rule for one culprit.
- ``done``: the search has its answer (0).

Never more than the budget left. The finishing time multiplies the simulated
rounds (parallel trainings share one) by the mean measured training duration,
plus what the running trainings still need.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .runner.broken import TrainingBroken
from .engine import SwitchIgnored
from .store.journal import JOURNAL_NAME, read_records
from .rebuild import ANSWERS, _Replay, config_of
from .scoring import Threshold
from .store.state import ConfigKey, SearchState, TrialState, replay

HYPOTHESES = 6


@dataclass(frozen=True)
class Estimate:
    """Trainings probably left, their basis, and the probable finishing time."""

    trainings_left: int
    basis: str  # expectation | typical | done
    budget_left: int
    seconds_left: float | None = None
    finish_at: float | None = None
    explanation: str = ""

    def text(self) -> str:
        """One line for people: the number, its basis, the bound and the time."""
        if self.basis == "done":
            return "estimate: 0 trainings left (the search has its answer)"
        what = {"expectation": "expected", "typical": "typical for one culprit"}.get(self.basis, self.basis)
        line = f"estimate: about {self.trainings_left} training(s) left ({what}; at most {self.budget_left} by the budget)"
        if self.finish_at is not None and self.seconds_left is not None:
            line += f", finishing in about {_duration(self.seconds_left)} (around {time.strftime('%H:%M', time.localtime(self.finish_at))})"
        return line

    def to_json(self) -> dict[str, Any]:
        return {
            "trainings_left": self.trainings_left,
            "basis": self.basis,
            "budget_left": self.budget_left,
            "seconds_left": self.seconds_left,
            "finish_at": self.finish_at,
            "explanation": self.explanation,
        }


def _duration(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


class _Continuation(_Replay):
    """The replayed search, continued in memory: each launch is answered by ``fails`` at once."""

    def __init__(self, config: Any, state: SearchState, answer: Callable[[frozenset[str]], dict[str, Any]], budget: int):
        super().__init__(config, state)
        self._answer = answer
        self._budget = budget
        self.launched = 0
        self.rounds = 0
        self._number = 0

    def remaining_budget(self) -> int:
        return max(0, self._budget - self.launched)

    def _fake(self, key: ConfigKey) -> TrialState:
        names, repeat = key
        self._number += 1
        trial_id = f"sim{self._number:05d}"
        self.state.apply(
            {"type": "trial_started", "trial_id": trial_id, "config": sorted(names), "repeat": repeat,
             "device": ["sim"], "trial_dir": "", "role": self._role(key), "time": 0.0}
        )
        self.state.apply({"type": "trial_finished", "trial_id": trial_id, "duration": 0.0, **self._answer(names)})
        return self.state.trials[trial_id]

    def _launch_batch(self, keys: Sequence[ConfigKey], stop_after: Callable[[TrialState], bool] | None) -> None:
        width = max(1, len(self.config.train.devices))
        count = len(keys)
        for index, key in enumerate(keys):
            trial = self._fake(key)
            if stop_after is not None and stop_after(trial):
                # Later keys of the wave already running are launched (and paid) too.
                count = min(len(keys), math.ceil((index + 1) / width) * width)
                break
        self.launched += count
        self.rounds += math.ceil(count / width)


def _answers(threshold: Threshold) -> tuple[dict[str, Any], dict[str, Any]]:
    """Journal fields of a passing and a failing training under this threshold."""
    passing = {"kind": "metric", "value": threshold.baseline, "reason": "simulated"}
    candidates = [threshold.all_on, threshold.limit - threshold.tolerance if threshold.goal == "max" else threshold.limit + threshold.tolerance]
    for value in candidates:
        if value is not None and math.isfinite(value) and threshold.is_worse(value):
            return passing, {"kind": "metric", "value": value, "reason": "simulated"}
    return passing, {"kind": "nonfinite", "value": "nan", "reason": "simulated"}


def _measured(
    state: SearchState, threshold: Threshold, crash_is_failure: bool
) -> tuple[list[frozenset[str]], list[frozenset[str]]]:
    """The configurations measured failing and passing so far."""
    failed: list[frozenset[str]] = []
    passed: list[frozenset[str]] = []
    for trial in state.cache().values():
        measurement = trial.measurement
        if measurement is None:
            continue
        verdict = threshold.verdict(measurement, crash_is_failure).value
        (failed if verdict == "fail" else passed if verdict == "pass" else []).append(trial.config)
    return failed, passed


def _fails(
    config: frozenset[str], culprits: set[str], failed: list[frozenset[str]], passed: list[frozenset[str]]
) -> bool:
    """A hypothetical training's verdict, monotone and consistent with what was measured:
    a superset of a failing configuration fails, a subset of a passing one passes, else
    it fails when it holds a hypothesized culprit."""
    if any(config >= known for known in failed):
        return True
    if any(config <= known for known in passed):
        return False
    return bool(culprits & config)


def estimate(records: Iterable[dict[str, Any]], state_dir: Path, now: float | None = None) -> Estimate | None:
    """The estimate for the search these journal records describe; None when there is none to give."""
    records = list(records)
    now = time.time() if now is None else now
    state = replay(records)
    if state.definition is None:
        return None
    config = config_of(state, state_dir)
    budget_left = max(0, config.search.budget - state.launched)
    if state.finished is not None:
        return Estimate(0, "done", budget_left)
    probe = _Replay(config, replay(records))
    probe._open()
    try:
        result = probe._search()
    except (TrainingBroken, SwitchIgnored):
        return None
    if result.status in ANSWERS:
        return Estimate(0, "done", budget_left)
    pre = probe._pre
    durations = [float(t.finished["duration"]) for t in state.trials.values()
                 if t.finished is not None and isinstance(t.finished.get("duration"), (int, float))]
    mean = sum(durations) / len(durations) if durations else None
    running = [max(0.0, mean - (now - t.started_at)) if mean is not None else 0.0 for t in state.open_trials()]
    width = max(1, len(config.train.devices))
    if pre is None or pre.threshold is None or not pre.ok:
        rules = len(state.definition.get("rules") or [])
        references = sum(1 for key, _ in probe._reference_keys(probe._reference_extra) if probe._settled(key) is None)
        open_refs = sum(1 for t in state.open_trials() if t.role in ("baseline", "all_on"))
        typical = max(0, references - open_refs) + 2 * max(1, math.ceil(math.log2(max(2, rules)))) + 1
        left = min(typical, budget_left)
        seconds = (math.ceil(left / width) * mean + max(running, default=0.0)) if mean is not None else None
        return Estimate(left, "typical", budget_left, seconds, now + seconds if seconds is not None else None,
                        "the references are not measured yet: the dry run's rule for one culprit")
    threshold = pre.threshold
    passing, failing = _answers(threshold)
    failed, passed = _measured(state, threshold, config.score.crash_is_failure)
    # The failing configurations no smaller failing one explains: each holds a culprit
    # the search has not pinned down yet (a single rule, by hypothesis).
    minimal = [sorted(c) for c in failed if c and not any(other < c for other in failed)]
    minimal = [names for index, names in enumerate(minimal) if names not in minimal[:index]]
    tries = max((min(len(names), HYPOTHESES) for names in minimal), default=1)
    counts: list[int] = []
    rounds: list[int] = []
    for attempt in range(tries):
        culprits = {names[int(attempt * len(names) / tries) % len(names)] for names in minimal}
        world = replay(records)
        for trial in world.open_trials():  # the running trainings end as the hypothesis says
            fails = _fails(trial.config, culprits, failed, passed)
            world.apply({"type": "trial_finished", "trial_id": trial.trial_id, "duration": 0.0,
                         **(failing if fails else passing)})

        def answer(config_names: frozenset[str], culprits: set[str] = culprits) -> dict[str, Any]:
            return failing if _fails(config_names, culprits, failed, passed) else passing

        continuation = _Continuation(config, world, answer, budget_left)
        continuation._open()
        try:
            continuation._search()
        except (TrainingBroken, SwitchIgnored):
            pass
        counts.append(continuation.launched)
        rounds.append(continuation.rounds)
    left = min(budget_left, math.ceil(sum(counts) / len(counts)))
    seconds = None
    if mean is not None:
        seconds = (sum(rounds) / len(rounds)) * mean + max(running, default=0.0)
    explanation = (
        f"mean over {len(counts)} hypotheses (one culprit rule in each of the {len(minimal)} failing "
        f"configuration(s) no smaller failing one explains, no other culprits): {min(counts)} to {max(counts)} trainings"
    )
    return Estimate(left, "expectation", budget_left, seconds, now + seconds if seconds is not None else None, explanation)


def estimate_from_dir(state_dir: Path) -> Estimate | None:
    """``estimate`` of the journal in ``state_dir``, read without its lock."""
    return estimate(read_records(state_dir / JOURNAL_NAME), state_dir)
