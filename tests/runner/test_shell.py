"""Placeholders in the script of ``bash -c`` / ``sh -c``: quoted for where they stand, run by real shells."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fusion_dd.runner.shell import script_index, substitute_script
from fusion_dd.runner.trial import substitute_command

SEPARATOR = "\x1e"
# Each context prints the value once, followed by the separator. Comments and a
# here-string in between keep the scanner honest about what is not a quote.
CONTEXTS = [
    ("unquoted", "printf '%s\\036' {x}", lambda v: v),
    ("double quotes", 'printf \'%s\\036\' "{x}"', lambda v: v),
    ("single quotes", "printf '%s\\036' '{x}'", lambda v: v),
    ("command substitution", 'printf \'%s\\036\' "$(printf %s {x})"', lambda v: v.rstrip("\n")),
    ("double quotes in $()", 'v=$(printf %s "{x}"); printf \'%s\\036\' "$v"', lambda v: v.rstrip("\n")),
    ("backquotes", 'printf \'%s\\036\' "`printf %s {x}`"', lambda v: v.rstrip("\n")),
    ("double quotes in backquotes", 'v=`printf %s "{x}"`; printf \'%s\\036\' "$v"', lambda v: v.rstrip("\n")),
    ("single quotes in backquotes in double quotes", 'printf \'%s\\036\' "`printf %s \'{x}\'`"', lambda v: v.rstrip("\n")),
    ("comment", "# don't stop {x} here\nprintf '%s\\036' {x}", lambda v: v),
    ("here-document", "cat <<EOF\n{x}\nEOF\nprintf '\\036'", lambda v: v + "\n"),
    ("quoted here-document", "cat <<'EOF'\n{x}\nEOF\nprintf '\\036'", lambda v: v + "\n"),
]
BASH_ONLY = [
    ("ansi-c quotes", "printf '%s\\036' $'{x}'", lambda v: v),
    ("after a here-string", "cat <<<'x' >/dev/null; printf '%s\\036' \"{x}\"", lambda v: v),
]
VALUES = st.text(
    alphabet=st.sampled_from(list("ab /.-_$()`'\"\\;|&<>*?[]{}~#!=%\n\t") + ["é", "名"]), max_size=24
).filter(lambda v: "EOF" not in v.split("\n"))


def shells() -> list[str]:
    return [name for name in ("bash", "dash") if shutil.which(name)]


@pytest.mark.parametrize("shell", shells())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=VALUES)
@example(value='"{<(')  # bash 5.2 misparsed this one in "`...`" until '"' was escaped there
def test_every_value_reaches_the_script_literally(shell: str, value: str, tmp_path_factory) -> None:
    contexts = CONTEXTS + (BASH_ONLY if shell == "bash" else [])
    script = "\n".join(template for _, template, _ in contexts)
    argv = substitute_command([shell, "-c", script], {"x": value})
    cwd = tmp_path_factory.mktemp("sh")
    result = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=30)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.split(SEPARATOR)[:-1]
    assert dict(zip([name for name, _, _ in contexts], printed)) == {
        name: expected(value) for name, _, expected in contexts
    }
    assert result.stderr == ""
    assert not list(cwd.iterdir()), "the value ran a command"


@pytest.mark.parametrize(
    "argv, index",
    [
        (["bash", "-c", "s"], 2),
        (["/bin/sh", "-ec", "s", "name", "arg"], 2),
        (["bash", "-lc", "s"], 2),
        (["bash", "-o", "pipefail", "-c", "s"], 4),
        (["bash", "--norc", "-c", "s"], 3),
        (["bash", "--rcfile", "f", "-c", "s"], 4),
        (["bash", "-c", "--", "s"], 3),
        (["env", "FOO=1", "bash", "-c", "s"], 4),
        (["timeout", "9h", "zsh", "-c", "s"], 4),
        (["bash", "train.sh", "-c"], None),
        (["bash", "-e", "train.sh"], None),
        (["python", "-c", "s"], None),
        (["python", "train.py", "--shell", "bash"], None),
        (["bash", "-c"], None),
    ],
)
def test_the_script_of_a_shell_invocation_is_found(argv: list[str], index: int | None) -> None:
    assert script_index(argv) == index


def test_only_the_script_is_quoted() -> None:
    values = {"trial_dir": "/s $(x)/t", "device": "0"}
    argv = substitute_command(
        ["bash", "-c", "cd {trial_dir} && run --dev={device}", "{trial_dir}", "{trial_dir}"], values
    )
    assert argv == ["bash", "-c", "cd '/s $(x)/t' && run --dev=0", "/s $(x)/t", "/s $(x)/t"]
    python = ["python", "-c", "print('{trial_dir}')", "{trial_dir}"]
    assert substitute_command(python, values) == ["python", "-c", "print('/s $(x)/t')", "/s $(x)/t"]


def test_a_plain_path_is_left_as_it_is_in_every_context() -> None:
    script = "a {p} \"{p}\" '{p}' $({p}) `{p}`\ncat <<E\n{p}\nE"
    assert substitute_script(script, {"p": "/state/trials/0001"}) == script.replace("{p}", "/state/trials/0001")


def test_unknown_placeholders_and_comments_are_left_alone() -> None:
    assert substitute_script("awk '{print $1}' {other} # {x}", {"x": "a b"}) == "awk '{print $1}' {other} # {x}"
