"""The CANN backend: fusion_switch.cfg and AUTOFUSE_FLAGS, ASCEND_WORK_PATH, fusion_result.json.

Ascend's graph compiler reads a JSON switch file with a ``GraphFusion`` and a
``UBFusion`` section (docs/architecture.md 2.1); candidates carry their section as their
group. Every trial gets its own compiler work directory (``ASCEND_WORK_PATH``,
unless the user set one), because a shared one lets a trial reuse another's
fusion decisions. After a trial its ``fusion_result.json`` is the proof that
the switch file was applied, and its ``effect_times`` say how often each rule
fused; both become journaled facts through the ``fusion_result`` hook.
AutoFuse switch points (``rules.AutoFuse``) are rendered into ``AUTOFUSE_FLAGS``
instead (``fusion_dd.backends.cann.autofuse``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .artifacts import check_switch_applied, read_trial_results
from ...core.hooks import TrialFiles, missing_message
from ...core.rules import Rule, Section
from ...search.choose_off import Chooser, choose_off_by_effect, preferring
from .switch import SwitchFile, render_switch
from ..base import Rendered
from .autofuse import CAPABILITIES, FLAGS_ENV, autofuse_points, realize, render_flags

WORK_PATH_ENV = "ASCEND_WORK_PATH"

def _kernel_level(rule: object) -> bool:
    section = getattr(rule, "section", None)
    return section is Section.UB or (section is Section.AUTOFUSE and getattr(rule, "name", "") in CAPABILITIES)


# Switching off a UBFusion rule only stops kernels being merged in the unified
# buffer: the graph every other pass sees stays the same, while switching off a
# GraphFusion rewrite can change which later fusions match. Likewise AutoFuse's
# reduce or concat capability rather than AutoFuse as a whole (elemwise).
UB_FIRST = preferring(
    _kernel_level,
    "a UBFusion rule (or an AutoFuse capability), whose switch-off leaves the graph seen by the other "
    "passes unchanged",
)


def _explain_autofuse(choose: Chooser) -> Chooser:
    """Say why {elemwise, reduce} is a pair: reduce and concat work only with AutoFuse on."""

    def explained(culprit_set: frozenset) -> tuple[object, str]:
        rule, reason = choose(culprit_set)
        names = {getattr(r, "name", None) for r in culprit_set if getattr(r, "section", None) is Section.AUTOFUSE}
        needing = sorted(names & set(CAPABILITIES))
        if "elemwise" in names and needing:
            reason += (
                f" (AutoFuse's {' and '.join(needing)} fusion works only with AutoFuse on, "
                "--enable_autofuse=true, which is the elemwise switch point: the fault is in "
                f"{' or '.join(needing)} fusion)"
            )
        return rule, reason

    if hasattr(choose, "effects"):
        explained.effects = choose.effects  # type: ignore[attr-defined]
    return explained


class FusionResultHook:
    """``fusion_result.json`` of a trial: did the compiler obey the switch file, what fused how often."""

    name = "fusion_result"

    def __init__(self, candidates: Sequence[Rule], report_fired: bool = False) -> None:
        self.candidates = list(candidates)
        self._by_name = {rule.name: rule for rule in self.candidates}
        # Closure and rules.from: all_on need every rule that fired, candidate or not, and its
        # section; a search's trials journal only the candidates' counts, as they always did.
        self.report_fired = report_fired

    def collect(self, files: TrialFiles) -> dict[str, Any]:
        read = read_trial_results(files.trial_dir)
        results = read.results
        # ``enabled`` holds names: a name searched in both sections counts as on in both (a
        # rule in the section it does not belong to never fires, so this can hide no proof).
        enabled = [rule for rule in self.candidates if rule.name in files.enabled]
        check = check_switch_applied(results, self.candidates, enabled, read.unreadable)
        said: dict[str, Any] = {"message": check.message}
        if check.message == missing_message("fusion_result.json"):
            said = {"missing": "fusion_result.json"}  # the sentence is made when read (hooks.missing_message)
        facts: dict[str, Any] = {"switch_check": {"status": check.status, **said}}
        if read.unreadable:
            # Counts from part of the files would mislead the switch-off choice: none are journaled.
            if check.status != "ignored":  # an ignored switch stops the search with its own message
                path, reason = read.unreadable[0]
                facts["error"] = f"unreadable fusion_result.json {path}: {reason}"
            facts["unreadable"] = [{"path": path, "reason": reason} for path, reason in read.unreadable]
            return facts
        effects: dict[str, int] = {}
        for result in results:
            for stats in result.graphs.values():
                for rule, pass_stats in stats.items():
                    if rule.name in self._by_name and pass_stats.effect_times:
                        effects[rule.name] = effects.get(rule.name, 0) + pass_stats.effect_times
        if results:
            facts["files"] = len(results)
            facts["effects"] = dict(sorted(effects.items()))
        if results and self.report_fired:
            fired = sorted({rule for result in results for rule in result.fired()}, key=lambda r: (r.name, r.section.value))
            sections: dict[str, str] = {}
            for rule in fired:
                sections.setdefault(rule.name, rule.section.value)  # a name in both sections: the first
            facts["fired"] = sorted(sections)
            facts["fired_sections"] = sections
            off = {rule.name for rule in self.candidates if rule.name not in files.enabled}
            fired_off = sorted(off & set(sections))
            if fired_off:
                facts["fired_although_off"] = fired_off
        return facts


class CannBackend:
    """Ascend CANN's graph compiler (GE/FE)."""

    name = "cann"

    def __init__(self, base_cfg: SwitchFile | None = None, user_env: Mapping[str, str] | None = None) -> None:
        self.base_cfg = base_cfg
        # The AUTOFUSE_FLAGS the training would get without us: the config's, else ours.
        self.user_flags = (user_env or {}).get(FLAGS_ENV, os.environ.get(FLAGS_ENV))
        self._points_of: Sequence[Rule] | None = None  # the candidates self._points were found for
        self._points: dict[str, Rule] = {}

    def render(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> Rendered:
        enabled = list(enabled)
        flags = render_flags(candidates, enabled, self.user_flags)
        return Rendered(
            switch_text=render_switch(candidates, enabled, self.base_cfg),
            env_defaults={WORK_PATH_ENV: "{trial_dir}"},
            env={FLAGS_ENV: flags} if flags is not None else {},
        )

    def realize(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> frozenset[Rule]:
        # Asked for every configuration of a search, always with the same candidates:
        # finding their AutoFuse points once, not per call, keeps a replay of 5,000
        # trials from spending seconds on it.
        if candidates is not self._points_of:
            self._points_of, self._points = candidates, autofuse_points(candidates)
        return realize(candidates, enabled, self.user_flags, self._points)

    def hooks(self, candidates: Sequence[Rule]) -> Sequence[FusionResultHook]:
        return [FusionResultHook(candidates)]

    #: rules.from: all_on: every candidate "on" is what CANN does by default for a rule that
    #: fired with the switch file silent about it, so that training is the search's all-on one.
    all_on_by_default = True

    def closure_hooks(self, candidates: Sequence[Rule]) -> Sequence[FusionResultHook]:
        """Closure and rules.from: all_on: also every rule that fired and its section (fusion_result.json)."""
        return [FusionResultHook(candidates, report_fired=True)]

    def closure_group(self, name: str) -> Section | None:
        """A fired rule's group is the section fusion_result.json reported it in (``fired_sections``);
        a name without one can be no candidate."""
        return None

    def chooser(self, effects: Mapping[Rule, int]) -> Chooser:
        return _explain_autofuse(choose_off_by_effect(effects, fallback=UB_FIRST) if effects else UB_FIRST)
