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


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` by ``data``, durably (fsync before and after the rename)."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        dir_fd = os.open(folder or ".", os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_text_atomic(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode)


def write_json_atomic(path: str | os.PathLike[str], document: Any, mode: int = 0o644) -> None:
    """JSON (indented, keys sorted) written atomically, e.g. status.json of a trial."""
    write_bytes_atomic(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8"), mode)
