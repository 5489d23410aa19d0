"""An in-memory oracle and synthetic failure models, for tests and benchmarks.

A real training costs hours, so strategies are judged by how many trainings and
how many rounds of parallel trainings they launch. ``SimulatedOracle`` answers
from a plain function and counts both exactly the way the engine pays for them:
a configuration is trained at most once (the cache), P configurations share a
round, and a "first failing" question stops launching after the first wave that
contains a failure. The model helpers build the failure patterns of docs/architecture.md
section 3: independent culprits (OR), interacting sets (AND), both (mixed), and a
non-monotone masking pattern.

Noise: given a ``noise`` model, every training (configuration, repeat) is
passed through it, so the same configuration can answer differently on its
repeats, as real trainings do. ``flip_noise`` flips each training's outcome
with a fixed probability; ``gaussian_noise`` adds normal noise to a metric that
sits one unit on either side of the threshold and marks readings within a
margin as near the threshold. Both are seeded hashes of (seed, configuration,
repeat): a replay sees exactly the same trainings.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from fusion_dd.search.first_question import first_question, opening_width
from fusion_dd.search.lanes import LanePlan, Lanes
from fusion_dd.search.oracle import BudgetExhausted, Observation, Outcome

T = TypeVar("T", bound=Hashable)

TestFunction = Callable[[frozenset[T]], "Outcome | bool"]
# (configuration, repeat, the noise-free outcome) -> what this training reports
NoiseModel = Callable[[frozenset, int, Outcome], "Outcome | Observation"]
Key = tuple[frozenset, int]


def as_outcome(answer: Outcome | bool) -> Outcome:
    """Plain predicates say True for "the failure shows", as picire's tests do."""
    if isinstance(answer, Outcome):
        return answer
    return Outcome.FAIL if answer else Outcome.PASS


class SimulatedOracle(Generic[T]):
    """An ``Oracle`` backed by a function, with a cache, P devices and a budget.

    ``calls`` logs every configuration handed to the function, in order, so tests
    can assert that nothing was trained twice; ``trainings`` is its length and
    ``rounds`` the number of waves of at most ``parallelism`` trainings.

    It is also a ``RepeatOracle``: ``retest`` trains the next repeat of a
    configuration and ``trials`` lists what was asked, following the protocol's
    bookkeeping exactly as the engine must. ``supports_repeats`` is False unless
    ``repeats=True`` or a ``noise`` model is given, so that the noise layer
    leaves single-answer tests alone. ``asked`` logs every (configuration,
    repeat) answered to a caller, cache hits included; ``launched`` logs the
    trained ones. ``cache`` holds repeat 0 (as before repeats existed),
    ``repeat_cache`` the later repeats, ``near`` the keys read near the threshold.
    """

    def __init__(
        self,
        test: Callable[[frozenset[T]], Outcome | bool],
        parallelism: int = 1,
        budget: int | None = None,
        *,
        noise: NoiseModel | None = None,
        repeats: bool | None = None,
    ) -> None:
        if parallelism < 1:
            raise ValueError(f"parallelism must be at least 1, got {parallelism}")
        if budget is not None and budget < 0:
            raise ValueError(f"budget must not be negative, got {budget}")
        self._test = test
        self._noise = noise
        self.parallelism = parallelism
        self.budget = budget
        self.supports_repeats = bool(repeats) if repeats is not None else noise is not None
        self.cache: dict[frozenset[T], Outcome] = {}
        self.repeat_cache: dict[Key, Outcome] = {}
        self.near: set[Key] = set()
        self.calls: list[frozenset[T]] = []
        self.asked: list[Key] = []
        self.launched: list[Key] = []
        self.rounds = 0
        self.smallest_failing: frozenset[T] | None = None
        self._next: dict[frozenset[T], int] = {}
        self._prefetched: list[frozenset[T]] = []  # for the next question only
        # The plan the strategy sizes its questions by, moved on per question as the
        # engine's oracle does (``fusion_dd.search.lanes``); None for a fixed width.
        self.lanes: LanePlan | None = None

    def _question(self) -> None:
        if self.lanes is not None:
            self.lanes.advance()

    def prefetch(self, configs: Sequence[frozenset[T]]) -> None:
        """Train these along with the next question, on the devices its last wave leaves idle.

        As the engine's oracle does (``fusion_dd.search.oracle.prefetch``): the
        trainings count, the rounds they share do not, and the budget goes to the
        question's own configurations first.
        """
        self._prefetched = [frozenset(c) for c in configs]

    def _along(self, needed: Sequence[Key]) -> list[Key]:
        """The prefetched keys that fit beside ``needed`` (its last wave's idle devices, the budget).

        A configuration listed again stands for its next repeat (``prefetch``).
        """
        prefetched, self._prefetched = self._prefetched, []
        if not needed:
            return []
        spare = -len(needed) % self.parallelism
        if self.budget is not None:
            spare = min(spare, self.budget - self.trainings - len(needed))
        listed: dict[frozenset[T], int] = {}
        along: list[Key] = []
        for config in prefetched:
            key = (config, listed.get(config, 0))
            listed[config] = key[1] + 1
            wanted = key[1] == 0 or self.supports_repeats
            if wanted and len(along) < spare and key not in needed and self._cached(key) is None:
                along.append(key)
        return along

    @property
    def trainings(self) -> int:
        """Trainings launched so far (cache hits are free)."""
        return len(self.calls)

    # -- the answers cache, as a journal would keep it ---------------------------

    def _cached(self, key: Key) -> Outcome | None:
        config, repeat = key
        return self.cache.get(config) if repeat == 0 else self.repeat_cache.get(key)

    def journal(self) -> dict[Key, Observation]:
        """Every finished training by (configuration, repeat): what a resume may reuse."""
        keys = [(c, 0) for c in self.cache] + list(self.repeat_cache)
        return {key: Observation(key[1], self._cached(key), key in self.near) for key in keys}  # type: ignore[arg-type]

    def preload(self, journal: dict[Key, Observation]) -> None:
        """Take finished trainings from an earlier run, as resume does."""
        for (config, repeat), observation in journal.items():
            config = frozenset(config)
            if repeat == 0:
                self.cache[config] = observation.outcome
            else:
                self.repeat_cache[(config, repeat)] = observation.outcome
            if observation.near_threshold:
                self.near.add((config, repeat))

    # -- questions ----------------------------------------------------------------

    def outcomes(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        """Answer every configuration; the uncached ones run in waves of P."""
        self._question()
        configs = [frozenset(c) for c in configs]
        needed: list[Key] = [(c, 0) for c in _distinct(c for c in configs if c not in self.cache)]
        needed += self._along(needed)
        for start in range(0, len(needed), self.parallelism):
            self._run_wave(needed[start : start + self.parallelism])
        self._consumed(configs)
        return [self.cache[c] for c in configs]

    def first_failing(self, configs: Sequence[frozenset[T]]) -> int | None:
        """The first failing index in list order, launching waves of P in list order.

        A cached failure ends the question without launching anything after it;
        every configuration of a launched wave counts as a training, because a
        real device was busy with it even if its answer turned out not to matter.
        """
        self._question()
        configs = [frozenset(c) for c in configs]
        self._prefetched = []  # a wave may stop at a failure: nothing rides along
        index = 0
        while index < len(configs):
            known = self.cache.get(configs[index])
            if known is Outcome.FAIL:
                self._consumed(configs[: index + 1])
                return index
            if known is not None:
                index += 1
                continue
            wave: list[frozenset[T]] = []
            for config in configs[index:]:
                if len(wave) == self.parallelism:
                    break
                cached = self.cache.get(config)
                if cached is Outcome.FAIL:
                    break
                if cached is None and config not in wave:
                    wave.append(config)
            self._run_wave([(c, 0) for c in wave])
        self._consumed(configs)
        return None

    def retest(self, configs: Sequence[frozenset[T]]) -> list[Outcome]:
        """The next repeat of each configuration; uncached ones run in waves of P."""
        self._question()
        configs = [frozenset(c) for c in configs]
        counts = dict(self._next)
        keys: list[Key] = []
        for config in configs:
            repeat = counts.get(config, 0)
            counts[config] = repeat + 1
            keys.append((config, repeat))
        needed = [key for key in keys if self._cached(key) is None]
        needed += self._along(needed)
        for start in range(0, len(needed), self.parallelism):
            self._run_wave(needed[start : start + self.parallelism])
        answers = []
        for config, repeat in keys:
            self._next[config] = repeat + 1
            self.asked.append((config, repeat))
            answers.append(self._cached((config, repeat)))
        return answers  # type: ignore[return-value]

    def trials(self, config: frozenset[T]) -> list[Observation]:
        """The trainings of ``config`` asked in this run, in repeat order."""
        config = frozenset(config)
        seen = []
        for repeat in range(self._next.get(config, 0)):
            outcome = self._cached((config, repeat))
            if outcome is not None:
                seen.append(Observation(repeat, outcome, (config, repeat) in self.near))
        return seen

    def _consumed(self, configs: Sequence[frozenset[T]]) -> None:
        """Repeat 0 of these was answered to the caller: later repeats start at 1."""
        for config in configs:
            self.asked.append((config, 0))
            self._next[config] = max(self._next.get(config, 0), 1)

    def _run_wave(self, wave: Sequence[Key]) -> None:
        """Launch one round; stop at the budget, keeping what already ran."""
        launched = False
        for key in wave:
            if self.budget is not None and self.trainings >= self.budget:
                if launched:
                    self.rounds += 1
                raise BudgetExhausted(self.smallest_failing)
            launched = True
            config, repeat = key
            self.calls.append(config)
            self.launched.append(key)
            outcome = as_outcome(self._test(config))
            if self._noise is not None:
                reading = self._noise(config, repeat, outcome)
                if isinstance(reading, Observation):
                    if reading.near_threshold:
                        self.near.add(key)
                    outcome = reading.outcome
                else:
                    outcome = reading
            if repeat == 0:
                self.cache[config] = outcome
            else:
                self.repeat_cache[key] = outcome
            if outcome is Outcome.FAIL and (
                self.smallest_failing is None or len(config) < len(self.smallest_failing)
            ):
                self.smallest_failing = config
        if launched:
            self.rounds += 1


def _distinct(configs: Iterable[frozenset[T]]) -> list[frozenset[T]]:
    """Order-preserving de-duplication, so one batch never trains a config twice."""
    return list(dict.fromkeys(configs))


# --- failure models -------------------------------------------------------------


def sets_model(culprit_sets: Iterable[Collection[T]]) -> Callable[[frozenset[T]], bool]:
    """Fails when every rule of at least one culprit set is on (monotone).

    A set of one rule is an independent culprit; a larger set is an interaction
    that shows only when all its rules fuse together.
    """
    sets = [frozenset(s) for s in culprit_sets]
    if any(not s for s in sets):
        raise ValueError("a culprit set must not be empty: the empty configuration must pass")

    def fails(config: frozenset[T]) -> bool:
        return any(s <= config for s in sets)

    return fails


def or_model(culprits: Iterable[T]) -> Callable[[frozenset[T]], bool]:
    """Independent culprits: any one of them alone breaks accuracy."""
    return sets_model([{c} for c in culprits])


def and_model(culprits: Iterable[T]) -> Callable[[frozenset[T]], bool]:
    """One interaction: only all of the rules together break accuracy."""
    return sets_model([frozenset(culprits)])


def mixed_model(
    independent: Iterable[T], interacting: Iterable[Collection[T]]
) -> Callable[[frozenset[T]], bool]:
    """Independent culprits plus interacting sets, as real cases mix both."""
    return sets_model([*({c} for c in independent), *interacting])


def masked_model(culprit: T, masker: T, unmasker: T) -> Callable[[frozenset[T]], bool]:
    """Non-monotone, in the style of Zeller's DD.py sample: a rewrite hides a bug.

    ``culprit`` breaks accuracy, but while ``masker`` is on it rewrites the
    pattern away, unless ``unmasker`` is also on. All-on therefore fails, {culprit}
    fails, yet {culprit, masker} passes although it is a superset of a failing set.
    """
    if len({culprit, masker, unmasker}) != 3:
        raise ValueError("culprit, masker and unmasker must be three different rules")

    def fails(config: frozenset[T]) -> bool:
        return culprit in config and (masker not in config or unmasker in config)

    return fails


def any_of(*models: Callable[[frozenset[T]], bool]) -> Callable[[frozenset[T]], bool]:
    """Fails when any model fails: combines independent failure mechanisms."""

    def fails(config: frozenset[T]) -> bool:
        return any(model(config) for model in models)

    return fails


# --- noise models ---------------------------------------------------------------


def _uniform(seed: object, config: frozenset, repeat: int) -> random.Random:
    """A generator fixed by (seed, configuration, repeat), whatever the rule type."""
    text = f"{seed}|{sorted(map(repr, config))}|{repeat}"
    return random.Random(hashlib.blake2b(text.encode(), digest_size=8).digest())


def flip_noise(rate: float, seed: object = 0, exempt: Iterable[frozenset] = ()) -> NoiseModel:
    """Each training's PASS/FAIL is flipped independently with probability ``rate``.

    ``exempt`` configurations (e.g. the two reference configurations, which the
    engine settles with its own baseline repeats) are never flipped.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"flip rate must be within [0, 1], got {rate}")
    spared = {frozenset(c) for c in exempt}

    def noise(config: frozenset, repeat: int, outcome: Outcome) -> Outcome:
        if config in spared or outcome is Outcome.UNRESOLVED:
            return outcome
        if _uniform(seed, config, repeat).random() >= rate:
            return outcome
        return Outcome.PASS if outcome is Outcome.FAIL else Outcome.FAIL

    return noise


def gaussian_noise(
    sigma: float, margin: float = 0.0, seed: object = 0, exempt: Iterable[frozenset] = ()
) -> NoiseModel:
    """A metric one unit above the threshold when passing, one below when failing, plus N(0, sigma).

    The reading fails when it lands below the threshold, so a training flips with
    probability Phi(-1/sigma); it is near the threshold when it lands within
    ``margin`` of it, which is what the engine reports for a real metric.
    """
    if sigma < 0 or margin < 0:
        raise ValueError("sigma and margin must not be negative")
    spared = {frozenset(c) for c in exempt}

    def noise(config: frozenset, repeat: int, outcome: Outcome) -> Observation:
        if config in spared or outcome is Outcome.UNRESOLVED:
            return Observation(repeat, outcome, False)
        centre = -1.0 if outcome is Outcome.FAIL else 1.0
        reading = centre + sigma * _uniform(seed, config, repeat).gauss(0.0, 1.0)
        return Observation(repeat, Outcome.FAIL if reading < 0 else Outcome.PASS, abs(reading) < margin)

    return noise


def flip_probability(sigma: float) -> float:
    """How often ``gaussian_noise`` with this sigma flips a training."""
    return 0.5 * math.erfc(1.0 / (sigma * math.sqrt(2.0))) if sigma > 0 else 0.0


def references_round(
    oracle: SimulatedOracle[T], universe: Sequence[T], run: Callable[[object, Lanes], object], *, beside: bool = False
) -> Lanes:
    """The engine's first round on a simulated oracle: the two references and, with ``beside``,
    the search's first question beside them (``fusion_dd.search.first_question``), as the engine
    trains it on three devices or more where early passes are off (``early_stop.pass_at: off``;
    the default ``auto`` keeps it after the references).

    ``run(oracle, lanes)`` runs the search as the caller will. Returns the lanes to
    run it with: the oracle's width, or (when the first question rode along) a plan
    whose first question is sized to the devices the references left idle, as the
    engine's is.
    """
    everything = frozenset(universe)
    width = opening_width(oracle.parallelism, 2) if beside else None
    if width is None:
        oracle.outcomes([frozenset(), everything])
        return oracle.parallelism
    known = {frozenset(): Outcome.PASS, everything: Outcome.FAIL}
    parallelism = oracle.parallelism
    oracle.prefetch(
        first_question(lambda probe: run(probe, LanePlan(lambda: parallelism, opening=width)), known,
                       repeats=oracle.supports_repeats)
    )  # fmt: skip
    oracle.outcomes([frozenset(), everything])
    lanes = LanePlan(lambda: parallelism, opening=width)
    oracle.lanes = lanes
    return lanes
