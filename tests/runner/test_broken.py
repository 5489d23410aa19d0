"""diagnose_references: which reference results mean "the training does not run" (pure, no trainings)."""

from __future__ import annotations

from fusion_dd.runner.broken import diagnose_references, is_misread, is_start_error, log_tail
from fusion_dd.store.state import TrialState


def trial(number: int, kind: str, reason: str = "", exit_code: int | None = 0, config: frozenset = frozenset()) -> TrialState:
    state = TrialState(f"{number:04d}", config, 0, ("0",), f"trials/{number:04d}", 0.0)
    state.finished = {"kind": kind, "reason": reason, "exit_code": exit_code, "signal": None, "value": 0.9}
    return state


def test_a_start_error_is_broken_at_once_and_an_exit_code_is_not_a_start_error():
    missing = trial(1, "crash", "command not found: pythn3", exit_code=None)
    assert is_start_error(missing)
    assert "command not found: pythn3" in diagnose_references([missing], [], False).reason
    crashed = trial(1, "crash", "exit code 1", exit_code=1)
    assert not is_start_error(crashed)
    assert diagnose_references([crashed], [], False) is None  # one crash: retry first


def test_no_metric_anywhere_is_broken_once_settled_or_after_four():
    runs = [trial(n, "no_metric", "no match of pattern 'x=(\\S+)'") for n in range(1, 4)]
    assert diagnose_references(runs, [], False) is None
    assert "without a metric" in diagnose_references(runs, [], True).reason
    broken = diagnose_references(runs + [trial(4, "crash", "exit code 2", 2)], [], False)
    assert broken is not None and broken.trial.trial_id == "0004"
    assert broken.reason == "the training does not run: 4 reference training(s) ended before any metric; last: exit code 2"


MISREAD = (
    "no record with key 'accuracy' in metrics.jsonl (the training wrote no metrics.jsonl); output.log prints "
    "'accuracy: 0.9': to read the metric from the output, set metric.pattern: 'accuracy\\s*[=:]\\s*(\\S+)'"
)


def test_a_metric_printed_where_the_config_does_not_read_it_is_not_trained_again():
    baseline, all_on = trial(1, "no_metric", MISREAD), trial(2, "no_metric", MISREAD, config=frozenset({"A"}))
    assert is_misread(baseline)
    running = TrialState("0002", frozenset({"A"}), 0, ("1",), "trials/0002", 0.0)
    assert diagnose_references([baseline, running], [], False) is None  # all-on is still training: wait for it
    broken = diagnose_references([baseline, all_on], [], False)
    assert broken is not None and broken.trial is all_on
    assert broken.reason == f"the training does not run: 2 reference training(s) exited without a metric: {MISREAD}"


def test_only_a_clean_exit_with_the_advice_is_a_misread():
    assert not is_misread(trial(1, "no_metric", MISREAD, exit_code=1))  # a crash may go another way next time
    assert not is_misread(trial(1, "no_metric", "no record with key 'accuracy' in metrics.jsonl"))
    assert not is_misread(trial(1, "metric", MISREAD))
    plain = [trial(1, "no_metric", "no match of pattern 'x=(\\S+)'"), trial(2, "no_metric", MISREAD, exit_code=1)]
    assert diagnose_references(plain, [], False) is None  # retried, as before, up to four


def test_one_reference_with_a_metric_is_an_answer_not_a_broken_training():
    runs = [trial(1, "crash", "exit code 1", 1), trial(2, "metric", config=frozenset({"A"}))]
    assert diagnose_references(runs, [runs[0]], True) is None


def test_a_baseline_timeout_is_broken_even_when_all_on_has_a_metric():
    timeout = trial(1, "timeout", "timed out after 5 s", exit_code=None)
    runs = [timeout, trial(2, "metric", config=frozenset({"A"}))]
    broken = diagnose_references(runs, [timeout], True)
    assert broken is not None and "train.timeout" in broken.reason


def test_log_tail_reads_only_the_end(tmp_path):
    log = tmp_path / "output.log"
    log.write_text("".join(f"line {n}\n" for n in range(100_000)))
    assert log_tail(log) == [f"line {n}" for n in range(99_980, 100_000)]
    assert log_tail(tmp_path / "absent.log") == []
