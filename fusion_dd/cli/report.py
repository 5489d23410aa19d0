"""``fusion-dd report``: rebuild report.json, the summary and (optionally) the HTML report from the journal.

While a coordinator holds the search's lock this writes nothing into the state
directory (the running search rewrites ``report.json`` itself after every
finished trial); it only prints, or writes where ``--html`` points. With no
coordinator (stopped, finished, or crashed with a torn journal tail) it rewrites
``report.json`` so that a dead search never leaves a stale one; on a read-only
state directory (an archive, a read-only mount) it writes nothing there and says so.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import typer

from ..store.journal import JOURNAL_NAME, read_records
from ..coordinator.replay import config_of, rebuild
from ..report.build import REPORT_NAME, display_path, edited_fix_note, summary_lines, write_outputs
from ..store.state import replay
from .status_view import coordinator_pid


def run_report(state_dir: Path, *, html: Path | None, as_json: bool) -> int:
    """Rebuild and show the report; returns the exit code (0: the report was rebuilt)."""
    from ..core.errors import UsageError

    journal = state_dir / JOURNAL_NAME
    if not journal.exists():
        raise UsageError(f"{state_dir}: no search here (no {JOURNAL_NAME}); start one with 'fusion-dd search'")
    records = read_records(journal)
    pid = coordinator_pid(state_dir)
    rebuilt = rebuild(records, state_dir, running=pid is not None)
    report = rebuilt.report
    notes: list[str] = []
    if pid is None:
        try:
            edited = _write_in_state_dir(state_dir, records, report)
        except OSError as exc:
            # A read-only mount, an archive, a full disk: the report is still shown (and --html
            # written elsewhere); only the copy in the state directory stays as it was.
            where = exc.filename or state_dir / REPORT_NAME
            kind = "read-only" if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else "not writable"
            notes.append(
                f"the state directory is {kind} ({where}: {exc.strerror or exc}): nothing rewritten there"
            )
        else:
            notes.append(f"rewrote {display_path(state_dir / REPORT_NAME)} from the journal")
            if edited is not None:
                notes.append(edited)
    else:
        notes.append(
            f"a search is running here (coordinator pid {pid}): nothing written into {display_path(state_dir)}; "
            "it rewrites report.json itself as trials finish"
        )
    if html is not None:
        from ..report.html import write_html

        if html.name in ("", "..") or html.is_dir():  # '.', '', '..' and folders name no file
            raise UsageError(f"--html {html}: is a directory; give the page's file path, e.g. --html report.html")
        try:
            write_html(html, report, records, state_dir)
        except OSError as exc:  # named as the user typed it, not by the temporary file beside it
            raise UsageError(f"--html {html}: cannot write the page ({exc.strerror}); choose a writable path") from None
        notes.append(f"HTML report: {display_path(html)}")
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=False))
    else:
        for line in summary_lines(report, state_dir):
            typer.echo(line)
    for note in notes:
        typer.echo(f"fusion-dd: {note}", err=True)
    return 0


def _write_in_state_dir(state_dir: Path, records: list[dict], report: dict) -> str | None:
    """report.json and the fix file rebuilt from the journal (as the engine renders them); the line
    to say when an edited fix file was kept aside (see :func:`fusion_dd.report.build.write_outputs`)."""
    from ..backends import backend_for

    config = config_of(replay(records), state_dir)
    backend = backend_for(config)
    _, fix_path, kept = write_outputs(
        state_dir, report, list(config.rules), config.base_cfg,
        lambda candidates, enabled: backend.render(candidates, enabled).switch_text,
    )  # fmt: skip
    return edited_fix_note(fix_path, kept) if kept is not None and fix_path is not None else None


def readdress_moved(state_dir: Path) -> str | None:
    """Rewrite the outputs of a search just moved aside (``--restart``) for its new place.

    Its report's "continue with" named the directory it left, where a new search now
    starts: followed as printed, it would resume the wrong search. Only a report with
    such a hint is rewritten (from the journal, as ``fusion-dd report`` does, report.html
    too where there is one). Returns a line to say when that could not be done, or that
    an edited fix file was kept aside.
    """
    from ..core.errors import UsageError
    from ..report.build import HTML_NAME

    try:
        document = json.loads((state_dir / REPORT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no report there to mislead
    localization = document.get("localization") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not (
        document.get("continue_with") or (isinstance(localization, dict) and localization.get("continue_with"))
    ):
        return None
    try:
        records = read_records(state_dir / JOURNAL_NAME)
        report = rebuild(records, state_dir, running=False).report
        edited = _write_in_state_dir(state_dir, records, report)
        if (state_dir / HTML_NAME).exists():
            from ..report.html import write_html

            write_html(state_dir / HTML_NAME, report, records, state_dir)
    except (UsageError, OSError) as exc:
        return (
            f"its report still names its old place ({exc}); 'fusion-dd report --state-dir "
            f"{display_path(state_dir)}' rewrites it"
        )
    return edited
