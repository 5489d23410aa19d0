"""Pure search strategies: they ask an oracle about configurations and never run anything.

``STRATEGIES`` maps the names users may choose to minimizers, each a
``Strategy``: one declared signature ``(universe, oracle, failing=None, *,
parallelism, known, masks)`` that every strategy accepts whole (it may ignore
a keyword), so callers pass everything and never inspect a signature. ``find_culprits`` wraps
any of them to find every culprit set and a verified fix; with an oracle that
can repeat trainings it also guards every verdict against noise (``NoisePolicy``).
``Guided`` wraps a strategy with a prior (the top suspects asked first).
"""

from fusion_dd.search.bisection import bisect
from fusion_dd.search.choose_off import default_choose_off
from fusion_dd.search.culprits import CulpritSearch, CulpritSet, find_culprits
from fusion_dd.search.ddmin import ddmin
from fusion_dd.search.guided import Guided, guided
from fusion_dd.search.noise import Inconsistency, NoiseGuard, NoisePolicy
from fusion_dd.search.oracle import Observation, RepeatOracle, supports_repeats
from fusion_dd.search.strategy import Strategy

STRATEGIES: dict[str, Strategy] = {"ddmin": ddmin, "bisect": bisect}

DEFAULT_STRATEGY = "bisect"

__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "CulpritSearch",
    "CulpritSet",
    "Inconsistency",
    "NoiseGuard",
    "NoisePolicy",
    "Observation",
    "RepeatOracle",
    "Strategy",
    "bisect",
    "ddmin",
    "Guided",
    "guided",
    "default_choose_off",
    "find_culprits",
    "supports_repeats",
]
