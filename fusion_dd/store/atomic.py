"""Files that readers see whole or not at all: the one home of the atomic write.

Status records, reports and fix files are read by other processes (the
coordinator, ``fusion-dd status``, the user) while they may be rewritten, and
the machine may crash at any moment: a file is written beside its target,
fsynced, renamed over it, and the directory fsynced, so a reader sees the old
file or the new one, never a torn one.

Standard library only (``os``, ``json``): the supervisor imports it at the
start of every training and must start fast.
"""

from __future__ import annotations

import contextlib
import json
import os
from json.encoder import encode_basestring_ascii as _encode_string
from collections.abc import Iterable
from typing import Any


def write_bytes_atomic(
    path: str | os.PathLike[str], data: bytes | Iterable[bytes], mode: int = 0o644, durable: bool = True
) -> None:
    """Replace ``path`` by ``data``, durably (fsync before and after the rename).

    ``data`` may be a sequence of chunks: a large document written piece by piece
    is never held twice, as one string and as its bytes.

    ``durable=False`` keeps the atomic rename (a reader never sees a torn file)
    but skips the fsyncs, for files that mean nothing after a crash of the
    machine anyway: a pid record, or a launch record that is rewritten when the
    trial starts again. They are written for every training, and on a busy
    disk an fsync costs milliseconds.
    """
    path = os.fspath(path)
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            for chunk in (data,) if isinstance(data, bytes) else data:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        # A full or read-only disk: nothing half-written is left, and the error names the file
        # (os.write and os.fsync name none) with the errno's text.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OSError(exc.errno, exc.strerror or str(exc), path) from None
    if not durable:
        return
    with contextlib.suppress(OSError):
        dir_fd = os.open(folder or ".", os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_text_atomic(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode)


def write_json_atomic(path: str | os.PathLike[str], document: Any, mode: int = 0o644, durable: bool = True) -> None:
    """JSON (indented, keys sorted) written atomically, e.g. status.json of a trial."""
    write_bytes_atomic(path, (dumps_indented(document) + "\n").encode("utf-8"), mode, durable)


_SCALARS = (str, int, float, bool, type(None))


def dumps_indented(document: Any) -> str:
    """``json.dumps(document, indent=2, sort_keys=True)``, the same text, faster for big documents.

    The standard library writes indented JSON in pure Python, one call per value: the
    report of a 5,000-trial search (each trial's configuration a list of hundreds of
    names) took most of a second. Here a list or dict holding only scalars is written
    by the C encoder in one call, its separators carrying the indentation.
    """
    parts: list[str] = []
    _indented(document, 0, parts)
    return "".join(parts)


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return _encode_string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return json.dumps(value)  # numbers (NaN and the infinities spelled as json.dumps spells them) and the rest


def _indented(value: Any, depth: int, out: list[str]) -> None:
    if isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = "\n" + "  " * (depth + 1)
        if all(isinstance(key, str) for key in value):
            keys = sorted(value)
        else:  # keys json.dumps turns into strings: let it write this dict the standard way
            out.append(json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n" + "  " * depth))
            return
        out.append("{")
        separator = inner
        for key in keys:
            item = value[key]
            out.append(separator + _encode_string(key) + ": ")
            if isinstance(item, (dict, list, tuple)):
                _indented(item, depth + 1, out)
            else:
                out.append(_scalar(item))
            separator = "," + inner
        out.append("\n" + "  " * depth + "}")
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
            return
        inner = "\n" + "  " * (depth + 1)
        if all(isinstance(item, _SCALARS) for item in value):
            text = json.dumps(value, separators=("," + inner, ": "))
            out.append("[" + inner + text[1:-1] + "\n" + "  " * depth + "]")
            return
        out.append("[")
        separator = inner
        for item in value:
            out.append(separator)
            _indented(item, depth + 1, out)
            separator = "," + inner
        out.append("\n" + "  " * depth + "]")
    else:
        out.append(_scalar(value))


def unwritable_ancestor(path: str | os.PathLike[str]) -> str | None:
    """Where creating ``path`` (or writing into it, when it is a folder that exists) would fail, else None.

    The nearest folder of ``path`` that exists (``path`` itself when it does)
    and cannot be written into: a read-only mount, or no permission. Asked
    before work that ends by writing there, so that it fails at once, not last.
    """
    existing = os.fspath(path)
    while not os.path.exists(existing) and os.path.dirname(existing) not in ("", existing):
        existing = os.path.dirname(existing)
    if not os.path.exists(existing):
        existing = "."
    return None if os.access(existing, os.W_OK | os.X_OK) else existing
