"""The fake training (tests/fakes/fake_train.py) and the CLI around it, shared by every test.

One home for what tests need to run fusion-dd against the fake training: where
the fake is, its command line, a wrapper that makes some trials misbehave, the
``fusion-dd`` CLI as a subprocess (blocking or in the background) or in-process
(for the further cases of a behaviour one subprocess already covers), and the
launch log the fake writes. ``tests/conftest.py`` exposes the same things as
fixtures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fusion_dd.runner.trial import TrialSpec
from tests.support import FAKES

FAKE_TRAIN = FAKES / "fake_train.py"
#: The interpreter of a fake training: ``-S`` (no site), since the fake needs only the
#: standard library. ``site`` runs every .pth file of the environment, and an editable
#: install's import hook alone costs about 30 ms of CPU in each process: more than
#: half of a fake training, which the suite starts over a thousand times.
FAKE_PYTHON = (sys.executable, "-S")


def fake_command(*args: str) -> list[str]:
    """The argv of one fake training with ``args`` (see the options in fake_train.py)."""
    return [*FAKE_PYTHON, str(FAKE_TRAIN), *args]


def fake_trial_spec(tmp_path: Path, name: str, *fake_args: str, **overrides: Any) -> TrialSpec:
    """One trial of the fake training under ``tmp_path/trials/name`` (``overrides``: TrialSpec fields)."""
    fields: dict[str, Any] = dict(
        trial_id=name,
        trial_dir=tmp_path / "trials" / name,
        command=fake_command(*fake_args),
        workdir="{trial_dir}",
        base_dir=tmp_path,
        env={"OPENBLAS_NUM_THREADS": "1"},
        device=("0",),
        device_env="ASCEND_DEVICE_ID",
        timeout=120.0,
        repeat=0,
        switch_text='{"Switch": {"GraphFusion": {"ALL": "off"}}}',
        grace=1.0,
    )
    fields.update(overrides)
    return TrialSpec(**fields)


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI subprocess: single-threaded BLAS, so two cores are enough.

    No HTML report (``FUSION_DD_HTML=0``): these tests check report.json and the journal;
    the tests of the page ask for it with ``FUSION_DD_HTML=1``.
    """
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "FUSION_DD_HTML": "0", **(extra or {})}


def run_fusion_dd(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """`fusion-dd ARGS` in a subprocess, output captured; ``env`` adds to the test environment."""
    return subprocess.run(
        [sys.executable, "-m", "fusion_dd.cli", *args],
        cwd=cwd,
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def call_fusion_dd(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """`fusion-dd ARGS` in this process, as ``run_fusion_dd`` would see it, without an interpreter start.

    The console script's own ``main`` runs with the subprocess's working directory
    and environment (``cli_env``), its exit status and both streams captured, and
    everything restored afterwards. A subprocess costs about 0.3 s of CPU in
    interpreter and imports; this costs milliseconds. For commands that train
    nothing and block on nothing (usage errors, ``--dry-run``, ``rules``, ``report``,
    ``status``, ``init``), where a test checks many cases of one behaviour: each
    behaviour keeps one case end to end through ``run_fusion_dd`` (a real process,
    as users start it), the others come here (``fusion_dd_runner``). ``timeout`` is
    accepted for the same signature; there is no process to time out.
    """
    import contextlib
    import io
    import signal

    from fusion_dd.cli import main

    saved_env, saved_cwd, environment = dict(os.environ), os.getcwd(), cli_env(env)
    saved_signals = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    stdout, stderr = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    try:
        os.environ.clear()
        os.environ.update(environment)
        os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                main(list(args))
            except SystemExit as exit_:
                code = exit_.code
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for signum, handler in saved_signals.items():
            signal.signal(signum, handler)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): the message on stderr, status 1
        stderr.write(f"{code}\n")
        code = 1
    return subprocess.CompletedProcess(["fusion-dd", *args], code, stdout.getvalue(), stderr.getvalue())


def fusion_dd_runner(end_to_end: bool):
    """``run_fusion_dd`` for the case of a behaviour that goes through a real process, else ``call_fusion_dd``."""
    return run_fusion_dd if end_to_end else call_fusion_dd


def start_fusion_dd(cwd: Path, *args: str, stdout: int | None = None, stderr: int | None = None) -> subprocess.Popen[str]:
    """`fusion-dd ARGS` in the background, for tests that signal or kill the coordinator."""
    return subprocess.Popen(
        [sys.executable, "-m", "fusion_dd.cli", *args],
        cwd=cwd,
        env=cli_env(),
        stdout=stdout,
        stderr=stderr,
        text=True,
    )


def sigkill_search_when(cwd: Path, journal: Path, ready, within: float = 120, args: tuple[str, ...] = ("search",)) -> None:
    """Start ``fusion-dd ARGS`` (a search) in ``cwd`` and SIGKILL it once ``ready(journal text)`` holds."""
    import signal
    import time

    coordinator = start_fusion_dd(cwd, *args, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + within
        while True:
            assert time.monotonic() < deadline, "the search never got going"
            text = journal.read_text() if journal.exists() else ""
            if ready(text):
                break
            time.sleep(0.05)
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(timeout=30)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait(timeout=30)


def interrupt_when_journaled(cwd: Path, args: list[str], journal: Path, marker: str) -> subprocess.CompletedProcess[str]:
    """Start ``fusion-dd ARGS``, SIGINT it as soon as ``marker`` is in its journal's text; its outcome."""
    import signal
    import time

    coordinator = start_fusion_dd(cwd, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not (journal.exists() and marker in journal.read_text()):
            assert coordinator.poll() is None, coordinator.communicate()
            assert time.monotonic() < deadline, f"{marker} was never journaled"
            time.sleep(0.005)
        coordinator.send_signal(signal.SIGINT)
        out, err = coordinator.communicate(timeout=120)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.communicate()
    return subprocess.CompletedProcess(args, coordinator.returncode, out, err)


def wrapper_script(path: Path, prelude: str) -> Path:
    """A Python script that runs ``prelude`` and then the fake training in the same process.

    ``prelude`` is Python lines (``os``, ``runpy``, ``sys`` and ``time`` are
    imported) that run first and may exit, to make some trials misbehave.
    """
    path.write_text(
        "import os, runpy, sys, time\n"
        + prelude
        + f"sys.argv = [{str(FAKE_TRAIN)!r}] + sys.argv[1:]\n"
        + f"runpy.run_path({str(FAKE_TRAIN)!r}, run_name='__main__')\n"
    )
    return path


def read_launches(log: Path) -> list[tuple[tuple[str, ...], int]]:
    """(rules switched on, repeat) of every launch the fake logged with ``--launch-log``, in order."""
    if not log.exists():
        return []
    return [(tuple(record["on"]), record["repeat"]) for record in map(json.loads, log.read_text().splitlines())]
