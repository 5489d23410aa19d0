"""Plain option values converted without pydantic: a command starts in the time its own work takes.

typer 0.29 converts every option value that is not a boolean flag through a
pydantic ``TypeAdapter``, even a default of ``None``, and importing pydantic for
that costs more than half of what ``fusion-dd --help`` costs altogether: every
``status``, ``report`` and ``resume`` paid it before reading a single byte. The
options of fusion-dd are plain strings, whole numbers, numbers and paths with no
checks of typer's attached (no ``min``, no ``exists``, no custom parser), which
need no schema; nor do boolean flags (``--help`` among them), whose unset value
typer converts too. For those, a converter of our own is installed on the parameter
before typer builds its own; every other parameter, and every typer that does
not convert values this way (before 0.29), keeps typer's conversion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import typer

# ParameterInfo attributes that ask typer for checks beyond the plain conversion, with their defaults.
_PLAIN_DEFAULTS: dict[str, Any] = {
    "parser": None,
    "min": None,
    "max": None,
    "clamp": False,
    "exists": False,
    "file_okay": True,
    "dir_okay": True,
    "writable": False,
    "resolve_path": False,
    "allow_dash": False,
    "path_type": None,
    "formats": None,
}


def _whole(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.lstrip("+-").isdigit():
        raise ValueError(value)
    return int(text)


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(value)
    return float(value)


_TRUTH = {"true": True, "1": True, "yes": True, "y": True, "on": True,
          "false": False, "0": False, "no": False, "n": False, "off": False}


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return _TRUTH[str(value).strip().lower()]  # a KeyError is not a flag's value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _path(value: Any) -> Path:
    return value if isinstance(value, Path) else Path(value)


#: The converter of each plain annotation and the words of its error.
_CONVERTERS: dict[Any, tuple[Callable[[Any], Any], str]] = {
    bool: (_flag, "true or false"),
    str: (_text, "text"),
    int: (_whole, "a whole number (for example 3)"),
    float: (_number, "a number (for example 0.5)"),
    Path: (_path, "a path"),
}


class _PlainValue:
    """What typer's runtime conversion object offers (``coerce``), for one plain annotation."""

    def __init__(self, convert: Callable[[Any], Any], expected: str) -> None:
        self._convert = convert
        self._expected = expected

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return None
        try:
            return self._convert(value)
        except (TypeError, ValueError, KeyError):
            raise typer.BadParameter(f"{value!r} is not {self._expected}", ctx=ctx, param=param) from None


def install_plain_values(params: list[Any]) -> None:
    """Give each plain option of a command our converter, before typer builds its pydantic one."""
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", True) is not None:
            continue  # not typer 0.29's parameter, or already given a converter
        converter = _CONVERTERS.get(getattr(descriptor, "annotation", None))
        if converter is None or getattr(descriptor, "file_annotation", None) is not None:
            continue
        if param.multiple or param.nargs != 1:
            continue
        info = getattr(descriptor, "parameter_info", None)
        if info is None or any(getattr(info, name, default) != default for name, default in _PLAIN_DEFAULTS.items()):
            continue
        param._runtime_param = _PlainValue(*converter)
