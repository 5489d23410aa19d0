"""Helpers shared by the tests (never test files themselves; a test file imports no other).

``tests`` and its folders are packages, so test files of the same name in
different folders (``cli/test_journal.py``, ``store/test_journal.py``) do not
clash, and every test imports its helpers as ``from tests.support.X import ...``
whichever file pytest is given.

- ``fake_training``: the fake training's command, the CLI as a subprocess.
- ``cli``: a search config over the fake training and what its launches were.
- ``artifacts``: CANN artifacts written by hand and a training that obeys its switch file.
- ``dumping``: a search over the dumping fake training (localization).
- ``html_page``: the HTML report parsed and checked against the journal.
- ``oracle``: the training oracle over an in-memory journal.
- ``processes``: waiting on and looking for processes.
- ``searches``: a search's journal, started trainings and found culprit, read back.
- ``clusters``: a localhost dask cluster, and whether a Slurm answers.
- ``states``: hand-made journal records.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
FAKES = TESTS / "fakes"
