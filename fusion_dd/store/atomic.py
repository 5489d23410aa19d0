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
from typing import Any


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` by ``data``, durably (fsync before and after the rename).

    ``durable=False`` keeps the atomic rename (a reader never sees a torn file)
    but skips the fsyncs, for files that mean nothing after a crash of the
    machine anyway: a pid record, or a launch record that is rewritten when the
    trial starts again. They are written for every training, and on a busy
    disk an fsync costs milliseconds.
    """
    path = os.fspath(path)
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
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
    write_bytes_atomic(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8"), mode, durable)
