"""Shared test setup: the tests directory is importable, and the fake training is a fixture.

Helpers that tests import (the fake training's command, the CLI as a
subprocess, the in-memory lab behind the training oracle) live in plain modules
next to this file (``fake_training``, ``oracle_support``, ``process_support``):
a conftest module cannot be imported reliably by name when sub-directories have
their own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from fake_training import FAKE_TRAIN, fake_command, run_fusion_dd  # noqa: E402


@pytest.fixture(autouse=True)
def _single_threaded_blas(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test and every subprocess it starts: one BLAS thread (the machine has 2 cores)."""
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")


@pytest.fixture
def fake_train() -> Callable[..., list[str]]:
    """Builds the argv of a fake training: ``fake_train("--culprits", "A")``."""
    return fake_command


@pytest.fixture
def fake_train_path() -> Path:
    return FAKE_TRAIN


@pytest.fixture
def cli() -> Callable[..., object]:
    """Runs ``fusion-dd ARGS`` in a subprocess: ``cli("search", cwd=tmp_path)``."""
    return run_fusion_dd
