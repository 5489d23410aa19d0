"""The estimate of trainings left, the live view and the plain lines, and `fusion-dd status`."""

from __future__ import annotations

import io
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from fusion_dd.cli.progress import ConsoleEvents
from fusion_dd.coordinator.estimate import estimate
from fusion_dd.store.journal import read_records
from fusion_dd.store.state import replay
from tests.support.cli import CULPRIT, GRAPH, UB, write_config
from tests.support.fake_training import run_fusion_dd

ESTIMATE = re.compile(
    r"estimate: ((?:(\d+) to (\d+)|about (\d+)) training\(s\) left \((?:about \d+ expected, \d+ if one more culprit "
    r"set shows up|the same under every hypothesis|typical for one culprit set \(\d+\) to two|the answer stands; the dumped trainings of localization"
    r"|the trainings still running; the budget allows no more); at most (\d+) more by the budget\)"
    r"|0 trainings left \(the search has its answer\))"
)


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[Path, str]:
    """A finished search (plain output, as under nohup) of a culprit and an interacting pair."""
    folder = tmp_path_factory.mktemp("searched")
    write_config(folder, "--culprits", CULPRIT, "--pair", f"{GRAPH[3]}+{UB[2]}", budget=60)
    result = run_fusion_dd("search", cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder, result.stderr


def test_estimate_never_exceeds_the_budget_left_and_is_zero_at_the_end(searched):
    folder, _ = searched
    state_dir = folder / ".fusion-dd"
    records = read_records(state_dir / "journal.jsonl")
    budget = 60
    cuts = [index + 1 for index, record in enumerate(records) if record["type"] in ("trial_started", "trial_finished")]
    bases = set()
    for cut in cuts:
        prefix = records[:cut]
        found = estimate(prefix, state_dir)
        assert found is not None
        state = replay(prefix)
        left = budget - state.launched
        running = len(state.open_trials())  # still to finish: counted as left
        low, high = found.range
        assert 0 <= low <= found.trainings_left <= high <= found.budget_left + running and found.budget_left == left
        assert found.basis in ("typical", "expectation", "done")
        bases.add(found.basis)
        assert ESTIMATE.search(found.text()), found.text()
    assert {"typical", "expectation"} <= bases
    final = estimate(records, state_dir)
    assert final is not None and final.trainings_left == 0 and final.basis == "done"
    # Budget nearly spent: the bound wins over the expectation.
    middle = records[: cuts[len(cuts) // 2]]
    document = json.loads(json.dumps(middle))
    for record in document:
        if record["type"] == "session_started":
            record["budget"] = replay(middle).launched + 1
    tight = estimate(document, state_dir)
    running = len(replay(middle).open_trials())
    assert tight is not None and tight.range[1] <= 1 + running and tight.budget_left == 1


def _truth(records: list[dict], final: int) -> int:
    """Trainings left after these records: launched later, or running then."""
    state = replay(records)
    charged = [trial for trial in state.trials.values() if trial.costs_budget]
    return final - sum(1 for trial in charged if not trial.open)


def test_the_range_holds_what_was_left_and_says_0_only_when_nothing_is(searched):
    """At every finished training of a search with an independent culprit and an interacting pair
    (the fix candidate after the first culprit fails: one more set), the printed range holds the
    trainings really left in at least 80 % of the updates, and '0 left' means nothing is left."""
    folder, _ = searched
    state_dir = folder / ".fusion-dd"
    records = read_records(state_dir / "journal.jsonl")
    final = sum(1 for trial in replay(records).trials.values() if trial.costs_budget)
    cuts = [index + 1 for index, record in enumerate(records) if record["type"] == "trial_finished"]
    held = 0
    for cut in cuts:
        prefix = records[:cut]
        found = estimate(prefix, state_dir, now=0.0)
        assert found is not None
        truth = _truth(prefix, final)
        low, high = found.range
        held += low <= truth <= high
        if high == 0:
            assert truth == 0, f"'0 left' with {truth} training(s) still to come: {found.text()}"
        if truth > 0:
            assert "0 trainings left" not in found.text()
    assert held >= 0.8 * len(cuts), f"the range held the truth in {held} of {len(cuts)} updates"


def test_plain_output_is_line_based_and_says_the_basis(searched):
    _, stderr = searched
    assert "\x1b" not in stderr and "\r" not in stderr
    said = [line.strip() for line in stderr.splitlines() if "estimate:" in line]
    assert said and all(ESTIMATE.fullmatch(line.split(", finishing")[0]) for line in said), said
    assert said[-1] == "estimate: 0 trainings left (the search has its answer)"


def test_live_view_shows_running_trials_and_the_estimate(searched, tmp_path):
    folder, _ = searched
    state_dir = tmp_path / "state"
    shutil.copytree(folder / ".fusion-dd", state_dir)
    # Cut the journal mid-search so that there is something left to estimate.
    lines = (state_dir / "journal.jsonl").read_text().splitlines()
    (state_dir / "journal.jsonl").write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    stream = io.StringIO()
    events = ConsoleEvents(total_rules=30, budget=60, stream=stream, live=True)
    events.start(launched_before=5, state_dir=state_dir)
    state = replay(read_records(state_dir / "journal.jsonl"))
    trial = next(iter(state.trials.values()))
    events.trial_started(trial)
    deadline = time.monotonic() + 60
    while events.estimate() is None:
        assert time.monotonic() < deadline, "no estimate"
        time.sleep(0.05)
    time.sleep(1.2)  # one tick of the live panel
    events.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert "6/60 trainings" in text
    assert f"#{trial.trial_id}" in text and "elapsed" in text and "loss" in text
    assert ESTIMATE.search(text)
    found = events.estimate()
    assert found.trainings_left <= 60 - state.launched


def test_status_shows_the_estimate(searched, tmp_path):
    folder, _ = searched
    shutil.copytree(folder / ".fusion-dd", tmp_path / ".fusion-dd")
    journal = tmp_path / ".fusion-dd" / "journal.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    result = run_fusion_dd("status", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert ESTIMATE.search(result.stdout), result.stdout


def test_a_cluster_search_is_estimated_at_the_width_of_its_journaled_devices_without_connecting(searched, monkeypatch):
    """With train.launcher: dask the devices are the cluster's: the session journals them (HOST:ID),
    and the estimate (a replay of the journal) uses them, never the config's launcher."""
    folder, _ = searched
    state_dir = folder / ".fusion-dd"
    records = read_records(state_dir / "journal.jsonl")
    cuts = [index + 1 for index, record in enumerate(records) if record["type"] == "trial_finished"]
    middle = records[: cuts[len(cuts) // 3]]

    def boom(config):
        raise AssertionError("a replay connected to the cluster")

    monkeypatch.setattr("fusion_dd.coordinator.engine.launcher_for", boom)

    def on_cluster(devices: int):
        document = json.loads(json.dumps(middle))
        for record in document:
            if record["type"] == "search_started":
                record["config_document"]["train"].update(launcher="dask", scheduler="tcp://127.0.0.1:1")
            if record["type"] == "session_started":
                record["devices"] = [[f"node{index // 8}:{index % 8}"] for index in range(devices)]
        return estimate(document, state_dir, now=middle[-1]["time"])

    narrow, wide = on_cluster(1), on_cluster(8)
    assert narrow is not None and wide is not None
    assert narrow.trainings_left >= 2, narrow  # something to parallelize
    assert narrow.seconds_left is not None and wide.seconds_left is not None
    assert wide.seconds_left < narrow.seconds_left, (narrow, wide)


def test_with_the_budget_spent_the_estimate_says_what_is_left_is_what_is_running(searched):
    """Not "typical for one culprit set" beside "at most 0": the budget lets nothing more start."""
    folder, _ = searched
    records = read_records(folder / ".fusion-dd" / "journal.jsonl")
    # Right after the third training started (the least budget a search may have is 3).
    cut = [index + 1 for index, record in enumerate(records) if record["type"] == "trial_started"][2]
    middle = json.loads(json.dumps(records[:cut]))
    for record in middle:
        if record["type"] == "session_started":
            record["budget"] = replay(middle).launched
    found = estimate(middle, folder / ".fusion-dd")
    running = len(replay(middle).open_trials())
    assert found is not None and found.budget_left == 0 and found.range[1] <= running
    assert "the trainings still running; the budget allows no more; at most 0 more by the budget" in found.text()
    assert ESTIMATE.search(found.text()), found.text()


def test_with_the_budget_spent_and_nothing_running_the_estimate_says_the_search_needs_more(searched):
    """Not "about 0 trainings left" for a search that has no answer yet."""
    folder, _ = searched
    records = read_records(folder / ".fusion-dd" / "journal.jsonl")
    # Right after the third training finished, nothing running, the budget spent.
    ends = [index + 1 for index, record in enumerate(records) if record["type"] == "trial_finished"]
    middle = json.loads(json.dumps(records[: ends[2]]))
    assert not replay(middle).open_trials()
    for record in middle:
        if record["type"] == "session_started":
            record["budget"] = replay(middle).launched
    found = estimate(middle, folder / ".fusion-dd")
    assert found is not None and found.budget_left == 0 and found.range == (0, 0)
    assert found.text() == (
        "estimate: the budget is spent and nothing is running; the search needs more (resume with a larger --budget)"
    )


def test_while_a_finished_search_localizes_the_estimate_counts_the_dumped_trainings_left(tmp_path):
    # The answer is journaled before localization: "0 left (the search has its answer)" was
    # said while the dumped trainings still ran.
    from tests.support.dumping import write as write_localizing

    done = run_fusion_dd("search", "-c", str(write_localizing(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    state_dir = tmp_path / "state"
    records = read_records(state_dir / "journal.jsonl")
    answered = next(index for index, record in enumerate(records) if record["type"] == "search_finished")
    localizing = [record["trial_id"] for record in records[answered:] if record.get("role") == "localize"]
    assert localizing, "the search trained nothing for localization"
    cuts = [index + 1 for index, record in enumerate(records) if index >= answered and record["type"] in ("trial_started", "trial_finished")]
    for cut in [answered + 1, *cuts]:
        prefix = records[:cut]
        found = estimate(prefix, state_dir, now=0.0)
        finished = {record["trial_id"] for record in prefix if record["type"] == "trial_finished"}
        truth = sum(1 for trial_id in localizing if trial_id not in finished)
        assert found is not None and found.trainings_left == truth, (cut, found)
        assert found.basis == ("localization" if truth else "done")
        assert ESTIMATE.search(found.text()), found.text()
    assert "the answer stands; the dumped trainings of localization" in estimate(records[: answered + 1], state_dir).text()


def test_a_stopped_search_has_no_finishing_time_only_the_training_time_left(searched):
    """Nothing finishes while no coordinator runs: "finishing around 12:28" would be a time that passes unmet."""
    folder, _ = searched
    records = read_records(folder / ".fusion-dd" / "journal.jsonl")
    ends = [index + 1 for index, record in enumerate(records) if record["type"] == "trial_finished"]
    found = estimate(records[: ends[2]], folder / ".fusion-dd")
    assert found is not None and found.seconds_left is not None and found.range[1] > 0
    assert "finishing in about" in found.text()
    stopped = found.text(stopped=True)
    assert "finishing" not in stopped and "around" not in stopped
    assert stopped.endswith(" of training once resumed") and stopped.startswith(found.text().split(", finishing")[0])
