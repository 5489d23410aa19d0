"""Whether the search's first question trains beside the references, and which trainings that is.

The search layer says what the first question is before any answer
(``fusion_dd.search.first_question``); this decides, for one session, whether
to ask it there, so that a resumed session asks it exactly as the first one did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..config.settings import SearchConfig
from ..core.rules import Rule
from ..search.first_question import first_question, opening_width
from ..search.lanes import LanePlan, Lanes
from ..search.oracle import Outcome
from ..store.state import ConfigKey
from .ports import Context
from .references import References
from .settling import Settling
from .training_oracle import TrainingOracle


def early_passes_possible(config: SearchConfig) -> bool:
    """Whether the search's trainings may pass early, once the references have left their curves.

    A question trained beside the references cannot: no horizon exists yet, so it
    trains to its end, where after them it would most often stop at the horizon.
    Measured on the demo's five scenarios on 4 and 8 devices, that cost from 1 %
    fewer to 69 % more training-steps (more in 9 of 10 searches) and saved as
    many rounds as it took (3 and 3), so the first question rides along only where
    early passes are off (``early_stop.pass_at: off``, or no baseline training
    to take a curve from).
    """
    rule = config.early_stop
    return rule is not None and not rule.pass_at.off and config.score.baseline_metric is None


def planned_width(config: SearchConfig, devices: int, references: int) -> int | None:
    """The first question's width beside ``references`` reference trainings on ``devices``; None when it waits.

    It waits for them with fewer than three devices, references given as metrics
    (no training to ride along), early passes possible (``early_passes_possible``),
    or a guide made from the references' own dumps (the first question depends on them).
    """
    if not references or config.search.guide == "dumps" or early_passes_possible(config):
        return None
    return opening_width(devices, references)


def reference_trainings(config: SearchConfig) -> int:
    """The reference trainings a search starts with (``References.keys`` before any is trained again)."""
    score = config.score
    baseline = score.baseline_repeats if score.baseline_metric is None else 0
    return baseline + (score.all_on_repeats if score.all_on_metric is None else 0)


def first_question_beside_references(
    context: Context,
    references: References,
    settling: Settling,
    devices: int,
    oracle: TrainingOracle,
    candidates: Sequence[Rule],
    run: Callable[[Any, Lanes], object],
) -> tuple[int | None, list[ConfigKey]]:
    """The width of the first question when it trains beside the references, and its keys then.

    ``run(oracle, lanes)`` runs the all-culprits layer as the search will.
    (None, []) when the question is asked as usual (``planned_width``), or was
    asked already (then as the journal says it was). A session that finds the
    references trained asks its first question beside them only if an earlier
    session trained it there.
    """
    state = context.state
    if state.lanes:
        return (state.lanes[0] if state.opening else None), []
    config = context.config
    keys = [key for key, _ in references.keys(references.extra)]
    width = planned_width(config, devices, len(keys))
    if width is None:
        return None, []
    known = {frozenset(): Outcome.PASS, frozenset(candidates): Outcome.FAIL}
    wave = first_question(
        lambda probe: run(probe, LanePlan(lambda: width, opening=width)),
        known, repeats=config.search.confirm != "off",
    )  # fmt: skip
    riders = [(oracle.key_names(config), 0) for config in wave]
    if all(settling.settled(key) is not None for key in keys):
        started = {trial.key for trial in state.trials.values()}
        if not any(key in started for key in riders):
            return None, []  # trained without the first question beside them: it is asked as usual
    return width, riders
