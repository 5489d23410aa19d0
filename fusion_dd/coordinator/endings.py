"""How a session ends: the report of the search, its journaled answer, and the files a user reads.

Every ending builds the report from the journal's state and what the session
decided (the references' verdict, the culprit sets, the fix); a finished
search journals its answer in ``search_finished`` and writes ``report.json`` and
the fix's switch file, a stopped one writes the report of the search so far.
While a search runs, ``report.json`` is rewritten in the background after
finished trials (``ReportSnapshots``), so that a dead search never leaves a
stale one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..backends import fix_env_of
from ..core.rules import Rule
from ..core.scoring import Preconditions
from ..core.status import ExitCode, SearchStatus
from ..report import localize as localization
from ..report.build import (
    FIX_NAME,
    HTML_NAME,
    REPORT_NAME,
    build_report,
    display_path,
    edited_fix_note,
    finished_report,
    html_wanted,
    journaled_answer,
)
from ..report.build import write_outputs, write_report
from ..runner.broken import STATUS as TRAINING_BROKEN
from ..runner.broken import BrokenTraining, launched_command, report_details
from ..search.culprits import CulpritSearch
from ..store.journal import JOURNAL_NAME
from ..store.records import RecordType
from ..store.snapshots import Snapshots
from ..analysis import guide
from .containers import Containers
from .ports import Context, SearchResult
from .proofs import Proofs
from .required import RequiredPasses


class ReportSnapshots:
    """Rewrite report.json after finished trials, so a dead search never leaves a stale one.

    Rebuilt from the journal by the ``running_report`` port (replay, like ``fusion-dd
    report``) on the background thread of :class:`Snapshots`; a failure costs
    the snapshot, never the search. Without ``running_report``, report.json is
    written at the end only.
    """

    def __init__(
        self, context: Context, running_report: Callable[[list[dict[str, Any]], Path], dict[str, Any]] | None
    ) -> None:
        self._context = context
        self._running_report = running_report
        self._failed = False
        self._snapshots = Snapshots(self._write)

    def request(self) -> None:
        self._snapshots.request()

    def close(self) -> None:
        """Wait for a snapshot being written: it must not overwrite the final report."""
        self._snapshots.close()

    def _write(self) -> None:
        if self._running_report is None:
            return
        context = self._context
        try:
            records = context.sink.records()
            write_report(context.state_dir / REPORT_NAME, self._running_report(records, context.state_dir))
        except Exception as exc:  # noqa: BLE001 - a report snapshot must never stop a search
            if not self._failed:
                self._failed = True
                context.events.message(f"warning: could not rewrite {REPORT_NAME} during the search: {exc}")


class Endings:
    """The report and result of one session's end, written through ``snapshots``' files or kept in memory."""

    def __init__(
        self,
        context: Context,
        required: RequiredPasses,
        proofs: Proofs,
        containers: Containers,
        rounds: Callable[[], int],
        snapshots: ReportSnapshots | None,
    ) -> None:
        """``rounds``: the oracle's rounds so far. ``snapshots``: None for an engine that writes no file (a
        replay: its caller decides where the report goes)."""
        self._context = context
        self._required = required
        self._proofs = proofs
        self._containers = containers
        self._rounds = rounds
        self._snapshots = snapshots
        # What the last report was built from: a replay's caller words its own report from it.
        self.reported: tuple[Preconditions | None, CulpritSearch | None] = (None, None)

    def report(
        self, status: str, pre: Preconditions | None, result: CulpritSearch | None, message: str | None = None
    ) -> dict[str, Any]:
        context = self._context
        state = context.state
        self.reported = (pre, result)
        report = build_report(
            config=context.config,
            state=state,
            status=status,
            preconditions=pre,
            result=result,
            rounds=self._rounds(),
            message=message,
            required=self._required.rules,
        )
        report = localization.attach(report, state, context.config.localize is not None, display_path(context.state_dir))
        if self._proofs.alternatives:
            report["fix_alternatives"] = list(self._proofs.alternatives)
        if self._required.entry is not None:
            report["required"] = dict(self._required.entry)
        self._containers.report_entries(report)
        if state.guide is not None:
            report["guide"] = guide.report_entry(
                state.guide, list(state.refined.values()), [rule.name for rule in context.rules]
            )
        return report

    def finish(self, status: str, pre: Preconditions, result: CulpritSearch | None) -> SearchResult:
        """The search's answer: journaled in ``search_finished``, then written."""
        context = self._context
        report = self.report(status, pre, result)
        if status == SearchStatus.FOUND and result is not None:
            # What the user exports beside the fix cfg (CANN: AUTOFUSE_FLAGS when AutoFuse points are candidates).
            fix_env = fix_env_of(context.backend, context.rules, sorted(result.fix))
            if fix_env:
                report["fix_env"] = dict(fix_env)
        rules = (context.state.definition or {}).get("rules")
        context.append({"type": RecordType.SEARCH_FINISHED, "status": status, "report": journaled_answer(report, rules)})
        return self.write(status, ExitCode.OK, report)

    def stop(
        self,
        status: str,
        exit_code: int,
        pre: Preconditions | None,
        result: CulpritSearch | None,
        message: str | None = None,
    ) -> SearchResult:
        """A search that ends without an answer: the report of the search so far."""
        return self.write(status, exit_code, self.report(status, pre, result, message))

    def stop_broken(self, broken: BrokenTraining) -> SearchResult:
        """report.json with status training_broken, exit 2; not a finished search: fixed, it may run again."""
        context = self._context
        command, workdir = broken.command, broken.details.get("workdir")
        if broken.trial is not None:
            command, workdir = launched_command(context.state_dir / broken.trial.trial_dir)
        details = report_details(broken, context.state_dir, command or context.config.train.command, workdir)
        if context.state.definition is not None:
            context.append({"type": RecordType.SEARCH_STOPPED, "reason": TRAINING_BROKEN, "detail": broken.reason})
        report = self.report(TRAINING_BROKEN, None, None, message=f"stopped: {broken.reason}")
        report[TRAINING_BROKEN] = details
        return self.write(TRAINING_BROKEN, ExitCode.USAGE, report)

    def _switch_text(self, candidates: list[Rule], enabled: list[Rule]) -> str:
        return self._context.backend.render(candidates, enabled).switch_text

    def write(self, status: str, exit_code: int, report: dict[str, Any]) -> SearchResult:
        """report.json and the fix's switch file (none for an engine that writes no file)."""
        context = self._context
        if self._snapshots is None:
            return SearchResult(status, exit_code, report, context.state_dir / REPORT_NAME, None)
        self._snapshots.close()  # a snapshot still being written must not overwrite the final report
        report_path, fix_path, kept = write_outputs(
            context.state_dir, report, context.rules, context.config.base_cfg, self._switch_text
        )
        if kept is not None and fix_path is not None:
            context.events.message(edited_fix_note(fix_path, kept))
        return SearchResult(status, exit_code, report, report_path, fix_path)

    def from_finished(self) -> SearchResult:
        """The journaled answer of a finished search, written again only when the files are older than the journal.

        When report.json, the fix and report.html were all written after the
        journal last changed (a finished search shown again), nothing is written
        and the result's report leaves out its list of trials, which report.json
        holds: rebuilding every trial's configuration by name is most of the cost
        of showing a large search again.
        """
        context = self._context
        state, state_dir = context.state, context.state_dir
        assert state.finished is not None
        answer = state.finished["report"]
        journal, fix = state_dir / JOURNAL_NAME, state_dir / (answer.get("fix_config") or FIX_NAME)
        found = answer.get("status") == SearchStatus.FOUND
        outputs = [state_dir / REPORT_NAME, *([fix] if found else []), *([state_dir / HTML_NAME] if html_wanted() else [])]
        current = all(_newer_than(path, journal) for path in outputs)
        # Localizations journaled after the search finished (fusion-dd localize) join its answer.
        report = localization.attach(
            finished_report(state, trials=not current), state, context.config.localize is not None,
            display_path(state_dir),
        )
        if current:
            if self._snapshots is not None:
                self._snapshots.close()
            result = SearchResult(report["status"], ExitCode.OK, report, state_dir / REPORT_NAME, fix if found else None)
        else:
            result = self.write(report["status"], ExitCode.OK, report)
        # report.json keeps the rounds of the session that found the answer; what this session
        # shows counts its own (none for an answer shown again).
        return replace(result, report={**result.report, "rounds": self._rounds()})


def _newer_than(output: Path, source: Path) -> bool:
    """``output`` exists, is not empty, and was written after ``source`` last changed."""
    try:
        written = output.stat()
        return written.st_size > 0 and written.st_mtime_ns >= source.stat().st_mtime_ns
    except OSError:
        return False
