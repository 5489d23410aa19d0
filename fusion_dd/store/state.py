"""The state of a search, rebuilt by replaying its journal.

Pure: records in, state out. The engine, ``fusion-dd status`` and the report all
read a search through this one function, so they can never disagree about which
trainings finished, how much budget was used or which trainings were lost.
"""

from __future__ import annotations

import base64
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from types import MappingProxyType
from dataclasses import dataclass, field
from typing import Any

from ..core.scoring import Measurement
from .journal import TRIALS_DIR
from .records import RecordType

#: The log a trial's supervisor writes in its directory (``fusion_dd.runner.supervisor.LOG_FILE``).
LOG_NAME = "output.log"
ConfigKey = tuple[frozenset[str], int]  # (names of the rules switched on, repeat)
RESOLVED_KINDS = ("metric", "nonfinite", "diverged", "early_pass", "early_fail")
#: A training stopped at the horizon with its loss inside the baseline's band
#: (``fusion_dd.runner.horizon``): a speculative pass, proven by a full training.
EARLY_PASS = "early_pass"
#: A training stopped before the horizon because its loss left the band: a
#: speculative failure, proven by a full training of each culprit set.
EARLY_FAIL = "early_fail"
#: Both kinds of speculative verdict: neither is a full-length training.
EARLY_KINDS = (EARLY_PASS, EARLY_FAIL)


def withdraws(revision: Mapping[str, Any], kind: str, config: frozenset[str]) -> bool:
    """Whether an ``early_passes_revised`` record withdraws an early verdict of ``kind`` on ``config``.

    Only the verdicts that could have led to the contradicted claim go. A fix
    that failed its full training (scope ``inside``) holds a culprit the early
    passes missed: every early pass of a configuration inside the fix may hold
    it; early passes of configurations with a switched-off rule, and early
    failures, say nothing about it. A culprit set that passed alone (scope
    ``containing``) was blamed by early failures: those of configurations that
    contain it go. A record without a scope (journals written before scopes)
    withdraws every early pass, as it did then.
    """
    named = frozenset(revision.get("config") or ())
    scope = revision.get("scope")
    if scope == "inside":
        return kind == EARLY_PASS and config <= named
    if scope == "containing":
        return kind == EARLY_FAIL and named <= config
    return kind == EARLY_PASS


#: The role of a full training of the fix whose verdict was an early pass: it
#: proves the fix, and answers no question of the search that asked for it.
PROOF_ROLE = "proof"
#: The role of a full training of another minimum fix (``fix.prefer: speed``).
ALTERNATIVE_ROLE = "alternative"
#: The role of localization trainings (``fusion_dd.report.localize``): dumped trainings of a
#: configuration are other trainings than the search's, so they are kept out of the
#: search's cache (same key, different training) and have their own.
LOCALIZE_ROLE = "localize"


class RuleIndex:
    """A search's rule list (``definition.rules`` of ``search_started``), for configurations as bit masks.

    A configuration of n rules listed by name costs n times a rule name in every
    ``trial_started`` (20 KB a trial at 1,024 candidates); as a bit mask against
    the rule list journaled once, n / 6 characters. Bit i (little-endian bytes,
    base64 without padding) is rule i of the list. Decoding memoizes by mask: a
    search trains the same configuration again (repeats, retries), and equal
    configurations then share one frozenset.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._position = {name: index for index, name in enumerate(self.names)}
        self._decoded: dict[str, frozenset[str]] = {}
        # Per byte of a mask, the names each of its 256 values stands for: built as met, so a
        # mask decodes a byte at a time instead of a bit at a time.
        self._tables: list[dict[int, tuple[str, ...]]] = []

    def encode(self, names: Iterable[str]) -> str:
        mask = 0
        position = self._position
        for name in names:
            mask |= 1 << position[name]
        if not mask:
            return ""
        raw = mask.to_bytes((mask.bit_length() + 7) // 8, "little")
        return base64.b64encode(raw).decode("ascii").rstrip("=")

    def decode(self, text: str) -> frozenset[str]:
        found = self._decoded.get(text)
        if found is not None:
            return found
        raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=True) if text else b""
        tables = self._tables
        while len(tables) < len(raw):
            tables.append({})
        parts = []
        for offset, byte in enumerate(raw):
            if byte:
                table = tables[offset]
                part = table.get(byte)
                if part is None:
                    base = offset * 8
                    part = table[byte] = tuple(self.names[base + bit] for bit in _BITS[byte])
                parts.append(part)
        found = frozenset(chain.from_iterable(parts))
        self._decoded[text] = found
        return found


#: The set bits of each byte value, for decoding masks a byte at a time.
_BITS = tuple(tuple(bit for bit in range(8) if value >> bit & 1) for value in range(256))


def rule_names_of(definition: Mapping[str, Any] | None) -> list[str]:
    """The rule list of a search definition, in the order its masks index it."""
    return [str(item["name"]) for item in (definition or {}).get("rules") or []]


def encode_float(value: float | None) -> float | str | None:
    """JSON has no NaN/Inf; the journal spells them as strings."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def decode_float(value: Any) -> float | None:
    if value is None:
        return None
    return float(value)


@dataclass
class TrialState:
    """One training as the journal knows it.

    ``config`` may be given as a bit mask of the search's rule list
    (``masked``): it is decoded into names the first time it is read, so a
    replay that never asks about a trial's configuration (a finished search
    shown again) decodes none.
    """

    trial_id: str
    config: frozenset[str]
    repeat: int
    device: tuple[str, ...]
    trial_dir: str
    started_at: float
    role: str = "search"
    attempt: int = 1
    finished: dict[str, Any] | None = None
    cancelled: dict[str, Any] | None = None
    launch: dict[str, Any] | None = None  # the trial_launched record: its supervisor is running

    @classmethod
    def masked(cls, rules: RuleIndex, mask: str, **fields: Any) -> TrialState:
        """A trial whose configuration is decoded from ``mask`` when first read."""
        trial = _MaskedTrial(config=frozenset(), **fields)
        trial.__dict__["_mask"] = (rules, mask)
        trial.__dict__["_config"] = None  # not decoded yet
        return trial

    @property
    def key(self) -> ConfigKey:
        return (self.config, self.repeat)

    def facts(self, hook: str) -> dict[str, Any]:
        """What the artifact hook named ``hook`` journaled when this training ended ({} when nothing)."""
        facts = ((self.finished or {}).get("artifacts") or {}).get(hook)
        return facts if isinstance(facts, dict) else {}

    @property
    def log(self) -> str | None:
        """The training's log, relative to the state directory: journaled when it is not the usual one."""
        if self.finished is None:
            return None
        return str(self.finished.get("log") or f"{self.trial_dir}/{LOG_NAME}")

    @property
    def open(self) -> bool:
        """Started, and neither finished nor given up: it may still be running."""
        return self.finished is None and self.cancelled is None

    @property
    def costs_budget(self) -> bool:
        """A training counts against the budget once its supervisor started.

        The coordinator journals ``trial_started`` before it starts the
        supervisor; if it dies in between, the next coordinator finds no trace
        of a supervisor and records the trial cancelled with ``launched:
        false``: nothing ran, so nothing is charged. A trial still open counts
        (it may be starting right now), and so does every trial of a 0.1.0
        journal, whose cancellations never say.
        """
        return not (self.cancelled is not None and self.cancelled.get("launched") is False)

    @property
    def resolved(self) -> bool:
        """Finished with a verdict-worthy result (a metric, NaN/Inf, or a divergence)."""
        return self.finished is not None and self.finished.get("kind") in RESOLVED_KINDS

    @property
    def measurement(self) -> Measurement | None:
        if self.finished is None:
            return None
        return Measurement(
            kind=self.finished["kind"],
            value=decode_float(self.finished.get("value")),
            reason=self.finished.get("reason", ""),
        )


class _MaskedTrial(TrialState):
    """A trial whose configuration is still its journaled mask (see :meth:`TrialState.masked`)."""

    @property  # type: ignore[override]
    def config(self) -> frozenset[str]:
        found = self.__dict__.get("_config")
        if found is None:
            rules, mask = self.__dict__["_mask"]
            found = self.__dict__["_config"] = rules.decode(mask)
        return found

    @config.setter
    def config(self, value: frozenset[str]) -> None:
        self.__dict__["_config"] = value


@dataclass
class SearchState:
    definition: dict[str, Any] | None = None
    started_at: float | None = None
    trials: dict[str, TrialState] = field(default_factory=dict)
    finished: dict[str, Any] | None = None
    stops: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    # How the last session ended, when it said so: a search_stopped record after the last
    # session_started. None while it runs, or when it died without one (killed, crashed).
    last_stop: dict[str, Any] | None = None
    retired_devices: list[dict[str, Any]] = field(default_factory=list)
    # The parallelism each question of the search was asked with, in question order
    # (``question`` records): replayed on resume so that it asks the same questions.
    lanes: list[int] = field(default_factory=list)
    # Whether the first question was asked beside the references (``"opening": true`` in its
    # ``question`` record, ``fusion_dd.search.first_question``): a replay asks it the same way.
    opening: bool = False
    start_record: dict[str, Any] | None = None
    # Trials before this index were judged by a ``training_broken`` stop: the next
    # session trains the references again instead of re-reading that verdict.
    broken_before: int = 0
    # Kept up to date by apply(): the engine asks for them once per question.
    _by_key: dict[ConfigKey, TrialState] = field(default_factory=dict, repr=False)
    _attempts: dict[ConfigKey, int] = field(default_factory=dict, repr=False)
    # Finished trainings not yet in the indexes by key (with whether they dumped), see _index;
    # while a replay folds records in, indexing waits for the first question about a key.
    _unindexed: list[tuple[TrialState, bool]] = field(default_factory=list, repr=False)
    _replaying: bool = field(default=False, repr=False)
    # A reader's first question may index while a training's end is applied on another thread
    # (a report snapshot, the trainers): the pending list and the indexes change under this lock.
    _indexing: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    # Counts kept by apply(), so that a question costs O(1) however long the search ran.
    _charged: int = field(default=0, repr=False)
    _highest: int = field(default=0, repr=False)
    # Localization: finished dumped trainings by key, and the journaled comparisons
    # (``localized`` records) by the culprit set's sorted rule names.
    _localize_by_key: dict[ConfigKey, TrialState] = field(default_factory=dict, repr=False)
    localized: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    # The prior of a guided search (``guide`` record, fusion_dd.analysis.guide): journaled once, replayed on resume.
    guide: dict[str, Any] | None = None
    # The rankings of later searches from their fix candidates' dumps (``guide_refined``), by
    # the sorted rule names of the search's start: journaled once each, replayed on resume.
    refined: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    # Reference trainings that dumped tensors for the guide (``"dumps": true`` in trial_started):
    # the same training as the search's, so their dumps also serve localization.
    _dumping: set[str] = field(default_factory=set, repr=False)
    # Fix candidates trained with no early pass (``"to_end": true`` in trial_started): their
    # pass is the fix's proof, and a failure they show late is one early passes missed.
    _to_end: set[str] = field(default_factory=set, repr=False)
    # One rule alone asked once several culprit sets were sure (``"fails_to_end": true``): it
    # never stopped as an early failure, so a failure it shows is a full one, its set's proof.
    _fails_to_end: set[str] = field(default_factory=set, repr=False)
    # Full-length trainings by key (every finished training that did not pass early, proofs
    # included): what a key's early pass is replaced by once early passes were revised.
    _full_by_key: dict[ConfigKey, TrialState] = field(default_factory=dict, repr=False)
    _full_attempts: dict[ConfigKey, int] = field(default_factory=dict, repr=False)
    # ``early_passes_revised`` records: the first says in which round of the search a full
    # training contradicted an early pass; later rounds trust no early pass.
    early_revisions: list[dict[str, Any]] = field(default_factory=list)

    def full_trial(self, key: ConfigKey) -> TrialState | None:
        """The full-length training that decides this key (first resolved, else the latest); None if none."""
        self._index()
        return self._full_by_key.get(key)

    def full_attempts(self, key: ConfigKey) -> int:
        """How many full-length trainings of this key finished."""
        self._index()
        return self._full_attempts.get(key, 0)

    @property
    def early_revised_round(self) -> int | None:
        """The round of the search after which early passes count no more; None while they do."""
        return int(self.early_revisions[0]["round"]) if self.early_revisions else None

    # The search's rule list, for the configurations of trial_started (``on``, a bit mask of it).
    rule_index: RuleIndex = field(default_factory=lambda: RuleIndex(()), repr=False)

    @property
    def launched(self) -> int:
        """Trainings launched over the whole search, resumes included: what the budget caps."""
        return self._charged

    def cache(self) -> Mapping[ConfigKey, TrialState]:
        """Finished trainings by (configuration, repeat), read-only.

        A key may have several attempts (retries of crashed or timed-out
        trainings): the first attempt that produced a result wins, else the
        latest unresolved one, whose reason is then the one to report.
        """
        self._index()
        return MappingProxyType(self._by_key)

    def localize_cache(self) -> Mapping[ConfigKey, TrialState]:
        """Finished localization (dumped) trainings by (configuration, repeat), read-only."""
        self._index()
        return MappingProxyType(self._localize_by_key)

    def dumped(self, trial_id: str) -> bool:
        """Whether this (reference) trial was started to dump tensors for the guide."""
        return trial_id in self._dumping

    def to_end(self, trial_id: str) -> bool:
        """Whether this trial was started to train to its end unless it fails (no early pass)."""
        return trial_id in self._to_end

    def fails_to_end(self, trial_id: str) -> bool:
        """Whether this trial was started to train to its end if it fails (no early failure)."""
        return trial_id in self._fails_to_end

    def attempts(self, key: ConfigKey) -> int:
        """How many trainings of this (configuration, repeat) finished."""
        self._index()
        return self._attempts.get(key, 0)

    def open_trials(self) -> list[TrialState]:
        return [trial for trial in self.trials.values() if trial.open]

    def next_trial_number(self) -> int:
        """One past the highest trial number the journal knows (numbers may have gaps)."""
        return self._highest + 1

    def apply(self, record: dict[str, Any]) -> None:
        """Take one journal record into account (replay and live updates share this).

        A type this version does not know (a newer version's) changes nothing.
        """
        handler = _APPLY.get(record.get("type"))  # type: ignore[arg-type]
        if handler is not None:
            handler(self, record)

    def _apply_search_started(self, record: dict[str, Any]) -> None:
        if self.definition is None:
            self.definition = record["definition"]
            self.started_at = record.get("time")
            self.start_record = record
            self.rule_index = RuleIndex(rule_names_of(self.definition))

    def _apply_session_started(self, record: dict[str, Any]) -> None:
        self.sessions.append(record)
        self.last_stop = None

    def _apply_trial_started(self, record: dict[str, Any]) -> None:
        trial_id = record["trial_id"]
        replaced = self.trials.get(trial_id)
        if replaced is not None:
            self._charged -= replaced.costs_budget
        if trial_id.isdigit():
            self._highest = max(self._highest, int(trial_id))
        self._charged += 1  # an open trial counts (see TrialState.costs_budget)
        fields: dict[str, Any] = dict(
            trial_id=trial_id,
            repeat=int(record.get("repeat", 0)),
            device=tuple(record.get("device", ())),
            trial_dir=record.get("trial_dir") or f"{TRIALS_DIR}/{trial_id}",
            started_at=record.get("time", 0.0),
            role=record.get("role", "search"),
            attempt=int(record.get("attempt", 1)),
        )
        if "on" in record:
            self.trials[trial_id] = TrialState.masked(self.rule_index, str(record["on"]), **fields)
        else:  # a journal of an older version lists the configuration by name
            self.trials[trial_id] = TrialState(config=frozenset(record["config"]), **fields)
        if record.get("dumps"):
            self._dumping.add(trial_id)
        else:
            self._dumping.discard(trial_id)
        for flag, trials in (("to_end", self._to_end), ("fails_to_end", self._fails_to_end)):
            if record.get(flag):
                trials.add(trial_id)
            else:
                trials.discard(trial_id)

    def _apply_trial_launched(self, record: dict[str, Any]) -> None:
        trial = self.trials.get(record["trial_id"])
        if trial is not None:
            trial.launch = record

    def _apply_trial_finished(self, record: dict[str, Any]) -> None:
        trial = self.trials.get(record["trial_id"])
        if trial is None or trial.finished is not None:
            return
        trial.finished = record
        with self._indexing:
            self._unindexed.append((trial, trial.trial_id in self._dumping))
        if not self._replaying:
            self._index()

    def _index(self) -> None:
        """Take the finished trainings not indexed yet into the indexes by key, in journal order.

        Indexing a training needs its configuration's names (its mask decoded), so a
        replay leaves it to the first question about a key: a finished search shown
        again asks none and decodes no configuration.
        """
        if not self._unindexed:
            return  # the usual case once indexed: no lock to take
        with self._indexing:
            pending, self._unindexed = self._unindexed, []
            self._take(pending)

    def _take(self, pending: list[tuple[TrialState, bool]]) -> None:
        """The indexes updated for these finished trainings (with whether each dumped), in order."""
        for trial, dumping in pending:
            kind = trial.finished.get("kind") if trial.finished is not None else None
            if trial.role == LOCALIZE_ROLE:
                self._localize_by_key.setdefault(trial.key, trial)
            elif trial.role == PROOF_ROLE:
                self._note_full(trial)
                if dumping and kind == "metric":
                    self._localize_by_key.setdefault(trial.key, trial)  # the fix's dumped full training
            else:
                if kind not in EARLY_KINDS:
                    self._note_full(trial)
                if dumping and kind in ("metric", EARLY_PASS):
                    # An early pass dumped before it stopped (the engine lets no dumping training
                    # pass before the localized step): its dump serves localization too.
                    self._localize_by_key.setdefault(trial.key, trial)
                self._attempts[trial.key] = self._attempts.get(trial.key, 0) + 1
                current = self._by_key.get(trial.key)
                if current is None or not current.resolved:
                    self._by_key[trial.key] = trial

    def _apply_trial_cancelled(self, record: dict[str, Any]) -> None:
        trial = self.trials.get(record["trial_id"])
        if trial is not None and trial.finished is None:
            self._charged -= trial.costs_budget
            trial.cancelled = record
            self._charged += trial.costs_budget

    def _apply_search_stopped(self, record: dict[str, Any]) -> None:
        self.stops.append(record)
        self.last_stop = record
        if record.get("reason") == "training_broken":
            # The user fixes the training and runs again: its failed attempts no longer count.
            self.broken_before = len(self.trials)
            self._index()
            for key, trial in self._by_key.items():
                if not trial.resolved:
                    self._attempts.pop(key, None)

    def _apply_device_retired(self, record: dict[str, Any]) -> None:
        self.retired_devices.append(record)

    def _apply_question(self, record: dict[str, Any]) -> None:
        if int(record["index"]) == len(self.lanes):  # a duplicate of a known index changes nothing
            self.lanes.append(int(record["width"]))
            if len(self.lanes) == 1 and record.get("opening"):
                self.opening = True

    def _apply_search_finished(self, record: dict[str, Any]) -> None:
        self.finished = record

    def _apply_localized(self, record: dict[str, Any]) -> None:
        self.localized[tuple(sorted(record["culprit"]))] = record

    def _apply_guide(self, record: dict[str, Any]) -> None:
        if self.guide is None:  # the first one decided the questions; a duplicate changes nothing
            self.guide = record

    def _apply_guide_refined(self, record: dict[str, Any]) -> None:
        self.refined.setdefault(tuple(sorted(record["config"])), record)

    def _apply_early_passes_revised(self, record: dict[str, Any]) -> None:
        self.early_revisions.append(record)

    def _note_full(self, trial: TrialState) -> None:
        self._full_attempts[trial.key] = self._full_attempts.get(trial.key, 0) + 1
        current = self._full_by_key.get(trial.key)
        if current is None or not current.resolved:
            self._full_by_key[trial.key] = trial


#: The handler of each record type (``legacy_sealed`` is the journal's own: nothing to replay).
_APPLY: dict[str, Callable[[SearchState, dict[str, Any]], None]] = {
    RecordType.SEARCH_STARTED.value: SearchState._apply_search_started,
    RecordType.SESSION_STARTED.value: SearchState._apply_session_started,
    RecordType.TRIAL_STARTED.value: SearchState._apply_trial_started,
    RecordType.TRIAL_LAUNCHED.value: SearchState._apply_trial_launched,
    RecordType.TRIAL_FINISHED.value: SearchState._apply_trial_finished,
    RecordType.TRIAL_CANCELLED.value: SearchState._apply_trial_cancelled,
    RecordType.SEARCH_STOPPED.value: SearchState._apply_search_stopped,
    RecordType.DEVICE_RETIRED.value: SearchState._apply_device_retired,
    RecordType.QUESTION.value: SearchState._apply_question,
    RecordType.SEARCH_FINISHED.value: SearchState._apply_search_finished,
    RecordType.LOCALIZED.value: SearchState._apply_localized,
    RecordType.GUIDE.value: SearchState._apply_guide,
    RecordType.GUIDE_REFINED.value: SearchState._apply_guide_refined,
    RecordType.EARLY_PASSES_REVISED.value: SearchState._apply_early_passes_revised,
}


def replay(records: Iterable[dict[str, Any]]) -> SearchState:
    """Fold journal records into the search state."""
    state = SearchState()
    state._replaying = True  # indexing by key waits for the first question (SearchState._index)
    try:
        for record in records:
            state.apply(record)
    finally:
        state._replaying = False
    return state


def launched_count(records: Iterable[dict[str, Any]]) -> int:
    """``replay(records).launched`` without building the state (see :attr:`TrialState.costs_budget`).

    For the CLI's counter, which starts before the engine replays the journal: a
    replay of thousands of trials hashes every configuration, this only follows ids.
    """
    costs: dict[str, bool] = {}  # trial id -> counts against the budget
    finished: set[str] = set()
    for record in records:
        kind = record.get("type")
        if kind == "trial_started":
            costs[record["trial_id"]] = True  # a restarted id is a new, open trial
            finished.discard(record["trial_id"])
        elif kind == "trial_finished":
            if record["trial_id"] in costs:
                finished.add(record["trial_id"])
        elif kind == "trial_cancelled":
            if record["trial_id"] in costs and record["trial_id"] not in finished:
                costs[record["trial_id"]] = record.get("launched") is not False
    return sum(costs.values())


def definition_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Which parts of a search definition differ, named as config keys."""
    names = {
        "rules": "rules",
        "base_cfg": "rules.base_cfg",
        "base_cfg_extra": "rules.base_cfg",
        "command": "train.command",
        "workdir": "train.workdir",
        "env": "train.env",
        "strategy": "search.strategy",
        "fix": "fix.prefer",
    }
    changes: list[str] = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        if key == "base_cfg_extra" and key not in old and "base_cfg" in old:
            continue  # journaled since this key exists: an older search's cannot say, so it is not held against it
        if isinstance(old.get(key), dict) and isinstance(new.get(key), dict) and key in ("metric", "score", "fix", "noise"):
            section = "search" if key == "noise" else key  # noise: search.confirm, max_trainings, fix_trainings
            for sub in sorted(set(old[key]) | set(new[key])):
                if old[key].get(sub) != new[key].get(sub):
                    changes.append(f"{section}.{sub}")
        else:
            changes.append(names.get(key, key))
    return list(dict.fromkeys(changes))  # two parts of rules.base_cfg are one key to the user


def config_names(config: Sequence[Any] | frozenset[Any]) -> list[str]:
    """A configuration as the sorted list of rule names the journal stores."""
    return sorted(str(getattr(item, "name", item)) for item in config)
