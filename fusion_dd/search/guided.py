"""A prior-guided minimizer: ask the suspects alone first, then search unguided.

``bisect`` sits near the bound of a search that knows nothing about the
candidates. A *prior* (the rules the references' tensor dumps point at, or the
user's hunch) is knowledge: if the culprit is the top suspect, one training of
that rule alone both finds it and proves it (a single rule that fails is a
1-minimal failing set, since the empty configuration passes).

So ``Guided`` wraps a minimizer. Per search it first asks the untested suspects
alone, in rank order, P per round on P devices, and returns the first that
fails. It gives up after ``patience`` passing suspects in a row and hands the
search to the wrapped minimizer over the universe in prior order (suspects
first). What a prior may cost is therefore bounded: at most ``patience``
trainings per search that found no suspect guilty. Patience is ``max(2, P)``
(one round on P devices, two trainings on one) and grows by that much for
every suspect already proven guilty in this run (the prior has been right
before, so the next culprits are probably among the next suspects too).

Why two on one device: the unguided search needs about log2(n) + 1
questions; with k suspects asked alone first, the rules left need as many
again, so a useless prior costs k trainings. Asking the first two alone keeps
that cost at two (the issue's "at most a few trainings") while a culprit
ranked first or second costs one or two questions instead of ~log2(n) + 1.

Guarantees are those of the wrapped minimizer: every answer is a failing
single (1-minimal by the precondition that the empty configuration passes) or
the wrapped minimizer's verified answer; the all-culprits layer still trains
and verifies the fix. Pure and deterministic: what is asked depends only on the
prior, the answers (``known`` included) and the lanes, so a replay against the
journal asks exactly the same questions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from fusion_dd.search.ddmin import ordered
from fusion_dd.search.lanes import Lanes, width_of
from fusion_dd.search.masks import Answers, Masks
from fusion_dd.search.oracle import Oracle, Outcome

T = TypeVar("T", bound=Hashable)


def _accepts(function: Callable[..., object], keyword: str) -> bool:
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in params)


def _fails(answer: object) -> bool | None:
    if answer is None:
        return None
    return answer is Outcome.FAIL or answer is True


def prior_order(universe: Sequence[T], prior: Iterable[T]) -> list[T]:
    """The universe with the prior's rules first (in prior order), the rest in universe order.

    Rules of the prior that are not candidates are ignored (a ranking from dumps
    may name rules the user did not list).
    """
    order = ordered(universe)
    inside = frozenset(order)
    first = [rule for rule in dict.fromkeys(prior) if rule in inside]
    taken = frozenset(first)
    return first + [rule for rule in order if rule not in taken]


class Guided(Generic[T]):
    """A minimizer with ddmin's signature that tries the prior's suspects alone first.

    ``prior``: the suspects, most suspicious first (any subset of the
    candidates; unknown ones are ignored). ``base``: the minimizer that takes
    over when the suspects run out or patience does (default ``bisect``).
    ``patience``: passing suspects in a row per search before giving up; None
    means ``max(2, P)``. Either way it grows by the same amount for every
    suspect already known to fail alone.
    """

    def __init__(
        self,
        prior: Sequence[T],
        base: Callable[..., frozenset] | None = None,
        patience: int | None = None,
    ) -> None:
        if base is None:
            from fusion_dd.search.bisection import bisect

            base = bisect
        if patience is not None and patience < 0:
            raise ValueError(f"patience must not be negative, got {patience}")
        self.prior: list[T] = list(dict.fromkeys(prior))
        self.base = base
        self.patience = patience
        self._base_known = _accepts(base, "known")
        self._base_lanes = _accepts(base, "parallelism")
        self._base_masks = _accepts(base, "masks")

    def __call__(
        self,
        universe: Sequence[T],
        oracle: Oracle[T],
        failing: frozenset[T] | None = None,
        *,
        parallelism: Lanes = 1,
        known: Mapping[frozenset[T], Outcome | bool] | None = None,
        masks: Masks[T] | None = None,
    ) -> frozenset[T]:
        width_of(parallelism)  # refuses a width below 1 before anything is asked
        order = ordered(universe)
        start = frozenset(ordered(order, failing))
        if len(start) <= 1:
            return start
        answers: dict[frozenset[T], bool] = {}
        for config, answer in (known or {}).items():
            answers[frozenset(config)] = bool(_fails(answer))
        found = self._suspects(start, oracle, parallelism, answers)
        if found is not None:
            return found
        return self._fallback(order, oracle, start, parallelism, known, answers)

    def _suspects(
        self,
        start: frozenset[T],
        oracle: Oracle[T],
        parallelism: Lanes,
        answers: dict[frozenset[T], bool],
    ) -> frozenset[T] | None:
        """The first suspect inside ``start`` that fails alone, asked P per round; None: none (yet)."""
        suspects = [rule for rule in self.prior if rule in start]
        guilty = sum(1 for rule in self.prior if answers.get(frozenset({rule})) is True)
        misses = 0
        pending: list[T] = []
        for rule in suspects:
            single = frozenset({rule})
            verdict = answers.get(single)
            if verdict is True:
                return single  # proven earlier (e.g. asked in the same round as another culprit)
            if verdict is None:
                pending.append(rule)
        while pending:
            width = width_of(parallelism)
            step = self.patience if self.patience is not None else max(2, width)
            allowed = step * (1 + guilty) - misses
            if allowed <= 0:
                return None
            batch = pending[: min(width, allowed)]
            pending = pending[len(batch) :]
            configs = [frozenset({rule}) for rule in batch]
            outcomes = oracle.outcomes(configs)
            hit: frozenset[T] | None = None
            for config, outcome in zip(configs, outcomes):
                fails = outcome is Outcome.FAIL
                answers[config] = fails
                if fails and hit is None:
                    hit = config
                if not fails:
                    misses += 1
            if hit is not None:
                return hit
        return None

    def _fallback(
        self,
        order: list[T],
        oracle: Oracle[T],
        start: frozenset[T],
        parallelism: Lanes,
        known: Mapping[frozenset[T], Outcome | bool] | None,
        answers: dict[frozenset[T], bool],
    ) -> frozenset[T]:
        """The wrapped minimizer over the universe in prior order, told every answer so far."""
        guided_order = prior_order(order, self.prior)
        extra: dict[str, object] = {}
        if self._base_lanes:
            extra["parallelism"] = parallelism
        if self._base_known:
            mask_source = known.masks if isinstance(known, Answers) else None
            masks = Masks(guided_order)
            if mask_source is not None and mask_source.starts_with(guided_order):
                masks = mask_source
            given: Answers[T] = Answers(masks)
            for config, fails in answers.items():
                given.note(config, fails)
            extra["known"] = given
            if self._base_masks:
                extra["masks"] = masks
        return frozenset(self.base(guided_order, oracle, start, **extra))


def guided(
    prior: Sequence[T] | None, base: Callable[..., frozenset], patience: int | None = None
) -> Callable[..., frozenset]:
    """``base`` itself when there is no prior (nothing changes), else ``Guided(prior, base)``."""
    if not prior:
        return base
    return Guided(list(prior), base, patience)
