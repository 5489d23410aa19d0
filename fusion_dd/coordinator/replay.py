"""A search's report rebuilt from its journal alone, at any time, without training.

How: the engine's decision layer runs again against the journal's cache, with
other ports (``fusion_dd.coordinator.ports``): records applied in memory, a
trainer that is never called, no budget left. Resume is exact replay (the
strategy is deterministic and asks its questions from the cache, the journaled
``question`` widths replay the parallelism), so the replay reaches exactly the
point the search reached and stops there with the culprit sets, the smallest
failing configuration and the fix as the engine knows them. Nothing of this is
journaled twice, so a report can never disagree with the journal.

A replay never takes the journal's lock and writes nothing: the caller decides
where the report goes (``fusion-dd report`` writes ``report.json`` only when no
coordinator holds the lock; the running engine rewrites it after each trial).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runner.broken import TrainingBroken
from ..config.settings import SearchConfig, parse_started_config
from ..core.status import ANSWERS, ExitCode, SearchStatus, exit_code_of
from .engine import Engine
from .ports import MemorySink, NeverTrainer, NoBudget, SwitchIgnored
from ..core.errors import UsageError
from ..store.journal import JOURNAL_NAME, read_records
from ..report import localize as localization
from ..report.build import display_path, finished_report
from ..store.state import SearchState, replay

# Statuses that are an answer: the replay reached the end of the search.
RUNNING = SearchStatus.RUNNING


def replay_engine(config: SearchConfig, state: SearchState) -> Engine:
    """The engine over a replayed journal: records applied in memory only, nothing trained, nothing to spend.

    Never the config's launcher: a replay launches nothing, and the dask launcher would
    connect to the scheduler (10 s and a failure when it is gone) for status, report
    and every estimate of the live view. Its width is the journal's: the recorded
    questions, then the session's devices (which a cluster launcher journals as found).
    """
    return Engine(
        config, sink=MemorySink(state), trainer=NeverTrainer(config.train.devices), budget=NoBudget(), replaying=True
    )


@dataclass(frozen=True)
class Rebuilt:
    """A rebuilt report and how the search stands."""

    report: dict[str, Any]
    status: str
    exit_code: int


def config_of(state: SearchState, state_dir: Path) -> SearchConfig:
    """The search's config as its journal holds it, with the last session's budget and devices."""
    start = state.start_record
    if start is None:
        raise UsageError(f"{state_dir}: the journal holds no search_started record; nothing to report")
    config = parse_started_config(start, state_dir).with_started_defaults(start.get("definition"))
    if (config.from_all_on or config.closure) and state.definition is not None:
        # rules.from: all_on and closure found candidates the document does not list: the journal's are the search's.
        from dataclasses import replace

        from ..core.rules import Rule, Section

        journaled = state.definition.get("rules") or []
        config = replace(config, rules=tuple(Rule(item["name"], Section.parse(item["section"])) for item in journaled))
    session = state.sessions[-1] if state.sessions else {}
    devices = session.get("devices")
    return config.with_overrides(
        budget=session.get("budget"),
        devices=tuple(tuple(str(part) for part in device) for device in devices) if devices else None,
        state_dir=state_dir,
    )


def _stopped_as(state: SearchState) -> str:
    """How the last session ended: its search_stopped reason, or ``interrupted`` when it died without one."""
    return str(state.last_stop.get("reason") or "interrupted") if state.last_stop is not None else "interrupted"


def finished_answer(state: SearchState, state_dir: Path) -> dict[str, Any]:
    """A finished search's journaled answer with the localizations journaled after it.

    The answer is journaled before its culprits are localized (an interrupt
    during localization must not lose it), so the ``localized`` records that
    follow join it here, as the engine's own report does.
    """
    # Read from the journaled document, not parsed: a view of a finished search needs no valid config.
    document = (state.start_record or {}).get("config_document")
    configured = isinstance(document, dict) and bool(document.get("localize"))
    return localization.attach(finished_report(state), state, configured, display_path(state_dir))


def rebuild(records: Iterable[dict[str, Any]], state_dir: Path, *, running: bool) -> Rebuilt:
    """The report the engine would write now, from journal records alone.

    ``running``: a coordinator holds the lock; the status is then ``running``
    unless the replay already reaches an answer. A finished search keeps the
    report it journaled with ``search_finished``.
    """
    state = replay(records)
    if state.finished is not None:
        report = finished_answer(state, state_dir)
        return Rebuilt(report, report["status"], ExitCode.OK)
    config = config_of(state, state_dir)
    stopped = _stopped_as(state)  # before the replay adds its own (in-memory) stop
    said = state.last_stop is not None  # the last session journaled its stop: not killed
    detail = state.last_stop.get("detail") if state.last_stop is not None else None
    engine = replay_engine(config, state)
    try:
        result = engine.search()
    except TrainingBroken as exc:
        result = engine.endings.stop_broken(exc.broken)
    except SwitchIgnored as exc:
        result = engine.endings.stop(SearchStatus.SWITCH_IGNORED, ExitCode.USAGE, None, None, message=str(exc))
    if result.status in ANSWERS or result.status == SearchStatus.TRAINING_BROKEN and not running:
        return Rebuilt(result.report, result.status, result.exit_code)
    status = RUNNING if running else stopped
    stopped_ways = (SearchStatus.BUDGET_EXHAUSTED, SearchStatus.INTERRUPTED, SearchStatus.SWITCH_IGNORED,
                    SearchStatus.TRAINING_BROKEN, RUNNING)
    if status not in stopped_ways:
        status = SearchStatus.INTERRUPTED
    pre, found = engine.endings.reported
    message = None
    if status == RUNNING:
        message = "running: the report of the search so far"
    elif status == SearchStatus.TRAINING_BROKEN and detail:
        message = f"stopped: {detail}"
    elif status == SearchStatus.INTERRUPTED and not said:
        message = "interrupted: the coordinator stopped without a word (killed or crashed); rebuilt from the journal"
    known = pre if pre is not None else engine.references.known_preconditions()
    report = engine.endings.report(status, known, found, message)
    if result.status == SearchStatus.TRAINING_BROKEN:
        report["training_broken"] = result.report.get("training_broken")
    code = exit_code_of(status)
    return Rebuilt(report, status, code)


def running_report(records: list[dict[str, Any]], state_dir: Path) -> dict[str, Any]:
    """The report of a search still running, from its records: the engine's ``running_report`` port."""
    return rebuild(records, state_dir, running=True).report


def rebuild_from_dir(state_dir: Path, *, running: bool) -> Rebuilt:
    """``rebuild`` of the journal in ``state_dir`` (a torn last line is ignored by the reader)."""
    journal = state_dir / JOURNAL_NAME
    if not journal.exists():
        raise UsageError(f"{state_dir}: no search here (no {JOURNAL_NAME}); start one with 'fusion-dd search'")
    return rebuild(read_records(journal), state_dir, running=running)
