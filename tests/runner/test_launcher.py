"""The launcher seam: a second launcher, in another process, is all the engine needs to use it.

``ProcessLauncher`` ships each ``TrialRequest`` (pickled) to a fresh Python
process that runs the trial with the local launcher there and sends back the
``TrialResult`` record; the coordinator never touches the trial's process
itself. If the engine relied on anything but the protocol (a closure, a pid of
its own, a file it reads after the trial), these tests would break.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from fusion_dd.config.settings import load_config
from fusion_dd.coordinator.engine import Engine
from fusion_dd.runner.launcher import LocalLauncher, Placement, TrialRequest, TrialResult, result_of
from fusion_dd.runner.metrics import MetricSpec
from fusion_dd.runner.trial import TrialRun
from tests.support.cli import CULPRIT, write_config

_SPAWN = multiprocessing.get_context("spawn")


def _run_elsewhere(request: TrialRequest, connection: Any, cancel: Any) -> None:
    """In the other process: start the trial with the local launcher and report back."""
    handle = LocalLauncher().start(request)
    connection.send(handle.placement)
    connection.send(handle.wait(cancel))
    connection.close()


class ProcessHandle:
    def __init__(self, process: Any, connection: Any, cancel: Any, placement: Placement) -> None:
        self._process = process
        self._connection = connection
        self._cancel = cancel
        self.placement = placement
        self._result: TrialResult | None = None

    def wait(self, cancel: threading.Event | None = None) -> TrialResult:
        while self._result is None:
            if cancel is not None and cancel.is_set():
                self._cancel.set()
            if self._connection.poll(0.1):
                self._result = self._connection.recv()
        self._process.join(timeout=60)
        return self._result

    def cancel(self) -> None:
        self._cancel.set()


class ProcessLauncher:
    name = "fake-process"

    def __init__(self) -> None:
        self.started: list[str] = []

    def start(self, request: TrialRequest) -> ProcessHandle:
        ours, theirs = _SPAWN.Pipe()
        cancel = _SPAWN.Event()
        process = _SPAWN.Process(target=_run_elsewhere, args=(request, theirs, cancel), daemon=False)
        process.start()
        local = ours.recv()  # the other side started it: where it runs
        self.started.append(request.spec.trial_id)
        placement = Placement(self.name, local.host, local.boot_id, str(process.pid), local.device)
        return ProcessHandle(process, ours, cancel, placement)

    def adopt(self, request: TrialRequest, placement: dict | None) -> None:
        return None  # this launcher cannot re-attach: an open trial is lost and trained again

    def ever_started(self, request: TrialRequest) -> bool:
        return (request.trial_dir / "supervisor.json").exists()


@pytest.fixture(autouse=True)
def _single_threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")


def test_a_search_runs_entirely_through_a_launcher_in_another_process(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, "--culprits", CULPRIT))
    launcher = ProcessLauncher()
    result = Engine(config, launcher=launcher).run()
    assert result.status == "found", result.report.get("message")
    assert [rule["name"] for rule in result.report["culprits"][0]["rules"]] == [CULPRIT]
    journal = [json.loads(line) for line in (tmp_path / ".fusion-dd" / "journal.jsonl").read_text().splitlines()]
    launched = [record for record in journal if record["type"] == "trial_launched"]
    assert launched and len(launched) == len(launcher.started) == result.report["trainings"]
    assert {record["placement"]["launcher"] for record in launched} == {"fake-process"}
    assert all(int(record["placement"]["job_id"]) != os.getpid() for record in launched)


def test_a_request_and_its_result_are_plain_data(tmp_path: Path) -> None:
    """Pickled both ways: what a cluster launcher ships."""
    import pickle

    config = load_config(write_config(tmp_path, "--culprits", CULPRIT))
    engine = Engine(config)
    trial_dir = tmp_path / "t"
    trial_dir.mkdir()
    (trial_dir / "output.log").write_text("step 1\naccuracy: 0.9\n")
    (trial_dir / "metrics.jsonl").write_text("")
    request = TrialRequest(
        spec=_spec(engine, trial_dir),
        metric=MetricSpec.from_text(r"accuracy[=:]\s*(\S+)", "accuracy", "max", None),
        hooks=tuple(engine.trainer.hooks),
    )
    assert pickle.loads(pickle.dumps(request)).spec == request.spec
    run = TrialRun("t", trial_dir, 0, None, False, False, 1.5, 0.0, 1.5, trial_dir / "output.log",
                   trial_dir / "metrics.jsonl")
    result = result_of(run, request)
    assert pickle.loads(pickle.dumps(result)) == result
    fields = result.record_fields()
    assert fields["kind"] == "metric" and fields["value"] == 0.9 and "log_tail" not in fields
    assert fields["artifacts"]["fusion_result"]["switch_check"]["status"] == "unverified"


def _spec(engine: Engine, trial_dir: Path):
    from fusion_dd.store.state import TrialState

    trial = TrialState(trial_id="t", config=frozenset({CULPRIT}), repeat=0, device=("0",), trial_dir=str(trial_dir),
                       started_at=0.0)
    return engine.trainer.request(trial, ("0",)).spec
