"""Early passes in the replayed state: a key's early pass and its full trainings are kept apart.

The engine trusts a key's early pass until a full training contradicted one
(``early_passes_revised``); from the next round on the key is decided by its
full trainings, proofs of the fix included. Both must come out of the journal
alone, so that a resumed search replays every round exactly.
"""

from __future__ import annotations

from fusion_dd.store.state import PROOF_ROLE, replay, withdraws
from tests.support.states import search_started, trial

A = frozenset({"A"})


def test_an_early_pass_decides_its_key_and_is_not_a_full_training() -> None:
    state = replay([search_started(), *trial("0001", ["A"], None, kind="early_pass")])
    assert state.cache()[(A, 0)].trial_id == "0001" and state.cache()[(A, 0)].resolved
    assert state.full_trial((A, 0)) is None and state.full_attempts((A, 0)) == 0
    assert state.early_revised_round is None


def test_a_proof_is_a_full_training_of_the_key_and_never_displaces_the_early_pass() -> None:
    records = [
        search_started(),
        *trial("0001", ["A"], None, kind="early_pass"),
        *trial("0002", ["A"], 0.5, role=PROOF_ROLE),
    ]
    state = replay(records)
    assert state.cache()[(A, 0)].trial_id == "0001"  # the round that asked it keeps replaying its answer
    assert state.full_trial((A, 0)).trial_id == "0002" and state.full_attempts((A, 0)) == 1  # type: ignore[union-attr]
    assert state.attempts((A, 0)) == 1  # the proof is no attempt of the search's own training


def test_a_revision_names_its_round_and_the_first_one_counts() -> None:
    revised = {"type": "early_passes_revised", "round": 0, "config": ["A"], "trial_id": "0002", "reason": "r"}
    later = {**revised, "round": 3}
    state = replay([search_started(), *trial("0001", ["A"], None, kind="early_pass"), revised, later])
    assert state.early_revised_round == 0 and len(state.early_revisions) == 2


def test_the_first_resolved_full_training_decides_after_crashed_ones() -> None:
    records = [
        *trial("0001", ["A"], None, kind="early_pass"),
        *trial("0002", ["A"], None, kind="crash", attempt=2),
        *trial("0003", ["A"], 0.9, attempt=3),
        *trial("0004", ["A"], 0.1, attempt=4),
    ]
    state = replay(records)
    assert state.full_trial((A, 0)).trial_id == "0003" and state.full_attempts((A, 0)) == 3  # type: ignore[union-attr]


def test_a_revision_withdraws_only_the_early_verdicts_that_could_have_led_to_its_claim() -> None:
    fix = {"round": 0, "config": ["A", "B"], "scope": "inside"}
    assert withdraws(fix, "early_pass", frozenset({"A"})) and withdraws(fix, "early_pass", frozenset({"A", "B"}))
    assert not withdraws(fix, "early_pass", frozenset({"A", "C"}))  # holds a switched-off rule: says nothing of the fix
    assert not withdraws(fix, "early_fail", frozenset({"A"}))  # a failure never vouched for the fix
    culprit = {"round": 0, "config": ["C"], "scope": "containing"}
    assert withdraws(culprit, "early_fail", frozenset({"C", "D"})) and not withdraws(culprit, "early_fail", frozenset({"D"}))
    assert not withdraws(culprit, "early_pass", frozenset({"C", "D"}))
    old = {"round": 0, "config": ["A"]}  # written before scopes: every early pass, as then
    assert withdraws(old, "early_pass", frozenset({"Z"})) and not withdraws(old, "early_fail", frozenset({"A"}))


def test_an_early_failure_decides_its_key_and_is_not_a_full_training() -> None:
    state = replay([search_started(), *trial("0001", ["A"], None, kind="early_fail")])
    assert state.cache()[(A, 0)].resolved and state.full_trial((A, 0)) is None


def test_a_fix_candidate_started_to_train_to_its_end_is_known_as_such_and_a_restart_without_it_is_not() -> None:
    first = trial("0001", ["A"], 0.9)
    first[0] = {**first[0], "to_end": True}
    state = replay([search_started(), *first])
    assert state.to_end("0001")
    assert not replay([search_started(), *trial("0001", ["A"], 0.9)]).to_end("0001")  # older journals: none
    again = trial("0001", ["A"], 0.9)  # the same id started again (a resumed session) without the key
    assert not replay([search_started(), *first, *again]).to_end("0001")


def test_a_rule_alone_started_to_fail_only_in_full_is_known_as_such_and_a_restart_without_it_is_not() -> None:
    first = trial("0001", ["A"], 0.1)
    first[0] = {**first[0], "fails_to_end": True}
    state = replay([search_started(), *first])
    assert state.fails_to_end("0001") and not state.to_end("0001")
    assert not replay([search_started(), *trial("0001", ["A"], 0.1)]).fails_to_end("0001")  # older journals: none
    again = trial("0001", ["A"], 0.1)
    assert not replay([search_started(), *first, *again]).fails_to_end("0001")
