"""Trustworthy verdicts from noisy trainings: which answers deserve another training.

Real trainings are not bit-reproducible, and one unlucky verdict sends delta
debugging down the wrong branch: a passing configuration that is reported as
failing makes a strategy search inside it for a culprit that is not there. The
strategies themselves stay single-answer algorithms; ``NoiseGuard`` sits between
them and a ``RepeatOracle`` and decides *which* answers deserve another training.
It composes one module per family of rules, where each rule is written down
with its reasons:

- **Votes, not answers** (``fusion_dd.search.votes``): a verdict is the weighted
  majority of a configuration's trainings, settled once one side leads clearly;
  a tie at the limit fails.
- **Contradictions are re-trained, not believed** (``fusion_dd.search.monotonicity``):
  a failing configuration with a passing superset has both trained again, until
  the majority flips one (noise) or both hold (a genuinely non-monotone failure).
- **An interaction claim is checked once** (``fusion_dd.search.interactions``):
  noise and interactions look the same from one training each.
- **A lone culprit needs a second witness** (``necessity_shown``, from
  ``fusion_dd.search.monotonicity``): ``{c}``
  failing is backed by one training; usually another shows that ``c`` matters
  (a failing configuration whose removal of ``c`` passes: bisect's boundary, the
  fix verification). When none does, ``{c}`` is re-trained.
- **The final claims** (``fusion_dd.search.claims``): little cost when nothing is
  contradicted, three agreeing trainings of each claimed configuration once the
  run has shown noise (the references' own trainings included), and never a
  fix claimed on one training.
- **Revise, then replay.** A verdict that changes after the strategy was told
  raises ``Revised``; ``find_culprits`` then runs the search again from the
  start, which costs nothing (every answer is remembered) and follows the
  corrected branch. Every step is a function of the answers, so a resumed
  search asks exactly the same (configuration, repeat) pairs.

The guard itself is the glue: it answers the strategies, and after each new
verdict re-examines what it touched (contradictions first, then interaction
claims, then every verdict those re-trainings changed, in the order the
verdicts arrived), before it checks that nothing the strategy was told changed.

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fusion_dd.search.claims import Claims
from fusion_dd.search.interactions import InteractionClaims
from fusion_dd.search.masks import Masks
from fusion_dd.search.monotonicity import Monotonicity
from fusion_dd.search.oracle import Observation, Outcome, RepeatOracle, prefetch
from fusion_dd.search.votes import Votes, describe
from fusion_dd.search.votes import majority as majority  # the noise layer's rule, named from here too
from fusion_dd.search.votes import tally as tally

T = TypeVar("T", bound=Hashable)

CONFIRM_MODES = ("auto", "strict", "off")


@dataclass(frozen=True)
class NoisePolicy:
    """How hard to check verdicts.

    ``confirm``: "auto" (re-train on contradictions, interaction claims and
    near-threshold readings; confirm the final answer once noise was seen),
    "strict" (also always confirm every final claim by two agreeing trainings of
    its own configuration, never by support implied from others),
    "off" (single trainings, the behaviour without repeats).
    ``max_trainings``: trainings of one configuration, the first included.
    ``fix_trainings``: agreeing trainings the handed-over fix needs to be called
    verified on a run that has shown no noise (three at least once it has).
    """

    confirm: str = "auto"
    max_trainings: int = 7
    fix_trainings: int = 2

    def __post_init__(self) -> None:
        if self.confirm not in CONFIRM_MODES:
            raise ValueError(f"confirm must be one of {', '.join(CONFIRM_MODES)}, got {self.confirm!r}")
        if self.max_trainings < 1:
            raise ValueError(f"max_trainings must be at least 1, got {self.max_trainings}")
        if not 2 <= self.fix_trainings <= max(2, self.max_trainings):
            raise ValueError(f"fix_trainings must be 2 to max_trainings ({self.max_trainings}), got {self.fix_trainings}")


@dataclass(frozen=True)
class Inconsistency(Generic[T]):
    """Evidence that the trainings disagreed, for the report.

    ``kind`` is "flaky" (one configuration both passed and failed) or
    "non-monotone" (a configuration failed while a superset of it passed).
    ``configs`` are the configurations involved (for "non-monotone": the failing
    subset first), ``observations`` their trainings in this run, ``verdicts``
    what the majority decided, and ``explanation`` one sentence for a person.
    """

    kind: str
    configs: tuple[frozenset[T], ...]
    observations: tuple[tuple[Observation, ...], ...]
    verdicts: tuple[Outcome, ...]
    explanation: str


class Revised(Exception):
    """A verdict the strategy was already told has changed: replay the search."""


def _weakly(method: Callable[..., None]) -> Callable[..., None]:
    """``method`` called through a weak reference to its object (nothing once the object is gone)."""
    reference = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        bound = reference()
        if bound is not None:
            bound(*args)

    return call


class NoiseGuard(Generic[T]):
    """An ``Oracle`` for the strategies that answers with settled verdicts.

    ``universe`` is known to fail and the empty configuration to pass (the
    engine's preconditions, settled by its own reference repeats): they are
    never re-trained here. ``masks`` may be shared with the strategies
    (``fusion_dd.search.masks``), so that a configuration's mask is computed once.
    """

    def __init__(
        self,
        oracle: RepeatOracle[T],
        universe: Iterable[T],
        policy: NoisePolicy | None = None,
        masks: Masks[T] | None = None,
    ) -> None:
        self._base = oracle
        self.policy = policy or NoisePolicy()
        order = list(universe)
        given: dict[frozenset[T], Outcome] = {
            frozenset(order): Outcome.FAIL,
            frozenset(): Outcome.PASS,
        }
        self._touched: dict[frozenset[T], Outcome | None] = {}  # verdicts taken during one review step
        self._dirty: set[frozenset[T]] = set()  # verdicts changed since the last check of what was told
        self._told: dict[frozenset[T], bool] = {}
        self.replays = 0
        # Told of every verdict through a weak reference: a guard referenced by its own votes would be a
        # cycle, and a search's guard (its trainings, thousands of configurations) would outlive the
        # search until a full garbage collection.
        self._votes: Votes[T] = Votes(oracle, given, self.policy.max_trainings, _weakly(self._taken))
        self._monotone: Monotonicity[T] = Monotonicity(self._votes, masks if masks is not None else Masks(order))
        self._interactions: InteractionClaims[T] = InteractionClaims(self._votes, self._monotone)
        self._claims: Claims[T] = Claims(
            self._votes, self._monotone, order, self.policy.fix_trainings, own_trainings=self.policy.confirm == "strict"
        )  # fmt: skip

    def _taken(self, config: frozenset[T], old: Outcome | None, verdict: Outcome) -> None:
        """Every verdict taken: remembered for the review, and for the check of what was told."""
        self._touched.setdefault(config, old)
        if old is not None and old is not verdict:
            self._dirty.add(config)
        self._monotone.update(config, old, verdict)

    # -- what the run has seen ------------------------------------------------------

    @property
    def flaky(self) -> bool:
        """Whether some configuration (a reference included) both passed and failed in this run."""
        return self._votes.flaky

    def observations(self, config: frozenset[T]) -> tuple[Observation, ...]:
        return self._votes.observations(frozenset(config))

    def verdict(self, config: frozenset[T]) -> Outcome | None:
        """The settled verdict (None: never trained, and not a precondition)."""
        return self._votes.verdict(frozenset(config))

    def inconsistencies(self) -> list[Inconsistency[T]]:
        """Every disagreement seen, with its evidence, in the order it was found."""
        found: list[Inconsistency[T]] = []
        for low, high, explanation in self._monotone.contradictions():
            found.append(
                Inconsistency(
                    kind="non-monotone",
                    configs=(low, high),
                    observations=(self.observations(low), self.observations(high)),
                    verdicts=(
                        self.verdict(low) or Outcome.UNRESOLVED,
                        self.verdict(high) or Outcome.UNRESOLVED,
                    ),
                    explanation=explanation,
                )
            )
        for config, observations in self._votes.every_training():
            if self._votes.is_flaky(config):
                verdict = self.verdict(config) or Outcome.UNRESOLVED
                fails = sum(o.outcome is Outcome.FAIL for o in observations)
                passes = sum(o.outcome is Outcome.PASS for o in observations)
                found.append(
                    Inconsistency(
                        kind="flaky",
                        configs=(config,),
                        observations=(observations,),
                        verdicts=(verdict,),
                        explanation=(
                            f"the same configuration failed {fails} and passed {passes} of "
                            f"{len(observations)} trainings ({describe(observations)}); "
                            f"decided {verdict.value.upper()} by majority"
                        ),
                    )
                )
        return found

    # -- the Oracle the strategies see ----------------------------------------------

    def replay(self) -> None:
        """Forget what the strategy was told; keep every training (they are free now)."""
        self._told.clear()
        self._dirty.clear()
        self.replays += 1

    def outcomes(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        configs = [frozenset(c) for c in configs]
        new = [c for c in dict.fromkeys(configs) if self._votes.verdict(c) is None]
        if new:
            self._base.outcomes(new)
            self._votes.take(new)
            self._settle(new)
        return [self._answer(c) for c in configs]

    def prefetch(self, configs: Sequence[frozenset[T]]) -> None:
        """Passes on the configurations whose verdict is still open (``fusion_dd.search.oracle.prefetch``)."""
        prefetch(self._base, [c for c in map(frozenset, configs) if self._votes.verdict(c) is None])

    def first_failing(self, configs: Sequence[frozenset[T]]) -> int | None:
        configs = [frozenset(c) for c in configs]
        while True:
            unknown: list[frozenset[T]] = []
            for config in configs:
                verdict = self._votes.verdict(config)
                if verdict is Outcome.FAIL:
                    break
                if verdict is None and config not in unknown:
                    unknown.append(config)
            if not unknown:
                break
            hit = self._base.first_failing(unknown)
            consumed = unknown if hit is None else unknown[: hit + 1]
            self._votes.take(consumed)
            self._settle(consumed)
        for index, config in enumerate(configs):
            if self._answer(config) is Outcome.FAIL:
                return index
        return None

    def _answer(self, config: frozenset[T]) -> Outcome:
        verdict = self._votes.verdict(config)
        assert verdict is not None, "only settled configurations are answered"
        self._told[config] = verdict is Outcome.FAIL
        return verdict

    # -- settling -------------------------------------------------------------------

    def _settle(self, configs: Sequence[frozenset[T]]) -> None:
        """Re-train undecided verdicts, then look for contradictions; may raise ``Revised``."""
        self._votes.until(configs, self._votes.decided)
        self._review(configs)
        # Only a verdict that changed can differ from what the strategy was told.
        for config in self._dirty:
            told = self._told.get(config)
            if told is not None and self._votes.fails(config) != told:
                raise Revised
        self._dirty.clear()

    def _review(self, changed: Sequence[frozenset[T]]) -> None:
        """Contradictions, then interaction claims, for each verdict and for each one that moved meanwhile."""
        pending = list(dict.fromkeys(changed))
        while pending:
            config = pending.pop(0)
            self._touched = {}
            self._monotone.check(config)
            self._interactions.check(config)
            moved = [c for c, before in self._touched.items() if before is not self._votes.trained(c)]
            pending.extend(c for c in sorted(moved, key=self._monotone.arrival) if c not in pending)

    # -- the final answer -------------------------------------------------------------

    def support(self, config: frozenset[T], fails: bool, direct: bool = False) -> int:
        """Trainings that back "``config`` fails" or "passes" (``fusion_dd.search.claims``)."""
        return self._claims.support(config, fails, direct)

    def necessity_shown(self, rule: T) -> bool:
        """Whether a training other than ``{rule}`` alone shows that ``rule`` matters.

        Without one, an independent culprit rests on the single training of
        itself (``fusion_dd.search.monotonicity``).
        """
        return self._monotone.necessity_shown(rule)

    def claims(
        self, culprit_sets: Sequence[frozenset[T]], fix: frozenset[T] | None, everything: bool = True
    ) -> list[tuple[frozenset[T], bool]]:
        """What the answer asserts: each set fails, each single removal passes, the fix passes."""
        return self._claims.claims(culprit_sets, fix, everything)

    def confirmed(self, culprit_sets: Sequence[frozenset[T]], fix: frozenset[T]) -> bool:
        """Whether every claim of the answer rests on enough agreeing trainings and holds."""
        return self._claims.confirmed(culprit_sets, fix)

    def verified(self, fix: frozenset[T]) -> bool:
        """Whether "``fix`` passes" may be claimed: PASS on two agreeing trainings of its own,
        three once the run has shown noise."""
        return self._claims.verified(fix)

    def confirm_fix(self, fix: frozenset[T]) -> None:
        """Train a passing fix until it rests on the agreeing trainings ``verified`` needs;
        raises ``Revised`` if that changes its verdict (the search then goes on inside it)."""
        fix = frozenset(fix)
        while self._claims.weak_fix(fix):
            self._votes.retest([fix])
            self._settle([fix])

    def confirm_single_removals(
        self, culprit_sets: Sequence[frozenset[T]], fix: frozenset[T] | None = None
    ) -> None:
        """An interacting pair claims that each of its rules passes alone: two trainings of each,
        three for a rule in two pairs, the passing ``fix``'s trainings counting for the rules it
        keeps on (``Claims.weak_single_removals``)."""
        while True:
            weak = self._claims.weak_single_removals(culprit_sets, fix)
            if not weak:
                return
            self._votes.retest(weak)
            self._settle(weak)

    def confirm(
        self, culprit_sets: Sequence[frozenset[T]], fix: frozenset[T] | None, everything: bool = True
    ) -> None:
        """Train the answer's weakly supported claims again; raises ``Revised`` if one flips.

        Once the run has shown noise, every claim needs three agreeing trainings of
        its own configuration; before that, support implied by monotonicity counts.
        """
        while True:
            weak = self._claims.weak(culprit_sets, fix, everything)
            if not weak:
                return
            # A flipped claim the strategy relied on raises ``Revised`` here. A claim it
            # never asked about cannot change a replay; ``confirmed`` then says False.
            self._votes.retest(weak)
            self._settle(weak)
