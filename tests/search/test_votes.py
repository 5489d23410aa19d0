"""A configuration's verdict is the weighted majority of its trainings (fusion_dd.search.votes)."""

from __future__ import annotations

from fusion_dd.search.oracle import Observation, Outcome
from fusion_dd.search.votes import Votes, describe, majority, tally

F = frozenset
TABLE = {"F": Outcome.FAIL, "P": Outcome.PASS, "U": Outcome.UNRESOLVED}


def obs(*marks: str) -> list[Observation]:
    """'F', 'P', 'U', with '~' for a reading near the threshold."""
    return [Observation(i, TABLE[m[0]], m.endswith("~")) for i, m in enumerate(marks)]


class Scripted:
    """A repeat oracle whose trainings of each configuration read as scripted, one per question."""

    def __init__(self, scripts: dict) -> None:
        self.scripts = scripts
        self.asked: dict = {}

    def trials(self, config):
        return obs(*self.scripts.get(config, ())[: self.asked.get(config, 0)])

    def retest(self, configs):
        for config in configs:
            self.asked[config] = self.asked.get(config, 0) + 1

    outcomes = retest


def votes_for(scripts: dict, max_trainings: int = 7, references_trained: int = 1):
    """Votes over a scripted oracle, the references (all on, all off) trained before it as the engine does."""
    oracle = Scripted(scripts)
    given = {F(range(4)): Outcome.FAIL, F(): Outcome.PASS}
    for _ in range(references_trained):
        oracle.retest(list(given))
    taken: list = []
    votes = Votes(oracle, given, max_trainings, lambda *t: taken.append(t))
    return votes, oracle, taken


def test_votes_weigh_near_readings_half_and_ties_fail() -> None:
    assert tally(obs("F", "P~", "U")) == (2, 1)
    assert majority(obs("F", "P")) is Outcome.FAIL  # a tie: a fix that fails half the time is no fix
    assert majority(obs("F~", "P")) is Outcome.PASS
    assert majority(obs("U", "U")) is Outcome.UNRESOLVED
    assert majority(obs("U", "F~")) is Outcome.FAIL


def test_a_verdict_is_decided_by_a_clear_lead_and_a_dissent_asks_for_two() -> None:
    x = F({1})
    votes, oracle, _ = votes_for({x: ["F~", "P", "P", "F", "F", "F"]})
    oracle.outcomes([x])
    votes.take([x])
    assert not votes.decided(x)  # one reading near the threshold decides nothing
    votes.until([x], votes.decided)
    assert votes.observations(x) == tuple(obs("F~", "P", "P")) and votes.verdict(x) is Outcome.PASS
    y = F({2})
    votes, oracle, _ = votes_for({y: ["P", "F", "P", "P", "F"]})
    oracle.outcomes([y])
    votes.take([y])
    assert votes.decided(y)  # a clear first reading stands
    votes.retest([y])
    assert votes.flaky and not votes.decided(y)  # a clear dissent: a lead of two is needed now
    votes.until([y], votes.decided)
    assert len(votes.observations(y)) == 4 and votes.verdict(y) is Outcome.PASS


def test_a_dissent_cancels_an_agreeing_training() -> None:
    x = F({1})
    votes, oracle, _ = votes_for({x: ["P", "P", "F", "P", "F~", "F~"]})
    oracle.outcomes([x])
    for _ in range(3):
        votes.retest([x])
    assert votes.agreeing(x) == 2  # [P, P, F, P]: either disagreeing training could be the flip
    votes.retest([x])
    votes.retest([x])
    assert votes.agreeing(x) == 1  # the two dissents near the threshold cancel one more, not two


def test_every_verdict_taken_is_told_with_what_it_was_before() -> None:
    x = F({1})
    votes, oracle, taken = votes_for({x: ["F", "P", "P"]})
    oracle.outcomes([x])
    votes.take([x])
    votes.retest([x])
    votes.retest([x])
    assert taken == [(x, None, Outcome.FAIL), (x, Outcome.FAIL, Outcome.FAIL), (x, Outcome.FAIL, Outcome.PASS)]


def test_the_preconditions_are_never_retrained_and_their_disagreement_counts_as_noise() -> None:
    universe = F(range(4))
    votes, _, taken = votes_for({universe: ["F", "F"]}, references_trained=2)
    assert not votes.flaky
    votes, _, taken = votes_for({universe: ["F", "P", "F"]}, references_trained=3)
    assert votes.flaky and not taken  # noise seen before the first question
    assert votes.reference_observations(universe) == tuple(obs("F", "P", "F"))
    assert not votes.can_retrain(F()) and not votes.can_retrain(universe)
    votes.take([universe])  # a precondition's verdict is the engine's, not a majority taken here
    assert votes.verdict(universe) is Outcome.FAIL and votes.trained(universe) is None and not taken


def test_the_limit_ends_retraining() -> None:
    x = F({1})
    votes, oracle, _ = votes_for({x: ["F~", "P~", "F~", "P~", "F~"]}, max_trainings=4)
    oracle.outcomes([x])
    votes.take([x])
    votes.until([x], votes.decided)
    assert len(votes.observations(x)) == 4 and votes.verdict(x) is Outcome.FAIL  # a tie at the limit fails
    assert not votes.can_retrain(x) and votes.can_retrain(x, limit=8)


def test_trainings_read_as_a_person_reads_them() -> None:
    assert describe(obs("F", "P~", "U")) == "FAIL, PASS~, UNRESOLVED"
