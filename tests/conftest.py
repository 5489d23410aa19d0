"""Shared test setup: the markers' meaning, one BLAS thread, and the fake training as fixtures.

``tests`` is a package (every folder has an ``__init__.py``), so a test imports
its helpers as ``from tests.support.X import ...`` and same-named test files in
different folders do not clash. Helpers live in ``tests/support/`` (a conftest
cannot be imported reliably by name); the fixtures below expose the fake
training for tests that prefer fixtures.
"""

from __future__ import annotations

import compileall
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import fusion_dd

# Plain ``assert`` in the support modules reports its operands like in a test.
pytest.register_assert_rewrite("tests.support")

from tests.support.fake_training import FAKE_TRAIN, fake_command, run_fusion_dd  # noqa: E402

#: What a file that runs searches (or whole trainings) has among its names.
_SEARCHING = ("run_fusion_dd", "start_fusion_dd", "sigkill_search_when", "Engine", "start_trial", "prefetch")


def _runs_searches(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    if module is not None and any(name in vars(module) for name in _SEARCHING):
        return True
    info = getattr(item, "_fixtureinfo", None)
    chains = info.name2fixturedefs.values() if info is not None else ()
    return any(fixture.scope == "module" for chain in chains for fixture in chain)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers for every two cores.

    Most tests wait on trainings in subprocesses (their start, a timeout, a grace
    period), and with one worker per core the two cores sat idle for about a tenth of
    the suite. A third worker fills that time: the core suite took 167 s instead of
    177 s on two cores. Every test that waits for a process has a generous bound.
    """
    return max(1, (3 * (os.cpu_count() or 1) + 1) // 2)


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile fusion-dd once, before the workers start, where Python would not do it itself.

    The suite starts over a thousand Python processes that import fusion-dd (the CLI,
    the demo trainings, the dumping training). With ``PYTHONDONTWRITEBYTECODE`` set,
    no ``__pycache__`` is ever written, so each of them compiled the same 40-100
    modules from source again: about 0.15 s of CPU per CLI start, a fifth of the
    suite's CPU. Compiled here once (the controller only; a few ms when up to
    date), every process reads them; Python checks each pyc against its source's
    mtime, so an edited module is never run stale. Without that variable Python
    writes these files on the first import anyway; a read-only install is left as it is.

    The pytest processes themselves then write bytecode too: pytest caches the test
    modules it rewrites for ``assert`` only where Python may write, and rewriting all
    of them again took each worker about 4 s of CPU at every start. The processes the
    tests start keep the variable as it is.
    """
    if not sys.dont_write_bytecode:
        return
    if not hasattr(config, "workerinput"):
        compileall.compile_dir(Path(fusion_dd.__file__).parent, quiet=2)
    sys.dont_write_bytecode = False


#: The files handed out first, in this order. Files that keep both cores busy on their
#: own (the two demo files train on two processes) or compute most of their time alternate
#: with files that mostly wait (timeouts, kill graces, signals, sleeping trainings), so
#: that while one worker waits the other computes, rather than both waiting at once.
#: (CPU and wall time per file measured on two cores; a file not named keeps its place.)
_FIRST = (
    "tests/demo/test_demo_planted.py",
    "tests/runner/test_trial.py",
    "tests/cli/test_demo.py",
    "tests/runner/test_launcher.py",
    "tests/analysis/test_guide.py",
    "tests/cli/test_processes.py",
    "tests/cli/test_search.py",
    "tests/cli/test_training_faults.py",
    "tests/cli/test_preflight.py",
    "tests/cli/test_replay.py",
    "tests/cli/test_localize.py",
    "tests/report/test_html.py",
    "tests/cli/test_inputs.py",
    "tests/coordinator/test_estimate.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files that run searches first, those of ``_FIRST`` ahead (stable: otherwise in collection order)."""
    slow_files = {item.nodeid.split("::", 1)[0] for item in items if _runs_searches(item)}

    def key(item: pytest.Item) -> tuple[bool, int]:
        path = item.nodeid.split("::", 1)[0]
        return path not in slow_files, _FIRST.index(path) if path in _FIRST else len(_FIRST)

    items.sort(key=key)


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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A localhost dask cluster (scheduler and one worker per device) for the tests of one module;
    skipped, saying why, without dask. Imported only when asked for: dask is slow to import."""
    from tests.support.clusters import localhost_cluster

    yield from localhost_cluster(tmp_path_factory)
