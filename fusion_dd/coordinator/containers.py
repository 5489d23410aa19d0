"""Containers of named rules (ONNX Runtime's rule-based transformers): the search asks about the
container, and looks inside a culprit one for the rule that breaks the training.

A culprit set {container, others} fails with all the container's rules on and
passes with none; ddmin over the container's rules, each question the rest of
the set plus the container with those rules on, names a 1-minimal set of them.
The finer fix (the container on, one such rule off) replaces the coarse one when
it was trained and passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..core.rules import Rule
from ..search.culprits import CulpritSearch
from ..search.ddmin import ddmin
from ..search.oracle import Outcome
from .ports import Context
from .training_oracle import TrainingOracle


class Containers:
    """The backend's containers among the candidates, and the rules inside each."""

    def __init__(self, context: Context) -> None:
        self._context = context
        containers = getattr(context.backend, "containers", None)
        self.rules_of: dict[Rule, list[Rule]] = containers(context.rules) if containers is not None else {}
        self.inner = frozenset(rule for rules in self.rules_of.values() for rule in rules)

    def look_inside(self, result: CulpritSearch, oracle: TrainingOracle) -> CulpritSearch:
        """Name the rule inside each culprit container: ddmin over its rules, the rest of the set on.

        Raises ``BudgetExhausted``.
        """
        say = self._context.events.message
        culprits: list[Any] = []
        finer = set(result.fix)
        changed = False
        for culprit in result.culprit_sets:
            containers = [rule for rule in culprit.rules if rule in self.rules_of]
            if len(containers) != 1:
                culprits.append(culprit)
                continue
            container = containers[0]
            context = frozenset(culprit.rules - {container})
            inner = self.rules_of[container]
            say(f"{container} is a container of {len(inner)} rewrite rules: searching inside it for the rule")
            found = ddmin(inner, _WithContext(oracle, context), frozenset(inner))
            names = ", ".join(rule.name for rule in inner if rule in found)
            say(f"inside {container}: {names}")
            off = next(rule for rule in inner if rule in found)
            culprits.append(
                replace(
                    culprit,
                    rules=frozenset(context | found),
                    switched_off=frozenset({off}) if container in culprit.switched_off else culprit.switched_off,
                    reason=(culprit.reason + "; " if culprit.reason else "")
                    + f"found inside {container} (its rules searched one by one): {names}",
                )
            )
            if container in culprit.switched_off:
                finer |= {container, *inner}
                finer.discard(off)
                changed = True
        if not changed:
            return replace(result, culprit_sets=culprits)
        fix = frozenset(finer)
        for culprit in culprits:  # a rule of one container switched off must not stay on for another set
            fix -= culprit.switched_off
        verdict = oracle.outcomes([fix])[0]
        if verdict is not Outcome.PASS:
            say(
                "warning: the fix with only the rules found inside switched off did not pass; the fix switches "
                "the whole container off"
            )
            return replace(result, culprit_sets=[
                replace(new, switched_off=old.switched_off) for new, old in zip(culprits, result.culprit_sets)
            ])  # fmt: skip
        return replace(result, culprit_sets=culprits, fix=fix, fix_verified=True, fix_outcome=verdict)

    def report_entries(self, report: dict[str, Any]) -> None:
        """Name, in the report, the containers each culprit's rules were found inside."""
        container_of = {rule.name: container.name for container, rules in self.rules_of.items() for rule in rules}
        for culprit in report.get("culprits") or []:
            inside = sorted({container_of[rule["name"]] for rule in culprit["rules"] if rule["name"] in container_of})
            if inside:
                culprit["inside"] = inside  # its rules were found inside these containers


class _WithContext:
    """An oracle over a container's rules: every question also has ``context`` on (the rest of a culprit set)."""

    def __init__(self, oracle: TrainingOracle, context: frozenset[Rule]) -> None:
        self._oracle = oracle
        self._context = context

    def outcomes(self, configs: Sequence[frozenset[Rule]]) -> list[Outcome]:
        return self._oracle.outcomes([self._context | config for config in configs])

    def first_failing(self, configs: Sequence[frozenset[Rule]]) -> int | None:
        return self._oracle.first_failing([self._context | config for config in configs])
