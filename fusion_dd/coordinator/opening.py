"""Opening a search's state directory for a session: the journal, its search, and what must refuse to start.

A new search is journaled (``search_started``) only after the pre-flight check
passed, so that a fixed config starts afresh; a journal of another definition,
trial directories no journal knows, or trainings whose switch file the compiler
ignored make the session refuse before anything is trained or overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..config.settings import SearchConfig
from ..core.errors import UsageError
from ..report.build import larger_budget
from ..runner.broken import BrokenTraining, TrainingBroken
from ..store.identity import (
    SEARCH_ID_KEY,
    check_journal_belongs,
    journaled_id,
    new_search_id,
    record_state_dir_id,
    state_dir_id,
)
from ..store.journal import JOURNAL_NAME, TRIALS_DIR, read_records
from ..store.records import RecordType
from ..store.state import SearchState, definition_changes, replay
from .guidance import references_dump
from .ports import Context, JournalSink
from .preflight import preflight


def open_search(context: Context, sink: JournalSink, adopt: Sequence[dict[str, Any]]) -> None:
    """Lock and replay the journal, complete the config with the search's started defaults, and
    journal a new search (with ``adopt``, the records of an all-on reference trained before it)."""
    state_dir = context.state_dir
    if not (state_dir / JOURNAL_NAME).exists():
        refuse_trials_without_journal(state_dir, context.state)  # before creating anything there
    sink.open()
    state = context.state
    if state.start_record is not None:
        check_journal_belongs(state_dir, sink.path, journaled_id(state.start_record))
    context.config = context.config.with_started_defaults(state.definition)
    definition = context.config.definition()
    if state.definition is None:
        refuse_trials_without_journal(state_dir, state)
    unknown = unknown_trial_dirs(state_dir, state)
    if unknown:
        shown = ", ".join(f"{TRIALS_DIR}/{name}" for name in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        context.events.message(
            f"warning: {len(unknown)} trial director{'y' if len(unknown) == 1 else 'ies'} the journal does not "
            f"know ({shown}); left untouched: new trials skip those numbers"
        )
    if state.definition is None:
        refuse_broken_command(context.config)  # before the search is journaled: a fixed config then starts afresh
        search_id = new_search_id()
        context.append(
            {
                "type": RecordType.SEARCH_STARTED,
                SEARCH_ID_KEY: search_id,
                "definition": definition,
                "version": __version__,
                "config_path": str(context.config.source),
                "config_document": context.config.document,
            }
        )
        record_state_dir_id(state_dir, search_id)
        if adopt and references_dump(context.config):
            context.events.message("the all-on training of rules.from: all_on dumped no tensors: all-on trains again")
        elif adopt:
            for adopted in adopt:
                context.append(dict(adopted))
            context.events.message("the all-on training of rules.from: all_on is the all-on reference (trial all-on)")
    else:
        refuse_changed_definition(state_dir, state.definition, definition, state.last_stop)


def refuse_changed_definition(
    state_dir: Path, journaled: dict[str, Any], definition: dict[str, Any], last_stop: dict[str, Any] | None = None
) -> None:
    """The config defines another search than the journal's: resuming it would mix two searches' answers.

    After a ``training_broken`` stop a changed config is the usual next step (a
    metric pattern corrected, a command fixed): the refusal then says only that.
    """
    if journaled != definition:
        changes = ", ".join(definition_changes(journaled, definition))
        if last_stop is not None and last_stop.get("reason") == "training_broken":
            raise UsageError(
                f"{state_dir}: its search stopped because the training was broken, and the config changed since "
                f"(changed: {changes}); start the search with the new config with 'fusion-dd search --restart' "
                "(moves this state directory aside, keeping its journal and the broken trainings' logs)"
            )
        raise UsageError(
            f"{state_dir}: holds a search with a different definition (changed: {changes}); "
            "restore the old config, start over with 'fusion-dd search --restart' (moves this state "
            "directory aside, keeping its journal), or use another --state-dir for the new search"
        )


def refuse_unwritable(state_dir: Path) -> None:
    """The search could not create its state directory, or write into it (a read-only mount, no permission)."""
    from ..store.atomic import unwritable_ancestor

    existing = unwritable_ancestor(state_dir)
    if existing is not None:
        what = "write into the state directory" if Path(existing) == state_dir else "create the state directory"
        raise UsageError(f"{state_dir}: cannot {what} ({existing} is not writable: read-only or no permission)")


def foresee_opening(config: SearchConfig) -> tuple[str, str | None]:
    """What a search with this config would do with its state directory, read without changing anything.

    Returns one line saying it (a new search, a resume, a finished answer shown)
    and the refusal a search would stop with before any training, or None: the
    same checks as a session's start, for ``search --dry-run``, which must not
    promise a run the real search refuses. (Whether another fusion-dd holds the
    lock the CLI asks as ``fusion-dd status`` does: a search's lock is the journal's.)
    """
    state_dir = config.state_dir
    journal = state_dir / JOURNAL_NAME
    try:
        state = replay(read_records(journal)) if journal.exists() else replay([])
        if state.definition is None:
            refuse_trials_without_journal(state_dir, state)
            refuse_unwritable(state_dir)
            if not state_dir.exists():
                return "does not exist yet: a new search creates it and starts there", None
            return "empty: a new search starts there", None
        if state_dir_id(state_dir) is not None:  # (without an id, the check would record one: a change)
            check_journal_belongs(state_dir, journal, journaled_id(state.start_record))
        refuse_changed_definition(
            state_dir, state.definition, config.with_started_defaults(state.definition).definition(), state.last_stop
        )
        refuse_ignored_switch(state_dir, state)
        if state.finished is not None:
            return "holds this search, finished: a search shows its answer (and localizes, with localize:, culprits not yet localized)", None
        refuse_spent_budget(config.search.budget, state)
    except UsageError as exc:
        return "cannot be resumed", str(exc)
    return f"holds this search, unfinished ({state.launched} trainings launched): a search resumes it", None


def refuse_broken_command(config: SearchConfig) -> None:
    """Stop before any training when the command cannot run (see fusion_dd.coordinator.preflight)."""
    result = preflight(config)
    if result.errors:
        raise TrainingBroken(
            BrokenTraining(
                f"pre-flight: {result.errors[0]}",
                command=tuple(result.argv),
                details={"problems": list(result.errors[1:]), "workdir": result.workdir, "preflight": True},
            )
        )


def refuse_trials_without_journal(state_dir: Path, state: SearchState) -> None:
    """Trial directories but no search in the journal: starting over here would overwrite them."""
    unknown = unknown_trial_dirs(state_dir, state)
    if unknown:
        raise UsageError(
            f"{state_dir}: holds {len(unknown)} trial director{'y' if len(unknown) == 1 else 'ies'} "
            f"under {TRIALS_DIR}/ but no journal of a search, so fusion-dd cannot know what they are "
            "(was the journal deleted?); restore journal.jsonl, or start over with "
            f"'fusion-dd search --restart --state-dir {state_dir}', which moves this state directory aside"
        )


def unknown_trial_dirs(state_dir: Path, state: SearchState) -> list[str]:
    """Entries under trials/ that no journaled trial owns: never to be reused or overwritten."""
    try:
        entries = sorted(entry.name for entry in (state_dir / TRIALS_DIR).iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsageError(f"{state_dir / TRIALS_DIR}: cannot list the trial directories ({exc})") from None
    # The journal writes trial_dir with "/" (TRIALS_DIR/ID): its last part, without a Path per trial.
    known = {trial.trial_dir.rstrip("/").rpartition("/")[2] for trial in state.trials.values()}
    return [name for name in entries if name not in known]


def refuse_spent_budget(budget: int, state: SearchState) -> None:
    """A budget below what the search already launched can only be a slip: it counts every session.

    Trainings still open are collected even then (a finished training is never lost), so
    only a search with none open is refused, before the session journals anything.
    """
    launched = state.launched
    if budget < launched and not state.open_trials():
        raise UsageError(
            f"budget {budget} is below the {launched} trainings this search has already launched "
            f"(the budget counts every session's); give a larger one, e.g. --budget {larger_budget(budget, launched)}"
        )


def refuse_ignored_switch(state_dir: Path, state: SearchState) -> None:
    """Trainings whose switch file was ignored make every result in this state directory meaningless."""
    for trial in state.trials.values():
        if trial.finished is not None and trial.finished.get("switch_check") == "ignored":
            raise UsageError(
                f"{state_dir}: trial #{trial.trial_id} was trained with its switch file ignored by the "
                "compiler, so the results here prove nothing; fix the wiring (see docs/training.md) and start "
                "over with another --state-dir"
            )
