"""How a search can end, and the exit code each ending gives: declared once, here, so the
engine, its replay, the report and the command line cannot drift apart (the README's exit-code
table documents the same mapping)."""

from __future__ import annotations

import enum

from .words import Word


class SearchStatus(Word):
    """The ``status`` of ``report.json`` and of the journal's ``search_finished`` record.

    A :class:`~fusion_dd.core.words.Word`: the bare word the journal and ``report.json``
    have always carried."""

    FOUND = "found"
    NO_FAILURE = "no_failure"
    BASELINE_FAILS = "baseline_fails"
    TOO_NOISY = "too_noisy"
    BUDGET_EXHAUSTED = "budget_exhausted"
    INTERRUPTED = "interrupted"
    TRAINING_BROKEN = "training_broken"
    SWITCH_IGNORED = "switch_ignored"
    RUNNING = "running"


#: The endings that are answers about fusion, refusals included: the search is over.
ANSWERS = frozenset({SearchStatus.FOUND, SearchStatus.NO_FAILURE, SearchStatus.BASELINE_FAILS, SearchStatus.TOO_NOISY})


class ExitCode(enum.IntEnum):
    """The process exit codes of ``fusion-dd``."""

    OK = 0  # finished, refusals included (they are answers)
    INTERNAL = 1  # a crash of fusion-dd itself, with its crash log named
    USAGE = 2  # bad input, a state directory that cannot be used, a training that cannot run
    BUDGET = 3  # budget exhausted: ``fusion-dd resume --budget N`` continues
    INTERRUPTED = 130  # Ctrl-C or SIGTERM: ``fusion-dd resume`` continues


def exit_code_of(status: str) -> ExitCode:
    """The exit code a search that ended in ``status`` gives."""
    if status in ANSWERS or status == SearchStatus.RUNNING:
        return ExitCode.OK
    if status == SearchStatus.BUDGET_EXHAUSTED:
        return ExitCode.BUDGET
    if status == SearchStatus.INTERRUPTED:
        return ExitCode.INTERRUPTED
    return ExitCode.USAGE
