"""The candidate rule set, collected from whatever artifacts the user has.

Sources come in any mix: ``fusion_result.json`` files, GE graph dumps (text or
``atc --mode=5`` JSON), an existing ``fusion_switch.cfg`` (JSON or line format),
and plain lists of names (optionally ``Name Section`` per line), plus the YAML,
JSON and text that ``format_rules`` writes, so its output reads back. A file
given by name is read whatever its suffix; its kind is told by name where the
name is conventional and by content otherwise.

Artifacts written by CANN are evidence: they say which rules changed the network
(``fired``) and in which section each name lives. Lists written by people are
declarations: their names are checked against that evidence. A name given
without a section takes it from the artifacts, else from the catalog, else from
another source of the same run that names it with a section (a JSON switch
file, a ``Name Section`` list). A name none of them knows is refused only when it
looks like a misspelling of a known name (a few edits away), because CANN
silently ignores a misspelled entry; any other such name is a pass newer than
the catalog and is written into both sections, since CANN ignores an entry in
the section a pass does not belong to (never guess one section).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ....core.errors import UsageError
from ....core.rules import Rule, Section, catalog, catalog_section, name_problem
from ....core.safe_read import FUSION_RESULT_BYTES, GRAPH_DUMP_BYTES, SMALL_FILE_BYTES, loads_json, too_deep
from ....backends.cann.switch import parse_switch_text
from .common import read_text, sort_rules
from .discover import artifacts_in
from .fusion_result import FILE_NAME as FUSION_RESULT
from .fusion_result import looks_like_fusion_result, parse_fusion_result
from .graph import GraphModel, graph_from_json, graph_from_proto_text
from .validate import NameWarning, closest_names, likely_typos, validate_names

SourceKind = Literal["fusion_result", "graph_text", "graph_json", "switch_cfg", "rule_list"]

_SWITCH_LINE = re.compile(r"^\s*[^\s:#]+\s*:\s*(on|off)\s*$")
_PROTO_START = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*[{:]")
_RULE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_SWITCH_KEYS = {"Switch", "Priority", "ExceptionalPassOfO1Level"}
_SECTION_KEYS = {Section.GRAPH.value, Section.UB.value}


@dataclass(frozen=True)
class SourceInfo:
    """One file that was read, what it was taken for, and how many rules it gave."""

    path: str
    kind: SourceKind
    rules: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "rules": self.rules}


@dataclass
class CandidateSet:
    """The rules to search, with what the artifacts said about them.

    ``fired`` is None when no artifact could tell which rules changed the network;
    ``fired_sections`` are the sections the artifacts covered (a
    ``fusion_result.json`` without ``ub_fusion`` says nothing about UB rules).
    ``dropped`` holds declared rules left out because the artifacts show they never
    fired (``collect_candidates(..., keep_unfired=True)`` keeps them).
    """

    rules: list[Rule]
    fired: set[str] | None
    warnings: list[str]
    sources: list[SourceInfo]
    dropped: list[Rule] = field(default_factory=list)
    name_warnings: list[NameWarning] = field(default_factory=list)
    fired_sections: set[Section] = field(default_factory=set)
    #: Names no artifact, catalog or sectioned declaration placed: they are candidates in both sections.
    both_sections: list[str] = field(default_factory=list)

    def by_section(self) -> dict[Section, list[str]]:
        grouped: dict[Section, list[str]] = {Section.GRAPH: [], Section.UB: []}
        for rule in self.rules:
            grouped[rule.section].append(rule.name)
        return grouped


@dataclass
class _Evidence:
    """What one file says; combined across files by ``collect_candidates``."""

    kind: SourceKind
    rules: set[Rule] = field(default_factory=set)
    graph_names: set[str] = field(default_factory=set)  # pass_name entries: section decided later
    ub_names: set[str] = field(default_factory=set)
    sections: dict[str, set[Section]] = field(default_factory=dict)
    fired: set[str] | None = None
    covers: set[Section] = field(default_factory=set)  # sections ``fired`` speaks for
    declared: list[tuple[str, Section | None, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def collect_candidates(
    paths: Iterable[str | Path],
    *,
    keep_unfired: bool = False,
    declared_sections: Mapping[str, Section] | None = None,
) -> CandidateSet:
    """Read every source and combine them into one candidate set.

    ``declared_sections`` are sections the caller's own sources give names (the
    config's ``rules.GraphFusion`` / ``rules.UBFusion``): a name these files list
    without a section takes it from there before it is searched in both. Raises
    UsageError for a missing or malformed file and for a sectionless name that
    looks like a misspelling.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(artifacts_in(path))
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"{path}: no such file or directory")
    if not files:
        raise UsageError("no rule source given: name fusion_result.json, graph dumps or rule lists")

    evidence = [(path, read_source(path)) for path in dict.fromkeys(files)]
    return _combine(evidence, keep_unfired, declared_sections or {})


def read_source(path: Path) -> _Evidence:
    """Read one file as whatever kind it is."""
    name = path.name
    if name.startswith("fusion_result") and name.endswith(".json"):
        return _from_fusion_result(read_text(path, FUSION_RESULT, FUSION_RESULT_BYTES), str(path))
    text = read_text(path, "rule source", _size_limit(path))
    if name.startswith("ge_proto_") and path.suffix == ".txt":
        return _from_graph(graph_from_proto_text(text, str(path)), "graph_text")
    if path.suffix == ".cfg":
        return _from_switch(text, str(path))
    if path.suffix in (".yaml", ".yml"):
        return _from_rule_document(_load_yaml(text, str(path)), str(path))
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")) or path.suffix == ".json":
        return _from_json(text, str(path))
    lines = _significant_lines(text)
    if lines and all(_SWITCH_LINE.match(line) for line in lines):
        return _from_switch(text, str(path))
    if lines and _PROTO_START.match(lines[0]):
        return _from_graph(graph_from_proto_text(text, str(path)), "graph_text")
    return _from_rule_list(text, str(path))


def _size_limit(path: Path) -> int:
    """Switch files and YAML lists are written by people; any other file may be a graph dump."""
    if path.suffix in (".cfg", ".yaml", ".yml"):
        return SMALL_FILE_BYTES
    return GRAPH_DUMP_BYTES


def _significant_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


# --- one reader per kind ---------------------------------------------------------------


def _from_fusion_result(text: str, source: str) -> _Evidence:
    result = parse_fusion_result(text, source)
    evidence = _Evidence(
        "fusion_result",
        rules=set(result.fired()),
        fired=result.fired_names(),
        covers=result.sections(),
    )
    for rule in result.rules():
        evidence.sections.setdefault(rule.name, set()).add(rule.section)
    if not result.graphs:
        evidence.warnings.append(f"{source}: no compiled graph in this {FUSION_RESULT}")
    elif not evidence.rules:
        evidence.warnings.append(
            f"{source}: {len(result.rules())} pass(es) matched in {len(result.graphs)} graph(s) but none has "
            "effect_times > 0: no fusion rule changed this network, so none is a candidate"
        )
    return evidence


def _from_graph(model: GraphModel, kind: SourceKind) -> _Evidence:
    evidence = _Evidence(kind)
    if not model.has_provenance:
        evidence.warnings.append(
            f"{model.source}: no op carries pass_name or pass_name_ub, so this graph "
            f"dump ({len(model.ops)} ops) names no fusion rules; use the Build graph "
            f"of a fusion-on compile or its {FUSION_RESULT}"
        )
        return evidence
    evidence.ub_names = model.ub_names()
    evidence.graph_names = {name for op in model.ops for name in op.pass_name}
    evidence.fired = evidence.ub_names | evidence.graph_names
    evidence.covers = {Section.GRAPH, Section.UB}
    return evidence


def _from_json(text: str, source: str) -> _Evidence:
    try:
        document = loads_json(text, source, "rule source")
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and ('"graph_fusion"' in text or '"ub_fusion"' in text):
            return _from_fusion_result(text, source)  # graphs appended as objects
        raise UsageError(f"{source}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if isinstance(document, dict) and ("graph" in document or "op" in document):
        return _from_graph(graph_from_json(document, source), "graph_json")
    if looks_like_fusion_result(document):
        return _from_fusion_result(text, source)
    if isinstance(document, dict) and document and set(document) <= _SWITCH_KEYS:
        return _from_switch(text, source)
    if isinstance(document, dict) and ("rules" in document or (document and set(document) <= _SECTION_KEYS)):
        return _from_rule_document(document, source)
    if document == {}:
        evidence = _Evidence("rule_list")
        evidence.warnings.append(f"{source}: empty JSON object, no rules")
        return evidence
    raise UsageError(
        f"{source}: JSON of unknown kind; expected {FUSION_RESULT}, the JSON of "
        "atc --mode=5, a fusion_switch.cfg or a rule list {\"rules\": {\"GraphFusion\": [...]}}"
    )


def _from_switch(text: str, source: str) -> _Evidence:
    switch = parse_switch_text(text, source)
    evidence = _Evidence("switch_cfg")
    if switch.line_format:
        # The old format applies every line to both sections: the section is unknown.
        names = dict.fromkeys(name for name, _ in switch.names())
        evidence.declared = [(name, None, source) for name in names]
    else:
        evidence.declared = [(name, section, source) for name, section in switch.names()]
    if not evidence.declared:
        evidence.warnings.append(f"{source}: the switch file names no rule (only ALL or nothing)")
    return evidence


def _from_rule_list(text: str, source: str) -> _Evidence:
    evidence = _Evidence("rule_list")
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        tokens = line.split()
        where = f"{source}:{number}"
        if len(tokens) > 2 or not _RULE_NAME.match(tokens[0]):
            raise UsageError(
                f"{where}: expected one rule per line as 'Name' or 'Name Section', got {line!r}"
            )
        section = _parse_section(tokens[1], where) if len(tokens) == 2 else None
        evidence.declared.append((tokens[0], section, where))
    if not evidence.declared:
        evidence.warnings.append(f"{source}: the list names no rule")
    return evidence


def _from_rule_document(document: Any, source: str) -> _Evidence:
    """``{rules: {GraphFusion: [...], UBFusion: [...]}}`` as ``format_rules`` writes it."""
    key_prefix = ""
    if isinstance(document, dict) and "rules" in document:
        document, key_prefix = document["rules"], "rules."
    if not isinstance(document, dict):
        raise UsageError(
            f"{source}: expected rules: {{GraphFusion: [names], UBFusion: [names]}}"
        )
    evidence = _Evidence("rule_list")
    for key, names in document.items():
        where = f"{source}: {key_prefix}{key}"
        section = _parse_section(str(key), where)
        if names is None:
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UsageError(f"{where} must be a list of rule names")
        for name in names:
            if not _RULE_NAME.match(name):
                raise UsageError(f"{where}: {name!r} is not a rule name")
            evidence.declared.append((name, section, where))
    if not evidence.declared:
        evidence.warnings.append(f"{source}: the rule list names no rule")
    return evidence


def _load_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise too_deep(source, "rule list") from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else "?"
        raise UsageError(f"{source}:{line}: not valid YAML ({exc.problem})") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{source}: not valid YAML ({exc})") from None


def _parse_section(text: str, where: str) -> Section:
    try:
        return Section.parse(text)
    except ValueError:
        raise UsageError(f"{where}: unknown section {text!r}; use GraphFusion or UBFusion") from None


# --- combining ------------------------------------------------------------------------


def _combine(
    evidence: list[tuple[Path, _Evidence]], keep_unfired: bool, given_sections: Mapping[str, Section]
) -> CandidateSet:
    ub_names: set[str] = set()
    sections: dict[str, set[Section]] = {}
    fired: set[str] | None = None
    covered: set[Section] = set()
    for _, item in evidence:
        covered |= item.covers
        ub_names |= item.ub_names
        for name, found in item.sections.items():
            sections.setdefault(name, set()).update(found)
        if item.fired is not None:
            fired = (fired or set()) | item.fired
    for name in ub_names:
        sections.setdefault(name, set()).add(Section.UB)
    # A pass_name entry only says "some fusion": its section is the one stronger
    # evidence gives (pass_name_ub anywhere, fusion_result.json), else GraphFusion.
    weak = {
        name: sorted(sections.get(name, {Section.GRAPH}))
        for _, item in evidence
        for name in item.graph_names
    }
    strong = {name: set(found) for name, found in sections.items()}
    for name, found in weak.items():
        sections.setdefault(name, set()).update(found)

    # Sections people gave a name somewhere in this run (JSON switch file, "Name Section" lines).
    declared_sections: dict[str, set[Section]] = {name: {section} for name, section in given_sections.items()}
    for _, item in evidence:
        for name, section, _where in item.declared:
            if section is not None:
                declared_sections.setdefault(name, set()).add(section)

    chosen: set[Rule] = set()
    declared: list[Rule] = []
    both: list[str] = []
    sources: list[SourceInfo] = []
    warnings: list[str] = []
    for path, item in evidence:
        _check_names(path, item)
        from_artifact = set(item.rules)
        from_artifact |= {Rule(name, Section.UB) for name in item.ub_names}
        from_artifact |= {Rule(name, each) for name in item.graph_names for each in weak[name]}
        mine = set(from_artifact)
        for name, section, where in item.declared:
            resolved = (
                [section]
                if section is not None
                else resolve_sections(name, where, sections, fired, declared_sections)
            )
            if section is None and len(resolved) == 2 and not sections.get(name) and name not in declared_sections:
                both.append(name)
            for each in resolved:
                rule = Rule(name, each)
                mine.add(rule)
                declared.append(rule)
        chosen |= from_artifact
        sources.append(SourceInfo(str(path), item.kind, len(mine)))
        warnings.extend(item.warnings)

    dropped: list[Rule] = []
    for rule in dict.fromkeys(declared):
        never_fired = fired is not None and rule.section in covered and rule.name not in fired
        if never_fired and not keep_unfired:
            dropped.append(rule)
        else:
            chosen.add(rule)
    dropped = [rule for rule in sort_rules(dropped) if rule not in chosen]

    everything = sort_rules(chosen | set(dropped))
    # ``fired`` only speaks for the sections an artifact covered.
    # Weak sections are left out so that the catalog can contradict them.
    name_warnings = validate_names(
        [rule for rule in everything if rule.section in covered], fired, strong
    ) + validate_names(
        [rule for rule in everything if rule.section not in covered], None, strong
    )
    both = list(dict.fromkeys(both))
    if both:
        # One line for them all instead of an "unknown name" warning per rule and section.
        name_warnings = [w for w in name_warnings if not (w.kind == "unknown" and w.rule.name in both)]
    warnings.extend(str(warning) for warning in name_warnings)
    chosen_names = {rule.name for rule in chosen}
    both = [name for name in both if name in chosen_names]  # the rest never fired: said below
    if both:
        warnings.append(
            f"{len(both)} name(s) in neither the catalog nor any given artifact, so written into both "
            "sections of the switch file (CANN ignores an entry in a section the pass does not belong to): "
            + ", ".join(both)
        )
    if dropped:
        warnings.append(
            "left out of the candidates because they never fired: "
            + ", ".join(rule.name for rule in dropped)
        )
    return CandidateSet(
        rules=sort_rules(chosen),
        fired=fired,
        warnings=warnings,
        sources=sources,
        dropped=dropped,
        name_warnings=name_warnings,
        fired_sections=covered if fired is not None else set(),
        both_sections=both,
    )


def _check_names(path: Path, item: _Evidence) -> None:
    """Names read from an artifact get the checks hand-listed names get (no empty, blank or NUL name)."""
    names = [rule.name for rule in item.rules] + sorted(item.ub_names) + sorted(item.graph_names)
    names += list(item.sections) + [name for name, _, _ in item.declared]
    for name in names:
        problem = name_problem(name)
        if problem is not None:
            raise UsageError(f"{path}: rule name {problem}; the file is damaged or not a CANN artifact")


def resolve_sections(
    name: str,
    where: str,
    known_sections: Mapping[str, Iterable[Section]] | None = None,
    fired: Iterable[str] | None = None,
    declared_sections: Mapping[str, Iterable[Section]] | None = None,
) -> list[Section]:
    """The section(s) of a rule named without one; a UsageError when it looks misspelled.

    Artifact sections (``known_sections``) come first, then the catalog, then the
    sections other sources of the same run declare for the name. A name none of
    them knows is refused when it is a few edits from a known name (CANN would
    ignore the misspelling silently); otherwise it is a pass newer than the
    catalog and gets both sections, because CANN ignores an entry in the section
    a pass does not belong to. ``where`` names the file and line in the error.
    """
    known = dict(known_sections or {})
    if known.get(name):
        return sorted(set(known[name]), key=lambda section: section.value)
    section = catalog_section(name)
    if section is not None:
        return [section]
    declared = set((declared_sections or {}).get(name, ()))
    if declared:
        return sorted(declared, key=lambda section: section.value)
    vocabulary = set(catalog()) | set(known) | set(fired or ())
    typos = likely_typos(name, vocabulary)
    if typos:
        suggestions = closest_names(name, typos) or typos[:3]
        raise UsageError(
            f"{where}: rule {name!r} is not a known pass name and looks like a misspelling "
            f"(did you mean {', '.join(suggestions)}?); CANN silently ignores a misspelled name; if it "
            f"really is a pass newer than fusion-dd's catalog, write it as '{name} GraphFusion' or "
            f"'{name} UBFusion'"
        )
    return [Section.GRAPH, Section.UB]
