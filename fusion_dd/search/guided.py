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

Two more kinds of knowledge, both optional:

- **Partners** (``partners``: suspect -> rules): an interacting pair hides from
  the dumps when one of its rules makes no bad op of its own (a pass that
  removes a cast changes what a fused kernel reads, and the kernel's op is the
  one that goes wrong). When the top suspect of a search passes alone, the
  dumps still say its op is where the numbers go wrong, so after the first
  round of singles the search asks the top suspect *together with* each of its
  partners (the rules of the ops around its bad op, from the graph dump), P per
  round, with a patience of its own (so a prior with partners may cost twice
  the patience when it misleads). A failing pair ``{s, p}`` is proven
  1-minimal by ``{p}`` passing alone (asked; ``{s}`` passed already); if ``{p}``
  fails, ``{p}`` is the answer.
- **Refinement** (``refine``: start -> ranking and partners, or None): a later
  search starts inside a failing fix candidate, whose training may have dumped
  tensors too; its comparison against the baseline's dump ranks the rules of
  *that* failure (the first bad op is no longer hidden behind the culprit just
  switched off). ``refine`` is asked once per search that does not start from
  the whole universe; what it answers must be a function of the start alone
  (the engine journals it), so a replay asks the same questions.

Guarantees are those of the wrapped minimizer: every answer is a failing
single (1-minimal by the precondition that the empty configuration passes), a
failing pair whose two singles pass, or the wrapped minimizer's verified
answer; the all-culprits layer still trains and verifies the fix. Pure and
deterministic: what is asked depends only on the prior, the partners, what
``refine`` answers, the answers (``known`` included) and the lanes, so a replay
against the journal asks exactly the same questions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from fusion_dd.search.ddmin import ordered
from fusion_dd.search.lanes import Lanes, width_of
from fusion_dd.search.masks import Answers, Masks
from fusion_dd.search.oracle import Oracle, Outcome
from fusion_dd.search.strategy import Strategy

T = TypeVar("T", bound=Hashable)


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
    """A ``Strategy`` that tries the prior's suspects alone first.

    ``prior``: the suspects, most suspicious first (any subset of the
    candidates; unknown ones are ignored). ``base``: the minimizer that takes
    over when the suspects run out or patience does (default ``bisect``).
    ``patience``: passing suspects in a row per search before giving up; None
    means ``max(2, P)``. Either way it grows by the same amount for every
    suspect already known to fail alone. Pairs of the top suspect with its
    ``partners`` get the same patience again (not grown). ``refine``: see the
    module docstring.
    """

    def __init__(
        self,
        prior: Sequence[T],
        base: Strategy | None = None,
        patience: int | None = None,
        partners: Mapping[T, Sequence[T]] | None = None,
        refine: Callable[[frozenset[T]], tuple[Sequence[T], Mapping[T, Sequence[T]]] | None] | None = None,
    ) -> None:
        if base is None:
            from fusion_dd.search.bisection import bisect

            base = bisect
        if patience is not None and patience < 0:
            raise ValueError(f"patience must not be negative, got {patience}")
        self.prior: list[T] = list(dict.fromkeys(prior))
        self.base = base
        self.patience = patience
        self.partners: dict[T, list[T]] = {
            rule: list(dict.fromkeys(mates)) for rule, mates in (partners or {}).items()
        }
        self.refine = refine

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
        # Partners describe the failure whose dump they come from: the prior's belong to the
        # first search (the whole universe), a later search has only its refinement's.
        first = start == frozenset(order)
        ranking: Sequence[T] = self.prior
        partners: Mapping[T, Sequence[T]] = self.partners if first else {}
        if self.refine is not None and not first:
            refined = self.refine(start)
            if refined is not None:
                ranking = list(dict.fromkeys([*refined[0], *self.prior]))
                partners = {rule: list(mates) for rule, mates in refined[1].items()}
        found = self._suspects(start, oracle, parallelism, answers, ranking, partners)
        if found is not None:
            return found
        return self._fallback(order, oracle, start, parallelism, known, answers, ranking)

    def _suspects(
        self,
        start: frozenset[T],
        oracle: Oracle[T],
        parallelism: Lanes,
        answers: dict[frozenset[T], bool],
        ranking: Sequence[T],
        partners: Mapping[T, Sequence[T]],
    ) -> frozenset[T] | None:
        """The first suspect inside ``start`` that fails alone (or with a partner), P per round; None: none (yet)."""
        suspects = [rule for rule in ranking if rule in start]
        guilty = sum(1 for rule in ranking if answers.get(frozenset({rule})) is True)
        misses = 0
        paired = False
        pending: list[T] = []
        for rule in suspects:
            single = frozenset({rule})
            verdict = answers.get(single)
            if verdict is True:
                return single  # proven earlier (e.g. asked in the same round as another culprit)
            if verdict is None:
                pending.append(rule)
        while pending or not paired:
            width = width_of(parallelism)
            step = self.patience if self.patience is not None else max(2, width)
            allowed = step * (1 + guilty) - misses
            if not paired and (not pending or misses or allowed <= 0):
                # After the first round of singles (or with none left to ask): the top
                # suspect with each of its partners, once per search, with a patience of
                # its own (one round on P devices, two pairs on one).
                paired = True
                found, _ = self._pairs(start, oracle, width, step, answers, suspects, partners)
                if found is not None:
                    return found
                continue
            if allowed <= 0:
                return None
            batch = pending[: min(width, allowed)]
            pending = pending[len(batch) :]
            hit, passed = _ask(oracle, [frozenset({rule}) for rule in batch], answers)
            misses += passed
            if hit is not None:
                return hit
        return None

    def _pairs(
        self,
        start: frozenset[T],
        oracle: Oracle[T],
        width: int,
        budget: int,
        answers: dict[frozenset[T], bool],
        suspects: Sequence[T],
        partners: Mapping[T, Sequence[T]],
    ) -> tuple[frozenset[T] | None, int]:
        """The top suspect (passing alone) with each partner, at most ``budget`` of them.

        Returns a proven answer (the pair, or its partner alone when that fails
        too) and how many pairs passed.
        """
        top = next((rule for rule in suspects if answers.get(frozenset({rule})) is False), None)
        if top is None:
            return None, 0
        mates = [mate for mate in partners.get(top, ()) if mate in start and mate != top]
        pairs = [frozenset({top, mate}) for mate in mates]
        hit = next((pair for pair in pairs if answers.get(pair) is True), None)
        pending = [pair for pair in pairs if pair not in answers]
        misses = 0
        while hit is None and pending and misses < budget:
            batch = pending[: min(width, budget - misses)]
            pending = pending[len(batch) :]
            hit, passed = _ask(oracle, batch, answers)
            misses += passed
        if hit is None:
            return None, misses
        mate = frozenset(hit - {top})
        if mate not in answers:
            answers[mate] = oracle.outcomes([mate])[0] is Outcome.FAIL
        return (mate if answers[mate] else hit), misses

    def _fallback(
        self,
        order: list[T],
        oracle: Oracle[T],
        start: frozenset[T],
        parallelism: Lanes,
        known: Mapping[frozenset[T], Outcome | bool] | None,
        answers: dict[frozenset[T], bool],
        ranking: Sequence[T],
    ) -> frozenset[T]:
        """The wrapped minimizer over the universe in prior order, told every answer so far."""
        guided_order = prior_order(order, ranking)
        mask_source = known.masks if isinstance(known, Answers) else None
        masks = Masks(guided_order)
        if mask_source is not None and mask_source.starts_with(guided_order):
            masks = mask_source
        given: Answers[T] = Answers(masks)
        for config, fails in answers.items():
            given.note(config, fails)
        return frozenset(self.base(guided_order, oracle, start, parallelism=parallelism, known=given, masks=masks))


def guided(
    prior: Sequence[T] | None,
    base: Strategy,
    patience: int | None = None,
    partners: Mapping[T, Sequence[T]] | None = None,
    refine: Callable[[frozenset[T]], tuple[Sequence[T], Mapping[T, Sequence[T]]] | None] | None = None,
) -> Strategy:
    """``base`` itself when there is no prior and nothing to refine it (nothing changes), else ``Guided``."""
    if not prior and refine is None:
        return base
    return Guided(list(prior or ()), base, patience, partners, refine)


def _ask(
    oracle: Oracle[T], configs: Sequence[frozenset[T]], answers: dict[frozenset[T], bool]
) -> tuple[frozenset[T] | None, int]:
    """One round of questions, answers noted: (the first configuration that failed, how many passed)."""
    hit: frozenset[T] | None = None
    passed = 0
    for config, outcome in zip(configs, oracle.outcomes(configs)):
        fails = outcome is Outcome.FAIL
        answers[config] = fails
        if fails and hit is None:
            hit = config
        passed += not fails
    return hit, passed
