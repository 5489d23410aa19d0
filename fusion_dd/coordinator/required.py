"""Required passes: the candidates without which the training cannot run at all.

When the all-off baseline crashes (or exits 125) in every training while all
candidates on runs, some candidates are not optional for this model. ddmin on
"does it run" finds a 1-minimal set of them; from then on they stay on in every
configuration trained, the baseline is them alone, and the search goes on among
the other candidates. Deterministic against the journal's cache, so a resume or
a replay finds the same set without training again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.rules import Rule
from ..runner.broken import log_tail
from ..search.ddmin import ddmin
from .ports import Context, Launch
from .settling import Settling
from ..store.state import ConfigKey
from .training_oracle import RunsOracle, runs


class RequiredPasses:
    """The required passes found so far (none until the baseline is seen not to run)."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self.rules: frozenset[Rule] = frozenset()
        # Their names: the key of the search's baseline.
        self.names: frozenset[str] = frozenset()
        self.entry: dict[str, Any] | None = None  # for the report: which, and the baseline's error
        self.searching = False  # while they are searched for

    def realize(self, config: frozenset[Rule]) -> frozenset[Rule]:
        """What is trained for a configuration: the backend's realization, required passes on."""
        config = frozenset(config)
        # The same object when nothing is added: the oracle names a configuration once per object.
        return self._context.backend.realize(self._context.rules, config | self.rules if self.rules else config)

    def baseline_cannot_run(self, keys: Sequence[tuple[ConfigKey, str]], settling: Settling) -> bool:
        """The all-off baseline crashed or exited 125 in every training while all-on ran: a required pass.

        ``keys``: the reference trainings, with their roles.
        """
        score = self._context.config.score
        if self.rules or score.baseline_metric is not None or score.all_on_metric is not None:
            return False
        baseline = [settling.settled(key) for key, role in keys if role == "baseline"]
        all_on = [settling.settled(key) for key, role in keys if role == "all_on"]
        return bool(baseline) and not any(runs(trial) for trial in baseline) and bool(all_on) and all(runs(t) for t in all_on)

    def find(self, settling: Settling, launch: Launch) -> frozenset[Rule]:
        """A 1-minimal set of candidates that must stay on for the training to run (ddmin on "it runs").

        Raises ``BudgetExhausted``.
        """
        context = self._context
        baseline = settling.settled((frozenset(), 0))
        assert baseline is not None
        context.events.message(
            f"the baseline (all candidates off, #{baseline.trial_id}) cannot run "
            f"({(baseline.finished or {}).get('reason', 'crash')}) while all candidates on runs: "
            "searching for the candidates that must stay on"
        )
        oracle = RunsOracle(
            threshold=None,
            crash_is_failure=False,
            cached=settling.settled,
            launch=launch,
            remaining_budget=context.remaining_budget,
            repeats=False,
            realize=lambda config: context.backend.realize(context.rules, config),
        )
        self.searching = True
        try:
            required = ddmin(context.rules, oracle, frozenset(context.rules))
        finally:
            self.searching = False
        log = Path(baseline.trial_dir) / "output.log"
        self.entry = {
            "rules": [rule.name for rule in context.rules if rule in required],
            "trial_id": baseline.trial_id,
            "reason": (baseline.finished or {}).get("reason"),
            "log": str(log),
            "log_tail": log_tail(context.state_dir / log, 5),
        }
        return required

    def keep_on(self, required: frozenset[Rule]) -> None:
        """From here on the required passes stay on: the baseline is them alone, the search is over the rest."""
        self.rules = frozenset(required)
        self.names = frozenset(rule.name for rule in required)
        assert self.entry is not None
        error = error_line(self.entry["log_tail"])
        self._context.events.message(
            f"required: {', '.join(self.entry['rules'])} must stay on for the training to run"
            + (f" (all off: {error})" if error else "")
            + "; kept on in every configuration, the search goes on among the other candidates"
        )


def error_line(lines: Sequence[str]) -> str | None:
    """The line of a log's tail that names the error (its last line mentioning one), else its last line."""
    named = [line.strip() for line in lines if re.search(r"error|exception|failure|fatal", line, re.IGNORECASE)]
    shown = named[-1] if named else (lines[-1].strip() if lines else None)
    return shown[:300] if shown else None
