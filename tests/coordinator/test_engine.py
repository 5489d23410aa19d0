"""The engine through its public entry point, ``Engine(config, events).run()``, in-process.

Trainings are the fake training (real supervised subprocesses); the engine's
events are recorded, so these tests see what the CLI cannot: every training the
user is told about, in order, and the smallest failing set as it shrinks. The
report must be what the journal alone rebuilds, and running the engine again on
a finished search must launch nothing.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml

from fusion_dd.report.build import finished_report
from fusion_dd.config.settings import load_config
from fusion_dd.coordinator.engine import Engine
from fusion_dd.core.rules import Rule, Section, catalog
from fusion_dd.search.oracle import Outcome
from fusion_dd.store.journal import JOURNAL_NAME, read_records
from fusion_dd.store.state import TrialState, replay
from tests.support.fake_training import fake_command, read_launches

GRAPH = [name for name, section in catalog().items() if section is Section.GRAPH][:6]
CULPRIT = GRAPH[4]


class RecordingEvents:
    """SearchEvents that remember everything, thread-safely."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.log: list[tuple[str, str]] = []
        self.outcomes: dict[str, Outcome | None] = {}
        self.best: list[frozenset[Rule] | None] = []
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        with self._lock:
            self.messages.append(text)

    def trial_started(self, trial: TrialState) -> None:
        with self._lock:
            self.log.append(("start", trial.trial_id))

    def trial_finished(self, trial: TrialState, outcome: Outcome | None) -> None:
        with self._lock:
            self.log.append(("end", trial.trial_id))
            self.outcomes[trial.trial_id] = outcome

    def best_so_far(self, config: frozenset[Rule] | None) -> None:
        with self._lock:
            self.best.append(config)


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    document = {
        "rules": {"GraphFusion": GRAPH},
        "train": {"command": fake_command("--launch-log", "launch.log", "--culprits", CULPRIT), "devices": [0, 1]},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 40},
    }
    path = tmp_path / "fusion-dd.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_search_tells_its_events_and_its_report_is_the_journal(config_path: Path, tmp_path: Path) -> None:
    config = load_config(config_path)
    events = RecordingEvents()
    result = Engine(config, events).run()
    assert (result.status, result.exit_code) == ("found", 0)
    assert [[rule["name"] for rule in c["rules"]] for c in result.report["culprits"]] == [[CULPRIT]]

    started = [trial_id for kind, trial_id in events.log if kind == "start"]
    ended = [trial_id for kind, trial_id in events.log if kind == "end"]
    assert len(started) == len(set(started)) == result.report["trainings"] == len(read_launches(tmp_path / "launch.log"))
    assert sorted(ended) == sorted(started), "every training the user saw start is seen to end, once"
    for trial_id in started:
        assert events.log.index(("start", trial_id)) < events.log.index(("end", trial_id))
    by_id = {entry["trial_id"]: entry for entry in result.report["trials"]}
    # References end before there is a threshold to judge them by; every other training ends with its verdict.
    references = [trial_id for trial_id in started if by_id[trial_id]["role"] in ("baseline", "all_on")]
    assert len(references) == 2 and all(events.outcomes[trial_id] is None for trial_id in references)
    assert {trial_id: events.outcomes[trial_id].value for trial_id in started if trial_id not in references} == {
        trial_id: by_id[trial_id]["outcome"] for trial_id in started if trial_id not in references
    }
    # Every failing training is offered as the best so far (in the order they end; the display keeps the smallest).
    failing = [config for config in events.best if config is not None]
    assert len(failing) == sum(outcome is Outcome.FAIL for outcome in events.outcomes.values())
    assert all(CULPRIT in {rule.name for rule in config} for config in failing)
    assert {rule.name for rule in min(failing, key=len)} == {CULPRIT}

    state = replay(read_records(config.state_dir / JOURNAL_NAME))
    assert state.finished is not None and state.finished["report"]["culprits"] == result.report["culprits"]
    assert sorted(state.trials) == sorted(started) and state.launched == result.report["trainings"]
    # search_finished keeps the answer, not the trial list the trial records hold: put back, the same report.
    assert "trials" not in state.finished["report"]
    assert finished_report(state) == result.report


def test_a_journal_of_this_version_replays_to_the_questions_and_answer_of_the_run_that_wrote_it(
    config_path: Path, tmp_path: Path
) -> None:
    """Configurations as masks, the answer without its trial list: cut before search_finished, the
    journal alone replays every question from its cache (nothing trained) to the same answer."""
    from fusion_dd.coordinator.replay import rebuild

    config = load_config(config_path)
    result = Engine(config).run()
    records = read_records(config.state_dir / JOURNAL_NAME)
    assert records[-1]["type"] == "search_finished"
    started = [record for record in records if record["type"] == "trial_started"]
    assert started and all("on" in record and "config" not in record for record in started)
    rebuilt = rebuild(records[:-1], config.state_dir, running=False)
    for key in ("status", "culprits", "switched_off", "fix_verified", "trainings", "smallest_failing"):
        assert rebuilt.report[key] == result.report[key], key
    assert [entry["configuration"] for entry in rebuilt.report["trials"]] == [
        entry["configuration"] for entry in result.report["trials"]
    ]
    # And as a session: the questions replay from the journal's cache, none is trained again.
    (config.state_dir / JOURNAL_NAME).write_text(
        "".join(line for line in (config.state_dir / JOURNAL_NAME).read_text().splitlines(keepends=True)[:-1])
    )
    launched = read_launches(tmp_path / "launch.log")
    again = Engine(load_config(config_path)).run()
    assert read_launches(tmp_path / "launch.log") == launched
    assert again.report["culprits"] == result.report["culprits"] and again.status == "found"


def test_running_a_finished_search_again_launches_nothing_and_answers_the_same(config_path: Path, tmp_path: Path) -> None:
    config = load_config(config_path)
    first = Engine(config).run()
    launched = read_launches(tmp_path / "launch.log")
    events = RecordingEvents()
    again = Engine(load_config(config_path), events).run()
    assert read_launches(tmp_path / "launch.log") == launched
    assert [e for e in events.log if e[0] == "start"] == []
    assert again.status == first.status == "found"
    assert again.report["culprits"] == first.report["culprits"]
    assert again.report["trainings"] == first.report["trainings"]


def _four_devices(tmp_path: Path, culprit: str, rules: list[str], pass_at: str = "off") -> Path:
    document = {
        "rules": {"GraphFusion": rules},
        "train": {"command": fake_command("--launch-log", "launch.log", "--culprits", culprit), "devices": [0, 1, 2, 3]},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 60},
        "early_stop": {"pass_at": pass_at},
    }
    path = tmp_path / "fusion-dd.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_on_four_devices_the_first_question_trains_beside_the_references_and_replays_so(tmp_path: Path) -> None:
    """Without early passes, the two devices the references leave idle train the search's first
    question: its question record says so, the search then finds its answers in the cache, and a
    session cut right after that round asks the same questions, training nothing twice."""
    rules = [name for name, section in catalog().items() if section is Section.GRAPH][:24]
    config_path = _four_devices(tmp_path, rules[17], rules)
    result = Engine(load_config(config_path)).run()
    assert result.status == "found" and [[r["name"] for r in c["rules"]] for c in result.report["culprits"]] == [[rules[17]]]
    records = read_records(load_config(config_path).state_dir / JOURNAL_NAME)
    questions = [record for record in records if record["type"] == "question"]
    assert questions[0]["index"] == 0 and questions[0]["width"] == 2 and questions[0].get("opening") is True
    assert not any(record.get("opening") for record in questions[1:])
    first_end = next(index for index, record in enumerate(records) if record["type"] == "trial_finished")
    first_round = [record for record in records[:first_end] if record["type"] == "trial_started"]
    assert sorted(record["role"] for record in first_round) == ["all_on", "baseline", "search", "search"]
    launched = read_launches(tmp_path / "launch.log")
    assert len(set(launched)) == len(launched) == result.report["trainings"]

    # Cut right before the first question was journaled: the references and the riders finished.
    journal = load_config(config_path).state_dir / JOURNAL_NAME
    lines = journal.read_text().splitlines(keepends=True)
    cut = next(index for index, line in enumerate(lines) if '"type":"question"' in line)
    journal.write_text("".join(lines[:cut]))
    trained = {(tuple(sorted(on)), repeat) for on, repeat in read_launches(tmp_path / "launch.log")[: len(first_round)]}
    (tmp_path / "launch.log").write_text("")
    again = Engine(load_config(config_path)).run()
    relaunched = {(tuple(sorted(on)), repeat) for on, repeat in read_launches(tmp_path / "launch.log")}
    assert not relaunched & trained, "nothing of the first round is trained again"
    assert again.report["culprits"] == result.report["culprits"]
    assert again.report["trainings"] == result.report["trainings"]
    replayed = [record for record in read_records(journal) if record["type"] == "question"]
    assert replayed[0].get("opening") is True and [q["width"] for q in replayed] == [q["width"] for q in questions]


def test_with_both_references_given_as_metrics_the_first_question_is_asked_as_usual(tmp_path: Path) -> None:
    """No reference training, no round to ride along: the first question is not sized for one."""
    rules = [name for name, section in catalog().items() if section is Section.GRAPH][:24]
    config_path = _four_devices(tmp_path, rules[17], rules)
    document = yaml.safe_load(config_path.read_text())
    document["score"] = {"baseline_metric": 0.9, "all_on_metric": 0.5}
    config_path.write_text(yaml.safe_dump(document))
    result = Engine(load_config(config_path)).run()
    assert result.status == "found"
    questions = [r for r in read_records(load_config(config_path).state_dir / JOURNAL_NAME) if r["type"] == "question"]
    assert questions[0]["width"] == 4 and not any(record.get("opening") for record in questions)


def test_where_trainings_may_pass_early_the_first_question_waits_for_the_references(tmp_path: Path) -> None:
    """Beside the references a question trains to its end (no horizon yet); after them it may stop at
    the horizon. With early passes possible (the default ``pass_at: auto``) it is asked after them."""
    rules = [name for name, section in catalog().items() if section is Section.GRAPH][:24]
    config_path = _four_devices(tmp_path, rules[17], rules, pass_at="auto")
    result = Engine(load_config(config_path)).run()
    assert result.status == "found"
    records = read_records(load_config(config_path).state_dir / JOURNAL_NAME)
    first_end = next(index for index, record in enumerate(records) if record["type"] == "trial_finished")
    assert sorted(r["role"] for r in records[:first_end] if r["type"] == "trial_started") == ["all_on", "baseline"]
    assert not any(record.get("opening") for record in records if record["type"] == "question")
