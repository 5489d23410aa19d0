"""Option values converted without pydantic, with typer's own checks kept where an option asks for them.

The commands run in real subprocesses (a fresh interpreter shows what a command
imports); the converter is checked on a small typer app of its own, with the
installed typer, whichever version it is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
import typer

from fusion_dd.cli import _Command

_IMPORTS_OF_STATUS = """
import sys
from fusion_dd.cli import main
sys.argv = ["fusion-dd", "status", "--state-dir", sys.argv[1]]
try:
    main()
except SystemExit as stop:
    code = stop.code
print("exit", code, "pydantic", "pydantic" in sys.modules)
"""


def test_status_converts_its_options_without_importing_pydantic(tmp_path: Path) -> None:
    # typer 0.29 would import pydantic for --state-dir's value (and --help's unset one): more
    # than half of what `fusion-dd --help` costs, on every command.
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS_OF_STATUS, str(tmp_path / "none")],
        capture_output=True, text=True, timeout=120, check=False,
    )
    words = done.stdout.split()
    assert words[-4:] == ["exit", "2", "pydantic", "False"], done.stdout + done.stderr  # exit 2: no search there


def test_a_bad_whole_number_names_the_option_and_the_value(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fusion_dd.cli", "search", "--budget", "twelve"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2
    first = done.stderr.splitlines()[0]
    assert "--budget" in first and "'twelve'" in first and "Traceback" not in done.stderr


def _app(seen: dict[str, object]) -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.command(cls=_Command)
    def run(
        count: int = typer.Option(1, "--count"),
        ratio: float = typer.Option(0.5, "--ratio"),
        name: Optional[str] = typer.Option(None, "--name"),
        where: Optional[Path] = typer.Option(None, "--where"),
        at_least_two: int = typer.Option(2, "--at-least-two", min=2),
        dry: bool = typer.Option(False, "--dry"),
    ) -> None:
        seen.update(count=count, ratio=ratio, name=name, where=where, at_least_two=at_least_two, dry=dry)

    @app.command(cls=_Command)
    def other() -> None:  # two commands: typer then keeps the command names
        pass

    return app


def _invoke(args: list[str]) -> tuple[int, dict[str, object], str]:
    from typer.testing import CliRunner

    seen: dict[str, object] = {}
    result = CliRunner().invoke(_app(seen), ["run", *args])
    return result.exit_code, seen, result.output


def test_plain_values_convert_as_typer_converts_them() -> None:
    code, seen, output = _invoke(["--count", "7", "--ratio", "0.25", "--name", "x", "--where", "a/b", "--dry"])
    assert code == 0, output
    assert seen == {"count": 7, "ratio": 0.25, "name": "x", "where": Path("a/b"), "at_least_two": 2, "dry": True}
    assert isinstance(seen["count"], int) and isinstance(seen["where"], Path)


def test_defaults_stay_as_declared() -> None:
    code, seen, output = _invoke([])
    assert code == 0, output
    assert seen == {"count": 1, "ratio": 0.5, "name": None, "where": None, "at_least_two": 2, "dry": False}


@pytest.mark.parametrize(
    "args, option",
    [(["--count", "1.5"], "--count"), (["--count", "x"], "--count"), (["--ratio", "half"], "--ratio")],
)
def test_a_value_that_is_not_its_type_is_refused(args: list[str], option: str) -> None:
    code, _, output = _invoke(args)
    assert code == 2 and option in output and args[1] in output, output


def test_an_option_with_typer_checks_keeps_them() -> None:
    # min=2 is typer's check, not ours: the option keeps typer's conversion, range included.
    code, _, output = _invoke(["--at-least-two", "1"])
    assert code == 2 and "--at-least-two" in output, output
