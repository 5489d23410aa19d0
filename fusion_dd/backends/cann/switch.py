"""Reading and writing CANN's ``fusion_switch.cfg``.

The writer is the one place that decides what a trial's compiler sees, so it
follows FE's parser exactly (docs/architecture.md 2.1):

* JSON ``{"Switch": {"GraphFusion": {...}, "UBFusion": {...}}}``; other allowed
  top-level keys are ``Priority`` and ``ExceptionalPassOfO1Level``; values are
  exactly ``"on"`` or ``"off"``.
* A base cfg's ``Priority`` and ``ExceptionalPassOfO1Level`` are copied into
  every trial's file, and FE refuses the whole file (so every compile) when
  either is malformed: they are checked here as FE checks them, so that the
  mistake is one line before any training rather than a search of failed ones.
* FE refuses an empty file, and in the line format any line that is not empty
  but holds no ``:`` (a line of spaces included).
* An exact pass name beats ``"ALL"``, and CANN's built-in config beats a user
  ``"ALL"``. So every candidate gets an explicit exact entry; ``ALL`` is never
  written unless the user's own base cfg has it.
* The old line format (``PassName:on`` per line, both sections) is read too.

The reader reports problems as ``UsageError`` naming the file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import UsageError
from ...core.rules import Rule, Section
from ...core.safe_read import SMALL_FILE_BYTES, loads_json, read_text

ALL = "ALL"
_TOP_LEVEL_KEYS = ("Switch", "Priority", "ExceptionalPassOfO1Level")
_VALUES = {"on": True, "off": False}
#: The priorities FE accepts in a user's cfg, per level: [lowest, past the highest).
_PRIORITY_RANGES = {"Top": (0, 1000), "Main": (1000, 2000), "Down": (2000, 3000)}
_WHOLE_NUMBER = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class SwitchFile:
    """The content of one switch file, as CANN would apply it.

    ``entries`` maps each section to its exact entries (``"ALL"`` included) as
    booleans. ``line_format`` is True when the file used the old per-line format,
    whose entries apply to both sections. ``extra`` keeps the other top-level keys
    (``Priority``, ``ExceptionalPassOfO1Level``) so a base cfg survives rewriting.
    """

    entries: Mapping[Section, Mapping[str, bool]] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    line_format: bool = False

    def state(self, name: str, section: Section) -> bool | None:
        """On/off for one pass under CANN's precedence; None when the file is silent."""
        section_entries = self.entries.get(section, {})
        if name in section_entries:
            return section_entries[name]
        return section_entries.get(ALL)

    def names(self) -> list[tuple[str, Section]]:
        """Every exact (non-``ALL``) entry with its section, in file order."""
        return [
            (name, section)
            for section, section_entries in self.entries.items()
            for name in section_entries
            if name != ALL
        ]


#: A UTF-8 byte-order mark, as editors on Windows write it at the start of a file.
_BOM = "\ufeff"


def parse_switch_text(text: str, source: str = "fusion_switch.cfg") -> SwitchFile:
    """Parse a switch file's text; ``source`` names it in error messages.

    CANN's JSON parser skips a leading byte-order mark, so a JSON file with one
    is read as CANN reads it. In the line format CANN would take the mark for
    part of the first pass name and never match it: that file is refused.
    """
    if text.startswith(_BOM):
        text = text[len(_BOM) :]
        if not text.lstrip().startswith("{"):
            raise UsageError(
                f"{source}:1: starts with a UTF-8 byte-order mark, which CANN reads as part of the first "
                "pass name; save the file as UTF-8 without BOM"
            )
    if not text.strip():
        raise UsageError(
            f"{source}: the file is empty, and CANN refuses an empty switch file; "
            'write {"Switch": {}} into it, or leave it out'
        )
    if text.lstrip().startswith("{"):
        return _parse_json(text, source)
    return _parse_lines(text, source)


def load_switch_file(path: str | Path) -> SwitchFile:
    """Read and parse a switch file, with a clear error when it is missing."""
    path = Path(path)
    return parse_switch_text(read_text(path, "switch file", SMALL_FILE_BYTES), str(path))


def _parse_json(text: str, source: str) -> SwitchFile:
    try:
        document = loads_json(text, source, "switch file", object_pairs_hook=_reject_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{source}:{exc.lineno}: not valid JSON ({exc.msg}); "
            'expected {"Switch": {"GraphFusion": {...}, "UBFusion": {...}}}'
        ) from None
    except _DuplicateKey as exc:
        raise UsageError(f"{source}: duplicate key {exc.args[0]!r}") from None
    if not isinstance(document, dict):
        raise UsageError(f"{source}: the top level must be a JSON object")
    for key in document:
        if key not in _TOP_LEVEL_KEYS:
            raise UsageError(
                f"{source}: unknown top-level key {key!r}; CANN accepts only "
                + ", ".join(_TOP_LEVEL_KEYS)
            )
    switch = document.get("Switch", {})
    if not isinstance(switch, dict):
        raise UsageError(f"{source}: 'Switch' must be an object")
    entries: dict[Section, dict[str, bool]] = {}
    for section_name, section_entries in switch.items():
        if section_name not in (Section.GRAPH.value, Section.UB.value):
            raise UsageError(
                f"{source}: unknown section 'Switch.{section_name}'; "
                "use GraphFusion or UBFusion"
            )
        if not isinstance(section_entries, dict):
            raise UsageError(f"{source}: 'Switch.{section_name}' must be an object")
        section = Section(section_name)
        entries[section] = {}
        for name, value in section_entries.items():
            if not isinstance(value, str) or value not in _VALUES:
                raise UsageError(
                    f"{source}: 'Switch.{section_name}.{name}' is {value!r}; "
                    'CANN accepts exactly "on" or "off"'
                )
            entries[section][name] = _VALUES[value]
    if "Priority" in document:
        _check_priority(document["Priority"], source)
    if "ExceptionalPassOfO1Level" in document:
        _check_exceptional(document["ExceptionalPassOfO1Level"], source)
    extra = {key: document[key] for key in document if key != "Switch"}
    return SwitchFile(entries=entries, extra=extra)


def _check_priority(priority: Any, source: str) -> None:
    """``Priority.{GraphFusion|UBFusion}.{Top|Main|Down}.{pass}: "<integer>"``, in the level's range."""
    if not isinstance(priority, dict):
        raise UsageError(f"{source}: 'Priority' must be an object with GraphFusion or UBFusion in it")
    for section_name, levels in priority.items():
        where = f"Priority.{section_name}"
        if section_name not in (Section.GRAPH.value, Section.UB.value):
            raise UsageError(f"{source}: unknown section '{where}'; use GraphFusion or UBFusion")
        if not isinstance(levels, dict):
            raise UsageError(f"{source}: '{where}' must be an object with Top, Main or Down in it")
        seen: set[str] = set()
        for level, passes in levels.items():
            if level not in _PRIORITY_RANGES:
                raise UsageError(f"{source}: unknown level '{where}.{level}'; CANN accepts Top, Main or Down")
            if not isinstance(passes, dict):
                raise UsageError(f"{source}: '{where}.{level}' must be an object of pass names and priorities")
            low, high = _PRIORITY_RANGES[level]
            for name, value in passes.items():
                key = f"{where}.{level}.{name}"
                if name.strip() in seen:
                    raise UsageError(f"{source}: '{name}' has two priorities in '{where}'; CANN refuses that")
                seen.add(name.strip())
                if not isinstance(value, str) or not _WHOLE_NUMBER.fullmatch(value.strip()):
                    raise UsageError(
                        f"{source}: '{key}' is {value!r}; CANN expects a whole number in quotes, e.g. \"{low}\""
                    )
                if not low <= int(value) < high:
                    raise UsageError(
                        f"{source}: '{key}' is {value.strip()}; CANN accepts a {level} priority "
                        f"from {low} to {high - 1} in your own cfg"
                    )


def _check_exceptional(passes: Any, source: str) -> None:
    """``ExceptionalPassOfO1Level``: a list of pass names (FE keeps each of them on)."""
    if not isinstance(passes, list) or not all(isinstance(name, str) for name in passes):
        raise UsageError(
            f"{source}: 'ExceptionalPassOfO1Level' must be a list of pass names, "
            f'e.g. ["SoftmaxFusionPass"]; got {json.dumps(passes)[:80]}'
        )


def exceptional_passes(switch: SwitchFile) -> frozenset[str]:
    """The passes a cfg lists under ``ExceptionalPassOfO1Level``.

    FE looks this list up before the file's switches, and keeps every pass in
    it on whatever the switches say: a candidate rule listed there cannot be
    switched off by any trial's file.
    """
    listed = switch.extra.get("ExceptionalPassOfO1Level", [])
    return frozenset(name for name in listed if isinstance(name, str) and name)


def _parse_lines(text: str, source: str) -> SwitchFile:
    seen: dict[str, bool] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not raw:
            continue  # FE skips only lines that are truly empty
        if not line:
            raise UsageError(
                f"{source}:{number}: a line of only spaces, which CANN refuses (it holds no ':'); delete it"
            )
        # As CANN's parser does: split at the first colon, trim both sides.
        name, sep, value = (part.strip() for part in line.partition(":"))
        if not sep or not name or value not in _VALUES:
            raise UsageError(
                f"{source}:{number}: expected 'PassName:on' or 'PassName:off', "
                f"got {line!r}"
            )
        if name in seen:
            raise UsageError(
                f"{source}:{number}: {name!r} is listed twice; CANN refuses duplicates"
            )
        seen[name] = _VALUES[value]
    entries = {Section.GRAPH: dict(seen), Section.UB: dict(seen)}
    return SwitchFile(entries=entries, line_format=True)


class _DuplicateKey(Exception):
    pass


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def render_switch(
    candidates: Iterable[Rule],
    enabled: Iterable[Rule],
    base: SwitchFile | None = None,
) -> str:
    """The JSON text of a switch file for one configuration.

    Every candidate gets an exact entry, ``"on"`` when it is in ``enabled``,
    ``"off"`` otherwise. Entries of the base cfg for rules outside the candidate
    set are kept (an old line-format base is written into both sections, which is
    what CANN does with it); everything else stays at CANN's default.
    """
    candidate_list = list(candidates)
    enabled_set = set(enabled)
    unknown = enabled_set.difference(candidate_list)
    if unknown:
        names = ", ".join(sorted(rule.name for rule in unknown))
        raise ValueError(f"enabled rules are not candidates: {names}")
    sections: dict[str, dict[str, str]] = {
        Section.GRAPH.value: {},
        Section.UB.value: {},
    }
    candidate_keys = {(rule.name, rule.section) for rule in candidate_list}
    if base is not None:
        for section, section_entries in base.entries.items():
            for name, on in section_entries.items():
                if (name, section) not in candidate_keys:
                    sections[section.value][name] = "on" if on else "off"
    for rule in sorted(candidate_list):
        if rule.section not in (Section.GRAPH, Section.UB):
            continue  # AutoFuse (AUTOFUSE_FLAGS) and other compilers' rules are never in this file
        sections[rule.section.value][rule.name] = (
            "on" if rule in enabled_set else "off"
        )
    document: dict[str, Any] = {
        "Switch": {name: entries for name, entries in sections.items() if entries}
    }
    if base is not None:
        document.update(base.extra)
    return json.dumps(document, indent=2) + "\n"
