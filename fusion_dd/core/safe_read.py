"""Reading files that others wrote: regular files only, bounded in size and nesting.

Artifacts come from compilers, trainings and users. A FIFO or ``/dev/zero``
named by mistake would block or be read forever, a sparse file of terabytes
would exhaust memory, and JSON nested 100,000 levels deep exhausts Python's
recursion (a ``RecursionError`` is no ``ValueError``, so it escaped every
reader). Every artifact reader therefore goes through here, and each of these
problems becomes one ``UsageError`` naming the file and what is wrong.

The limits are far above what real artifacts need (the largest graph dumps of
big networks, without weights, are a few hundred MB; a ``fusion_result.json``
holds a few KB per compiled graph), so they only stop mistakes and hostile files.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import UsageError

MiB = 1 << 20

#: ``ge_proto_*.txt`` and ``atc --mode=5`` JSON; also files whose kind is told by content.
GRAPH_DUMP_BYTES = 512 * MiB
#: ``fusion_result.json``: a few KB per compiled graph, so thousands of graphs fit.
FUSION_RESULT_BYTES = 64 * MiB
#: Switch files and rule lists that people write (a few hundred names at most).
SMALL_FILE_BYTES = 16 * MiB
#: No artifact nests deeper than about 20 levels (a mode-5 attr value list is ~8).
MAX_JSON_DEPTH = 100

# O_NONBLOCK: opening a FIFO must not wait for a writer (it does nothing to regular files).
_OPEN_FLAGS = os.O_RDONLY
for _flag in ("O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC"):
    _OPEN_FLAGS |= getattr(os, _flag, 0)

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def describe_size(size: int) -> str:
    """Bytes in the unit a person reads (``64 MiB``, ``4.0 GiB``)."""
    if size >= 1 << 30:
        return f"{size / (1 << 30):.1f} GiB"
    if size >= MiB:
        return f"{size / MiB:.0f} MiB" if size % MiB == 0 else f"{size / MiB:.1f} MiB"
    return f"{size} bytes"


def read_bytes(path: str | Path, what: str, limit: int) -> bytes:
    """The content of a regular file of at most ``limit`` bytes, or a one-line UsageError.

    The file is opened non-blocking so that a FIFO is refused instead of waiting
    for a writer; the type and size are checked on the open descriptor (no race
    with a file swapped in between), and a file that grows while it is read is
    refused too, so memory never exceeds ``limit``.
    """
    path = Path(path)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise UsageError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise UsageError(_open_error(path, what, exc)) from None
    try:
        info = os.fstat(fd)
        _require_regular(path, what, info.st_mode)  # before fdopen, which refuses directories itself
        if info.st_size > limit:
            raise UsageError(_too_big(path, what, describe_size(info.st_size), limit))
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(info.st_size + 1)
            while len(data) <= limit:
                more = handle.read(min(limit + 1 - len(data), 16 * MiB))
                if not more:
                    return data
                data += more
        except OSError as exc:
            raise UsageError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    raise UsageError(_too_big(path, what, "grew while it was read", limit))


def read_text(path: str | Path, what: str, limit: int) -> str:
    """``read_bytes`` decoded as UTF-8; a binary file is a one-line UsageError."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a UTF-8 text file (byte {exc.start}); expected a {what}") from None


def too_deep(source: str, what: str, limit: int = MAX_JSON_DEPTH) -> UsageError:
    """The error for a document nested beyond ``limit`` levels (or beyond Python's recursion)."""
    return UsageError(
        f"{source}: nested more than {limit} levels deep; a {what} never is, so fusion-dd does not read it"
    )


def loads_json(text: str, source: str, what: str, **kwargs: Any) -> Any:
    """``json.loads`` with the nesting bounded; ``JSONDecodeError`` is left to the caller's message."""
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise too_deep(source, what) from None
    check_depth(value, source, what)
    return value


def check_depth(value: Any, source: str, what: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse a decoded JSON value nested deeper than ``limit`` arrays/objects.

    Level by level with comprehensions, not recursively (it must not itself
    recurse too deep) and not node by node (a 100 MB graph dump has millions of
    nodes). Tuples are the key/value pairs of an ``object_pairs_hook`` and add no
    level of their own.
    """
    containers = (dict, list)
    level = [value] if isinstance(value, containers) else []
    depth = 1
    while level:
        if depth > limit:
            raise too_deep(source, what, limit)
        children = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, (dict, list, tuple))
        ]
        level = [
            item
            for child in children
            for item in (child if isinstance(child, tuple) else (child,))
            if isinstance(item, containers)
        ]
        depth += 1


def _require_regular(path: Path, what: str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a plain file")
    raise UsageError(f"{path}: not a regular file ({kind}); expected a {what} file")


def _open_error(path: Path, what: str, exc: OSError) -> str:
    """Name a special file (a socket cannot be opened) by its kind, else the errno text."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        try:
            _require_regular(path, what, mode)
        except UsageError as refused:
            return str(refused)
    return f"{path}: cannot read {what} ({exc.strerror or exc})"


def _too_big(path: Path, what: str, problem: str, limit: int) -> str:
    return (
        f"{path}: {problem}, more than the {describe_size(limit)} fusion-dd reads at most "
        f"of a {what}; is it the right file?"
    )
