"""The search's prior: which candidates it asks about first, and which it pairs.

``search.suspects`` and (with ``search.guide: dumps``) a comparison of the
references' tensor dumps rank the candidates (``fusion_dd.analysis.guide``);
the ranking is journaled once as the ``guide`` record before the first
question, so that a resume or a replay asks the same questions. Later searches
of the all-culprits layer may be ranked by their failing fix candidate's dump
(``guide_refined``), journaled once each too. A replay reads only what was
journaled: deciding a guide compares files and may train.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..analysis import guide
from ..config.settings import SearchConfig
from ..core.errors import UsageError
from ..core.rules import Rule
from ..store.records import RecordType
from ..store.state import LOCALIZE_ROLE, TrialState
from .localizing import Localizing
from .ports import Context, Launch
from .required import RequiredPasses


def references_dump(config: SearchConfig) -> bool:
    """Whether the references themselves dump: guide on dumps, and dumping changes only the environment.

    ``localize.args`` or ``localize.command`` may cut a training short after the
    dumped step, so then the dumped runs are separate trainings (see ``Guidance``).
    """
    localize = config.localize
    return config.search.guide == "dumps" and localize is not None and localize.command is None and not localize.args


class Guidance:
    """The guide of one search: decided once (or read from the journal), refined per later search."""

    def __init__(
        self,
        context: Context,
        required: RequiredPasses,
        localizing: Localizing,
        launch: Launch,
        *,
        journal_only: bool = False,
    ) -> None:
        """``journal_only``: decide nothing, use what the journal holds (a replay)."""
        self._context = context
        self._required = required
        self._localizing = localizing
        self._launch = launch
        self._journal_only = journal_only

    def prior(self) -> list[Rule]:
        """The search's prior: the journaled ``guide`` record, made once before the first question.

        A search whose questions were asked before any guide record (an older
        version, or one started without a guide) replays them unguided.
        """
        context = self._context
        recorded = context.state.guide
        if recorded is None:
            if self._journal_only or context.state.lanes:
                return []
            settings = context.config.search
            if not settings.suspects and settings.guide != "dumps":
                return []
            dumps = self._dump_ranking() if settings.guide == "dumps" else None
            context.append(guide.record(settings.suspects, settings.guide, dumps, refine=references_dump(context.config)))
            recorded = context.state.guide
            assert recorded is not None
            for line in guide.summary_lines(recorded):
                context.events.message(line)
        elif list(recorded.get("suspects") or []) != list(context.config.search.suspects):
            context.events.message(
                "warning: search.suspects changed since this search started; its journaled ranking is kept "
                "(a resume replays the same questions; 'fusion-dd search --restart' starts over with the new one)"
            )
        return [context.rule_by_name[name] for name in recorded.get("ranking") or [] if name in context.rule_by_name]

    def partners(self) -> dict[Rule, list[Rule]]:
        """The journaled partners of the first suspects (``fusion_dd.analysis.guide.partners``), as rules."""
        dumps = (self._context.state.guide or {}).get("dumps") or {}
        return self._rules_of_partners(dumps.get("partners") or {})

    def _rules_of_partners(self, named: Mapping[str, Sequence[str]]) -> dict[Rule, list[Rule]]:
        by_name = self._context.rule_by_name
        return {
            by_name[rule]: [by_name[mate] for mate in mates if mate in by_name]
            for rule, mates in named.items()
            if rule in by_name
        }

    def refines(self) -> bool:
        """Whether later searches are ranked by their fix candidates' dumps.

        As the guide record says (journaled when the search started: the references
        and fix candidates dump as they train, so no extra training): a search
        journaled by a version without refinement replays without it, and a
        resume replays the journaled refinements whatever the config says now.
        """
        recorded = self._context.state.guide
        return bool(recorded and recorded.get("refine"))

    def refine(self, start: frozenset[Rule]) -> tuple[list[Rule], dict[Rule, list[Rule]]] | None:
        """A later search's own ranking: its failing start's dump against the baseline's, journaled once."""
        context = self._context
        names = tuple(sorted(rule.name for rule in start))
        recorded = context.state.refined.get(names)
        if recorded is None:
            recorded = None if self._journal_only else self._refined_record(names)
            if recorded is None:
                return None
            context.append(recorded)
            if recorded.get("ranking"):
                shown = ", ".join(recorded["ranking"][:4])
                context.events.message(
                    f"guide: the failing fix candidate's dump ranks {len(recorded['ranking'])} suspect(s): {shown}"
                )
        ranking = [context.rule_by_name[name] for name in recorded.get("ranking") or [] if name in context.rule_by_name]
        if not ranking:
            return None
        return ranking, self._rules_of_partners(recorded.get("partners") or {})

    def _refined_record(self, names: tuple[str, ...]) -> dict[str, Any] | None:
        """Compare the start's dumped training with the baseline's; a record with a reason when it cannot."""
        state = self._context.state
        cache = state.cache()
        trial, baseline = cache.get((frozenset(names), 0)), cache.get((self._required.names, 0))
        record: dict[str, Any] = {"type": RecordType.GUIDE_REFINED, "config": list(names)}
        dumped = state.dumped
        if trial is None or baseline is None or not (dumped(trial.trial_id) and dumped(baseline.trial_id)):
            return {**record, "reason": "no dumped training of this configuration"}
        record["trials"] = [trial.trial_id, baseline.trial_id]
        comparison, reason = self._compare(trial, baseline)
        if comparison is None:
            return {**record, "reason": reason}
        suspects = list((state.guide or {}).get("suspects") or [])  # as journaled, like the first ranking
        made = guide.refined(comparison, [rule.name for rule in self._context.rules], names, suspects)
        return {**made, "trials": record["trials"]}

    def _compare(self, trial: TrialState, reference: TrialState) -> tuple[Any, str | None]:
        """The dump comparison of two trials, or (None, why not): a failed comparison costs the guide, never the search."""
        try:
            return self._localizing.localizer().compare(trial, reference), None
        except UsageError as exc:
            return None, str(exc)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            return None, f"the comparison failed ({type(exc).__name__}: {exc})"

    def _dump_ranking(self) -> dict[str, Any]:
        """Compare the references' dumps and rank the candidates (trains two dumped runs if needed)."""
        context = self._context
        rules = [rule.name for rule in context.rules]
        keys = [(self._required.names, 0), (frozenset(rules), 0)]
        if references_dump(context.config):
            trials = [context.state.cache().get(key) for key in keys]
        else:
            cache = context.state.localize_cache()
            needed = [key for key in keys if key not in cache]
            if len(needed) > context.remaining_budget():
                return {"reason": "the budget leaves no room for the two dumped reference trainings"}
            if needed:
                context.events.message("guide: training the two references again with tensor dumps (localize.command/args)")
                self._launch(needed, None, LOCALIZE_ROLE)
            trials = [context.state.localize_cache().get(key) for key in keys]
        off, on = trials
        if off is None or on is None:
            return {"reason": "the dumped reference trainings did not finish"}
        evidence: dict[str, Any] = {"trials": [off.trial_id, on.trial_id]}
        comparison, reason = self._compare(on, off)
        if comparison is None:
            return {**evidence, "reason": reason}
        ranking, why = guide.rank(comparison, rules)
        evidence.update({"compared": len(comparison.pairs), "bad": len(comparison.bad), "ranking": ranking,
                         "evidence": why, "partners": guide.partners(comparison, rules, why)})
        if not ranking:
            evidence["reason"] = (
                f"no candidate rule made an op that differs beyond the thresholds ({len(comparison.pairs)} "
                "tensors compared)"
            )
        return evidence
