"""What the non-CANN backends share: name lists shipped with fusion-dd, and the switch check.

ONNX Runtime and XLA both take a plain list of names to switch off, ignore an
unknown name silently (like CANN), and run some passes whatever the list says.
So a configuration is proven applied when the compiler's own evidence shows at
least one switched-off candidate did not run (ORT: absent from its log) or the
list reached it (XLA: its ``debug_options`` dump); a switched-off candidate that
still fired is a warning naming it (it cannot be switched off), and only a trial
where no switch at all took effect is "ignored", which stops the search.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

from ..core.rules import Rule
from ..search.choose_off import Chooser, choose_off_by_effect, default_choose_off


class PlainListBackend:
    """What a compiler taking a plain list of names to switch off does like any other.

    Every candidate is switched on or off by itself (no stage that gates others, unlike
    CANN's AutoFuse), so the configuration trained is the one asked for; which rule of an
    interacting set to switch off follows the fired-rule counts when the trials left any.
    """

    def realize(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> frozenset[Rule]:
        return frozenset(enabled)

    def chooser(self, effects: Mapping[Rule, int]) -> Chooser:
        return choose_off_by_effect(effects) if effects else default_choose_off


def shown_names(names: Sequence[str], limit: int = 5) -> str:
    """The first ``limit`` names and how many more: a one-line message stays one line."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


@lru_cache(maxsize=None)
def shipped_names(filename: str) -> frozenset[str]:
    """The names of a data file of the package (one a line, ``#`` comments)."""
    text = (resources.files("fusion_dd") / "data" / filename).read_text(encoding="utf-8")
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")
    )


def switches_unverified(reason: str, fired_off: Iterable[str] = (), effects: dict[str, int] | None = None) -> dict[str, Any]:
    """The trial left no evidence of whether the switches took effect; ``reason`` says what was missing."""
    return switch_facts(applied=None, fired_off=fired_off, unverified=reason, ignored="", effects=effects)


def switches_ignored(reason: str, fired_off: Iterable[str], effects: dict[str, int] | None) -> dict[str, Any]:
    """The trial shows that no switch took effect; ``reason`` says how and what to fix."""
    return switch_facts(applied=False, fired_off=fired_off, unverified="", ignored=reason, effects=effects)


def switches_applied(fired_off: Iterable[str], effects: dict[str, int] | None) -> dict[str, Any]:
    """At least one switch took effect (``fired_off``: those that fired anyway, a warning)."""
    return switch_facts(applied=True, fired_off=fired_off, unverified="", ignored="", effects=effects)


def switch_facts(
    *,
    applied: bool | None,
    fired_off: Iterable[str],
    unverified: str,
    ignored: str,
    effects: dict[str, int] | None,
) -> dict[str, Any]:
    """Facts for the journal in the engine's vocabulary (see ``fusion_dd.core.hooks``).

    ``applied``: None when the trial left no evidence, False when it shows no
    switch took effect, True when at least one did. ``fired_off``: switched-off
    candidates that fired anyway; with ``applied`` True they are a warning, never
    a stop. Backends call it through the three ``switches_*`` functions above.
    """
    fired = sorted(set(fired_off))
    warning = (
        f"{', '.join(fired)} fired although switched off (the compiler runs "
        f"{'it' if len(fired) == 1 else 'them'} whatever the list says: "
        f"{'it' if len(fired) == 1 else 'they'} cannot be switched off)"
    )
    facts: dict[str, Any] = {}
    if applied is None:
        facts["switch_check"] = {"status": "unverified", "message": unverified}
    elif not applied:
        facts["switch_check"] = {"status": "ignored", "message": ignored}
    else:
        message = f"the switches were applied, but {warning}" if fired else "the switches were applied"
        facts["switch_check"] = {"status": "applied", "message": message}
    if fired:
        facts["fired_although_off"] = fired
    if effects is not None:
        facts["effects"] = dict(sorted(effects.items()))
    return facts
