"""Placeholders inside a shell script (``bash -c "... {switch_file} ..."``), quoted safely.

fusion-dd never runs a command through a shell itself, but a user may: the
command ``["bash", "-c", "python train.py --cfg {switch_file} > {trial_dir}/x.log"]``
hands the script to bash, which parses the substituted paths as shell text. A
state directory named ``run $(touch pwned)`` then ran a command, and one with a
space broke the script.

So in the script argument of a shell invocation (and only there: every other
argv element reaches the program as it is, never parsed) each value is quoted
for the spot it lands in:

* outside quotes (also inside ``$( )`` and backquotes): ``shlex.quote``;
* inside double quotes, and in the body of a here-document: ``$``, backquote,
  backslash (and ``"`` between double quotes) are escaped with a backslash. A
  ``shlex.quote`` there would be wrong *and* unsafe: the single quotes stay
  literal, and ``"'$(touch pwned)'"`` still runs the command;
* inside single quotes: each ``'`` becomes ``'\\''``;
* inside bash's ``$'...'``: backslash and ``'`` are escaped;
* in a here-document whose delimiter is quoted nothing expands, so the value
  goes in as it is;
* and inside backquotes, whatever the context there, ``$``, backquote and
  backslash are escaped once more per level (and ``"`` too when the backquotes
  stand between double quotes): a backquoted command loses one level of
  backslashes before it is parsed.

A comment is copied as it is (it never runs; an apostrophe in it must not
open a quote), so placeholders in it stay unreplaced.

The scanner follows the quoting rules of POSIX sh (with bash's ``$'...'``);
it is not a full parser: a ``)`` of a ``case`` pattern inside ``$( )`` ends
that command substitution early in its view, so a placeholder after it, still
inside the substitution, is quoted for the context around it; and a ``<<-``
here-document strips leading tabs from the value's lines too. The placeholder
syntax is :data:`fusion_dd.runner.trial`'s (``{name}`` of a known name); keep them in step.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence

#: Program names (the base name of the argv element) whose ``-c`` script is shell text.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})

_TOKEN = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# ``{{name}}`` is a literal ``{name}`` (the same escape as :func:`fusion_dd.runner.trial.substitute`).
_ESCAPED = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
#: Long options of bash/zsh that take the next argument as their value.
_LONG_WITH_VALUE = frozenset({"--rcfile", "--init-file"})
_HEREDOC = re.compile(r"<<(-?)[ \t]*")
_WORD_END = re.compile(r"[\s;|&<>()]")


def script_index(argv: Sequence[str]) -> int | None:
    """Index of the script argument of a shell invocation in ``argv``, or None.

    A shell is an element named like one of :data:`SHELLS` (any directory, so
    ``/bin/bash`` and wrappers such as ``env bash -c`` or ``timeout 9h sh -c``
    count), followed by options that include ``c`` (``-c``, ``-lc``, ``-ec``,
    ``-o pipefail -c``); its script is the first argument after the options.
    The arguments after the script (``$0``, ``$1``...) are data, not parsed.
    """
    for position, word in enumerate(argv):
        if os.path.basename(word) in SHELLS:
            index = _after_options(argv, position + 1)
            if index is not None:
                return index
    return None


def _after_options(argv: Sequence[str], index: int) -> int | None:
    command_mode = False
    while index < len(argv):
        arg = argv[index]
        if arg in ("--", "-"):
            index += 1
            break
        if arg.startswith("--"):
            index += 2 if arg in _LONG_WITH_VALUE else 1
            continue
        if len(arg) > 1 and arg[0] in "-+":
            letters = arg[1:]
            command_mode = command_mode or (arg[0] == "-" and "c" in letters)
            # -o NAME, +o NAME, -O SHOPT: the option's value is the next argument.
            index += 1 + letters.count("o") + letters.count("O")
            continue
        break
    return index if command_mode and index < len(argv) else None


def quote_plain(value: str) -> str:
    return shlex.quote(value)


def quote_double(value: str) -> str:
    return re.sub(r'([$`"\\])', r"\\\1", value)


def quote_heredoc(value: str) -> str:
    return re.sub(r"([$`\\])", r"\\\1", value)


def quote_single(value: str) -> str:
    return value.replace("'", "'\\''")


def quote_ansi_c(value: str) -> str:
    return re.sub(r"(['\\])", r"\\\1", value)


_QUOTERS = {
    "plain": quote_plain,
    "paren": quote_plain,
    "backtick": quote_plain,
    "double": quote_double,
    "heredoc": quote_heredoc,
    "heredoc_literal": lambda value: value,
    "single": quote_single,
    "ansi_c": quote_ansi_c,
}


def _quote(stack: Sequence[str], value: str) -> str:
    """``value`` quoted for the innermost context, then once more per enclosing backquote.

    The text of a backquoted command loses one level of backslashes (before
    ``$``, backquote and backslash, and also ``"`` when the backquotes stand
    between double quotes) before it is parsed, and a backquote in the value
    would end it early. A bare ``"`` in ``"`...`"`` is unspecified by POSIX and
    bash 5.2 misparses some (``'"{<('``), so it is escaped there too.
    """
    quoted = _QUOTERS[stack[-1]](value)
    for level in range(len(stack) - 1, 0, -1):
        if stack[level] == "backtick":
            special = r'([$`"\\])' if stack[level - 1] == "double" else r"([$`\\])"
            quoted = re.sub(special, r"\\\1", quoted)
    return quoted


def _substitute_line(line: str, values: Mapping[str, str], context: Sequence[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return "{" + match.group(1) + "}"
        name = match.group(2)
        return _quote(context, values[name]) if name in values else match.group(0)

    return re.sub(f"{_ESCAPED.pattern}|{_TOKEN.pattern}", replace, line)


def substitute_script(script: str, values: Mapping[str, str]) -> str:
    """Replace each known ``{name}`` in a shell script by its value, quoted for where it stands."""
    out: list[str] = []
    stack = ["plain"]
    pending: list[tuple[str, bool, bool]] = []  # here-documents opened on this line
    index = 0
    length = len(script)
    while index < length:
        escaped = _ESCAPED.match(script, index)
        if escaped:
            out.append("{" + escaped.group(1) + "}")
            index = escaped.end()
            continue
        match = _TOKEN.match(script, index)
        if match and match.group(1) in values:
            out.append(_quote(stack, values[match.group(1)]))
            index = match.end()
            continue
        char = script[index]
        top = stack[-1]
        step = 1
        if top == "single":
            if char == "'":
                stack.pop()
        elif top == "ansi_c":
            if char == "\\":
                step = 2
            elif char == "'":
                stack.pop()
        elif top == "double":
            if char == "\\":
                step = 2
            elif char == '"':
                stack.pop()
            elif script.startswith("$(", index):
                stack.append("paren")
                step = 2
            elif char == "`":
                stack.append("backtick")
        else:  # plain, paren, backtick: unquoted text
            heredoc = _HEREDOC.match(script, index) if char == "<" else None
            if char == "\\":
                step = 2
            elif char == "'":
                stack.append("single")
            elif script.startswith("$'", index):
                stack.append("ansi_c")
                step = 2
            elif char == '"':
                stack.append("double")
            elif script.startswith("$(", index):
                stack.append("paren")
                step = 2
            elif char == "(" and top == "paren":
                stack.append("paren")
            elif char == ")" and top == "paren":
                stack.pop()
            elif char == "`":
                if top == "backtick":
                    stack.pop()
                else:
                    stack.append("backtick")
            elif script.startswith("<<<", index):
                step = 3  # a here-string: its word is ordinary shell text
            elif heredoc is not None:
                step = _heredoc_word(script, heredoc, pending) - index
            elif char == "#" and (index == 0 or script[index - 1] in " \t\n;|&("):
                # A comment, copied as it is: it never runs, and an apostrophe
                # in it ("# don't") must not be read as an opening quote.
                newline = script.find("\n", index)
                step = (length if newline < 0 else newline) - index
            elif char == "\n" and pending:
                out.append(char)
                index = _heredoc_bodies(script, index + 1, pending, values, out, stack)
                pending = []
                continue
        out.append(script[index : index + step])
        index += step
    return "".join(out)


def _heredoc_word(script: str, opener: re.Match[str], pending: list[tuple[str, bool, bool]]) -> int:
    """Note the here-document opened by ``<<`` at ``opener``; returns the index after its word.

    Noted as (delimiter, strip leading tabs (``<<-``), delimiter quoted: the body is literal).
    """
    start = opener.end()
    end = start
    while end < len(script) and not _WORD_END.match(script, end):
        end += 2 if script[end] == "\\" else 1
    word = script[start:end]
    quoted = any(quote in word for quote in "'\"\\")
    delimiter = word.replace("\\", "").replace("'", "").replace('"', "")
    pending.append((delimiter, opener.group(1) == "-", quoted))
    return end


def _heredoc_bodies(
    script: str,
    index: int,
    pending: list[tuple[str, bool, bool]],
    values: Mapping[str, str],
    out: list[str],
    stack: Sequence[str],
) -> int:
    """Copy the bodies of the here-documents that start at ``index``; returns the index after them."""
    for delimiter, strip_tabs, quoted in pending:
        context = [*stack, "heredoc_literal" if quoted else "heredoc"]
        while index < len(script):
            end = script.find("\n", index)
            end = len(script) if end < 0 else end + 1
            line = script[index:end]
            check = line.rstrip("\n").lstrip("\t") if strip_tabs else line.rstrip("\n")
            if check == delimiter:
                out.append(line)
                index = end
                break
            out.append(_substitute_line(line, values, context))
            index = end
    return index
