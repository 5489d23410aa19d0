"""One search from a loaded configuration to every output a user reads: what the command line
does, offered to library users too, so that ``Engine(config).run()`` is not mistaken for the
whole of it (closure before the journal, the launcher closed after, the HTML page).

    from fusion_dd.config.settings import load_config
    from fusion_dd.coordinator.run import run_search

    finished = run_search(load_config("fusion-dd.yaml"))
    print(finished.result.status, finished.result.report_path, finished.html)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.settings import SearchConfig
from ..store.journal import JOURNAL_NAME, read_records
from .closure import prepare
from .engine import Engine, SearchEvents, SearchResult
from ..report.build import html_wanted
from ..runner.launcher import call_hook
from .replay import running_report


@dataclass(frozen=True)
class FinishedRun:
    """What ``run_search`` leaves: the engine's result, the configuration it ran (closure may
    have added candidates), and the HTML page (or why it could not be written)."""

    config: SearchConfig
    result: SearchResult
    state: Any  # the engine's replayed journal state at the end (the report's source)
    html: Path | None
    html_error: str | None


def run_search(
    config: SearchConfig,
    *,
    say: Callable[[str], None] | None = None,
    events_for: Callable[[SearchConfig], SearchEvents | None] | None = None,
    localize_only: bool = False,
    note: str | None = None,
) -> FinishedRun:
    """Run (or resume) the search ``config`` describes and write its outputs.

    ``say``: where closure's lines go (quiet when None). ``events_for``: the progress display
    for the prepared configuration (None: no display). ``localize_only``: only the localization
    step of a finished search. ``note``: what of the devices and launcher came from the journal.
    Raises ``UsageError`` for a search that cannot run, as the engine does.
    """
    prepared = prepare(config, say or (lambda line: None))
    config = prepared.config
    events = events_for(config) if events_for is not None else None
    engine = None
    try:
        engine = Engine(config, events, adopt=prepared.adopted, running_report=running_report)
        engine.context_note = note
        result = engine.localize() if localize_only else engine.run()
    finally:
        call_hook(getattr(engine, "launcher", None), "close")
    state = getattr(engine, "state", None)
    html, html_error = write_html_report(config.state_dir, result.report, state)
    return FinishedRun(config, result, state, html, html_error)


def write_html_report(state_dir: Path, report: dict[str, Any], state: Any = None) -> tuple[Path | None, str | None]:
    """report.html next to report.json; a failure here costs only the page (the answer is
    written), so it is returned as words, not raised.

    ``state``: the engine's replayed state of the journal (the page then needs no replay of
    its own). ``FUSION_DD_HTML=0`` asks for no page (for scripts that only want
    ``report.json``; the page itself costs milliseconds).
    """
    if not html_wanted():
        return None, None
    try:
        from ..report.html import HTML_NAME, write_html

        page, journal = state_dir / HTML_NAME, state_dir / JOURNAL_NAME
        if _newer_than(page, journal):
            # Nothing journaled since the page was drawn (a finished search shown again).
            return page, None
        opened = state if getattr(state, "definition", None) is not None else None  # an engine that opened the journal
        return write_html(page, report, read_records(journal) if opened is None else (), state_dir, opened), None
    except Exception as exc:  # noqa: BLE001 - the search's answer is already written
        return None, f"{type(exc).__name__}: {exc}"


def _newer_than(page: Path, source: Path) -> bool:
    """``page`` exists, is not empty, and was written after ``source`` last changed."""
    try:
        drawn = page.stat()
        return drawn.st_size > 0 and drawn.st_mtime_ns >= source.stat().st_mtime_ns
    except OSError:
        return False
