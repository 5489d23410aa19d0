"""The verdicts ordered by inclusion: contradictions, antichains and which rules are shown necessary.

The strategies assume a monotone failure model: a configuration that fails
keeps failing when more rules are switched on. So the verdicts check each
other. A failing configuration with a passing superset breaks the model:
either one of the two verdicts was noise, or the failure is genuinely
non-monotone (one rule's rewrite hides the pattern a buggy rule would match).
Both are trained again until each rests on two agreeing trainings (a side that
still wins only narrowly gets up to twice the limit: a wrong verdict that
contradicts others would be contradicted, and re-trained, again and again);
then the majority flips the wrong one (the run is flaky), or both hold and the
contradiction is recorded as genuine (the strategies cope, bisect by falling
back to ddmin). Either way the record says what re-training made of it.

The same order says which rules a failing configuration needs: a rule whose
removal is known to pass, because a passing configuration holds the rest. The
interaction claims and the final claims are built on that
(``fusion_dd.search.interactions``, ``fusion_dd.search.claims``).

Every question compares a verdict with the earlier ones, so the verdicts are
kept as bit masks with their two antichains (``fusion_dd.search.masks``),
updated in place when a verdict arrives or changes: a rebuild from every
verdict after each flip made a noisy search of thousands of rules quadratic.

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from fusion_dd.search.masks import Antichains, Masks
from fusion_dd.search.oracle import Observation, Outcome
from fusion_dd.search.votes import Votes, describe, rule_count

T = TypeVar("T", bound=Hashable)

# A contradiction's evidence: the two configurations' trainings before and after they were
# re-trained, and their verdicts then. Worded only when the report asks: a false failure of a
# small configuration contradicts thousands of passing ones, most never read.
Retrained = tuple[
    tuple[tuple[Observation, ...], tuple[Observation, ...]],
    tuple[tuple[Observation, ...], tuple[Observation, ...]],
    tuple["Outcome | None", "Outcome | None"],
]


def explain(low: frozenset, high: frozenset, record: Retrained) -> str:
    """One sentence on a contradiction and what re-training made of it."""
    before, after, (low_now, high_now) = record
    head = (
        f"a configuration of {rule_count(len(low))} failed ({describe(before[0]) or 'precondition'}) while a "
        f"superset of {rule_count(len(high))} passed ({describe(before[1]) or 'precondition'})"
    )
    if low_now is Outcome.FAIL and high_now is Outcome.PASS:
        tail = (
            f"; re-trained, both held ({describe(after[0])} / "
            f"{describe(after[1])}): the failure is genuinely non-monotone"
        )
    else:
        wrong = "the subset's failure" if low_now is not Outcome.FAIL else "the superset's pass"
        tail = f"; re-trained ({describe(after[0])} / {describe(after[1])}): {wrong} was noise"
    return head + tail


class Monotonicity(Generic[T]):
    """The verdicts of ``votes`` as masks, with their contradictions and the necessity they show.

    ``update`` must be told of every verdict ``votes`` takes (its
    ``on_verdict``); the preconditions are in from the start.
    """

    def __init__(self, votes: Votes[T], masks: Masks[T]) -> None:
        self._votes = votes
        self.masks = masks
        # Bookkeeping that keeps a question's cost flat as the answers pile up: the order in
        # which verdicts arrived, the minimal failing / maximal passing ones, and the masks of
        # every failing and passing verdict (in no particular order), for the scans that need all.
        self._seq: dict[frozenset[T], int] = {}
        self._chains = Antichains()
        self.config_of: dict[int, frozenset[T]] = {}
        self.fail_masks: list[int] = []
        self.pass_masks: list[int] = []
        self.pass_set: set[int] = set()
        for config, verdict in votes.given.items():
            self._add(config, verdict)
        self._halves_seen: dict[int, tuple[bool, int]] = {}  # leaf -> (halves found, passing masks looked at)
        self._needed_seen: dict[int, tuple[int, int]] = {}  # leaf -> (necessary rules' bits, passing masks looked at)
        # (failing subset, passing superset) -> what their trainings were before and after the re-training
        self._contradictions: dict[tuple[frozenset[T], frozenset[T]], Retrained] = {}

    # -- bookkeeping ------------------------------------------------------------------

    def mask(self, config: frozenset[T]) -> int:
        return self.masks.of(config)

    def update(self, config: frozenset[T], old: Outcome | None, verdict: Outcome) -> None:
        """A verdict was taken: ``old`` is what it was before (None: a first training)."""
        if old is None:
            self._seq[config] = len(self._seq)
        elif old is not verdict:
            self._remove(config, old)
        if old is not verdict:
            self._add(config, verdict)

    def _add(self, config: frozenset[T], verdict: Outcome) -> None:
        if verdict is Outcome.FAIL or verdict is Outcome.PASS:
            mask = self.mask(config)
            self.config_of[mask] = config
            self._chains.add(mask, verdict is Outcome.FAIL)
            if verdict is Outcome.FAIL:
                self.fail_masks.append(mask)
            else:
                self.pass_masks.append(mask)
                self.pass_set.add(mask)

    def _remove(self, config: frozenset[T], verdict: Outcome) -> None:
        """Take back a verdict that changed, in place: a flip used to rebuild everything from all verdicts."""
        if verdict is Outcome.FAIL or verdict is Outcome.PASS:
            mask = self.mask(config)
            fails = verdict is Outcome.FAIL
            same = self.fail_masks if fails else self.pass_masks
            same.remove(mask)
            if not fails:
                self.pass_set.discard(mask)
                # ``halves`` and ``necessary`` remember what the passing masks showed; one went.
                self._halves_seen = {}
                self._needed_seen = {}
            self._chains.remove(mask, fails, same)

    def antichains(self) -> Antichains:
        """Minimal failing and maximal passing verdicts (the preconditions included).

        Kept up to date as verdicts arrive and change, as are ``fail_masks`` /
        ``pass_masks``, the masks of every failing and passing verdict.
        """
        return self._chains

    def arrival(self, config: frozenset[T]) -> tuple[int, int]:
        """Position in the order of ``Votes.settled``: the order every scan follows."""
        seq = self._seq.get(config)
        if seq is not None:
            return (0, seq)
        return (1, list(self._votes.given).index(config))

    # -- contradictions -----------------------------------------------------------------

    def check(self, config: frozenset[T]) -> None:
        """A failing configuration with a passing superset: train both again."""
        votes = self._votes
        verdict = votes.verdict(config)
        if verdict is None:
            return
        pairs = []
        mask = self.mask(config)
        # No maximal passing verdict around it (no minimal failing one inside it): no pair at all.
        if verdict is Outcome.FAIL and self._chains.contradicts(mask, True):
            pairs = [(config, other) for other in self._around(mask)]
        elif verdict is Outcome.PASS and self._chains.contradicts(mask, False):
            pairs = [(other, config) for other in self._inside(mask)]
        for low, high in pairs:
            if (low, high) in self._contradictions:
                continue
            before = (votes.observations(low), votes.observations(high))
            votes.make_firm([low, high])
            if votes.fails(low) and not votes.fails(high):
                # Still contradicting: a side that won only narrowly (at the limit) gets
                # up to twice the limit, since a wrong verdict that contradicts others
                # would be contradicted, and re-trained, again and again.
                votes.until([low, high], votes.clear, 2 * votes.max_trainings)
            after = (votes.observations(low), votes.observations(high))
            self._contradictions[(low, high)] = (before, after, (votes.verdict(low), votes.verdict(high)))

    def contradictions(self) -> Iterator[tuple[frozenset[T], frozenset[T], str]]:
        """Every contradiction re-trained, in the order found: (failing subset, passing superset, explanation)."""
        for (low, high), record in self._contradictions.items():
            yield low, high, explain(low, high, record)

    def _around(self, mask: int) -> list[frozenset[T]]:
        """The passing configurations strictly around ``mask``, in verdict order.

        Found among the masks, not by walking every verdict's rules: after a
        contradiction this is asked for each question of a search.
        """
        found = [self.config_of[high] for high in self.pass_masks if mask & ~high == 0 and high != mask]
        return sorted(found, key=self.arrival)

    def _inside(self, mask: int) -> list[frozenset[T]]:
        """The failing configurations strictly inside ``mask``, in verdict order."""
        found = [self.config_of[low] for low in self.fail_masks if low & ~mask == 0 and low != mask]
        return sorted(found, key=self.arrival)

    # -- necessity ----------------------------------------------------------------------

    def leaves(self, around: frozenset[T]) -> list[frozenset[T]]:
        """Smallest known failing configurations whose evidence ``around`` touches.

        That is ``around`` itself when it fails, or the failing configurations
        around a passing one, if no failing configuration lies inside them:
        exactly the minimal failing ones (the antichain), in verdict order.
        """
        verdict = self._votes.verdict(around)
        chains = self._chains
        if verdict is Outcome.FAIL:
            return [around] if chains.is_min_fail(self.mask(around)) else []
        if verdict is not Outcome.PASS:
            return []
        inside = self.mask(around)
        # A single failing rule lies strictly around ``around`` only when that is empty.
        lows = chains.min_fail if inside == 0 else chains.multi_fail
        near = [self.config_of[low] for low in lows if inside & ~low == 0 and inside != low]
        return sorted(near, key=self.arrival)

    def necessary(self, leaf: frozenset[T]) -> set[T]:
        """Rules of ``leaf`` whose removal is known to pass (by a passing superset of the removal)."""
        whole = self.mask(leaf)
        needed, seen = self._needed_seen.get(whole, (-1, 0))
        if needed < 0:
            needed = 0
            chains = self._chains
            # A passing superset of a removal lies inside a maximal passing one, which shows the
            # same removal unless it holds all of ``leaf`` (a contradiction): then look at all.
            if chains.contradicts(whole, True):
                candidates = self.pass_masks
            else:
                candidates = chains.max_pass
        else:
            # Passing verdicts only arrive (a change forgets this): look at the new ones only. A
            # leaf inside a passing configuration is asked about for every question after it.
            candidates = self.pass_masks[seen:]
        for other in candidates:
            missing = whole & ~other
            if missing and missing & (missing - 1) == 0:
                needed |= missing
        self._needed_seen[whole] = (needed, len(self.pass_masks))
        found: set[T] = set()
        while needed:
            low = needed & -needed
            found.add(self.masks.rule(low.bit_length() - 1))
            needed ^= low
        return found

    def halves(self, leaf: frozenset[T]) -> bool:
        """Two disjoint passing parts of at least two rules each that make up ``leaf``."""
        whole = self.mask(leaf)
        if whole.bit_count() < 4:
            return False
        # Passing verdicts only arrive (a change forgets this): look at the new ones only.
        found, seen = self._halves_seen.get(whole, (False, 0))
        if not found:
            outside = ~whole
            passing = self.pass_set
            for part in self.pass_masks[seen:]:
                if part & outside == 0 and part != whole and part.bit_count() >= 2:
                    rest = whole ^ part
                    if rest.bit_count() >= 2 and rest in passing:
                        found = True
                        break
            self._halves_seen[whole] = (found, len(self.pass_masks))
        return found

    def necessity_shown(self, rule: T) -> bool:
        """Whether a training other than ``{rule}`` alone shows that ``rule`` matters.

        That is a failing configuration with more rules than ``rule`` whose
        removal of ``rule`` is known to pass (bisect's boundary, the fix
        verification). Without one, an independent culprit rests on the single
        training of itself; that happens when the first probe of a search was
        the rule alone, so one flip there names a culprit that no later answer
        contradicts.
        """
        bit = 1 << self.masks.bit(rule)
        chains = self._chains
        # The maximal passing configurations with and without ``rule``, split once: the
        # question is asked for every culprit of a search, each over all failing ones.
        without = [high for high in chains.max_pass if not high & bit]
        holding = [high for high in chains.max_pass if high & bit]
        passing: list[int] | None = None
        # Newest first: the training that shows it is usually the boundary that isolated the
        # rule, late in the search (the answer is the same in any order).
        for holder in reversed(self.fail_masks):
            if not holder & bit or holder == bit:
                continue
            rest = holder & ~bit
            # Any passing configuration around ``rest`` lies inside a maximal one; one of those
            # without ``rule`` shows it, none around means none at all; else look at all.
            if any(rest & ~high == 0 for high in without):
                return True
            if not any(rest & ~high == 0 for high in holding):
                continue
            if passing is None:
                passing = [mask for mask in self.pass_masks if not mask & bit]
            if any(rest & ~mask == 0 for mask in passing):
                return True
        return False
