"""The oracle that answers a strategy's questions with real trainings.

It is the only place where the pure search meets the world: settled answers
come from the journal, the rest are trained in parallel over the device pool,
and the budget is enforced here. Because cached answers are free and the
strategies are deterministic, running a search again from the start replays
every finished training instantly and launches only what was never finished:
that is resume.

Repeats (``retest``) follow the ``RepeatOracle`` contract of
``fusion_dd.search.oracle``: repeat indices are counted per session (``_asked``),
never read from the journal, so a replay asks exactly the (configuration,
repeat) pairs the interrupted session asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

from ..core.rules import Rule
from ..core.scoring import Threshold
from ..search.lanes import LanePlan
from ..search.oracle import BudgetExhausted, Observation, Outcome
from ..store.state import ConfigKey, TrialState

# Launch a batch of (configuration, repeat) keys, in order; once a finished
# training satisfies ``stop_after`` the later ones may be cancelled. Results are
# read back through ``cached``.
BatchLauncher = Callable[[Sequence[ConfigKey], Callable[[TrialState], bool] | None], None]


class TrainingOracle:
    """RepeatOracle[Rule] backed by the journal's cache and a batch launcher."""

    def __init__(
        self,
        *,
        threshold: Threshold | None,
        crash_is_failure: bool,
        cached: Callable[[ConfigKey], TrialState | None],
        launch: BatchLauncher,
        remaining_budget: Callable[[], int],
        margin: float = 0.0,
        repeats: bool = True,
        lanes: LanePlan | None = None,
        realize: Callable[[frozenset[Rule]], frozenset[Rule]] | None = None,
        answered: Callable[[Sequence[TrialState]], None] | None = None,
    ) -> None:
        self.threshold = threshold
        self.crash_is_failure = crash_is_failure
        self.margin = margin
        self.supports_repeats = repeats
        self._cached = cached
        self._launch = launch
        self._remaining_budget = remaining_budget
        self._asked: dict[frozenset[str], int] = {}
        self._names_by_id: dict[int, tuple[frozenset[Rule], frozenset[str]]] = {}
        self.smallest_failing: frozenset[Rule] | None = None
        self.rounds = 0
        # The parallelism each question was asked with (journaled by the engine): the
        # strategy reads it to build the question, the oracle moves it on per question.
        self.lanes = lanes
        # The configuration the compiler really trains for the one asked (the
        # backend's ``realize``): answers and repeats are keyed on it.
        self._realize = realize or (lambda config: config)
        # fusion_dd.search.oracle.prefetch: configurations for the question after the next one,
        # trained along with the next question on the devices it leaves idle.
        self._prefetched: list[frozenset[Rule]] = []
        self._along: list[frozenset[Rule]] = []
        self._width: int | None = None
        # Told the trainings that answered each question once it is answered, before the
        # strategy sees the answer; it may raise to end the search's round there (the same
        # point in a replay, which asks the same questions).
        self._answered = answered

    def prefetch(self, configs: Sequence[frozenset[Rule]]) -> None:
        """Train these (repeat 0) along with the next question, where it leaves a device idle.

        The width of a question is journaled, so a replay fills the same devices
        with the same configurations: resume stays exact replay.
        """
        self._prefetched = [self._realize(frozenset(config)) for config in configs]

    def _question(self) -> None:
        self._along, self._prefetched = self._prefetched, []
        self._width = self.lanes.advance() if self.lanes is not None else None

    def _alongside(self, pending: Sequence[ConfigKey]) -> list[ConfigKey]:
        """The prefetched keys for the devices this question's trainings leave idle (taken once).

        A configuration listed again stands for its next repeat (``prefetch``).
        """
        along, self._along = self._along, []
        if self._width is None or not pending:
            return []
        listed: dict[frozenset[str], int] = {}
        keys: list[ConfigKey] = []
        for config in along:
            names = self._names(config)
            key = (names, listed.get(names, 0))
            listed[names] = key[1] + 1
            wanted = key[1] == 0 or self.supports_repeats
            idle = self._width - len(pending) - len(keys)
            if wanted and idle > 0 and key not in pending and self._cached(key) is None:
                keys.append(key)
        return keys

    def key_names(self, config: frozenset[Rule]) -> frozenset[str]:
        """The names a configuration's trainings are keyed by (after the backend's ``realize``)."""
        return self._names(self._realize(frozenset(config)))

    def _names(self, config: frozenset[Rule]) -> frozenset[str]:
        """The journal's key of a configuration, named once per configuration object.

        A question's configurations are looked up again and again (its verdicts, its
        repeats, ``trials``) as the same objects; keyed by identity, a lookup costs
        neither naming the rules again nor hashing them (``Rule.__hash__`` runs in
        Python, once per rule per new frozenset). The entry holds the configuration,
        so its id cannot be reused while it is cached.
        """
        found = self._names_by_id.get(id(config))
        if found is not None and found[0] is config:
            return found[1]
        names = _names(config)
        trained = self._cached((names, 0))
        if trained is not None:
            # The journal's own set of these names: one copy per configuration, not one more
            # per lookup table (a set of a thousand names is tens of KB).
            names = trained.config
        if len(self._names_by_id) >= 1 << 10:  # more than a question uses; each entry keeps two sets alive
            self._names_by_id.clear()
        self._names_by_id[id(config)] = (config, names)
        return names

    # -- verdicts -------------------------------------------------------------

    def verdict_of(self, trial: TrialState) -> Outcome:
        assert self.threshold is not None, "verdicts need the references' threshold"
        measurement = trial.measurement
        assert measurement is not None, "only finished trials have a verdict"
        return self.threshold.verdict(measurement, self.crash_is_failure)

    def near_threshold(self, trial: TrialState) -> bool:
        """The metric landed within ``margin`` of the limit: a verdict to weigh lightly."""
        measurement = trial.measurement
        if self.threshold is None or self.margin <= 0 or measurement is None or not measurement.has_value or measurement.value is None:
            return False
        return abs(measurement.value - self.threshold.limit) < self.margin

    def _known(self, config: frozenset[Rule], repeat: int = 0) -> Outcome | None:
        trial = self._cached((self._names(config), repeat))
        if trial is None:
            return None
        verdict = self.verdict_of(trial)
        if verdict is Outcome.FAIL:
            self._note_failing(config)
        return verdict

    def _fails(self, trial: TrialState) -> bool:
        return self.verdict_of(trial) is Outcome.FAIL

    def _note_failing(self, config: frozenset[Rule]) -> None:
        if self.smallest_failing is None or len(config) < len(self.smallest_failing):
            self.smallest_failing = config

    # -- repeat bookkeeping -------------------------------------------------------

    def note_asked(self, config: frozenset[Rule], count: int) -> None:
        """Count trainings made outside the strategy (the reference runs) as asked in this session."""
        names = self._names(self._realize(frozenset(config)))
        self._asked[names] = max(self._asked.get(names, 0), count)

    def _mark_asked(self, configs: Sequence[frozenset[Rule]]) -> None:
        for config in configs:
            self.note_asked(config, 1)

    # -- running --------------------------------------------------------------

    def train_until_settled(
        self,
        keys: Sequence[ConfigKey],
        stop_after: Callable[[TrialState], bool] | None = None,
        before_round: Callable[[], None] | None = None,
        riders: Sequence[ConfigKey] = (),
    ) -> bool:
        """Train these keys, round after round, until each is settled or the budget is spent.

        The one train-until-settled loop: the references use it before there is
        a threshold (``before_round`` may stop the search, e.g. when the training
        does not run at all), the strategy's questions through ``_settle``.
        ``riders`` train in the first round only, after the keys (the budget goes
        to the keys first), and are not waited for beyond it: the search's first
        question beside the references (``fusion_dd.search.first_question``).
        Returns whether every key is settled.
        """
        first = True
        while True:
            if before_round is not None:
                before_round()
            ride = first and any(self._cached(key) is None for key in keys)  # never a round of riders alone
            if not self._run([*keys, *riders] if ride else keys, stop_after):
                break
            first = False
        return all(self._cached(key) is not None for key in keys)

    def _run(self, keys: Sequence[ConfigKey], stop_after: Callable[[TrialState], bool] | None) -> bool:
        """Train the distinct unsettled keys, in order, as far as the budget allows (one round).

        Returns False when nothing was left to launch, or nothing could be (the budget is spent).
        """
        needed: list[ConfigKey] = []
        for key in keys:
            if key not in needed and self._cached(key) is None:
                needed.append(key)
        needed = needed[: max(0, self._remaining_budget())]
        if not needed:
            return False
        self.rounds += 1
        self._launch(needed, stop_after)
        return True

    def first_failing(self, configs: Sequence[frozenset[Rule]]) -> int | None:
        self._question()
        self._along = []  # a failure cancels the trainings after it: nothing rides along
        configs = [self._realize(frozenset(config)) for config in configs]
        while True:
            # Walk in order: the answer is known once every configuration before
            # the first failure is settled. Only those still need training.
            pending: list[ConfigKey] = []
            for index, config in enumerate(configs):
                verdict = self._known(config)
                if verdict is Outcome.FAIL:
                    if not pending:
                        self._mark_asked(configs[: index + 1])
                        self._tell_answered([(config, 0) for config in configs[: index + 1]])
                        return index
                    break
                if verdict is None:
                    pending.append((self._names(config), 0))
            else:
                if not pending:
                    self._mark_asked(configs)
                    self._tell_answered([(config, 0) for config in configs])
                    return None
            # A retried training (crash, timeout) may need another round.
            if not self._run(pending, self._fails):
                raise BudgetExhausted(self.smallest_failing)

    def _settle(self, requests: Sequence[tuple[frozenset[Rule], int]]) -> list[Outcome]:
        """Verdicts of (configuration, repeat) pairs, training what is unsettled."""
        while True:
            verdicts = [self._known(config, repeat) for config, repeat in requests]
            if all(verdict is not None for verdict in verdicts):
                return [verdict for verdict in verdicts if verdict is not None]
            pending = [
                (self._names(config), repeat) for (config, repeat), v in zip(requests, verdicts) if v is None
            ]
            # The budget goes to the question's own keys first (_run cuts from the end).
            if not self._run([*pending, *self._alongside(pending)], None):
                raise BudgetExhausted(self.smallest_failing)

    def outcomes(self, configs: Sequence[frozenset[Rule]]) -> list[Outcome]:
        self._question()
        configs = [self._realize(frozenset(config)) for config in configs]
        verdicts = self._settle([(config, 0) for config in configs])
        self._mark_asked(configs)
        self._tell_answered([(config, 0) for config in configs])
        return verdicts

    def retest(self, configs: Sequence[frozenset[Rule]]) -> list[Outcome]:
        """The next repeat of each configuration (a configuration listed twice gets two)."""
        self._question()
        configs = [self._realize(frozenset(config)) for config in configs]
        next_repeat = dict(self._asked)
        requests: list[tuple[frozenset[Rule], int]] = []
        for config in configs:
            names = self._names(config)
            repeat = next_repeat.get(names, 0)
            requests.append((config, repeat))
            next_repeat[names] = repeat + 1
        verdicts = self._settle(requests)
        self._asked = next_repeat
        self._tell_answered(requests)
        return verdicts

    def _tell_answered(self, requests: Sequence[tuple[frozenset[Rule], int]]) -> None:
        if self._answered is None:
            return
        trials = [trial for config, repeat in requests if (trial := self._cached((self._names(config), repeat)))]
        self._answered(trials)

    def trials(self, config: frozenset[Rule]) -> list[Observation]:
        """Every training of ``config`` asked in this session, in repeat order."""
        config = self._realize(frozenset(config))
        observations = []
        for repeat in range(self._asked.get(self._names(config), 0)):
            trial = self._cached((self._names(config), repeat))
            if trial is None:
                continue
            observations.append(Observation(repeat, self.verdict_of(trial), self.near_threshold(trial)))
        return observations


#: What a training ends as when its configuration cannot run at all (a compile or build
#: failure, or the training's own exit 125): the all-off baseline of a required pass.
CANNOT_RUN = ("crash", "unevaluable")


def runs(trial: TrialState | None) -> bool:
    """Whether a finished training ran its configuration (anything but a crash or exit 125)."""
    measurement = trial.measurement if trial is not None else None
    return measurement is not None and measurement.kind not in CANNOT_RUN


class RunsOracle(TrainingOracle):
    """The required passes' question: a configuration "fails" when its training *runs*.

    ddmin over this oracle, started from all candidates on (which runs) with the
    empty configuration known not to run, gives a 1-minimal set of candidates
    that must stay on for the training to run at all: the same machinery as the
    culprit search, asked the opposite question. Answers come from the same
    journal cache, so a resume replays them.
    """

    def verdict_of(self, trial: TrialState) -> Outcome:
        return Outcome.FAIL if runs(trial) else Outcome.PASS


def _names(config: frozenset[Rule]) -> frozenset[str]:
    """A configuration's rule names, the journal's key for it.

    Named in C (``attrgetter`` over the set): strategies pass new frozensets at
    every question (``realize`` builds one), and a memo keyed by their value would
    pay a ``Rule.__hash__`` in Python per rule per question, more than naming them.
    """
    return frozenset(map(_NAME, config))


_NAME = attrgetter("name")

