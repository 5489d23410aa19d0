"""How many trainings a search probably still needs, and when it will probably finish.

The number comes from the search's own decision layer, not from a formula: the
journal is replayed (``fusion_dd.coordinator.replay``) and the search is then continued in
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

from ..config.settings import SearchConfig
from ..core.status import SearchStatus
from ..report import localize as localization
from ..report.build import finished_report
from ..runner.broken import TrainingBroken
from .engine import Engine
from .ports import MemorySink, SwitchIgnored, TrialPlan
from ..store.journal import JOURNAL_NAME, read_records
from .replay import ANSWERS, config_of, replay_engine
from ..core.scoring import Threshold
from ..store.state import PROOF_ROLE, SearchState, TrialState, replay
from ..store.records import RecordType

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
    low: int | None = None  # the fewest any hypothesis needs (None: ``trainings_left``)
    high: int | None = None  # the likely upper bound: one more culprit set than seen (None: ``trainings_left``)

    @property
    def range(self) -> tuple[int, int]:
        """(fewest, likely most) trainings left, running ones included."""
        low = self.trainings_left if self.low is None else self.low
        high = self.trainings_left if self.high is None else self.high
        return min(low, self.trainings_left), max(high, self.trainings_left)

    def text(self, stopped: bool = False) -> str:
        """One line for people: the range, what it assumes, the budget's bound and the time.

        ``stopped``: no coordinator runs the search, so there is no finishing
        time, only the time the trainings left would take once it is resumed.
        """
        if self.basis == "done":
            return "estimate: 0 trainings left (the search has its answer)"
        low, high = self.range
        if self.budget_left == 0 and high == 0:
            return "estimate: the budget is spent and nothing is running; the search needs more (resume with a larger --budget)"
        span = f"{low} to {high}" if low != high else f"about {high}"
        if self.budget_left == 0:
            what = "the trainings still running; the budget allows no more"
        elif self.basis == "typical":
            what = f"typical for one culprit set ({self.trainings_left}) to two"
        elif self.basis == "localization":
            what = "the answer stands; the dumped trainings of localization"
        elif low == high:
            what = "the same under every hypothesis"  # e.g. the fix passed: no further culprit set can hide
        else:
            what = f"about {self.trainings_left} expected, {high} if one more culprit set shows up"
        line = f"estimate: {span} training(s) left ({what}; at most {self.budget_left} more by the budget)"
        if stopped and self.seconds_left is not None:
            line += f", about {_duration(self.seconds_left)} of training once resumed"
        elif self.finish_at is not None and self.seconds_left is not None:
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
            "low": self.range[0],
            "high": self.range[1],
        }


def _duration(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


class _Hypothetical:
    """The trainer and budget of a replayed search continued in memory: each launch is answered at once.

    ``answer`` gives a hypothetical training's journal fields; the trainings and
    rounds a continuation launches are counted, within ``budget``.
    """

    def __init__(
        self, sink: MemorySink, answer: Callable[[frozenset[str]], dict[str, Any]], budget: int, devices: int
    ) -> None:
        self._sink = sink
        self._answer = answer
        self._budget = budget
        self._width = max(1, devices)
        self._devices = devices
        self.launched = 0
        self.rounds = 0
        self._number = 0

    def remaining(self) -> int:
        return max(0, self._budget - self.launched)

    def lanes(self) -> int:
        return self._devices

    def _fake(self, plan: TrialPlan) -> TrialState:
        names, repeat = plan.key
        self._number += 1
        trial_id = f"sim{self._number:05d}"
        record = {"type": RecordType.TRIAL_STARTED, "trial_id": trial_id, "config": sorted(names), "repeat": repeat,
                  "device": ["sim"], "trial_dir": "", "role": plan.role, "time": 0.0}
        # As the engine journals it (this training's dump serves localization), except that the
        # estimate counts a fix's proof as not dumped.
        if plan.dumps and plan.role != PROOF_ROLE:
            record["dumps"] = True
        self._sink.append(record)
        self._sink.append({"type": RecordType.TRIAL_FINISHED, "trial_id": trial_id, "duration": 0.0, **self._answer(names)})
        return self._sink.state.trials[trial_id]

    def launch_batch(self, plans: Sequence[TrialPlan], stop_after: Callable[[TrialState], bool] | None) -> None:
        count = len(plans)
        for index, plan in enumerate(plans):
            trial = self._fake(plan)
            if stop_after is not None and stop_after(trial):
                # Later keys of the wave already running are launched (and paid) too.
                count = min(len(plans), math.ceil((index + 1) / self._width) * self._width)
                break
        self.launched += count
        self.rounds += math.ceil(count / self._width)


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
    config: frozenset[str], culprits: set[frozenset[str]], failed: list[frozenset[str]], passed: list[frozenset[str]]
) -> bool:
    """A hypothetical training's verdict, monotone and consistent with what was measured:
    a superset of a failing configuration fails, a subset of a passing one passes, else
    it fails when it holds a hypothesized culprit set."""
    if any(config >= known for known in failed):
        return True
    if any(config <= known for known in passed):
        return False
    return any(culprit <= config for culprit in culprits)


def _mean_duration(state: SearchState) -> float | None:
    """The mean duration of the finished trainings (None before any)."""
    durations = [float(t.finished["duration"]) for t in state.trials.values()
                 if t.finished is not None and isinstance(t.finished.get("duration"), (int, float))]
    return sum(durations) / len(durations) if durations else None


def _localization_estimate(state: SearchState, config: SearchConfig, budget_left: int, now: float) -> Estimate:
    """A finished search: its answer is journaled before its culprits are localized, so what
    may be left are the dumped trainings of the culprit sets not localized yet (0: done)."""
    if config.localize is None:
        return Estimate(0, "done", budget_left)
    report = finished_report(state, trials=False)  # its culprits only: no trial's configuration decoded
    if report.get("status") != SearchStatus.FOUND:
        return Estimate(0, "done", budget_left)
    culprits, switched_off = localization.culprits_of(report)
    rules = [rule["name"] for rule in (state.definition or {}).get("rules") or []]
    _, needed = localization.still_to_train(localization.plan(rules, culprits, switched_off), state)
    left = min(len(needed), budget_left + len(state.open_trials()))
    if not left:
        return Estimate(0, "done", budget_left)
    mean = _mean_duration(state)
    seconds = None
    if mean is not None:
        width = max(1, len(config.train.devices))
        seconds = math.ceil(left / width) * mean  # the running ones are among them: a bound, not a sum
    return Estimate(left, "localization", budget_left, seconds, now + seconds if seconds is not None else None,
                    "the search has its answer; the dumped trainings of localization are left")


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
        return _localization_estimate(state, config, budget_left, now)
    probe = replay_engine(config, replay(records))
    try:
        result = probe.search()
    except (TrainingBroken, SwitchIgnored):
        return None
    mean = _mean_duration(state)
    running = [max(0.0, mean - (now - t.started_at)) if mean is not None else 0.0 for t in state.open_trials()]
    width = max(1, len(config.train.devices))
    pre = probe.references.preconditions
    if result.status in ANSWERS:
        if result.status == "found" and pre is not None and pre.threshold is not None:
            # The answer stands; what may be left are the dumped trainings of localization.
            passing, failing = _answers(pre.threshold)
            launched, turns = _continue(config, records, set(), [], [], passing, failing, budget_left)
            left = launched + len(state.open_trials())
            if left:
                seconds = turns * mean + max(running, default=0.0) if mean is not None else None
                return Estimate(left, "localization", budget_left, seconds,
                                now + seconds if seconds is not None else None,
                                "the search has its answer; the dumped trainings of localization are left")
        return Estimate(0, "done", budget_left)
    if pre is None or pre.threshold is None or not pre.ok:
        rules = len(state.definition.get("rules") or [])
        keys = probe.references.keys(probe.references.extra)
        references = sum(1 for key, _ in keys if probe.settling.settled(key) is None)
        per_culprit = 2 * max(1, math.ceil(math.log2(max(2, rules)))) + 1
        cap = budget_left + len(state.open_trials())
        left = min(references + per_culprit, cap)
        high = min(references + 3 * per_culprit, cap)  # two culprit sets, one of them a pair
        low = min(references + 2, cap)  # the first question names the culprit, and the fix is verified
        seconds = (math.ceil(left / width) * mean + max(running, default=0.0)) if mean is not None else None
        return Estimate(left, "typical", budget_left, seconds, now + seconds if seconds is not None else None,
                        "the references are not measured yet: the dry run's rule for one culprit, and for two",
                        low=low, high=high)
    threshold = pre.threshold
    passing, failing = _answers(threshold)
    failed, passed = _measured(state, threshold, config.score.crash_is_failure)
    # The failing configurations no smaller failing one explains: each holds a culprit
    # the search has not pinned down yet (a single rule, by hypothesis). A failing fix
    # candidate is one of them: at least one more culprit set than those isolated.
    minimal = [sorted(c) for c in failed if c and not any(other < c for other in failed)]
    minimal = [names for index, names in enumerate(minimal) if names not in minimal[:index]]
    # A rule that a passing training had on is no culprit on its own: the culprit of a
    # failing configuration is one of its other rules (all of them cleared: an interacting
    # set, bet on by its first rules). A culprit set not seen yet hides the same way.
    rules = [rule["name"] for rule in state.definition.get("rules") or []]
    cleared = {name for config_names in passed for name in config_names}
    minimal = [[name for name in names if name not in cleared] or names for names in minimal]
    tries = max((min(len(names), HYPOTHESES) for names in minimal), default=1)
    hidden = [name for name in rules if name not in cleared] or rules
    running_search = sum(1 for trial in state.open_trials())
    base: list[tuple[int, int]] = []
    more: list[tuple[int, int]] = []
    for attempt in range(tries):
        culprits = {frozenset({names[int(attempt * len(names) / tries) % len(names)]}) for names in minimal}
        base.append(_continue(config, records, culprits, failed, passed, passing, failing, budget_left))
    suspected = _suspected(state, minimal, passed)
    if suspected is not None:  # a guided search asks its suspects first: the cheapest world it may be in
        base.append(_continue(config, records, suspected, failed, passed, passing, failing, budget_left))
    for attempt in range(min(HYPOTHESES, len(hidden))):
        culprits = {frozenset({names[int(attempt * len(names) / tries) % len(names)]}) for names in minimal}
        # The costlier kind of culprit set: an interacting pair, two rules far apart.
        others = [name for name in hidden if frozenset({name}) not in culprits] or hidden
        first = int((attempt + 0.5) * len(others) / min(HYPOTHESES, len(hidden)))
        culprits.add(frozenset({others[first], others[(first + len(others) // 2) % len(others)]}))
        more.append(_continue(config, records, culprits, failed, passed, passing, failing, budget_left))
    counts = [launched + running_search for launched, _ in base]
    if state.guide is None and config.search.guide == "dumps":
        # The guide is decided from the references' dumps once they are in (a replay cannot):
        # its first suspect may be the culprit, one question and the fix verification.
        counts.append(min(counts + [2 + running_search]))
    rounds = [turns for _, turns in base]
    left = min(budget_left + running_search, math.ceil(sum(counts) / len(counts)))
    low = min(counts)
    high = min(budget_left + running_search, max(counts + [launched + running_search for launched, _ in more]))
    seconds = None
    if mean is not None:
        seconds = (sum(rounds) / len(rounds)) * mean + max(running, default=0.0)
    explanation = (
        f"over {len(counts)} hypotheses (one culprit rule in each of the {len(minimal)} failing "
        f"configuration(s) no smaller failing one explains): {min(counts)} to {max(counts)} trainings, "
        f"running ones included; {high} at most over {len(more)} hypotheses with one more culprit set"
    )
    return Estimate(left, "expectation", budget_left, seconds, now + seconds if seconds is not None else None,
                    explanation, low=low, high=high)


def _suspected(
    state: SearchState, minimal: Sequence[Sequence[str]], passed: Sequence[frozenset[str]]
) -> set[frozenset[str]] | None:
    """The hypothesis a guided search bets on: in each unexplained failing configuration, its top suspect.

    The suspects are the journaled guide's ranking and those of its refinements (the
    dumps of failing fix candidates), latest first. A suspect that passed alone is
    bet on with its first partner (an interacting pair), as the guided search asks
    it next. None when nothing was ranked.
    """
    found = [*reversed(list(state.refined.values())), *([state.guide] if state.guide is not None else [])]
    order = [name for record in found for name in record.get("ranking") or []]
    if not order:
        return None
    mates: dict[str, list[str]] = {}
    for record in found:
        for rule, names in ((record.get("dumps") or record).get("partners") or {}).items():
            mates.setdefault(rule, list(names))
    alone = {next(iter(config)) for config in passed if len(config) == 1}
    chosen: set[frozenset[str]] = set()
    for names in minimal:
        inside = set(names)
        top = next((name for name in order if name in inside), None)
        if top is None:
            return None
        mate = next((name for name in mates.get(top, []) if name in inside), None) if top in alone else None
        chosen.add(frozenset({top, mate}) if mate is not None else frozenset({top}))
    return chosen


def _continue(
    config: Any,
    records: Sequence[dict[str, Any]],
    culprits: set[frozenset[str]],
    failed: list[frozenset[str]],
    passed: list[frozenset[str]],
    passing: dict[str, Any],
    failing: dict[str, Any],
    budget_left: int,
) -> tuple[int, int]:
    """(trainings launched, rounds) of the search continued in memory, were ``culprits`` the culprit sets."""
    world = replay(records)
    for trial in world.open_trials():  # the running trainings end as the hypothesis says
        fails = _fails(trial.config, culprits, failed, passed)
        world.apply({"type": RecordType.TRIAL_FINISHED, "trial_id": trial.trial_id, "duration": 0.0,
                     **(failing if fails else passing)})

    def answer(config_names: frozenset[str]) -> dict[str, Any]:
        return failing if _fails(config_names, culprits, failed, passed) else passing

    sink = MemorySink(world)
    continuation = _Hypothetical(sink, answer, budget_left, len(config.train.devices))
    engine = Engine(config, sink=sink, trainer=continuation, budget=continuation, replaying=True)
    try:
        engine.search()
    except (TrainingBroken, SwitchIgnored):
        pass
    return continuation.launched, continuation.rounds


def estimate_from_dir(state_dir: Path) -> Estimate | None:
    """``estimate`` of the journal in ``state_dir``, read without its lock."""
    return estimate(read_records(state_dir / JOURNAL_NAME), state_dir)
