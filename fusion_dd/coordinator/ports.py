"""What the engine's decisions are made against: where records go, what trains, what may still be spent.

The same decision layer serves three callers. A coordinator session journals
every record durably, trains through the configured launcher and spends the
configured budget; a replay (``fusion_dd.coordinator.replay``) applies records
to a state in memory, never trains and has nothing to spend; the estimate
(``fusion_dd.coordinator.estimate``) continues a replay against trainings that
answer hypothetically. They differ only in these ports, so that a report or an
estimate is made by exactly the code that made the search's decisions.

Also here: the engine's words to its user interface (``SearchEvents``) and what
a session leaves (``SearchResult``), which every job of the engine names.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..backends import CompilerBackend
from ..config.settings import SearchConfig
from ..core.rules import Rule
from ..search.oracle import Outcome
from ..store.journal import Journal
from ..store.state import ConfigKey, SearchState, TrialState, replay


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
    """A session's end: its status and exit code, the report and where its files are.

    ``report`` is what report.json holds, except for a finished search shown again
    with its files current: then it leaves out the list of trials (read report.json
    for them, or ``fusion_dd.report.build.finished_report`` of the replayed journal).
    """

    status: str  # a SearchStatus (fusion_dd.core.status)
    exit_code: int
    report: dict[str, Any]
    report_path: Path
    fix_path: Path | None


class SwitchIgnored(Exception):
    """A trial's fusion_result.json shows the compiler did not apply its switch file."""


# -- the record sink ------------------------------------------------------------------


class RecordSink(Protocol):
    """Where the engine's records go; each record is applied to ``state`` as it is taken."""

    state: SearchState

    @property
    def opened(self) -> bool:
        """Whether records can be taken (a journal is open, or the state was given)."""
        ...

    def open(self) -> None: ...

    def append(self, record: dict[str, Any], durable: bool = True) -> None: ...

    def append_built(self, build: Callable[[SearchState], dict[str, Any]], durable: bool) -> dict[str, Any]:
        """Build a record from the state and take it, with no other record in between (a new trial's number)."""
        ...

    def records(self) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


class JournalSink:
    """The search's journal: every record on disk before anything depends on it, under the journal's lock."""

    def __init__(self, state_dir: Path) -> None:
        self._state_dir = state_dir
        self._journal: Journal | None = None
        self._lock = threading.Lock()
        self.state = SearchState()

    @property
    def opened(self) -> bool:
        return self._journal is not None

    @property
    def path(self) -> Path:
        assert self._journal is not None
        return self._journal.path

    def open(self) -> None:
        """Take the journal's lock and replay what earlier sessions journaled."""
        self._journal = Journal.open(self._state_dir)
        self.state = replay(self._journal.records())

    def append(self, record: dict[str, Any], durable: bool = True) -> None:
        """Journal a record (durably unless told: see ``Journal.append``) and apply it to the live state, atomically."""
        assert self._journal is not None
        if record.setdefault("time", now()) is None:
            del record["time"]  # asked for none
        with self._lock:
            self._journal.append(record, durable)
            self.state.apply(record)

    def append_built(self, build: Callable[[SearchState], dict[str, Any]], durable: bool) -> dict[str, Any]:
        assert self._journal is not None
        with self._lock:
            record = build(self.state)
            self._journal.append(record, durable)
            self.state.apply(record)
        return record

    def records(self) -> list[dict[str, Any]]:
        assert self._journal is not None
        with self._lock:
            return list(self._journal.records())

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()


class MemorySink:
    """A given state that records are applied to in memory only: a replay must not change the search."""

    def __init__(self, state: SearchState) -> None:
        self.state = state
        self._applied: list[dict[str, Any]] = []

    @property
    def opened(self) -> bool:
        return True

    def open(self) -> None:
        """Nothing to open: the state was given, replayed by the caller."""

    def append(self, record: dict[str, Any], durable: bool = True) -> None:
        self.state.apply(record)
        self._applied.append(record)

    def append_built(self, build: Callable[[SearchState], dict[str, Any]], durable: bool) -> dict[str, Any]:
        record = build(self.state)
        self.append(record, durable)
        return record

    def records(self) -> list[dict[str, Any]]:
        """The records applied since the state was given (the state itself holds the earlier ones)."""
        return list(self._applied)

    def close(self) -> None:
        """Nothing to close: no file was opened."""


# -- the trainer and the budget ---------------------------------------------------------


@dataclass(frozen=True)
class TrialPlan:
    """One training the engine asks for: its key, what it is for, whether it also dumps tensors,
    whether it trains to its end unless it fails (a fix candidate under early passes), and
    whether it trains to its end when it fails (one rule alone, once several culprit sets are sure)."""

    key: ConfigKey
    role: str
    dumps: bool = False
    to_end: bool = False
    fails_to_end: bool = False


class Trainer(Protocol):
    """What trains the configurations the engine asks about; every result lands in the record sink."""

    def launch_batch(self, plans: Sequence[TrialPlan], stop_after: Callable[[TrialState], bool] | None) -> None:
        """Train these (``stop_after``: a finished training that makes the rest of the batch pointless)."""
        ...

    def lanes(self) -> int:
        """How many trainings run at once now (devices in service)."""
        ...


class Launch(Protocol):
    """How a job of the engine asks for trainings: the keys, and what they are for when their keys cannot say."""

    def __call__(
        self, keys: Sequence[ConfigKey], stop_after: Callable[[TrialState], bool] | None, role: str | None = None
    ) -> None: ...


class NeverTrainer:
    """A replay's trainer: its budget is 0, so nothing is ever asked of it."""

    def __init__(self, devices: Sequence[Any]) -> None:
        self._devices = len(devices)

    def launch_batch(self, plans: Sequence[TrialPlan], stop_after: Callable[[TrialState], bool] | None) -> None:
        raise AssertionError("a replay never launches a training")  # its budget is 0

    def lanes(self) -> int:
        """The journal's width: the session's devices, as ``config_of`` put them in the config."""
        return self._devices


class Budget(Protocol):
    def remaining(self) -> int: ...


class SessionBudget:
    """``search.budget`` less every training the journal says was launched, resumes included."""

    def __init__(self, limit: Callable[[], int], state: Callable[[], SearchState]) -> None:
        self._limit = limit
        self._state = state

    def remaining(self) -> int:
        return max(0, self._limit() - self._state().launched)


class NoBudget:
    """Nothing left to spend: a replay decides from the journal's answers alone."""

    def remaining(self) -> int:
        return 0


# -- what the jobs share ------------------------------------------------------------------


class Context:
    """What every job of one engine shares: the configuration, the candidates, the backend and the ports.

    ``config`` is the one field that changes: opening the journal completes it
    with the defaults the search started with.
    """

    def __init__(
        self, config: SearchConfig, backend: CompilerBackend, events: SearchEvents, sink: RecordSink, budget: Budget
    ) -> None:
        self.config = config
        self.backend = backend
        self.events = events
        self.sink = sink
        self.budget = budget
        self.rules = list(config.rules)
        self.rule_by_name = {rule.name: rule for rule in self.rules}

    @property
    def state(self) -> SearchState:
        return self.sink.state

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir

    def append(self, record: dict[str, Any], durable: bool = True) -> None:
        self.sink.append(record, durable)

    def remaining_budget(self) -> int:
        return self.budget.remaining()

    def rules_named(self, names: frozenset[str]) -> list[Rule]:
        return [self.rule_by_name[name] for name in sorted(names)]


def now() -> float:
    """A journal record's time: to the millisecond, which every reader needs (four bytes a record saved)."""
    return round(time.time(), 3)
