"""CANN's AutoFuse switch points and the ``AUTOFUSE_FLAGS`` value that realizes them.

AutoFuse (CANN 8.3 and later) fuses operators beside the fusion rules of
``fusion_switch.cfg`` and is switched by the environment variable
``AUTOFUSE_FLAGS``: ``--key=value`` items separated by ``;``, e.g.
``--enable_autofuse=true;--autofuse_enable_pass=reduce,concat``.

* ``elemwise`` is AutoFuse as a whole: ``--enable_autofuse=true|false``
  (default false); when false every other AutoFuse control point is ignored;
* ``reduce`` and ``concat`` are its optional capabilities (off by default):
  on in ``--autofuse_enable_pass``, off in ``--autofuse_disable_pass``; one
  value must never be in both lists.

So a configuration with ``reduce`` or ``concat`` on but AutoFuse off cannot
be trained as asked: ``realize`` maps it to what CANN really does, and the
search keys its cache on that. The user's own ``AUTOFUSE_FLAGS`` (from the
config's ``train.env`` or the environment fusion-dd runs in) is kept: its
other items stay, the switch points that are candidates are ours.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...core.rules import AUTOFUSE_POINTS, Rule, Section

FLAGS_ENV = "AUTOFUSE_FLAGS"
ENABLE = "--enable_autofuse"
ENABLE_PASS = "--autofuse_enable_pass"
DISABLE_PASS = "--autofuse_disable_pass"
CAPABILITIES = tuple(point for point in AUTOFUSE_POINTS if point != "elemwise")


def parse_flags(text: str | None) -> dict[str, str]:
    """``--k=v;--k2=v2`` as an ordered dict (items without ``=`` keep an empty value)."""
    items: dict[str, str] = {}
    for item in (text or "").split(";"):
        item = item.strip()
        if not item:
            continue
        key, _, value = item.partition("=")
        items[key.strip()] = value.strip()
    return items


def format_flags(items: Mapping[str, str]) -> str:
    return ";".join(f"{key}={value}" if value != "" else key for key, value in items.items())


def _listed(items: Mapping[str, str], key: str) -> list[str]:
    return [value for value in (part.strip() for part in items.get(key, "").split(",")) if value]


def user_enables_autofuse(flags: str | None) -> bool:
    """Whether the user's ``AUTOFUSE_FLAGS`` switches AutoFuse on."""
    return parse_flags(flags).get(ENABLE, "false").lower() == "true"


def autofuse_points(rules: Iterable[Rule]) -> dict[str, Rule]:
    """The candidates that are AutoFuse switch points, by point name."""
    return {rule.name: rule for rule in rules if rule.section is Section.AUTOFUSE}


def realize(
    candidates: Iterable[Rule],
    enabled: Iterable[Rule],
    user_flags: str | None,
    points: Mapping[str, Rule] | None = None,
) -> frozenset[Rule]:
    """The configuration CANN really trains when ``enabled`` is asked for.

    Reduce and Concat fusion are AutoFuse capabilities: with AutoFuse off (the
    ``elemwise`` candidate off, or, when ``elemwise`` is no candidate, off in the
    user's flags) they do nothing, so they count as off.
    """
    points = autofuse_points(candidates) if points is None else points  # given: the caller's, for these candidates
    enabled_set = frozenset(enabled)
    if not points:
        return enabled_set
    on = points["elemwise"] in enabled_set if "elemwise" in points else user_enables_autofuse(user_flags)
    if on:
        return enabled_set
    return frozenset(rule for rule in enabled_set if not (rule.section is Section.AUTOFUSE and rule.name in CAPABILITIES))


def render_flags(candidates: Iterable[Rule], enabled: Iterable[Rule], user_flags: str | None) -> str | None:
    """The ``AUTOFUSE_FLAGS`` value for a configuration, or None when no candidate is an AutoFuse point.

    The user's items are kept (order included); the candidates' points are set
    as the configuration says; a capability is never left in both lists.
    """
    points = autofuse_points(candidates)
    if not points:
        return None
    enabled_set = frozenset(enabled)
    items = parse_flags(user_flags)
    if "elemwise" in points:
        items[ENABLE] = "true" if points["elemwise"] in enabled_set else "false"
    enable = [value for value in _listed(items, ENABLE_PASS) if value not in points]
    disable = [value for value in _listed(items, DISABLE_PASS) if value not in points]
    for point in CAPABILITIES:
        if point in points:
            (enable if points[point] in enabled_set else disable).append(point)
    for key, values in ((ENABLE_PASS, enable), (DISABLE_PASS, disable)):
        if values:
            items[key] = ",".join(values)
        else:
            items.pop(key, None)
    return format_flags(items)
