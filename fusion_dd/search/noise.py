"""Trustworthy verdicts from noisy trainings: repeats, majorities and contradictions.

Real trainings are not bit-reproducible, and one unlucky verdict sends delta
debugging down the wrong branch: a passing configuration that is reported as
failing makes a strategy search inside it for a culprit that is not there. The
strategies themselves stay single-answer algorithms; ``NoiseGuard`` sits between
them and a ``RepeatOracle`` and decides *which* answers deserve another training.

The rules, and why:

- **Votes, not answers.** A configuration's verdict is the weighted majority of
  its trainings: 2 for a clear reading, 1 for one near the threshold. It is
  settled once one side leads by 2 (one clear training, or two agreeing near
  ones); once a clear training dissented, by 2 more than the dissent (a lead of
  two clear trainings); else it is re-trained, up to ``max_trainings``. A tie at
  the limit is FAIL, as Verrou counts a configuration that can fail as failing:
  a fix that fails half the time is no fix. UNRESOLVED trainings do not vote
  (the engine retries crashes itself); with no vote at all the verdict is
  UNRESOLVED, which the strategies treat as not failing.
- **Contradictions are re-trained, not believed.** When a configuration fails
  but one of its supersets passes (monotonicity broken), both are trained again
  until each rests on two agreeing trainings (a side that still wins only
  narrowly gets up to twice the limit). Either one of them was noise (the
  majority flips it, and the run is flaky), or both hold and the failure model
  is genuinely non-monotone (recorded; the strategies cope, bisect by falling
  back to ddmin).
- **An interaction claim is checked once.** Noise and interactions look the same
  from one training each: every subset of a falsely failing configuration passes,
  exactly as every proper subset of an interacting set does. So when the answers
  claim that a smallest known failing configuration needs two or more rules not
  already vouched for by a larger checked one (removing either passes), or that
  it splits into two passing halves of two or more rules each (ddmin's view),
  that configuration is re-trained. If its claim keeps growing afterwards, as
  it does while a search walks through a configuration that does not really
  fail, each growth buys one more training (up to twice the limit). Before a
  rule of an interacting set is switched off, the removals that make it an
  interaction must rest on two trainings (their own, or a passing superset's).
  Independent culprits never show this pattern, so a clean search for them
  pays nothing; a clean interacting set usually pays one training.
- **A lone culprit needs a second witness.** ``{c}`` failing is backed by one
  training; usually another shows that ``c`` matters (a failing configuration
  whose removal of ``c`` passes: bisect's boundary, the fix verification). When
  none does, ``{c}`` is re-trained.
- **Little cost when nothing is contradicted.** Requiring two trainings for every
  final claim would cost two extra trainings per culprit (the culprit alone and
  the fix have no other support: no smaller configuration can show a culprit
  fails, no larger one can show the fix passes), which breaks the noise-free
  budgets (one culprit among 256 in 12 trainings). So the final answer is
  confirmed that strictly (``confirm="strict"``) on request, and automatically
  (``"auto"``) once the run has shown noise (a configuration that both passed
  and failed); then every claim needs three agreeing trainings of its own
  (two flips of one configuration are then the likeliest way left to a wrong
  claim: a third training makes that three).
  Without noise, claims supported by monotonicity (a failing subset, a passing
  superset) need nothing more, except where two aligned flips would contradict
  nothing: a set found by a second or later search (a false FAIL of the fix
  candidate, then of a single), every searched set once two were found, and the
  "passes alone" claims of an interacting pair (``confirm_single_removals``: a
  false PASS of a true lone culprit makes it a pair). One culprit costs nothing
  more; each further set or pair a training or two.
- **The references count.** The engine settles the two references (all off,
  all on) by majority before the search (``fusion_dd.core.scoring.reference_decision``);
  when their own trainings disagreed, the run has shown noise before its first
  question, so every claim needs three agreeing trainings from the start. With
  noise seen, a fix is only claimed verified (``verified``) and an answer only
  ``confirmed`` on three agreeing trainings of each claimed configuration itself.
- **Revise, then replay.** A verdict that changes after the strategy was told
  raises ``Revised``; ``find_culprits`` then runs the search again from the
  start, which costs nothing (every answer is remembered) and follows the
  corrected branch. Every step is a function of the answers, so a resumed
  search asks exactly the same (configuration, repeat) pairs.

Pure: no I/O, no clocks, no threads.
"""

from __future__ import annotations

from collections import Counter

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from fusion_dd.search.masks import Antichains, Masks
from fusion_dd.search.oracle import Observation, Outcome, RepeatOracle, prefetch

T = TypeVar("T", bound=Hashable)

CONFIRM_MODES = ("auto", "strict", "off")


@dataclass(frozen=True)
class NoisePolicy:
    """How hard to check verdicts.

    ``confirm``: "auto" (re-train on contradictions, interaction claims and
    near-threshold readings; confirm the final answer once noise was seen),
    "strict" (also always confirm every final claim by two agreeing trainings),
    "off" (single trainings, the behaviour without repeats).
    ``max_trainings``: trainings of one configuration, the first included.
    """

    confirm: str = "auto"
    max_trainings: int = 7

    def __post_init__(self) -> None:
        if self.confirm not in CONFIRM_MODES:
            raise ValueError(f"confirm must be one of {', '.join(CONFIRM_MODES)}, got {self.confirm!r}")
        if self.max_trainings < 1:
            raise ValueError(f"max_trainings must be at least 1, got {self.max_trainings}")


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


def _submasks(mask: int) -> list[int]:
    """Every non-empty subset of ``mask``."""
    found = []
    sub = mask
    while sub:
        found.append(sub)
        sub = (sub - 1) & mask
    return found


def _rules(count: int) -> str:
    return f"{count} rule" + ("" if count == 1 else "s")


# A contradiction's evidence: the two configurations' trainings before and after they were
# re-trained, and their verdicts then. Worded only when the report asks: a false failure of a
# small configuration contradicts thousands of passing ones, most never read.
_Retrained = tuple[
    tuple[tuple[Observation, ...], tuple[Observation, ...]],
    tuple[tuple[Observation, ...], tuple[Observation, ...]],
    tuple["Outcome | None", "Outcome | None"],
]


def _explain(low: frozenset, high: frozenset, record: _Retrained) -> str:
    """One sentence on a contradiction and what re-training made of it."""
    before, after, (low_now, high_now) = record
    head = (
        f"a configuration of {_rules(len(low))} failed ({_describe(before[0]) or 'precondition'}) while a "
        f"superset of {_rules(len(high))} passed ({_describe(before[1]) or 'precondition'})"
    )
    if low_now is Outcome.FAIL and high_now is Outcome.PASS:
        tail = (
            f"; re-trained, both held ({_describe(after[0])} / "
            f"{_describe(after[1])}): the failure is genuinely non-monotone"
        )
    else:
        wrong = "the subset's failure" if low_now is not Outcome.FAIL else "the superset's pass"
        tail = f"; re-trained ({_describe(after[0])} / {_describe(after[1])}): {wrong} was noise"
    return head + tail


def _describe(observations: Sequence[Observation]) -> str:
    marks = []
    for observation in observations:
        mark = observation.outcome.value.upper()
        marks.append(mark + ("~" if observation.near_threshold else ""))
    return ", ".join(marks)


class NoiseGuard(Generic[T]):
    """An ``Oracle`` for the strategies that answers with settled verdicts.

    ``universe`` is known to fail and the empty configuration to pass (the
    engine's preconditions, settled by its own reference repeats): they are
    never re-trained here.
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
        self._rank = {rule: i for i, rule in enumerate(order)}
        self._given: dict[frozenset[T], Outcome] = {
            frozenset(order): Outcome.FAIL,
            frozenset(): Outcome.PASS,
        }
        # Bookkeeping that keeps a question's cost flat as the answers pile up
        # (fusion_dd.search.masks): the order in which verdicts arrived, the
        # verdicts that changed, the minimal failing / maximal passing ones.
        self._masks: Masks[T] = masks if masks is not None else Masks(order)
        self._seq: dict[frozenset[T], int] = {}
        self._chains = Antichains()
        self._config_of: dict[int, frozenset[T]] = {}
        self._fail_masks: list[int] = []
        self._pass_masks: list[int] = []
        self._pass_set: set[int] = set()
        for config, verdict in self._given.items():
            self._chain_add(config, verdict)
        self._halves_seen: dict[int, tuple[bool, int]] = {}  # leaf -> (halves found, passing masks looked at)
        self._needed_seen: dict[int, tuple[int, int]] = {}  # leaf -> (necessary rules' bits, passing masks looked at)
        self._touched: dict[frozenset[T], Outcome | None] = {}
        self._dirty: set[frozenset[T]] = set()  # verdicts changed since the last check of what was told
        self._flaky_configs: set[frozenset[T]] = set()
        self._obs: dict[frozenset[T], tuple[Observation, ...]] = {}
        self._verdict: dict[frozenset[T], Outcome] = {}
        self._told: dict[frozenset[T], bool] = {}
        self._firm: set[frozenset[T]] = set()
        self._claims_checked: dict[frozenset[T], int] = {}  # checked leaf -> rules claimed necessary then
        # (failing subset, passing superset) -> what their trainings were before and after the re-training
        self._contradictions: dict[tuple[frozenset[T], frozenset[T]], _Retrained] = {}
        self.replays = 0
        # The references' own trainings (the engine settled them by majority before the
        # search): when they disagreed, the run has shown noise before its first question.
        self._reference_obs: dict[frozenset[T], tuple[Observation, ...]] = {
            config: tuple(oracle.trials(config)) for config in self._given
        }
        self._reference_flaky = any(self._is_flaky(c) for c in self._reference_obs)

    # -- bookkeeping ------------------------------------------------------------------

    def _mask(self, config: frozenset[T]) -> int:
        return self._masks.of(config)

    def _set_verdict(self, config: frozenset[T], verdict: Outcome) -> None:
        old = self._verdict.get(config)
        self._touched.setdefault(config, old)
        if old is None:
            self._seq[config] = len(self._seq)
        elif old is not verdict:
            self._dirty.add(config)
            self._chain_remove(config, old)
        self._verdict[config] = verdict
        if old is not verdict:
            self._chain_add(config, verdict)

    def _chain_add(self, config: frozenset[T], verdict: Outcome) -> None:
        if verdict is Outcome.FAIL or verdict is Outcome.PASS:
            mask = self._mask(config)
            self._config_of[mask] = config
            self._chains.add(mask, verdict is Outcome.FAIL)
            if verdict is Outcome.FAIL:
                self._fail_masks.append(mask)
            else:
                self._pass_masks.append(mask)
                self._pass_set.add(mask)

    def _chain_remove(self, config: frozenset[T], verdict: Outcome) -> None:
        """Take back a verdict that changed, in place: a flip used to rebuild everything from all verdicts."""
        if verdict is Outcome.FAIL or verdict is Outcome.PASS:
            mask = self._mask(config)
            fails = verdict is Outcome.FAIL
            same = self._fail_masks if fails else self._pass_masks
            same.remove(mask)
            if not fails:
                self._pass_set.discard(mask)
                # ``_halves`` and ``_necessary`` remember what the passing masks showed; one went.
                self._halves_seen = {}
                self._needed_seen = {}
            self._chains.remove(mask, fails, same)

    def _antichains(self) -> Antichains:
        """Minimal failing and maximal passing verdicts (the preconditions included).

        Kept up to date as verdicts arrive and change, as are ``_fail_masks`` /
        ``_pass_masks``, the masks of every failing and passing verdict (in no
        particular order), for the scans that need all.
        """
        return self._chains

    def _arrival(self, config: frozenset[T]) -> tuple[int, int]:
        """Position in the order of ``{**_verdict, **_given}``: the order every scan used to follow."""
        seq = self._seq.get(config)
        if seq is not None:
            return (0, seq)
        return (1, list(self._given).index(config))

    # -- what the run has seen ------------------------------------------------------

    @property
    def flaky(self) -> bool:
        """Whether some configuration (a reference included) both passed and failed in this run."""
        return bool(self._flaky_configs) or self._reference_flaky

    def observations(self, config: frozenset[T]) -> tuple[Observation, ...]:
        return self._obs.get(frozenset(config), ())

    def verdict(self, config: frozenset[T]) -> Outcome | None:
        """The settled verdict (None: never trained, and not a precondition)."""
        config = frozenset(config)
        return self._given.get(config) or self._verdict.get(config)

    def inconsistencies(self) -> list[Inconsistency[T]]:
        """Every disagreement seen, with its evidence, in the order it was found."""
        found: list[Inconsistency[T]] = []
        for (low, high), record in self._contradictions.items():
            found.append(
                Inconsistency(
                    kind="non-monotone",
                    configs=(low, high),
                    observations=(self.observations(low), self.observations(high)),
                    verdicts=(
                        self.verdict(low) or Outcome.UNRESOLVED,
                        self.verdict(high) or Outcome.UNRESOLVED,
                    ),
                    explanation=_explain(low, high, record),
                )
            )
        for config, observations in [*self._reference_obs.items(), *self._obs.items()]:
            if self._is_flaky(config):
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
                            f"{len(observations)} trainings ({_describe(observations)}); "
                            f"decided {verdict.value.upper()} by majority"
                        ),
                    )
                )
        return found

    def _is_flaky(self, config: frozenset[T]) -> bool:
        outcomes = {o.outcome for o in self._obs.get(config, self._reference_obs.get(config, ()))}
        return Outcome.FAIL in outcomes and Outcome.PASS in outcomes

    def _fails(self, config: frozenset[T]) -> bool:
        return self.verdict(config) is Outcome.FAIL

    # -- the Oracle the strategies see ----------------------------------------------

    def replay(self) -> None:
        """Forget what the strategy was told; keep every training (they are free now)."""
        self._told.clear()
        self._dirty.clear()
        self.replays += 1

    def outcomes(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        configs = [frozenset(c) for c in configs]
        new = [c for c in dict.fromkeys(configs) if self.verdict(c) is None]
        if new:
            self._base.outcomes(new)
            self._sync(new)
            self._settle(new)
        answers = [self._answer(c) for c in configs]
        return answers

    def prefetch(self, configs: Sequence[frozenset[T]]) -> None:
        """Passes on the configurations whose verdict is still open (``fusion_dd.search.oracle.prefetch``)."""
        prefetch(self._base, [c for c in map(frozenset, configs) if self.verdict(c) is None])

    def first_failing(self, configs: Sequence[frozenset[T]]) -> int | None:
        configs = [frozenset(c) for c in configs]
        while True:
            unknown: list[frozenset[T]] = []
            for config in configs:
                verdict = self.verdict(config)
                if verdict is Outcome.FAIL:
                    break
                if verdict is None and config not in unknown:
                    unknown.append(config)
            if not unknown:
                break
            hit = self._base.first_failing(unknown)
            consumed = unknown if hit is None else unknown[: hit + 1]
            self._sync(consumed)
            self._settle(consumed)
        for index, config in enumerate(configs):
            if self._answer(config) is Outcome.FAIL:
                return index
        return None

    def _answer(self, config: frozenset[T]) -> Outcome:
        verdict = self.verdict(config)
        assert verdict is not None, "only settled configurations are answered"
        self._told[config] = verdict is Outcome.FAIL
        return verdict

    # -- training and settling ------------------------------------------------------

    def _sync(self, configs: Iterable[frozenset[T]]) -> None:
        """Take the oracle's trainings of these configurations (it must list every one it answered)."""
        for config in configs:
            if config in self._given:
                continue
            observations = tuple(self._base.trials(config))
            if not observations:
                raise RuntimeError(
                    f"the oracle answered a configuration of {_rules(len(config))} but its trials() lists "
                    "no training of it: see RepeatOracle for the bookkeeping the noise layer relies on"
                )
            self._obs[config] = observations
            if self._is_flaky(config):
                self._flaky_configs.add(config)
            else:
                self._flaky_configs.discard(config)
            self._set_verdict(config, majority(observations))

    def _decided(self, config: frozenset[T]) -> bool:
        """One side leads by one clear training; by two once a clear training dissented.

        A first answer is taken as it is (no cost on a clean run; the checks
        above catch the wrong ones that matter). Once a configuration has both
        passed and failed it is known to sit where flips happen, and a net lead
        of one is wrong as often as a single training (1 in 20 at 5 % flips),
        a lead of two about 1 in 360. A dissent near the threshold weighs half,
        so [FAIL~, PASS, PASS] is decided.
        """
        observations = self._obs.get(config, ())
        if len(observations) >= self.policy.max_trainings:
            return True
        fail, passed = tally(observations)
        if fail == passed == 0:
            return True
        return abs(fail - passed) >= 2 + min(fail, passed, 2)

    def _clear(self, config: frozenset[T]) -> bool:
        """A lead of two clear trainings, or twice the usual limit reached."""
        observations = self._obs.get(config, ())
        fail, passed = tally(observations)
        return abs(fail - passed) >= 4 or len(observations) >= 2 * self.policy.max_trainings

    def _agreeing(self, config: frozenset[T]) -> int:
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

    def _can_retrain(self, config: frozenset[T], limit: int | None = None) -> bool:
        limit = self.policy.max_trainings if limit is None else limit
        return config not in self._given and len(self._obs.get(config, ())) < limit

    def _retest(self, configs: Sequence[frozenset[T]]) -> None:
        self._base.retest(configs)
        self._sync(configs)

    def _settle(self, configs: Sequence[frozenset[T]]) -> None:
        """Re-train undecided verdicts, then look for contradictions; may raise ``Revised``."""
        self._until(configs, self._decided)
        self._review(configs)
        # Only a verdict that changed can differ from what the strategy was told.
        for config in self._dirty:
            told = self._told.get(config)
            if told is not None and self._fails(config) != told:
                raise Revised
        self._dirty.clear()

    def _until(
        self, configs: Sequence[frozenset[T]], done: Callable[[frozenset[T]], bool], limit: int | None = None
    ) -> None:
        """Re-train, one round at a time, every configuration that is not ``done`` yet."""
        while True:
            wave = [c for c in dict.fromkeys(configs) if not done(c) and self._can_retrain(c, limit)]
            if not wave:
                return
            self._retest(wave)

    def _make_firm(self, configs: Sequence[frozenset[T]]) -> None:
        """Two agreeing trainings and a clear majority for each (as the limit allows)."""
        configs = [c for c in configs if c not in self._given]
        self._until(configs, lambda c: self._decided(c) and self._agreeing(c) >= 2)
        self._firm.update(configs)

    # -- contradictions and interaction claims ----------------------------------------

    def _review(self, changed: Sequence[frozenset[T]]) -> None:
        pending = list(dict.fromkeys(changed))
        while pending:
            config = pending.pop(0)
            self._touched = {}
            self._check_monotone(config)
            self._check_claim(config)
            moved = [c for c, before in self._touched.items() if before is not self._verdict.get(c)]
            pending.extend(c for c in sorted(moved, key=self._arrival) if c not in pending)

    def _check_monotone(self, config: frozenset[T]) -> None:
        """A failing configuration with a passing superset: train both again."""
        verdict = self.verdict(config)
        if verdict is None:
            return
        pairs = []
        mask = self._mask(config)
        # No maximal passing verdict around it (no minimal failing one inside it): no pair at all.
        if verdict is Outcome.FAIL and self._antichains().contradicts(mask, True):
            pairs = [(config, other) for other in self._around(mask)]
        elif verdict is Outcome.PASS and self._antichains().contradicts(mask, False):
            pairs = [(other, config) for other in self._inside(mask)]
        for low, high in pairs:
            if (low, high) in self._contradictions:
                continue
            before = (self._obs.get(low, ()), self._obs.get(high, ()))
            self._make_firm([low, high])
            if self._fails(low) and not self._fails(high):
                # Still contradicting: a side that won only narrowly (at the limit) gets
                # up to twice the limit, since a wrong verdict that contradicts others
                # would be contradicted, and re-trained, again and again.
                self._until([low, high], self._clear, 2 * self.policy.max_trainings)
            after = (self.observations(low), self.observations(high))
            self._contradictions[(low, high)] = (before, after, (self.verdict(low), self.verdict(high)))

    def _around(self, mask: int) -> list[frozenset[T]]:
        """The passing configurations strictly around ``mask``, in verdict order.

        Found among the masks, not by walking every verdict's rules: after a
        contradiction this is asked for each question of a search.
        """
        found = [self._config_of[high] for high in self._pass_masks if mask & ~high == 0 and high != mask]
        return sorted(found, key=self._arrival)

    def _inside(self, mask: int) -> list[frozenset[T]]:
        """The failing configurations strictly inside ``mask``, in verdict order."""
        found = [self._config_of[low] for low in self._fail_masks if low & ~mask == 0 and low != mask]
        return sorted(found, key=self._arrival)

    def _leaves(self, around: frozenset[T]) -> list[frozenset[T]]:
        """Smallest known failing configurations whose evidence ``around`` touches.

        That is ``around`` itself when it fails, or the failing configurations
        around a passing one, if no failing configuration lies inside them:
        exactly the minimal failing ones (the antichain), in verdict order.
        """
        verdict = self.verdict(around)
        chains = self._antichains()
        if verdict is Outcome.FAIL:
            return [around] if chains.is_min_fail(self._mask(around)) else []
        if verdict is not Outcome.PASS:
            return []
        inside = self._mask(around)
        # A single failing rule lies strictly around ``around`` only when that is empty.
        lows = chains.min_fail if inside == 0 else chains.multi_fail
        near = [self._config_of[low] for low in lows if inside & ~low == 0 and inside != low]
        return sorted(near, key=self._arrival)

    def _check_claim(self, config: frozenset[T]) -> None:
        """A fresh interaction claim rests on one training of its failing configuration: re-train it.

        Rules already shown necessary inside a larger failing configuration that
        was checked are not fresh: the leaves that a search visits inside it carry
        them along, and checking each again would cost a training per step. A
        checked configuration whose claim keeps growing (yet another of its rules
        turns out necessary) is what a search looks like when it walks through a
        configuration that does not really fail: each growth buys one more training.
        """
        for leaf in self._leaves(config):
            if leaf in self._given:
                continue
            necessary = self._necessary(leaf)
            if leaf in self._claims_checked:
                # A walk costs a binary search per step, so it may buy up to twice the
                # usual number of trainings: a wrong majority here is the costliest kind.
                walk_limit = 2 * self.policy.max_trainings
                if len(necessary) > self._claims_checked[leaf] and self._can_retrain(leaf, walk_limit):
                    self._claims_checked[leaf] = len(necessary)
                    self._retest([leaf])
                    self._until([leaf], self._decided)
                continue
            if leaf in self._firm:
                continue
            fresh = necessary - self._vouched(leaf)
            if len(fresh) < 2 and not self._halves(leaf):
                continue
            self._claims_checked[leaf] = len(necessary)
            self._make_firm([leaf])

    def _vouched(self, leaf: frozenset[T]) -> set[T]:
        vouched: set[T] = set()
        inside = self._mask(leaf)
        for checked in self._claims_checked:
            outer = self._mask(checked)
            if inside & ~outer == 0 and inside != outer and self._fails(checked):
                vouched.update(self._necessary(checked))
        return vouched

    def _necessary(self, leaf: frozenset[T]) -> set[T]:
        """Rules of ``leaf`` whose removal is known to pass (by a passing superset of the removal)."""
        whole = self._mask(leaf)
        needed, seen = self._needed_seen.get(whole, (-1, 0))
        if needed < 0:
            needed = 0
            chains = self._antichains()
            # A passing superset of a removal lies inside a maximal passing one, which shows the
            # same removal unless it holds all of ``leaf`` (a contradiction): then look at all.
            if chains.contradicts(whole, True):
                candidates = self._pass_masks
            else:
                candidates = chains.max_pass
        else:
            # Passing verdicts only arrive (a change forgets this): look at the new ones only. A
            # leaf inside a passing configuration is asked about for every question after it.
            candidates = self._pass_masks[seen:]
        for other in candidates:
            missing = whole & ~other
            if missing and missing & (missing - 1) == 0:
                needed |= missing
        self._needed_seen[whole] = (needed, len(self._pass_masks))
        found: set[T] = set()
        while needed:
            low = needed & -needed
            found.add(self._masks.rule(low.bit_length() - 1))
            needed ^= low
        return found

    def _halves(self, leaf: frozenset[T]) -> bool:
        """Two disjoint passing parts of at least two rules each that make up ``leaf``."""
        whole = self._mask(leaf)
        if whole.bit_count() < 4:
            return False
        self._antichains()
        # Passing verdicts only arrive (a change rebuilds and forgets this): look at the new ones only.
        found, seen = self._halves_seen.get(whole, (False, 0))
        if not found:
            outside = ~whole
            passing = self._pass_set
            for part in self._pass_masks[seen:]:
                if part & outside == 0 and part != whole and part.bit_count() >= 2:
                    rest = whole ^ part
                    if rest.bit_count() >= 2 and rest in passing:
                        found = True
                        break
            self._halves_seen[whole] = (found, len(self._pass_masks))
        return found

    # -- the final answer ---------------------------------------------------------------

    def support(self, config: frozenset[T], fails: bool, direct: bool = False) -> int:
        """Trainings that back "``config`` fails" (a failing subset) or "passes" (a passing superset).

        ``direct``: only trainings of ``config`` itself. Once a run has shown
        noise, two single trainings of different configurations that imply each
        other are two chances for a flip, not a confirmation.
        """
        config = frozenset(config)
        if config in self._given:
            if (self._given[config] is Outcome.FAIL) != fails:
                return 0
            trained = self._reference_obs.get(config)
            if direct and trained:  # a reference's own trainings, as its majority counted them
                return sum(o.outcome is self._given[config] for o in trained)
            return self._witnesses()  # settled before the search, or given as a known metric
        if direct:
            return self._agreeing(config) if self._fails(config) == fails and config in self._verdict else 0
        whole = self._mask(config)
        chains = self._antichains()
        if fails:
            if not chains.fails_inside(whole):
                return 0  # no failing configuration inside it at all
            if 1 << whole.bit_count() <= len(self._fail_masks):
                candidates = _submasks(whole)  # a small configuration: its subsets are fewer
            else:
                candidates = self._fail_masks
        else:
            if not chains.contradicts(whole, True) and whole not in self._pass_set:
                return 0  # no passing configuration around it at all
            candidates = self._pass_masks
        wanted = Outcome.FAIL if fails else Outcome.PASS
        total = 0
        for mask in candidates:
            if (mask & ~whole if fails else whole & ~mask) == 0:
                other = self._config_of.get(mask)
                if other is not None and self._verdict.get(other) is wanted:  # references count above
                    total += self._agreeing(other)
        return total

    def necessity_shown(self, rule: T) -> bool:
        """Whether a training other than ``{rule}`` alone shows that ``rule`` matters.

        That is a failing configuration with more rules than ``rule`` whose
        removal of ``rule`` is known to pass (bisect's boundary, the fix
        verification). Without one, an independent culprit rests on the single
        training of itself; that happens when the first probe of a search was
        the rule alone, so one flip there names a culprit that no later answer
        contradicts.
        """
        bit = 1 << self._masks.bit(rule)
        chains = self._antichains()
        # The maximal passing configurations with and without ``rule``, split once: the
        # question is asked for every culprit of a search, each over all failing ones.
        without = [high for high in chains.max_pass if not high & bit]
        holding = [high for high in chains.max_pass if high & bit]
        passing: list[int] | None = None
        # Newest first: the training that shows it is usually the boundary that isolated the
        # rule, late in the search (the answer is the same in any order).
        for holder in reversed(self._fail_masks):
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
                passing = [mask for mask in self._pass_masks if not mask & bit]
            if any(rest & ~mask == 0 for mask in passing):
                return True
        return False

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
        """Whether every claim of the answer rests on enough agreeing trainings (``_witnesses``) and holds.

        Once the run has shown noise the two trainings must be of the claim's own
        configuration: support implied by monotonicity is two chances for a flip.
        """
        direct = self.flaky
        return all(
            self.support(c, fails, direct) >= self._witnesses() and (self.verdict(c) is None or self._fails(c) == fails)
            for c, fails in self.claims(culprit_sets, fix)
        )

    def _witnesses(self) -> int:
        """Agreeing trainings a final claim needs: two; three once the run has shown noise,
        where two flips of one configuration are the likeliest way left to a wrong claim."""
        return 3 if self.flaky else 2

    def verified(self, fix: frozenset[T]) -> bool:
        """Whether "``fix`` passes" may be claimed: its verdict is PASS on two agreeing
        trainings of its own (three once the run has shown noise).

        One training is one flip away from a false claim, and nothing else can
        back it: no larger configuration than a fix can pass. At 5 % flips, with
        a second culprit the search has not found yet, a single passing
        training hands over a fix that truly fails in about 1 search in 30.
        """
        fix = frozenset(fix)
        if self.verdict(fix) is not Outcome.PASS:
            return False
        if fix in self._given and not self.flaky:
            return True  # every rule off: the baseline reference, settled by the engine before the search
        return self.support(fix, False, direct=True) >= self._witnesses()

    def confirm_fix(self, fix: frozenset[T]) -> None:
        """Train a passing fix until it rests on the agreeing trainings ``verified`` needs;
        raises ``Revised`` if that changes its verdict (the search then goes on inside it)."""
        fix = frozenset(fix)
        while (
            self.verdict(fix) is Outcome.PASS
            and fix not in self._given
            and self.support(fix, False, direct=True) < self._witnesses()
            and self._can_retrain(fix)
        ):
            self._retest([fix])
            self._settle([fix])

    def confirm_single_removals(self, culprit_sets: Sequence[frozenset[T]]) -> None:
        """An interacting pair claims that each of its rules passes alone: two trainings of each.

        That is the claim one false PASS of a true lone culprit ``c`` turns into
        the spurious pair ``{c, x}``; support implied by a passing superset of
        ``{c}`` is one more chance for the same flip, so only ``{c}``'s own
        trainings count. Larger sets' removals keep monotone support: a clean
        interacting set must not cost a training per rule.

        A rule in two of the pairs needs three: that is what a lone culprit whose
        single training flipped twice looks like (its first partner switched off,
        the search finds it again with the next one), the likeliest wrong answer
        left at a few percent of flips; a genuine overlap ({a,b}, {b,c}) pays one
        training for it.
        """
        counts = Counter(rule for rules in culprit_sets if len(rules) == 2 for rule in rules)

        def needed(rule: T) -> int:
            return 3 if counts[rule] > 1 else 2

        while True:
            weak = [
                rules - {rule}
                for rules in culprit_sets
                if len(rules) == 2
                for rule in sorted(rules, key=self._rank.__getitem__)
                if self.support(rules - {rule}, False, direct=True) < needed(next(iter(rules - {rule})))
                and self._can_retrain(rules - {rule})
                and self.verdict(rules - {rule}) is not Outcome.UNRESOLVED
            ]
            if not weak:
                return
            self._retest(weak)
            self._settle(weak)

    def confirm(
        self, culprit_sets: Sequence[frozenset[T]], fix: frozenset[T] | None, everything: bool = True
    ) -> None:
        """Train the answer's weakly supported claims again; raises ``Revised`` if one flips.

        Once the run has shown noise, every claim needs three agreeing trainings of
        its own configuration; before that, support implied by monotonicity counts.
        """
        while True:
            direct = self.flaky
            weak = [
                c
                for c, fails in self.claims(culprit_sets, fix, everything)
                if self.support(c, fails, direct) < self._witnesses()
                and self._can_retrain(c)
                and self.verdict(c) is not Outcome.UNRESOLVED  # crashes are the engine's to retry
            ]
            if not weak:
                return
            # A flipped claim the strategy relied on raises ``Revised`` here. A claim it
            # never asked about cannot change a replay; ``confirmed`` then says False.
            self._retest(weak)
            self._settle(weak)
