"""A prior-guided minimizer: the top suspects first, at most two trainings more than blind.

``bisect`` sits near the bound of a search that knows nothing about the
candidates: one culprit among m costs ceil(log2 m) + 1 questions whatever its
place (``blind(m)``). A *prior* (the rules the references' tensor dumps point
at, or the user's hunch) is knowledge: if the culprit is the top suspect, one
training of that rule alone both finds it and proves it (a single rule that
fails is a 1-minimal failing set, since the empty configuration passes).

What can be bought with a prior is bounded by counting: with one culprit, a
search is a binary tree of questions, and a culprit that costs c questions
uses 2^-c of it (twice that when its proof is a question of its own). So the
top suspect proven in one question takes half of every possible search, and a
prior that pays off for the top ranks must cost the others something. The
search here spends exactly two questions per search on the prior (one device),
and each rank pays at most that:

1. the top suspect alone (the ranking's rank 1: found and proven in one);
2. the *fence*: the top F suspects on, everything else off. F = blind(m) - 1,
   the most suspects that can each be asked alone within what blind bisect
   would cost (suspect r costs r + 1 questions, the F-th costs blind(m));
3. if the fence fails, its suspects alone, in rank order; if it passes, a
   binary search of the rest with those two questions spent: every rank costs
   at most blind(m) + 2. That search puts its spare capacity where the prior
   points: each question is the shortest prefix whose rest still fits the
   budget, and a prefix of one rule is asked as that rule alone, which proves it
   when it fails (about half the ranks cost one question less than the bound).
   When the budget's binary search ends on the last two rules of the search,
   it asks the prefix without the last one instead: that configuration is the
   next fix candidate, which the all-culprits layer then gets for free.

n = 256 rules: rank 1 costs 1 question, ranks 2..8 cost 3..9, every other rank
10 or 11 (blind bisect: 9 for every rank). Galloping (prefixes 1, 2, 4, 8, ...,
then a binary search inside the last doubling) costs 2 log2(r) + 1, which for
an uninformative prior is about twice blind bisect; the budget is what keeps
this search within two trainings of it.

"Prefix fails" in the monotone model means the prefix holds every rule of some
culprit set. So the fence also answers for interacting sets (it fails when a
whole set is among the top suspects), and the questions of step 3 are the ones
bisect itself would ask, in another order. When the answers stop fitting one
culprit (every rule of the failing interval passes alone: an interaction), the
wrapped minimizer (default ``bisect``) takes over over the universe in prior
order, told every answer so far, so nothing asked is lost and the answer is
its verified one. The all-culprits layer (``fusion_dd.search.culprits``) calls
the search once per culprit set, each time inside the failing fix candidate,
with every earlier answer: suspects already asked are not asked again.

With P devices (P >= 2) a round holds P questions: the first round asks the
top suspect alone, the fence (2P - 1 suspects) and the next P - 2 suspects
alone; if the fence fails, the next round asks its other suspects alone, else
the wrapped minimizer searches the rest (which the passing fence has cut). A
culprit among the top P - 1 costs one round; any other at most one round more
than blind.

Two more kinds of knowledge, both optional:

- **Partners** (``partners``: suspect -> rules): an interacting pair hides from
  the dumps when one of its rules makes no bad op of its own (a pass that
  removes a cast changes what a fused kernel reads, and the kernel's op is the
  one that goes wrong). When the top suspect passes alone, the dumps still say
  its op is where the numbers go wrong, so right after the first round the
  search asks the top suspect *together with* each of its partners (the rules
  of the ops around its bad op, from the graph dump), P per round, at most
  max(2, P) of them (so misleading partners cost that much more). A failing
  pair ``{s, p}`` is proven 1-minimal by ``{p}`` passing alone (asked; ``{s}``
  passed already); if ``{p}`` fails, ``{p}`` is the answer.
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


def blind(size: int) -> int:
    """Questions blind bisect needs for one culprit among ``size`` rules, its proof included."""
    return max(0, size - 1).bit_length() + 1


def _reach(budget: int) -> int:
    """The most rules a binary search with a proof can settle in ``budget`` questions (one culprit)."""
    return 1 << (budget - 1) if budget >= 1 else 0


def fence_size(size: int, width: int, suspects: int) -> int:
    """How many top suspects the fence holds (0: no fence), for a search of ``size`` rules on ``width`` devices.

    One device: blind(size) - 1, so that each suspect inside the fence, asked
    alone in rank order, costs at most what blind bisect would. P devices:
    2P - 1, the suspects the first round does not ask alone fill one more
    round. Never more than the ranked suspects (the order past them is the
    universe's, no knowledge) nor the whole search (that is known to fail).
    """
    room = blind(size) - 1 if width == 1 else 2 * width - 1
    fence = min(room, suspects, size - 1)
    return fence if fence >= 2 else 0


class Guided(Generic[T]):
    """A ``Strategy`` that asks the prior's top suspects first, within two trainings of blind bisect.

    ``prior``: the suspects, most suspicious first (any subset of the
    candidates; unknown ones are ignored). ``base``: the minimizer that takes
    over when the answers stop fitting one culprit, or on P devices once the
    suspects are asked (default ``bisect``). ``partners``: pairs of the top
    suspect with its partners are asked right after it passes alone, at most
    max(2, P) of them. ``refine``: see the module docstring.
    """

    def __init__(
        self,
        prior: Sequence[T],
        base: Strategy | None = None,
        partners: Mapping[T, Sequence[T]] | None = None,
        refine: Callable[[frozenset[T]], tuple[Sequence[T], Mapping[T, Sequence[T]]] | None] | None = None,
    ) -> None:
        if base is None:
            from fusion_dd.search.bisection import bisect

            base = bisect
        self.prior: list[T] = list(dict.fromkeys(prior))
        self.base = base
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
        rules = [rule for rule in prior_order(order, ranking) if rule in start]
        suspects = sum(1 for rule in dict.fromkeys(ranking) if rule in start)
        found = _Search(rules, suspects, oracle, parallelism, answers).run(partners)
        if found is not None:
            return found
        return self._fallback(order, oracle, start, parallelism, known, answers, ranking)

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


class _Search(Generic[T]):
    """One search's questions over ``rules`` (the start, suspects first): see the module docstring.

    ``run`` returns a proven answer (a failing single, or a pair whose singles
    pass) or None when the answers do not fit one culprit, or the suspects are
    asked on P devices: the wrapped minimizer goes on with ``answers``, which
    holds every answer this search got (and those it was given).
    """

    def __init__(
        self,
        rules: list[T],
        suspects: int,
        oracle: Oracle[T],
        lanes: Lanes,
        answers: dict[frozenset[T], bool],
    ) -> None:
        self.rules = rules
        self.suspects = suspects
        self.oracle = oracle
        self.lanes = lanes
        self.answers = answers

    def prefix(self, size: int) -> frozenset[T]:
        return frozenset(self.rules[:size])

    def single(self, index: int) -> frozenset[T]:
        return frozenset({self.rules[index]})

    def ask(self, configs: Sequence[frozenset[T]]) -> list[bool]:
        """One round: the configurations not answered yet are trained together; True: fails."""
        fresh = [config for config in dict.fromkeys(configs) if config not in self.answers]
        if fresh:
            _ask(self.oracle, fresh, self.answers)
        return [self.answers[config] for config in configs]

    def run(self, partners: Mapping[T, Sequence[T]]) -> frozenset[T] | None:
        size = len(self.rules)
        # A rule proven earlier (e.g. asked alone in the round that found another culprit).
        guilty = {rule for config, fails in self.answers.items() if fails and len(config) == 1 for rule in config}
        if guilty:
            proven = next((rule for rule in self.rules if rule in guilty), None)
            if proven is not None:
                return frozenset({proven})
        width = width_of(self.lanes)
        fence = fence_size(size, width, self.suspects)
        # The top suspects not asked alone yet: a later search (inside a failing fix
        # candidate) is told what the earlier ones asked, and goes on down the ranking.
        reach = max(1, fence) if width == 1 else max(1, fence, min(width, self.suspects))
        unasked = [self.single(i) for i in range(reach) if self.single(i) not in self.answers]
        if width == 1:
            first = unasked[:1]  # the top suspect (of those not asked yet) alone
        elif fence > width:  # the top suspect, the fence, the next suspects alone
            first = unasked[:1] + [self.prefix(fence)] + unasked[1 : width - 1]
        else:  # one round asks every suspect a fence would hold: no fence
            fence = 0
            first = unasked[:width]
        self.ask(first)
        hit = self._first_failing_single(first)
        if hit is not None:
            return hit
        found = self._pairs(partners)
        if found is not None:
            return found
        if not fence:
            return None  # the top suspect alone was all the prior said: the wrapped minimizer's search
        if width > 1:
            return self._fence_singles(fence)
        fails = self.ask([self.prefix(fence)])[0]
        lo, hi = (1, fence) if fails else (fence, size)
        return self._descend(lo, hi, blind(size))

    def _first_failing_single(self, configs: Sequence[frozenset[T]]) -> frozenset[T] | None:
        return next((c for c in configs if len(c) == 1 and self.answers.get(c) is True), None)

    def _fence_singles(self, fence: int) -> frozenset[T] | None:
        """P devices: a failing fence's suspects alone, P per round, the ones not asked yet."""
        if not self.ask([self.prefix(fence)])[0]:
            return None
        pending = [self.single(i) for i in range(fence) if self.single(i) not in self.answers]
        while pending:
            width = width_of(self.lanes)
            batch, pending = pending[:width], pending[width:]
            self.ask(batch)
            hit = self._first_failing_single(batch)
            if hit is not None:
                return hit
        return None

    def _descend(self, lo: int, hi: int, budget: int) -> frozenset[T] | None:
        """One device: the culprit among ranks (lo, hi], the prefix of ``hi`` failing, in ``budget`` questions.

        Each question is the shortest prefix whose rest still fits the budget
        (``_reach``), asked as its last rule alone when it adds one rule (that
        proves the rule when it fails; when it passes, the search goes on as if
        the prefix had passed, which is what one culprit implies). None when
        the last candidate passes alone: no single culprit explains the
        answers, an interaction does, and the wrapped minimizer finds it.
        """
        size = len(self.rules)
        while hi - lo >= 1:
            if hi - lo == 1:
                return self.single(lo) if self.ask([self.single(lo)])[0] else None
            cut = min(hi - 1, max(lo + 1, hi - _reach(budget - 1)))
            budget -= 1
            if cut == lo + 1 and not (hi == size and hi - lo == 2):
                if self.ask([self.single(lo)])[0]:
                    return self.single(lo)
                lo = cut
            elif self.ask([self.prefix(cut)])[0]:
                hi = cut
            else:
                lo = cut
        return None

    def _pairs(self, partners: Mapping[T, Sequence[T]]) -> frozenset[T] | None:
        """The top suspect (passing alone) with each partner, at most max(2, P) of them.

        Returns a proven answer: the pair, or its partner alone when that fails too.
        """
        top = self.rules[0]
        if self.answers.get(frozenset({top})) is not False:
            return None
        inside = frozenset(self.rules)
        mates = [mate for mate in partners.get(top, ()) if mate in inside and mate != top]
        pairs = [frozenset({top, mate}) for mate in dict.fromkeys(mates)]
        hit = next((pair for pair in pairs if self.answers.get(pair) is True), None)
        pending = [pair for pair in pairs if pair not in self.answers]
        budget = max(2, width_of(self.lanes))
        misses = 0
        while hit is None and pending and misses < budget:
            batch = pending[: min(width_of(self.lanes), budget - misses)]
            pending = pending[len(batch) :]
            hit, passed = _ask(self.oracle, batch, self.answers)
            misses += passed
        if hit is None:
            return None
        mate = frozenset(hit - {top})
        fails = self.ask([mate])[0]
        return mate if fails else hit


def guided(
    prior: Sequence[T] | None,
    base: Strategy,
    partners: Mapping[T, Sequence[T]] | None = None,
    refine: Callable[[frozenset[T]], tuple[Sequence[T], Mapping[T, Sequence[T]]] | None] | None = None,
) -> Strategy:
    """``base`` itself when there is no prior and nothing to refine it (nothing changes), else ``Guided``."""
    if not prior and refine is None:
        return base
    return Guided(list(prior or ()), base, partners, refine)


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
