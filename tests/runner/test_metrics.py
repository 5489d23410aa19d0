"""Reading a run's metric and classifying the run, on hand-written logs and metrics files."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fusion_dd.core.errors import UsageError
from fusion_dd.runner.metrics import (
    LAST_LINE_CHARS,
    LAST_LINE_TAIL_BYTES,
    MetricSpec,
    classify,
    last_output_line,
    parse_number,
    read_metric,
)
from fusion_dd.runner.trial import TrialRun

ACC = MetricSpec.from_text(r"accuracy: (\S+)")
FROM_FILE = MetricSpec()


def make_run(
    directory: Path,
    log: str | bytes | None = None,
    metrics: str | None = None,
    **status: object,
) -> TrialRun:
    directory.mkdir(parents=True, exist_ok=True)
    log_path, metrics_path = directory / "output.log", directory / "metrics.jsonl"
    if log is not None:
        data = log.encode() if isinstance(log, str) else log
        log_path.write_bytes(data)
    if metrics is not None:
        metrics_path.write_text(metrics)
    fields: dict = dict(
        trial_id="t1", trial_dir=directory, exit_code=0, signal=None, timed_out=False,
        cancelled=False, duration=12.0, start=100.0, end=112.0, log_path=log_path,
        metrics_path=metrics_path, error=None, timeout=30.0,
    )
    fields.update(status)
    return TrialRun(**fields)


def test_last_match_of_the_pattern_wins(tmp_path: Path) -> None:
    run = make_run(tmp_path, "accuracy: 0.1\nstep 1 loss 0.5\naccuracy: 0.2\naccuracy: 0.93,\n")
    reading = read_metric(run, ACC)
    assert reading.value == pytest.approx(0.93)
    assert not reading.nonfinite
    assert "line 4" in reading.detail and "last of 3" in reading.detail
    assert classify(run, reading) == ("metric", reading.detail)


@settings(deadline=None, max_examples=30)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=8))
def test_last_match_wins_for_any_values(tmp_path_factory: pytest.TempPathFactory, values: list[float]) -> None:
    directory = tmp_path_factory.mktemp("run")
    log = "".join(f"epoch {i} loss 0.1 accuracy: {v!r}\n" for i, v in enumerate(values))
    assert read_metric(make_run(directory, log), ACC).value == values[-1]


def test_no_match_is_no_metric_with_the_pattern_in_the_reason(tmp_path: Path) -> None:
    run = make_run(tmp_path, "step 1 loss 0.4\ndone\n")
    reading = read_metric(run, ACC)
    kind, reason = classify(run, reading)
    assert (kind, reading.value) == ("no_metric", None)
    assert "no match of pattern" in reason and "accuracy: (\\S+)" in reason


def test_a_last_match_that_is_not_a_number_is_no_metric(tmp_path: Path) -> None:
    run = make_run(tmp_path, "accuracy: 0.5\naccuracy: N/A\n")
    kind, reason = classify(run, read_metric(run, ACC))
    assert kind == "no_metric" and "'N/A'" in reason


def test_metrics_file_last_record_with_the_key(tmp_path: Path) -> None:
    metrics = (
        '{"step": 1, "loss": 0.9}\n'
        '{"step": 2, "loss": 0.5, "accuracy": 0.7}\n'
        "garbage in the middle\n"
        '{"step": 3, "loss": 0.4, "accuracy": 0.8}\n'
        '{"step": 4, "loss": 0.3}\n'
        '{"step": 5, "accuracy": 0.'  # torn: the training died mid-write
    )
    reading = read_metric(make_run(tmp_path, metrics=metrics), FROM_FILE)
    assert reading.value == pytest.approx(0.8)
    assert not reading.nonfinite
    assert "line 4" in reading.detail


def test_metrics_file_value_as_string_and_custom_key(tmp_path: Path) -> None:
    run = make_run(tmp_path, metrics='{"step": 1, "top1": "0.75"}\n')
    assert read_metric(run, MetricSpec(key="top1")).value == pytest.approx(0.75)


def test_metrics_file_without_the_key(tmp_path: Path) -> None:
    run = make_run(tmp_path, metrics='{"step": 1, "loss": 0.3}\n')
    reading = read_metric(run, FROM_FILE)
    kind, reason = classify(run, reading)
    assert kind == "no_metric" and "no record with key 'accuracy'" in reason


def test_missing_files_are_no_metric_not_an_error(tmp_path: Path) -> None:
    run = make_run(tmp_path / "never-ran")
    assert classify(run, read_metric(run, FROM_FILE))[0] == "no_metric"
    assert classify(run, read_metric(run, ACC))[0] == "no_metric"


@pytest.mark.parametrize(
    "record",
    [
        '{"step": 3, "loss": NaN}',
        '{"step": 3, "loss": Infinity}',
        '{"step": 3, "loss": -Infinity}',
        '{"step": 3, "loss": "nan"}',
        '{"step": 3, "loss": "inf"}',
        '{"step": 3, "accuracy": NaN}',
    ],
)
def test_nonfinite_in_the_metrics_file(tmp_path: Path, record: str) -> None:
    metrics = '{"step": 1, "loss": 0.5}\n' + record + '\n{"step": 4, "loss": 0.2, "accuracy": 0.9}\n'
    reading = read_metric(make_run(tmp_path, metrics=metrics), FROM_FILE)
    assert reading.nonfinite
    assert "metrics.jsonl line 2" in reading.detail


@pytest.mark.parametrize(
    "line",
    ["step 7 loss nan", "loss=NaN, lr=0.1", "Loss: inf", "train loss -inf.", "loss:\tInfinity"],
)
def test_nonfinite_loss_in_the_log(tmp_path: Path, line: str) -> None:
    log = f"INFO start\nstep 1 loss 0.5\n{line}\naccuracy: 0.9\n"
    run = make_run(tmp_path, log, exit_code=0)
    reading = read_metric(run, ACC)
    assert reading.nonfinite and reading.value == pytest.approx(0.9)
    assert classify(run, reading)[0] == "nonfinite"
    assert "line 3" in reading.detail


@pytest.mark.parametrize(
    "line",
    ["INFO loss_scale: inf", "loss 0.25", "loss scale: inf", "nan_count=0 loss 1.5", "INFO: loss nanny"],
)
def test_finite_or_unrelated_values_are_not_nonfinite(tmp_path: Path, line: str) -> None:
    reading = read_metric(make_run(tmp_path, f"{line}\naccuracy: 0.9\n"), ACC)
    assert not reading.nonfinite


def test_nonfinite_metric_match(tmp_path: Path) -> None:
    reading = read_metric(make_run(tmp_path, "accuracy: nan\naccuracy: 0.9\n"), ACC)
    assert reading.nonfinite and reading.value == pytest.approx(0.9)


def test_nonfinite_found_deep_in_a_long_log(tmp_path: Path) -> None:
    filler = "INFO step 100 loss 0.123 lr 0.0001 throughput 1234.5\n" * 40_000  # > 2 MB
    log = filler + "step 40001 loss NaN\n" + filler + "accuracy: 0.9\n"
    reading = read_metric(make_run(tmp_path, log), ACC)
    assert reading.nonfinite and "line 40001" in reading.detail
    assert reading.value == pytest.approx(0.9)


def test_nonfinite_also_scanned_when_the_metric_comes_from_the_file(tmp_path: Path) -> None:
    run = make_run(tmp_path, "step 1 loss nan\n", metrics='{"step": 1, "accuracy": 0.9}\n')
    assert read_metric(run, FROM_FILE).nonfinite


def test_loss_scan_can_be_switched_off(tmp_path: Path) -> None:
    spec = MetricSpec.from_text(r"accuracy: (\S+)", loss_pattern=None)
    assert not read_metric(make_run(tmp_path, "loss nan\naccuracy: 0.9\n"), spec).nonfinite


def test_custom_loss_pattern(tmp_path: Path) -> None:
    spec = MetricSpec.from_text(r"acc=(\S+)", loss_pattern=r"objective\((\S+)\)")
    assert read_metric(make_run(tmp_path, "objective(nan)\nacc=0.5\n"), spec).nonfinite


def test_undecodable_bytes_do_not_break_reading(tmp_path: Path) -> None:
    run = make_run(tmp_path, b"\xff\xfe garbage \x80\naccuracy: 0.61\n")
    assert read_metric(run, ACC).value == pytest.approx(0.61)


def test_nonfinite_wins_whatever_the_exit_code(tmp_path: Path) -> None:
    run = make_run(tmp_path, "step 3 loss nan\n", exit_code=1)
    assert classify(run, read_metric(run, ACC))[0] == "nonfinite"
    run = make_run(tmp_path, "step 3 loss nan\n", exit_code=None, signal=9, timed_out=True)
    assert classify(run, read_metric(run, ACC))[0] == "nonfinite"


@pytest.mark.parametrize(
    "status, expected",
    [
        ({"exit_code": 3}, ("crash", "exit code 3; output.log ends 'accuracy: 0.9'")),
        ({"exit_code": None, "signal": 9}, ("crash", "killed by signal 9 (SIGKILL)")),
        ({"exit_code": None, "error": "command not found: x"}, ("crash", "command not found: x")),
        ({"exit_code": None, "signal": 9, "timed_out": True}, ("timeout", "timed out after 30 s")),
        ({"exit_code": None, "signal": 15, "cancelled": True}, ("cancelled", "cancelled")),
    ],
)
def test_classify_runs_without_a_trustworthy_metric(
    tmp_path: Path, status: dict, expected: tuple[str, str]
) -> None:
    run = make_run(tmp_path, "accuracy: 0.9\n", **status)
    assert classify(run, read_metric(run, ACC)) == expected


@pytest.mark.parametrize(
    "stop, log, expected",
    [
        ({"kind": "nonfinite", "step": 3, "reason": "stopped early at step 3: loss nan"},
         "step 3 loss nan\n", ("nonfinite", "stopped early at step 3: loss nan")),
        ({"kind": "diverged", "step": 8, "reason": "stopped early at step 8: loss 4"},
         "step 8 loss 4\n", ("diverged", "stopped early at step 8: loss 4")),
        # NaN seen in the log after the divergence decision: the stronger verdict wins.
        ({"kind": "diverged", "step": 8, "reason": "r"}, "step 9 loss nan\n",
         ("nonfinite", "non-finite value: loss 'nan' at output.log line 1")),
        ({"kind": "diverged", "step": 8}, "", ("diverged", "stopped early at step 8")),
        ({"kind": "diverged"}, "", ("diverged", "stopped early")),
    ],
)
def test_a_run_stopped_early_is_its_decisions_kind(
    tmp_path: Path, stop: dict, log: str, expected: tuple[str, str]
) -> None:
    # Killed by our SIGTERM, yet neither a crash nor a cancellation.
    run = make_run(tmp_path, log, exit_code=None, signal=15, early_stop=stop)
    assert classify(run, read_metric(run, ACC)) == expected
    assert not run.succeeded
    assert TrialRun.from_json(run.to_json()) == run


@pytest.mark.parametrize(
    "token, value",
    [("0.91,", 0.91), ("(0.5)", 0.5), ("93.1%", 93.1), ("1e-3;", 1e-3), ("7.", 7.0), (".5", 0.5),
     (3, 3.0), ("abc", None), (True, None), (None, None), ("", None)],
)
def test_parse_number(token: object, value: float | None) -> None:
    assert parse_number(token) == value


@pytest.mark.parametrize("token", ["nan", "NaN", "-nan", "inf", "-Infinity", "INF,", float("nan")])
def test_parse_number_nonfinite(token: object) -> None:
    number = parse_number(token)
    assert number is not None and not math.isfinite(number)


@settings(deadline=None, max_examples=50)
@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["", ",", ";", ")", "."]))
def test_parse_number_round_trips_printed_floats(value: float, suffix: str) -> None:
    assert parse_number(repr(value) + suffix) == value


def test_spec_from_text_errors_name_the_key() -> None:
    with pytest.raises(UsageError, match=r"metric\.pattern: .*not a valid regular expression"):
        MetricSpec.from_text("acc: ([0-9")
    with pytest.raises(UsageError, match=r"metric\.pattern: .*capturing group"):
        MetricSpec.from_text(r"acc: \S+")
    with pytest.raises(UsageError, match=r"metric\.goal"):
        MetricSpec.from_text(None, goal="up")
    with pytest.raises(UsageError, match=r"score\.loss_pattern"):
        MetricSpec.from_text(None, loss_pattern="(", where="score")
    with pytest.raises(ValueError):
        MetricSpec(pattern=re.compile("no group"))


# --- lines longer than the reader holds ------------------------------------------------

from fusion_dd.runner import metrics as metrics_module  # noqa: E402

_WORDS = st.sampled_from(["accuracy: 0.5", "accuracy: 12", "loss=nan", "loss=0.3", " ", "\r", "\n", "x", "é", "accu", "racy: 7"])


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(_WORDS, max_size=80), cap=st.integers(4, 40), block=st.integers(1, 30))
def test_a_log_read_in_small_pieces_gives_every_match_once_as_a_whole_read_does(parts, cap, block, tmp_path_factory):
    """Long lines come in overlapping pieces: no match lost at a boundary, none counted twice.

    (A single match longer than the overlap is the documented exception: not generated here.)
    """
    text = "".join(parts)
    expected = [match for line in text.split("\n") for match in re.finditer(r"accuracy: (\S+)", line)]
    spec = MetricSpec.from_text(r"accuracy: (\S+)")
    losses = [match for line in text.split("\n") for match in spec.loss_pattern.finditer(line)]
    assume(all(len(match.group(0)) < 16 for match in [*expected, *losses]))
    path = tmp_path_factory.mktemp("log") / "output.log"
    path.write_bytes(text.encode())
    whole = metrics_module._scan_log(path, spec)
    saved = metrics_module.LINE_CAP, metrics_module.OVERLAP, metrics_module._BLOCK_BYTES
    try:
        metrics_module.LINE_CAP, metrics_module.OVERLAP, metrics_module._BLOCK_BYTES = cap, 16, block
        pieces = metrics_module._scan_log(path, spec)
    finally:
        metrics_module.LINE_CAP, metrics_module.OVERLAP, metrics_module._BLOCK_BYTES = saved
    assert (pieces.matches, pieces.last_token, pieces.last_line) == (whole.matches, whole.last_token, whole.last_line)
    assert bool(pieces.first_nonfinite) == bool(whole.first_nonfinite)
    assert whole.matches == len(expected) and whole.last_token == (expected[-1].group(1) if expected else None)


def test_a_metric_after_megabytes_without_a_newline_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """A progress bar rewriting one line with \\r: the reader holds pieces, never the line."""
    held: list[int] = []
    real = metrics_module._scan_piece

    def spy(scan, piece, *args):
        held.append(len(piece.text))
        return real(scan, piece, *args)

    bar = b"".join(b"\r%3d%%|####| loss=0.4 " % (i % 100) for i in range(200_000))  # about 4 MB
    run = make_run(tmp_path, bar + b" accuracy: 0.81" + bar)
    metrics_module._scan_piece = spy
    try:
        reading = read_metric(run, ACC)
    finally:
        metrics_module._scan_piece = real
    assert reading.value == pytest.approx(0.81)
    assert held and max(held) <= metrics_module.LINE_CAP + metrics_module._BLOCK_BYTES + metrics_module.OVERLAP


def _suggested_pattern(detail: str) -> str:
    found = re.search(r"set metric\.pattern: '(.+)'$", detail)
    assert found, detail
    return found.group(1)


@pytest.mark.parametrize(
    ("key", "printed"),
    [("accuracy", "epoch 3 accuracy: 0.5"), ("val/acc", "val/acc=0.81 loss=0.2"), ("top-1", "Top-1: .75")],
)
def test_a_metric_printed_but_not_written_names_the_pattern_that_reads_it(
    tmp_path: Path, key: str, printed: str
) -> None:
    run = make_run(tmp_path, f"starting\n{printed}\ndone\n")  # no metrics file
    reading = read_metric(run, MetricSpec(key=key))
    assert reading.value is None
    assert f"no record with key {key!r} in metrics.jsonl (the training wrote no metrics.jsonl)" in reading.detail
    assert f"output.log prints {printed!r}" in reading.detail
    # The advice works: with the pattern it names, the same run gives its metric.
    advised = MetricSpec.from_text(_suggested_pattern(reading.detail), key=key)
    assert read_metric(run, advised).value is not None


@pytest.mark.parametrize(
    ("pattern", "printed", "value"),
    [
        (r"accuracy[=:]\s*(\S+)", "eval accuracy = 0.7681", 0.7681),  # a space before the '='
        (r"accuracy[=:]\s*(\S+)", "Accuracy 0.91", 0.91),  # no separator at all, another case
        (r"(?i)top-1=(\S+)", "Top-1: 75.5", 75.5),
    ],
)
def test_a_pattern_that_misses_the_printed_metric_names_one_that_reads_it(
    tmp_path: Path, pattern: str, printed: str, value: float
) -> None:
    run = make_run(tmp_path, f"step 1 loss 0.5\n{printed}\ndone\n")
    reading = read_metric(run, MetricSpec.from_text(pattern))
    assert reading.value is None
    assert reading.detail.startswith(f"no match of pattern '{pattern}' in output.log; output.log prints {printed!r}")
    advised = MetricSpec.from_text(_suggested_pattern(reading.detail))
    assert read_metric(run, advised).value == pytest.approx(value)


@pytest.mark.parametrize("printed", ["accuracy improved to 0.9", "my_accuracy: 0.9", "accuracy: n/a"])
def test_no_advice_for_a_missed_pattern_when_no_line_prints_its_word_and_a_number(tmp_path: Path, printed: str) -> None:
    run = make_run(tmp_path, f"{printed}\n")
    detail = read_metric(run, MetricSpec.from_text(r"accuracy=(\S+)")).detail
    assert detail == "no match of pattern 'accuracy=(\\S+)' in output.log"


def test_no_advice_when_the_output_prints_no_such_metric(tmp_path: Path) -> None:
    run = make_run(tmp_path, "step 1 loss 0.5\nmy_accuracy: 0.9\naccuracy: n/a\n", metrics='{"step": 1}\n')
    detail = read_metric(run, FROM_FILE).detail
    assert detail == "no record with key 'accuracy' in metrics.jsonl"  # the file was written, without the key


def test_only_the_end_of_a_long_log_is_read_for_the_advice(tmp_path: Path) -> None:
    from fusion_dd.runner.metrics import HINT_TAIL_BYTES

    filler = "x" * 99 + "\n"
    run = make_run(tmp_path, "accuracy: 0.5\n" + filler * (HINT_TAIL_BYTES // 100 + 10))
    assert "prints" not in read_metric(run, FROM_FILE).detail
    run = make_run(tmp_path / "late", filler * (HINT_TAIL_BYTES // 100 + 10) + "accuracy: 0.5\n")
    assert "prints 'accuracy: 0.5'" in read_metric(run, FROM_FILE).detail


def test_a_crash_names_the_last_line_the_training_printed(tmp_path: Path) -> None:
    traceback = "Traceback (most recent call last):\n  File 'train.py'\nRuntimeError: EZ9999 kernel launch failed\n\n  \n"
    assert last_output_line(_log(tmp_path, traceback)) == "RuntimeError: EZ9999 kernel launch failed"
    long = "x" * 1000
    assert last_output_line(_log(tmp_path, "step 1\n" + long)) == "x" * (LAST_LINE_CHARS - 3) + "..."
    # Only the end of the log is read: a line that began before it is cut, never read whole.
    huge = "E" * (10 * LAST_LINE_TAIL_BYTES)
    assert last_output_line(_log(tmp_path, huge)) == "E" * (LAST_LINE_CHARS - 3) + "..."
    assert last_output_line(_log(tmp_path, "\n\n")) is None
    assert last_output_line(tmp_path / "absent.log") is None


def _log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "output.log"
    path.write_text(text)
    return path
