"""Checking rule names before a search spends trainings on them.

CANN silently ignores a misspelled name in ``fusion_switch.cfg``, so a search over
a misspelled rule would "prove" that the rule is harmless. Names are checked
against the rules that fired in the user's artifacts when there are any (they are
authoritative: CANN wrote them), otherwise against the shipped catalog, which is
incomplete: a name that fired is right even when the catalog lacks it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ....core.rules import Rule, Section, catalog

WarningKind = Literal["unknown", "never-fired", "section-mismatch"]
#: Unknown names for which the closest spellings are looked up (see ``validate_names``).
SUGGESTED_NAMES = 20


@dataclass(frozen=True)
class NameWarning:
    """One problem with one candidate rule; ``str()`` is the message for users."""

    rule: Rule
    kind: WarningKind
    message: str
    suggestions: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.message


def validate_names(
    rules: Iterable[Rule],
    fired: set[str] | None,
    known_sections: Mapping[str, Iterable[Section]] | None = None,
    suggest: int | None = SUGGESTED_NAMES,
) -> list[NameWarning]:
    """Warnings about candidate names, in the order of ``rules``.

    ``fired`` holds the names that changed the graph in the user's artifacts, or
    None when no artifact was given. ``known_sections`` holds the sections the
    artifacts gave each name; they beat the catalog when checking sections.
    Closest spellings are looked up for the first ``suggest`` unknown names only
    (None: all): they cost milliseconds each, and thousands of unknown names are
    reported as a count anyway.
    """
    suggested = 0
    known = catalog()
    artifact_sections = {
        name: set(sections) for name, sections in (known_sections or {}).items()
    }
    vocabulary = set(known) | set(artifact_sections) | set(fired or ())
    warnings: list[NameWarning] = []
    for rule in rules:
        name = rule.name
        did_fire = fired is not None and name in fired
        if not did_fire and name not in known and name not in artifact_sections:
            suggestions: tuple[str, ...] = ()
            if suggest is None or suggested < suggest:
                suggested += 1
                suggestions = closest_names(name, vocabulary)
            hint = f" (did you mean {', '.join(suggestions)}?)" if suggestions else ""
            warnings.append(
                NameWarning(
                    rule,
                    "unknown",
                    f"{name} ({rule.section}) is not a known CANN pass name{hint}; "
                    "CANN silently ignores a misspelled name",
                    suggestions,
                )
            )
        if fired is not None and not did_fire:
            warnings.append(
                NameWarning(
                    rule,
                    "never-fired",
                    f"{name} ({rule.section}) never fired in the given artifacts: "
                    "switching it cannot change this network",
                )
            )
        expected = artifact_sections.get(name) or (
            {known[name]} if name in known else set()
        )
        if expected and rule.section not in expected:
            other = " or ".join(sorted(section.value for section in expected))
            warnings.append(
                NameWarning(
                    rule,
                    "section-mismatch",
                    f"{name} is listed under {rule.section} but is a {other} pass; "
                    "CANN ignores an entry in the wrong section",
                )
            )
    return warnings


def closest_names(name: str, vocabulary: Iterable[str], limit: int = 3) -> tuple[str, ...]:
    """The known spellings closest to ``name``, ignoring case.

    Pass names share long suffixes (``...FusionPass``), so many unrelated names
    look similar; only the matches about as close as the best one are kept.
    """
    by_lower: dict[str, list[str]] = {}
    for known in sorted(set(vocabulary)):
        if known != name:
            by_lower.setdefault(known.lower(), []).append(known)
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(name.lower())
    scored = []
    for lower in by_lower:
        matcher.set_seq1(lower)
        if matcher.real_quick_ratio() >= _CUTOFF and matcher.quick_ratio() >= _CUTOFF:
            ratio = matcher.ratio()
            if ratio >= _CUTOFF:
                scored.append((ratio, lower))
    if not scored:
        return ()
    best = max(ratio for ratio, _ in scored)
    close = sorted((-ratio, lower) for ratio, lower in scored if ratio >= best - _MARGIN)
    return tuple(spelling for _, lower in close for spelling in by_lower[lower])[:limit]


_CUTOFF = 0.75
_MARGIN = 0.05


def likely_typos(name: str, vocabulary: Iterable[str]) -> tuple[str, ...]:
    """Known names within a few edits of ``name`` (ignoring case): what a misspelling looks like.

    Unlike ``closest_names`` (similar-looking names, for suggestions), this is the
    test that decides whether an unknown name is refused: a name two edits from a
    known pass (``LayerNormGradV3FusionPas``) is almost surely that pass misspelled,
    while a name far from every known one is more likely a pass newer than the
    catalog. The distance counts insertions, deletions, substitutions and swaps of
    neighbours; one edit is allowed for short names, two from eight characters on.
    """
    lowered = name.lower()
    limit = 1 if len(name) < 8 else 2
    found = []
    for known in sorted(set(vocabulary)):
        if known != name and _within_edits(lowered, known.lower(), limit):
            found.append(known)
    return tuple(found)


def _within_edits(a: str, b: str, limit: int) -> bool:
    """Optimal-string-alignment distance of ``a`` and ``b`` is at most ``limit``.

    Only the diagonal band of width ``limit`` is computed, and the rows stop as
    soon as every cell exceeds it, so comparing one name with a catalog of
    hundreds costs milliseconds.
    """
    if abs(len(a) - len(b)) > limit:
        return False
    over = limit + 1
    previous2: list[int] = []
    previous = [j if j <= limit else over for j in range(len(b) + 1)]
    for i in range(1, len(a) + 1):
        current = [over] * (len(b) + 1)
        current[0] = i if i <= limit else over
        for j in range(max(1, i - limit), min(len(b), i + limit) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            value = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                value = min(value, previous2[j - 2] + 1)
            current[j] = min(value, over)
        if min(current) > limit:
            return False
        previous2, previous = previous, current
    return previous[len(b)] <= limit
