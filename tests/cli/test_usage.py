"""Command-line mistakes are one line plus a usage hint, exit 2, never a traceback.

Run through a real subprocess, as a user meets them: typer 0.29 stopped
depending on click, and the old error path imported click and crashed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fusion_dd.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args, needle",
    [
        (["search", "--bogus"], "--bogus"),
        (["search", "--budget", "abc"], "--budget"),
        (["rules"], "sources"),
        (["no-such-command"], "no-such-command"),
        (["resume", "--jobs", "x"], "--jobs"),
        (["search", "--devices"], "--devices"),
    ],
)
def test_usage_errors_are_short_and_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    completed = _run(args, tmp_path)
    assert completed.returncode == 2, completed.stderr
    assert "Traceback" not in completed.stderr + completed.stdout
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 8
    assert lines[0].startswith("fusion-dd: error:") and needle.lower() in lines[0].lower()


@pytest.mark.parametrize(
    "command, flag", [("search", "--dry-run"), ("demo", "--no-localize"), ("report", "--json"), ("init", "--from")]
)
def test_a_flag_is_shown_without_a_value_in_the_help(tmp_path: Path, command: str, flag: str) -> None:
    # typer 0.29 shows <bool> beside a flag unless told otherwise, which reads as "--dry-run true",
    # and a repeatable option as <list[Path]>, which reads as if it took a Python list.
    completed = _run([command, "--help"], tmp_path)
    assert completed.returncode == 0, completed.stderr
    line = next(line for line in completed.stdout.splitlines() if flag in line)
    assert "<bool>" not in line and "BOOLEAN" not in line and "list[" not in line, line


def test_help_itself_is_shown_as_a_flag_on_every_help_page(tmp_path: Path) -> None:
    # The same typer 0.29 habit gave "--help <bool>" on every page, the root's included.
    from fusion_dd.cli import app

    pages = [[]] + [[command.name or command.callback.__name__] for command in app.registered_commands]
    for page in pages:
        completed = _run([*page, "--help"], tmp_path)
        assert completed.returncode == 0, completed.stderr
        line = next(line for line in completed.stdout.splitlines() if "--help" in line)
        assert "Show this message" in line and "<bool>" not in line and "BOOLEAN" not in line, (page, line)


def test_bare_command_prints_help_and_succeeds(tmp_path: Path) -> None:
    completed = _run([], tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert "search" in completed.stdout and "Traceback" not in completed.stderr


def test_the_in_process_cli_the_tests_use_answers_as_a_real_process_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``call_fusion_dd`` (tests/support/fake_training.py) stands in for a fusion-dd process in the
    further cases of a behaviour one real process already covers: the same exit status, stdout and
    stderr, with the caller's working directory and environment (AUTOFUSE_FLAGS set by the test)."""
    from tests.support.artifacts import fusion_result
    from tests.support.cli import CULPRIT, write_config
    from tests.support.fake_training import call_fusion_dd, run_fusion_dd

    write_config(tmp_path, "--culprits", CULPRIT)
    fusion_result(tmp_path / "fusion_result.json", {"ConvToFullyConnectionFusionPass": "GraphFusion"})
    for args in (["search", "--dry-run"], ["search", "--budget", "2"], ["status"], ["search", "--bogus"]):
        real, here = run_fusion_dd(*args, cwd=tmp_path), call_fusion_dd(*args, cwd=tmp_path)
        assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr), args
    monkeypatch.setenv("AUTOFUSE_FLAGS", "--enable_autofuse=true")
    real, here = run_fusion_dd("rules", "fusion_result.json", cwd=tmp_path), call_fusion_dd("rules", "fusion_result.json", cwd=tmp_path)
    assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr)
    assert "AutoFuse" in here.stdout, here.stdout  # the test's environment reached the command


def test_a_read_only_state_dir_is_one_line(tmp_path: Path) -> None:
    """An OSError on the state directory names the path and the errno text."""
    import os

    if os.geteuid() == 0:
        # root ignores permission bits: use a path below a regular file instead.
        blocker = tmp_path / "blocker"
        blocker.write_text("")
        state = blocker / "state"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        state = locked / "state"
    (tmp_path / "fusion-dd.yaml").write_text(
        "rules: {GraphFusion: [SoftmaxFusionPass]}\n"
        f"train: {{command: [{sys.executable!r}, '-c', 'print(1)']}}\n"
        "metric: {pattern: 'x(\\\\d)'}\n"
    )
    completed = _run(["search", "--state-dir", str(state)], tmp_path)
    assert completed.returncode == 2, completed.stderr
    assert "Traceback" not in completed.stderr
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("fusion-dd: error:") and str(state) in lines[0]


FROZEN_AT_EXIT = """
import gc, sys
from fusion_dd.cli import main
for argv in ({argv}):
    sys.argv = ["fusion-dd", "--version"]
    try:
        main(argv)
    except SystemExit as exc:
        print(exc.code, gc.get_freeze_count() > 0)
"""


@pytest.mark.parametrize(("argv", "frozen"), [("None,", "True"), ("['--version'],", "False")])
def test_the_entry_point_freezes_the_gc_for_a_fast_exit_and_a_caller_with_argv_keeps_it(
    tmp_path: Path, argv: str, frozen: str
) -> None:
    """The exit's full collections over every object cost about 0.1 s of CPU per command."""
    done = subprocess.run(
        [sys.executable, "-c", FROZEN_AT_EXIT.format(argv=argv)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split()[-2:] == ["0", frozen], done.stdout + done.stderr


@pytest.mark.parametrize("command, line", [
    ("status", "no search here (no journal.jsonl); start one with 'fusion-dd search'"),
    ("report", "no search here (no journal.jsonl); start one with 'fusion-dd search'"),
    ("resume", "no search to resume here; start one with 'fusion-dd search'"),
    ("localize", "no search to localize here; start one with 'fusion-dd search'"),
])
def test_a_command_on_a_folder_without_a_search_says_so_in_its_own_words(tmp_path, command, line):
    result = _run([command], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"fusion-dd: error: {(tmp_path / '.fusion-dd').resolve()}: {line}"]
    assert not (tmp_path / ".fusion-dd").exists(), "nothing may be written"


def test_the_cli_module_imports_no_engine_until_a_command_needs_it() -> None:
    """Every command, --help included, starts by importing fusion_dd.cli: the engine is not its start-up cost."""
    code = (
        "import sys, fusion_dd.cli\n"
        "loaded = [m for m in ('fusion_dd.coordinator.engine', 'fusion_dd.coordinator.replay') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
