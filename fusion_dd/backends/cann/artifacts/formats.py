"""Printing a candidate set for ``fusion-dd rules``.

The YAML pastes into ``fusion-dd.yaml`` as ``rules: {GraphFusion: [...], UBFusion:
[...]}``; the text form is one ``Name Section`` per line. Both carry the sources
and warnings as ``#`` comments and read back through ``collect_candidates``, so a
user can save the output, edit it, and give it back.
"""

from __future__ import annotations

import json

import yaml

from ....core.errors import UsageError
from ....core.rules import AUTOFUSE_POINTS, Section
from .candidates import CandidateSet

FORMATS = ("yaml", "txt", "json")
_AUTOFUSE_NOTE = "# AUTOFUSE_FLAGS switches AutoFuse on here: its switch points are candidates too"


def format_rules(candidates: CandidateSet, fmt: str = "yaml", autofuse: bool = False) -> str:
    """The candidate set as YAML, text or JSON.

    ``autofuse``: AutoFuse is on where the training runs (``AUTOFUSE_FLAGS``), so its
    switch points are offered as candidates too: no artifact lists them.
    """
    if fmt == "yaml":
        text = _yaml(candidates)
        return text + (f"  {Section.AUTOFUSE.value}: [{', '.join(AUTOFUSE_POINTS)}]  {_AUTOFUSE_NOTE}\n" if autofuse else "")
    if fmt == "txt":
        text = _txt(candidates)
        return text + "".join(f"{point} {Section.AUTOFUSE.value}\n" for point in AUTOFUSE_POINTS) if autofuse else text
    if fmt == "json":
        document = json.loads(_json(candidates))
        if autofuse:
            document["rules"][Section.AUTOFUSE.value] = list(AUTOFUSE_POINTS)
        return json.dumps(document, indent=2) + "\n"
    raise UsageError(f"unknown format {fmt!r}: use {', '.join(FORMATS)}")


def _sections(candidates: CandidateSet) -> dict[str, list[str]]:
    return {section.value: names for section, names in candidates.by_section().items()}


def _comments(candidates: CandidateSet) -> list[str]:
    lines = [
        f"# from {source.path} ({source.kind}): {source.rules} rule(s)"
        for source in candidates.sources
    ]
    lines.extend(f"# warning: {warning}" for warning in candidates.warnings)
    return lines


def _yaml(candidates: CandidateSet) -> str:
    body = yaml.safe_dump(
        {"rules": _sections(candidates)}, sort_keys=False, default_flow_style=False
    )
    return "\n".join(_comments(candidates) + [body.rstrip("\n")]) + "\n"


def _txt(candidates: CandidateSet) -> str:
    width = max((len(rule.name) for rule in candidates.rules), default=0)
    lines = _comments(candidates)
    lines.extend(f"{rule.name:<{width}} {rule.section.value}" for rule in candidates.rules)
    return "\n".join(lines) + "\n" if lines else ""


def _json(candidates: CandidateSet) -> str:
    document = {
        "rules": _sections(candidates),
        "fired": sorted(candidates.fired) if candidates.fired is not None else None,
        "fired_sections": sorted(section.value for section in candidates.fired_sections),
        "dropped": [rule.to_json() for rule in candidates.dropped],
        "both_sections": list(candidates.both_sections),
        "warnings": list(candidates.warnings),
        "sources": [source.to_json() for source in candidates.sources],
    }
    return json.dumps(document, indent=2) + "\n"

