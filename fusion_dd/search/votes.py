"""Verdicts from repeated trainings: weighted votes, majorities, and when a verdict is settled.

Real trainings are not bit-reproducible, so one training is one draw, and a
configuration's verdict is the weighted majority of its trainings, not its
first answer:

- A clear reading weighs 2, one near the threshold 1: a metric that landed by
  the limit is a coin toss more often than others.
- A verdict is settled once one side leads by 2 (one clear training, or two
  agreeing near ones); once a clear training dissented, by 2 more than the
  dissent (a lead of two clear trainings); else it is re-trained, up to
  ``max_trainings``. A first answer is therefore taken as it is (no cost on a
  clean run), and a configuration that has both passed and failed, known to sit
  where flips happen, needs a lead that is wrong about 1 in 360 times at 5 %
  flips instead of 1 in 20.
- A tie at the limit is FAIL, as Verrou counts a configuration that can fail
  as failing: a fix that fails half the time is no fix.
- UNRESOLVED trainings do not vote (the engine retries crashes itself); with no
  vote at all the verdict is UNRESOLVED, which the strategies treat as not
  failing.
- A claim rests on the trainings that agree with its verdict *net of* those
  that dissent (``Votes.agreeing``): either of two disagreeing trainings could
  be the flip.

``Votes`` is the one place of the noise layer that asks the oracle for repeats,
and it asks only what the other rules decide to re-train, so a replay of the
same answers asks exactly the same (configuration, repeat) pairs.

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from fusion_dd.search.oracle import Observation, Outcome, RepeatOracle

T = TypeVar("T", bound=Hashable)

# Told of every verdict taken: (configuration, its verdict before or None, its verdict now).
VerdictListener = Callable[[frozenset, "Outcome | None", Outcome], None]


def tally(observations: Iterable[Observation]) -> tuple[int, int]:
    """Weighted votes (fail, pass): a near-threshold reading counts half."""
    fail = passed = 0
    for observation in observations:
        weight = 1 if observation.near_threshold else 2
        if observation.outcome is Outcome.FAIL:
            fail += weight
        elif observation.outcome is Outcome.PASS:
            passed += weight
    return fail, passed


def majority(observations: Sequence[Observation]) -> Outcome:
    """The verdict of a configuration's trainings (ties fail: see the module docstring)."""
    fail, passed = tally(observations)
    if fail == passed == 0:
        return Outcome.UNRESOLVED
    return Outcome.FAIL if fail >= passed else Outcome.PASS


def describe(observations: Sequence[Observation]) -> str:
    """Trainings as a person reads them: "FAIL, PASS~" (``~``: near the threshold)."""
    marks = []
    for observation in observations:
        mark = observation.outcome.value.upper()
        marks.append(mark + ("~" if observation.near_threshold else ""))
    return ", ".join(marks)


def rule_count(count: int) -> str:
    """"1 rule", "3 rules"."""
    return f"{count} rule" + ("" if count == 1 else "s")


class Votes(Generic[T]):
    """Every training of each configuration asked in this run, and the verdict its majority gives.

    ``given`` holds the preconditions (the universe fails, the empty
    configuration passes): the engine settled them by its own reference
    repeats before the search, so they are never re-trained here, but their
    trainings are read once, since references that disagreed mean the run has
    shown noise before its first question. ``on_verdict`` is told of every
    verdict taken, changed or not, so that what is built on the verdicts
    (``fusion_dd.search.monotonicity``) follows them in place.
    """

    def __init__(
        self,
        oracle: RepeatOracle[T],
        given: dict[frozenset[T], Outcome],
        max_trainings: int,
        on_verdict: VerdictListener,
    ) -> None:
        self._base = oracle
        self.given = given
        self.max_trainings = max_trainings
        self._on_verdict = on_verdict
        self._obs: dict[frozenset[T], tuple[Observation, ...]] = {}
        self._verdict: dict[frozenset[T], Outcome] = {}
        self._flaky_configs: set[frozenset[T]] = set()
        # Configurations re-trained to two agreeing trainings and a clear majority: a
        # contradiction or an interaction claim already paid for them.
        self.firm: set[frozenset[T]] = set()
        self._reference_obs: dict[frozenset[T], tuple[Observation, ...]] = {
            config: tuple(oracle.trials(config)) for config in given
        }
        self._reference_flaky = any(self.is_flaky(c) for c in self._reference_obs)

    # -- what the trainings say ----------------------------------------------------------

    @property
    def flaky(self) -> bool:
        """Whether some configuration (a reference included) both passed and failed in this run."""
        return bool(self._flaky_configs) or self._reference_flaky

    def is_flaky(self, config: frozenset[T]) -> bool:
        outcomes = {o.outcome for o in self._obs.get(config, self._reference_obs.get(config, ()))}
        return Outcome.FAIL in outcomes and Outcome.PASS in outcomes

    def observations(self, config: frozenset[T]) -> tuple[Observation, ...]:
        """The trainings of ``config`` in this run (none for a reference: see ``reference_observations``)."""
        return self._obs.get(config, ())

    def reference_observations(self, config: frozenset[T]) -> tuple[Observation, ...] | None:
        """A reference's own trainings, as the engine's majority counted them."""
        return self._reference_obs.get(config)

    def every_training(self) -> list[tuple[frozenset[T], tuple[Observation, ...]]]:
        """The references' trainings, then every other configuration's, in the order first trained."""
        return [*self._reference_obs.items(), *self._obs.items()]

    def verdict(self, config: frozenset[T]) -> Outcome | None:
        """The settled verdict (None: never trained, and not a precondition)."""
        return self.given.get(config) or self._verdict.get(config)

    def trained(self, config: frozenset[T]) -> Outcome | None:
        """The majority of ``config``'s own trainings (None for a precondition)."""
        return self._verdict.get(config)

    def fails(self, config: frozenset[T]) -> bool:
        return self.verdict(config) is Outcome.FAIL

    def settled(self) -> dict[frozenset[T], Outcome]:
        """Every verdict, the preconditions last: the order every scan of all verdicts follows."""
        return {**self._verdict, **self.given}

    # -- when a verdict is settled ---------------------------------------------------------

    def decided(self, config: frozenset[T]) -> bool:
        """One side leads by one clear training; by two once a clear training dissented.

        A first answer is taken as it is (no cost on a clean run; the checks
        of contradictions and claims catch the wrong ones that matter). Once a
        configuration has both passed and failed it is known to sit where flips
        happen, and a net lead of one is wrong as often as a single training
        (1 in 20 at 5 % flips), a lead of two about 1 in 360. A dissent near the
        threshold weighs half, so [FAIL~, PASS, PASS] is decided.
        """
        observations = self._obs.get(config, ())
        if len(observations) >= self.max_trainings:
            return True
        fail, passed = tally(observations)
        if fail == passed == 0:
            return True
        return abs(fail - passed) >= 2 + min(fail, passed, 2)

    def clear(self, config: frozenset[T]) -> bool:
        """A lead of four clear trainings, or twice the usual limit reached.

        Asked of the two sides of a contradiction (a failing configuration inside a
        passing one), one of which is wrong unless the failure is genuinely not
        monotone. A long search holds thousands of verdicts, so some side of some
        contradiction rests on two or three flips in a row (1 in 400, 1 in 8,000 at
        5 % flips); taken for a genuine non-monotone failure, it sends bisection to
        ddmin over the whole configuration, again at every replay of the search
        (searches of 128 culprits among 4,096 rules ran past 50,000 trainings). A
        genuinely non-monotone pair pays a few trainings more to be believed.
        """
        observations = self._obs.get(config, ())
        fail, passed = tally(observations)
        return abs(fail - passed) >= 8 or len(observations) >= 2 * self.max_trainings

    def agreeing(self, config: frozenset[T]) -> int:
        """Trainings that agree with the verdict, net of those that dissent.

        A claim on [PASS, PASS, FAIL, PASS] rests on two trainings, not three:
        each dissent cancels one agreeing training, since either of the two
        could be the flip (at 5 % flips, a net lead of three is wrong about once
        in 7,000 claims, three agreeing out of four about once in 200).
        """
        verdict = self._verdict.get(config)
        observations = self._obs.get(config, ())
        dissenting = [o for o in observations if o.outcome is not verdict and o.outcome is not Outcome.UNRESOLVED]
        near = sum(o.near_threshold for o in dissenting)  # two dissents near the threshold cancel one
        dissent = len(dissenting) - near + near // 2
        return max(0, sum(o.outcome is verdict for o in observations) - dissent)

    def can_retrain(self, config: frozenset[T], limit: int | None = None) -> bool:
        limit = self.max_trainings if limit is None else limit
        return config not in self.given and len(self._obs.get(config, ())) < limit

    # -- training ----------------------------------------------------------------------------

    def take(self, configs: Iterable[frozenset[T]]) -> None:
        """Take the oracle's trainings of these configurations (it must list every one it answered)."""
        for config in configs:
            if config in self.given:
                continue
            observations = tuple(self._base.trials(config))
            if not observations:
                raise RuntimeError(
                    f"the oracle answered a configuration of {rule_count(len(config))} but its trials() lists "
                    "no training of it: see RepeatOracle for the bookkeeping the noise layer relies on"
                )
            self._obs[config] = observations
            if self.is_flaky(config):
                self._flaky_configs.add(config)
            else:
                self._flaky_configs.discard(config)
            old = self._verdict.get(config)
            verdict = majority(observations)
            self._verdict[config] = verdict
            self._on_verdict(config, old, verdict)

    def retest(self, configs: Sequence[frozenset[T]]) -> None:
        """One more training of each configuration (two for one listed twice)."""
        self._base.retest(configs)
        self.take(configs)

    def until(
        self, configs: Sequence[frozenset[T]], done: Callable[[frozenset[T]], bool], limit: int | None = None
    ) -> None:
        """Re-train, one round at a time, every configuration that is not ``done`` yet."""
        while True:
            wave = [c for c in dict.fromkeys(configs) if not done(c) and self.can_retrain(c, limit)]
            if not wave:
                return
            self.retest(wave)

    def make_firm(self, configs: Sequence[frozenset[T]]) -> None:
        """Two agreeing trainings and a clear majority for each (as the limit allows)."""
        configs = [c for c in configs if c not in self.given]
        self.until(configs, lambda c: self.decided(c) and self.agreeing(c) >= 2)
        self.firm.update(configs)
