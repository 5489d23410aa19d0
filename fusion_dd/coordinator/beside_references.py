"""Whether the search's first question trains beside the references, and which trainings that is.

The search layer says what the first question is before any answer
(``fusion_dd.search.first_question``); this decides, for one session, whether
to ask it there, so that a resumed session asks it exactly as the first one did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.rules import Rule
from ..search.first_question import first_question, opening_width
from ..search.lanes import LanePlan, Lanes
from ..search.oracle import Outcome
from ..store.state import ConfigKey
from .ports import Context
from .references import References
from .settling import Settling
from .training_oracle import TrainingOracle


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
    (None, []) when the question is asked as usual: fewer than three devices,
    references given as metrics (no training to ride along), a guide made from
    the references' own dumps (the first question depends on them), or a first
    question already asked (then as the journal says it was).
    A session that finds the references trained asks its first question
    beside them only if an earlier session trained it there.
    """
    state = context.state
    if state.lanes:
        return (state.lanes[0] if state.opening else None), []
    if context.config.search.guide == "dumps":
        return None, []
    keys = [key for key, _ in references.keys(references.extra)]
    width = opening_width(devices, len(keys))
    if width is None or not keys:
        return None, []  # references given as metrics: there is no round to ride along
    known = {frozenset(): Outcome.PASS, frozenset(candidates): Outcome.FAIL}
    wave = first_question(
        lambda probe: run(probe, LanePlan(lambda: width, opening=width)),
        known, repeats=context.config.search.confirm != "off",
    )  # fmt: skip
    riders = [(oracle.key_names(config), 0) for config in wave]
    if all(settling.settled(key) is not None for key in keys):
        started = {trial.key for trial in state.trials.values()}
        if not any(key in started for key in riders):
            return None, []  # trained without the first question beside them: it is asked as usual
    return width, riders
