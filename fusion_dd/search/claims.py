"""The final answer's claims: what it takes to call a set confirmed and a fix verified.

An answer asserts that each culprit set fails, that each of its single-rule
removals passes (for an interacting set) and that the fix passes. Each claim is
backed by trainings: its own, or by monotonicity those of a failing subset or a
passing superset (``Claims.support``). The rules, and why:

- **Little cost when nothing is contradicted.** Requiring two trainings for
  every final claim would cost two extra trainings per culprit (the culprit
  alone and the fix have no other support: no smaller configuration can show a
  culprit fails, no larger one can show the fix passes), which breaks the
  noise-free budgets (one culprit among 256 in 12 trainings). So the final
  answer is confirmed that strictly (``confirm="strict"``) on request, and
  automatically (``"auto"``) once the run has shown noise (a configuration that
  both passed and failed).
- **Three once noise was seen.** Then every claim needs three agreeing
  trainings of its own configuration (``witnesses``): two flips of one
  configuration are the likeliest way left to a wrong claim, and two single
  trainings of different configurations that imply each other are two chances
  for a flip, not a confirmation.
- **Without noise, two aligned flips.** Claims supported by monotonicity (a
  failing subset, a passing superset) need nothing more, except where two
  aligned flips would contradict nothing: a set found by a second or later
  search (a false FAIL of the fix candidate, then of a single), every searched
  set once two were found, and the "passes alone" claims of an interacting
  pair. One culprit costs nothing more; each further set or pair a training or
  two. Which claims are checked when is the all-culprits layer's choice
  (``fusion_dd.search.culprits``); before a rule of an interacting set is
  switched off, the removals that make it an interaction (``everything``
  False) must rest on two trainings, their own or a passing superset's.
- **The references count.** The engine settles the two references (all off,
  all on) by majority before the search
  (``fusion_dd.core.scoring.reference_decision``); when their own trainings
  disagreed, the run has shown noise before its first question, so every
  claim needs three agreeing trainings from the start.
- **The fix is never claimed on one training.** One training is one flip away
  from a false claim and nothing else can back it (``verified``).
- **An interacting pair's "passes alone" claims need their own trainings.**
  A false PASS of a true lone culprit ``c`` turns it into the spurious pair
  ``{c, x}`` (``weak_single_removals``). On a run without noise the passing
  fix's trainings count too for the rule it keeps on: were that rule a lone
  culprit, each of them would have had to flip as well.

``Claims`` only says which claims are weak; the guard trains them
(``fusion_dd.search.noise``), since a claim that flips sends the search back
to the start.

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

from fusion_dd.search.monotonicity import Monotonicity
from fusion_dd.search.oracle import Outcome
from fusion_dd.search.votes import Votes

T = TypeVar("T", bound=Hashable)


def _submasks(mask: int) -> list[int]:
    """Every non-empty subset of ``mask``."""
    found = []
    sub = mask
    while sub:
        found.append(sub)
        sub = (sub - 1) & mask
    return found


class Claims(Generic[T]):
    """How well the verdicts back an answer; ``order`` is the universe, in the order rules are named."""

    def __init__(
        self, votes: Votes[T], monotone: Monotonicity[T], order: Sequence[T], fix_trainings: int = 2,
        own_trainings: bool = False,
    ) -> None:
        """``fix_trainings``: agreeing trainings "verified" needs at least (``NoisePolicy``);
        ``own_trainings``: every claim counts only trainings of its own configuration, even
        on a run that has shown no noise (``confirm: strict``)."""
        self._votes = votes
        self._monotone = monotone
        self._rank = {rule: i for i, rule in enumerate(order)}
        self._fix_trainings = fix_trainings
        self._own_trainings = own_trainings

    def witnesses(self) -> int:
        """Agreeing trainings a final claim needs: two; three once the run has shown noise,
        where two flips of one configuration are the likeliest way left to a wrong claim."""
        return 3 if self._votes.flaky else 2

    def fix_witnesses(self) -> int:
        """Agreeing trainings of its own the handed-over fix needs: ``witnesses``, or more if asked.

        On a run that has shown no noise, a second culprit the search has not
        found hides behind the fix only if every training of the fix flipped to
        a pass: at a flip rate p, p to the power of this count of the searches
        that missed one. A third training costs one on every search.
        """
        return max(self.witnesses(), self._fix_trainings)

    def support(self, config: frozenset[T], fails: bool, direct: bool = False, enough: int | None = None) -> int:
        """Trainings that back "``config`` fails" (a failing subset) or "passes" (a passing superset).

        ``direct``: only trainings of ``config`` itself. Once a run has shown
        noise, two single trainings of different configurations that imply each
        other are two chances for a flip, not a confirmation.

        ``enough``: the count stops once it reaches this many (every claim asks
        whether a few trainings back it, and counting every answer of a long search
        around each claim made the final checks quadratic); below it, the count is exact.
        """
        votes = self._votes
        config = frozenset(config)
        if config in votes.given:
            if (votes.given[config] is Outcome.FAIL) != fails:
                return 0
            trained = votes.reference_observations(config)
            if direct and trained:  # a reference's own trainings, as its majority counted them
                return sum(o.outcome is votes.given[config] for o in trained)
            return self.witnesses()  # settled before the search, or given as a known metric
        if direct:
            return votes.agreeing(config) if votes.fails(config) == fails and votes.trained(config) is not None else 0
        monotone = self._monotone
        whole = monotone.mask(config)
        chains = monotone.antichains()
        if fails:
            if not chains.fails_inside(whole):
                return 0  # no failing configuration inside it at all
            if 1 << whole.bit_count() <= len(monotone.fail_masks):
                candidates = _submasks(whole)  # a small configuration: its subsets are fewer
            else:
                candidates = monotone.fail_masks
        else:
            if not chains.contradicts(whole, True) and whole not in monotone.pass_set:
                return 0  # no passing configuration around it at all
            candidates = monotone.pass_masks
        wanted = Outcome.FAIL if fails else Outcome.PASS
        config_of = monotone.config_of
        total = 0
        for mask in candidates:
            if (mask & ~whole if fails else whole & ~mask) == 0:
                other = config_of.get(mask)
                if other is not None and votes.trained(other) is wanted:  # references count above
                    total += votes.agreeing(other)
                    if enough is not None and total >= enough:
                        break
        return total

    def claims(
        self, culprit_sets: Sequence[frozenset[T]], fix: frozenset[T] | None, everything: bool = True
    ) -> list[tuple[frozenset[T], bool]]:
        """What the answer asserts: each set fails, each single removal passes, the fix passes.

        With ``everything`` False: only the single-rule removals of interacting
        sets, the claims that make a set an interaction. A strategy has usually
        trained each of them and a larger passing configuration around it, so
        checking them is free on a clean run; and one false PASS there is what
        turns an independent culprit into a spurious pair.
        """
        claimed: dict[frozenset[T], bool] = {}
        for rules in culprit_sets:
            rules = frozenset(rules)
            if everything:
                claimed[rules] = True
            if len(rules) > 1:
                for rule in rules:
                    claimed.setdefault(rules - {rule}, False)
        if everything and fix is not None:
            claimed.setdefault(frozenset(fix), False)
        return list(claimed.items())

    def confirmed(self, culprit_sets: Sequence[frozenset[T]], fix: frozenset[T]) -> bool:
        """Whether every claim of the answer rests on enough agreeing trainings (``witnesses``) and holds.

        Once the run has shown noise (and always with ``own_trainings``) the
        trainings must be of the claim's own configuration: support implied by
        monotonicity is two chances for a flip.
        """
        votes = self._votes
        direct = votes.flaky or self._own_trainings
        return all(
            self.support(c, fails, direct, self.witnesses()) >= self.witnesses() and (votes.verdict(c) is None or votes.fails(c) == fails)
            for c, fails in self.claims(culprit_sets, fix)
        )

    def verified(self, fix: frozenset[T]) -> bool:
        """Whether "``fix`` passes" may be claimed: its verdict is PASS on two agreeing
        trainings of its own (three once the run has shown noise; ``fix_witnesses``).

        One training is one flip away from a false claim, and nothing else can
        back it: no larger configuration than a fix can pass. At 5 % flips, with
        a second culprit the search has not found yet, a single passing
        training hands over a fix that truly fails in about 1 search in 30.
        """
        votes = self._votes
        fix = frozenset(fix)
        if votes.verdict(fix) is not Outcome.PASS:
            return False
        if fix in votes.given and not votes.flaky:
            return True  # every rule off: the baseline reference, settled by the engine before the search
        return self.support(fix, False, direct=True) >= self.fix_witnesses()

    # -- what is worth another training -------------------------------------------------

    def weak(
        self, culprit_sets: Sequence[frozenset[T]], fix: frozenset[T] | None, everything: bool = True
    ) -> list[frozenset[T]]:
        """The claims short of ``witnesses`` that may still be trained (crashes are the engine's to retry).

        Once the run has shown noise only a claim's own trainings count; before
        that, support implied by monotonicity does.
        """
        votes = self._votes
        direct = votes.flaky or self._own_trainings
        return [
            c
            for c, fails in self.claims(culprit_sets, fix, everything)
            if self.support(c, fails, direct, self.witnesses()) < self.witnesses()
            and votes.can_retrain(c)
            and votes.verdict(c) is not Outcome.UNRESOLVED
        ]

    def weak_fix(self, fix: frozenset[T]) -> bool:
        """Whether a passing fix still lacks the agreeing trainings ``verified`` needs, and may get them."""
        votes = self._votes
        return (
            votes.verdict(fix) is Outcome.PASS
            and fix not in votes.given
            and self.support(fix, False, direct=True) < self.fix_witnesses()
            and votes.can_retrain(fix)
        )

    def weak_single_removals(
        self, culprit_sets: Sequence[frozenset[T]], fix: frozenset[T] | None = None
    ) -> list[frozenset[T]]:
        """The "passes alone" claims of interacting pairs short of their own trainings, in rule order.

        That is the claim one false PASS of a true lone culprit ``c`` turns into
        the spurious pair ``{c, x}``; support implied by a passing superset of
        ``{c}`` is one more chance for the same flip, so only ``{c}``'s own
        trainings count: two. Larger sets' removals keep monotone support: a
        clean interacting set must not cost a training per rule.

        A rule in two of the pairs needs three: that is what a lone culprit whose
        single training flipped twice looks like (its first partner switched off,
        the search finds it again with the next one), the likeliest wrong answer
        left at a few percent of flips; a genuine overlap ({a,b}, {b,c}) pays one
        training for it.

        ``fix``: the passing fix about to be handed over. A rule it keeps on
        that truly failed alone would make every training of the fix fail as
        well, so on a run that has shown no noise those trainings count for the
        rule's "passes alone" claim beside its own: the fix is trained because
        it is the answer, not picked for having passed, so each of its passing
        trainings is one more flip the wrong claim would need. The pair's rule
        the fix switches off still needs its own trainings.
        """
        votes = self._votes
        counts = Counter(rule for rules in culprit_sets if len(rules) == 2 for rule in rules)
        fix_support = 0
        if fix is not None and not (votes.flaky or self._own_trainings) and votes.verdict(fix) is Outcome.PASS:
            fix_support = self.support(fix, False, direct=True)

        def needed(rule: T) -> int:
            return 3 if counts[rule] > 1 else 2

        def backed(removal: frozenset[T]) -> int:
            own = self.support(removal, False, direct=True)
            return own + fix_support if own and fix_support and removal <= fix else own

        return [
            rules - {rule}
            for rules in culprit_sets
            if len(rules) == 2
            for rule in sorted(rules, key=self._rank.__getitem__)
            if backed(rules - {rule}) < needed(next(iter(rules - {rule})))
            and votes.can_retrain(rules - {rule})
            and votes.verdict(rules - {rule}) is not Outcome.UNRESOLVED
        ]
