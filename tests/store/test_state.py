"""The search state replayed from hand-made journal records (fusion_dd/store/state.py).

The engine, ``fusion-dd status`` and the report all read a search through
``replay``; these tests pin what it makes of the records: which training decides
a (configuration, repeat), how many attempts finished, which trials are open,
and what the budget is charged.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusion_dd.core.rules import Rule, Section
from fusion_dd.store.state import config_names, decode_float, definition_changes, encode_float, replay
from tests.support.states import cancelled, finished, launched, search_started, session_started, started, trial

A = frozenset({"A"})


def test_an_empty_journal_is_an_empty_search() -> None:
    state = replay([])
    assert state.definition is None and state.trials == {} and state.finished is None
    assert state.launched == 0 and state.cache() == {} and state.open_trials() == []
    assert state.next_trial_number() == 1


def test_the_first_search_started_record_defines_the_search() -> None:
    first, second = search_started(["A"]), search_started(["A", "B"])
    state = replay([first, session_started(), second, session_started(budget=40)])
    assert state.definition == first["definition"] and state.start_record is first
    assert state.started_at == 1000.0
    assert [session["budget"] for session in state.sessions] == [20, 40]


def test_a_finished_training_is_cached_by_configuration_and_repeat() -> None:
    state = replay([search_started(), *trial("0001", ["A"], 0.5), *trial("0002", ["A"], 0.9, repeat=1)])
    cache = state.cache()
    assert set(cache) == {(A, 0), (A, 1)}
    assert cache[(A, 0)].trial_id == "0001" and cache[(A, 1)].trial_id == "0002"
    assert cache[(A, 0)].measurement.value == 0.5 and cache[(A, 0)].resolved
    with pytest.raises(TypeError):
        cache[(A, 2)] = cache[(A, 0)]  # type: ignore[index]  # read-only: only records change the state


def test_the_first_attempt_with_a_result_decides_and_attempts_are_counted() -> None:
    records = [
        *trial("0001", ["A"], None, kind="crash"),
        *trial("0002", ["A"], 0.8, attempt=2),
        *trial("0003", ["A"], 0.2, attempt=3),  # a later attempt never replaces a result
    ]
    state = replay(records)
    assert state.cache()[(A, 0)].trial_id == "0002"
    assert state.attempts((A, 0)) == 3 and state.attempts((A, 1)) == 0


def test_without_a_result_the_latest_unresolved_attempt_stands() -> None:
    state = replay([*trial("0001", ["A"], None, kind="crash"), *trial("0002", ["A"], None, kind="timeout")])
    decisive = state.cache()[(A, 0)]
    assert decisive.trial_id == "0002" and not decisive.resolved
    assert decisive.measurement.kind == "timeout"


def test_a_trial_finishes_once_and_a_late_cancel_does_not_undo_it() -> None:
    state = replay([*trial("0001", ["A"], 0.9), finished("0001", 0.1), cancelled("0001")])
    only = state.trials["0001"]
    assert only.finished["value"] == 0.9 and only.cancelled is None
    assert state.attempts((A, 0)) == 1


def test_records_about_unknown_trials_are_ignored() -> None:
    state = replay([finished("0009", 0.5), cancelled("0009"), launched("0009")])
    assert state.trials == {} and state.cache() == {}


def test_open_trials_are_those_neither_finished_nor_cancelled() -> None:
    state = replay([
        *trial("0001", ["A"]),
        started("0002", ["B"]), launched("0002"),
        started("0003", ["C"]), cancelled("0003"),
        started("0004", ["A", "B"]),
    ])
    assert [t.trial_id for t in state.open_trials()] == ["0002", "0004"]
    assert state.trials["0002"].launch is not None and state.trials["0004"].launch is None


def test_the_budget_is_charged_for_every_training_whose_supervisor_may_have_started() -> None:
    state = replay([
        *trial("0001", ["A"]),
        started("0002", ["B"]), cancelled("0002", was_launched=True),
        started("0003", ["C"]), cancelled("0003", was_launched=False),  # never ran: free
        started("0004", ["A", "B"]), cancelled("0004", was_launched=None),  # a 0.1.0 journal: charged
        started("0005", ["A", "C"]),  # still open: it may be starting right now
    ])
    assert state.launched == 4
    assert not state.trials["0003"].costs_budget and state.trials["0005"].costs_budget


def test_trial_numbers_go_on_after_the_highest_even_with_gaps() -> None:
    state = replay([*trial("0002", ["A"]), *trial("0017", ["B"]), *trial("ref-x", ["C"])])
    assert state.next_trial_number() == 18


def test_a_training_broken_stop_forgets_the_failed_attempts_but_keeps_results() -> None:
    records = [
        *trial("0001", [], None, kind="crash", role="baseline"),
        *trial("0002", ["A", "B"], 0.4, role="all_on"),
        {"type": "search_stopped", "reason": "training_broken"},
    ]
    state = replay(records)
    assert state.broken_before == 2 and state.stops[-1]["reason"] == "training_broken"
    assert state.attempts((frozenset(), 0)) == 0, "the broken baseline must be trained again"
    assert state.attempts((frozenset({"A", "B"}), 0)) == 1
    state.apply(started("0003", [], role="baseline", attempt=2))
    state.apply(finished("0003", 0.9))
    assert state.cache()[(frozenset(), 0)].trial_id == "0003"


def test_live_updates_and_replay_give_the_same_state() -> None:
    records = [search_started(), session_started(), *trial("0001", ["A"]), started("0002", ["B"])]
    live = replay([])
    for record in records:
        live.apply(record)
    again = replay(records)
    assert live.trials == again.trials and dict(live.cache()) == dict(again.cache())


def test_retired_devices_stops_and_the_end_are_kept() -> None:
    retired = {"type": "device_retired", "device": ["1"], "reason": "device 1 set aside"}
    end = {"type": "search_finished", "report": {"status": "found"}}
    state = replay([search_started(), retired, {"type": "search_stopped", "reason": "interrupted"}, end])
    assert state.retired_devices == [retired] and state.finished is end
    assert [stop["reason"] for stop in state.stops] == ["interrupted"] and state.broken_before == 0


@pytest.mark.parametrize("value", [0.25, None, math.inf, -math.inf])
def test_floats_survive_the_journal(value) -> None:
    assert decode_float(encode_float(value)) == value


def test_nan_is_spelled_as_a_string_and_read_back_as_nan() -> None:
    assert encode_float(math.nan) == "nan"
    state = replay(trial("0001", ["A"], encode_float(math.nan), kind="nonfinite"))
    measurement = state.cache()[(A, 0)].measurement
    assert measurement.kind == "nonfinite" and math.isnan(measurement.value) and not measurement.has_value


def test_definition_changes_are_named_as_config_keys() -> None:
    old = search_started()["definition"]
    new = dict(old, command=["python3", "other.py"], metric={"goal": "min", "key": "accuracy"}, strategy="ddmin")
    assert definition_changes(old, new) == ["train.command", "metric.goal", "search.strategy"]
    assert definition_changes(old, dict(old)) == []


def test_config_names_are_sorted_names_of_rules_or_strings() -> None:
    assert config_names(frozenset({Rule("b", Section.UB), Rule("a", Section.GRAPH)})) == ["a", "b"]
    assert config_names(["z", "y"]) == ["y", "z"]


@given(st.integers(min_value=0, max_value=1300), st.data())
def test_a_configuration_journaled_as_a_mask_of_the_rule_list_decodes_to_the_same_rule_names(size, data) -> None:
    from fusion_dd.store.state import RuleIndex

    names = [f"Rule{index}" for index in range(size)]
    chosen = data.draw(st.sets(st.sampled_from(names)) if names else st.just(set()))
    index = RuleIndex(names)
    mask = index.encode(chosen)
    assert RuleIndex(names).decode(mask) == frozenset(chosen)
    assert len(mask) <= (size + 5) // 6 + 1, "a mask costs a character per six rules, never a name per rule"


def test_replay_reads_configurations_by_mask_and_by_name_alike_and_equal_ones_share_a_key() -> None:
    from fusion_dd.store.state import RuleIndex

    names = ["A", "B", "C", "D", "E", "F", "G", "H", "I"]
    masked = RuleIndex(names).encode({"B", "I"})
    records = [
        search_started(names),
        {**started("0001", ["B", "I"]), "config": ["B", "I"]},
        finished("0001", 0.5),
        {**{key: value for key, value in started("0002", [], repeat=1).items() if key != "config"}, "on": masked},
        finished("0002", 0.6),
    ]
    state = replay(records)
    assert state.trials["0001"].config == state.trials["0002"].config == frozenset({"B", "I"})
    assert set(state.cache()) == {(frozenset({"B", "I"}), 0), (frozenset({"B", "I"}), 1)}


def _masked(record: dict, names: list[str]) -> dict:
    """A trial_started record as this version journals it: the configuration as a mask of the rule list."""
    from fusion_dd.store.state import RuleIndex

    body = {key: value for key, value in record.items() if key != "config"}
    return {**body, "on": RuleIndex(names).encode(record["config"])}


_NAMES = ["A", "B", "C", "D"]


@st.composite
def _journals(draw) -> list[dict]:
    """Trainings of a few configurations, with retries, early passes, proofs, dumps, cancellations and a broken stop."""
    records: list[dict] = [search_started(_NAMES)]
    for number in range(1, draw(st.integers(1, 14)) + 1):
        # Now and then the same trial id again: a session that restarts a training it never saw end.
        trial_id = f"{number - 1:04d}" if number > 1 and draw(st.integers(0, 4)) == 0 else f"{number:04d}"
        on = draw(st.sets(st.sampled_from(_NAMES), max_size=2))
        role = draw(st.sampled_from(["search", "search", "proof", "localize", "baseline"]))
        record = _masked(started(trial_id, on, draw(st.integers(0, 1)), role=role), _NAMES)
        if draw(st.booleans()):
            record["dumps"] = True
        records.append(record)
        end = draw(st.sampled_from(["finished", "early", "crash", "cancelled", "open", "broken"]))
        if end == "finished":
            records.append(finished(trial_id, draw(st.sampled_from([0.4, 0.9]))))
        elif end == "early":
            records.append(finished(trial_id, 0.9, kind="early_pass"))
        elif end == "crash":
            records.append(finished(trial_id, None, kind="crash"))
        elif end == "cancelled":
            records.append(cancelled(trial_id))
        elif end == "broken":
            records.append({"type": "search_stopped", "reason": "training_broken"})
    return records


@given(_journals())
def test_a_replay_answers_every_question_by_key_as_the_records_applied_one_by_one_do(records) -> None:
    """Replay indexes finished trainings by key only when first asked; a live state indexes each as it ends."""
    live = replay([])
    for record in records:
        live.apply(record)
    again = replay(records)
    keys = {(frozenset(on), repeat) for on in ([], ["A"], ["B"], ["A", "B"], ["C", "D"]) for repeat in (0, 1)}
    keys |= {trial.key for trial in live.trials.values()}
    for key in keys:
        assert again.attempts(key) == live.attempts(key), key
        assert again.full_attempts(key) == live.full_attempts(key), key
        assert getattr(again.full_trial(key), "trial_id", None) == getattr(live.full_trial(key), "trial_id", None), key
    assert {key: t.trial_id for key, t in again.cache().items()} == {key: t.trial_id for key, t in live.cache().items()}
    assert {key: t.trial_id for key, t in again.localize_cache().items()} == {
        key: t.trial_id for key, t in live.localize_cache().items()
    }


def test_a_replay_decodes_no_configuration_until_one_is_asked_about(monkeypatch) -> None:
    """A finished search shown again reads no trial's configuration: decoding a thousand masks is its cost."""
    from fusion_dd.store.state import RuleIndex

    decoded: list[str] = []
    original = RuleIndex.decode
    monkeypatch.setattr(RuleIndex, "decode", lambda self, text: decoded.append(text) or original(self, text))
    records = [search_started(_NAMES)]
    for number, on in enumerate([["A"], ["B", "C"], ["A"]], start=1):
        records += [_masked(started(f"{number:04d}", on), _NAMES), finished(f"{number:04d}", 0.9)]
    state = replay(records)
    assert decoded == [] and state.launched == 3
    assert state.trials["0002"].config == frozenset({"B", "C"}) and len(decoded) == 1
    assert state.cache()[(frozenset({"A"}), 0)].trial_id == "0001", "the first training of a key decides it"
