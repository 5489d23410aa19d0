"""Finding CANN artifacts in directories and loading graph dumps by path or glob.

A dump directory written with ``DUMP_GE_GRAPH`` holds one ``ge_proto_*.txt`` per
compile stage unless ``DUMP_GRAPH_LEVEL=3`` kept only the ``Build`` graph. The
``Build`` graph is the one that runs, so when a directory has ``*_Build.txt``
files the other stages are ignored: their passes are either in the final graph
anyway or were undone, and parsing every stage costs time.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ....core.errors import UsageError
from .fusion_result import FILE_NAME as FUSION_RESULT

if TYPE_CHECKING:
    from .graph import GraphModel

GRAPH_DUMP_GLOB = "ge_proto_*.txt"
BUILD_SUFFIX = "_Build.txt"


def graph_dumps_in(directory: Path) -> list[Path]:
    """The graph dumps under a directory, only the ``Build`` stage when present."""
    dumps = _files_named(directory, GRAPH_DUMP_GLOB)
    build = [path for path in dumps if path.name.endswith(BUILD_SUFFIX)]
    return build or dumps


def fusion_results_in(directory: Path) -> list[Path]:
    """Every ``fusion_result.json`` under a directory (e.g. ``$ASCEND_WORK_PATH/FE/<pid>/``).

    Told by content as well as by name: a training or a user may keep the file
    under another name (one per rank, per step, a copy beside the logs), and a
    result that is missed would leave the switch check unverified for no reason.
    A ``.json`` file is taken when its first bytes hold one of the keys only
    ``fusion_result.json`` writes; the reader then parses it in full (and names
    it as unreadable when it is not one after all).
    """
    return walk_files(directory, _is_fusion_result_entry)


#: The keys that mark a fusion_result.json in its first bytes, in every shape CANN writes.
_FUSION_RESULT_MARK = re.compile(rb'"(?:graph_fusion|ub_fusion|session_and_graph_id[^"]*)"\s*:')
_SNIFF_BYTES = 4096


def _is_fusion_result_entry(entry: os.DirEntry[str]) -> bool:
    if entry.name == FUSION_RESULT:
        return _exists(entry)
    if not entry.name.endswith(".json"):
        return False
    try:
        if not stat.S_ISREG(entry.stat().st_mode):
            return False  # never open a FIFO or a device just to look at it
        with open(entry.path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError:
        return False
    return _FUSION_RESULT_MARK.search(head) is not None


def _files_named(directory: Path, pattern: str) -> list[Path]:
    """Every non-directory under ``directory`` whose name matches, sorted.

    Iterative (``rglob`` recurses once per level, so a training that leaves a
    directory tree a thousand levels deep in its trial dir would crash the
    search); symlinked directories are not followed and unreadable ones are
    skipped, as ``rglob`` does. A FIFO or device with a matching name is kept, so
    that its reader names it instead of the file silently missing; a dangling
    symlink is skipped.
    """
    return walk_files(directory, lambda entry: fnmatch.fnmatchcase(entry.name, pattern) and _exists(entry))


def walk_files(directory: Path, keep: Callable[[os.DirEntry[str]], bool]) -> list[Path]:
    """Every non-directory below ``directory`` that ``keep`` accepts, sorted.

    Iterative, symlinked directories not followed, unreadable entries skipped
    (see ``_files_named``); shared by the artifact discovery and the tensor-dump scan.
    """
    found: list[Path] = []
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            with os.scandir(current) as entries:
                listed = list(entries)
        except OSError:
            continue
        for entry in listed:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(current / entry.name)
                elif keep(entry):
                    found.append(current / entry.name)
            except OSError:
                continue
    return sorted(found)


def _exists(entry: os.DirEntry[str]) -> bool:
    """A file, or a special file that is really there (a dangling symlink is not)."""
    try:
        return entry.is_file() or not entry.is_symlink()
    except OSError:
        return False


def artifacts_in(directory: Path) -> list[Path]:
    """The files a directory argument stands for; an error when there are none."""
    found = fusion_results_in(directory) + graph_dumps_in(directory)
    if not found:
        raise UsageError(
            f"{directory}: no {FUSION_RESULT} or {GRAPH_DUMP_GLOB} found in this "
            "directory; name the artifact files themselves"
        )
    return found


def graph_paths(patterns: Iterable[str | Path]) -> list[Path]:
    """Expand graph arguments: files, directories and glob patterns."""
    paths: list[Path] = []
    for pattern in patterns:
        text = str(pattern)
        if glob.has_magic(text) and not Path(text).exists():
            matches = sorted(Path(match) for match in glob.glob(text, recursive=True))
            if not matches:
                raise UsageError(f"{text}: no file matches this pattern")
            for match in matches:
                paths.extend(graph_dumps_in(match) if match.is_dir() else [match])
            continue
        path = Path(text)
        if path.is_dir():
            dumps = graph_dumps_in(path)
            if not dumps:
                raise UsageError(f"{path}: no {GRAPH_DUMP_GLOB} graph dump in this directory")
            paths.extend(dumps)
        elif path.exists():
            paths.append(path)
        else:
            raise UsageError(f"{path}: graph dump not found")
    return list(dict.fromkeys(paths))


def load_graphs(patterns: Iterable[str | Path]) -> list[GraphModel]:
    """Load every graph dump named by files, directories or glob patterns."""
    from .graph import load_graph  # here: the graph reader pulls protobuf, which finding files never needs

    return [load_graph(path) for path in graph_paths(patterns)]
