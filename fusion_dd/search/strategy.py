"""The one signature every minimizing strategy has, declared once.

The all-culprits layer (``fusion_dd.search.culprits``) and the guided wrapper
(``fusion_dd.search.guided``) call a strategy once per culprit set and hand it
what they know: the devices (``parallelism``), the answers so far (``known``)
and the bit masks of the configurations (``masks``). A strategy that has no use
for some of them still accepts them, so callers always pass everything and
never ask a function which keywords it takes: the contract is a type checked
statically (``Strategy``), not a signature probed at run time.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Protocol, TypeVar

from fusion_dd.search.lanes import Lanes
from fusion_dd.search.masks import Masks
from fusion_dd.search.oracle import Oracle, Outcome

T = TypeVar("T", bound=Hashable)


class Strategy(Protocol):
    """A minimizer: a 1-minimal failing subset of ``failing`` (default: the universe), by the oracle's answers.

    ``failing`` is known to fail and the empty configuration to pass (the
    engine's preconditions); neither is asked again. ``parallelism``: how many
    questions one round may ask (a number, or a ``LanePlan`` read each round).
    ``known``: answers the oracle already gave in this run (``Outcome``, or True
    for "fails"), to narrow where to look; only answers a replay would also have.
    ``masks``: the caller's bit masks for its configurations, only for speed.
    A strategy may ignore any of the keywords, but it must accept all of them.
    """

    def __call__(
        self,
        universe: Sequence[T],
        oracle: Oracle[T],
        failing: frozenset[T] | None = None,
        *,
        parallelism: Lanes = 1,
        known: Mapping[frozenset[T], Outcome | bool] | None = None,
        masks: Masks[T] | None = None,
    ) -> frozenset[T]: ...
