"""Devices.watch: which quick crashes set a device aside (in-process, no trainings)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fusion_dd.coordinator.devices import Devices
from fusion_dd.store.state import TrialState


class _Context:
    """What Devices reads of the engine's context: the devices, the trials, the journal and the terminal."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(train=SimpleNamespace(devices=[("0",), ("1",)]))
        self.state = SimpleNamespace(trials={})
        self.journaled: list[dict[str, Any]] = []
        self.said: list[str] = []
        self.events = SimpleNamespace(message=self.said.append)

    def append(self, record: dict[str, Any]) -> None:
        self.journaled.append(record)


def _train(context: _Context, devices: Devices, on: set[str], device: str, kind: str) -> None:
    number = len(context.state.trials) + 1
    trial = TrialState(f"{number:04d}", frozenset(on), 0, (device,), f"trials/{number:04d}", 0.0)
    trial.finished = {"kind": kind, "reason": "exit code 1" if kind == "crash" else "", "duration": 0.5}
    context.state.trials[trial.trial_id] = trial
    devices.watch((device,), trial)


def _devices() -> tuple[_Context, Devices]:
    context = _Context()
    devices = Devices(context, launcher=None, quiet_while=lambda: False)  # type: ignore[arg-type]
    devices.pool()
    return context, devices


def test_a_culprit_that_crashes_every_configuration_keeping_it_on_costs_no_device() -> None:
    context, devices = _devices()
    _train(context, devices, set(), "0", "metric")  # the baseline runs
    _train(context, devices, {"A", "B", "C"}, "1", "crash")  # all on: A crashes the training
    _train(context, devices, {"A", "B"}, "1", "crash")  # and so does every configuration with A on
    assert devices.retired == [] and context.journaled == [] and context.said == []


def test_a_device_that_crashes_what_runs_elsewhere_is_set_aside() -> None:
    context, devices = _devices()
    _train(context, devices, {"A", "B", "C"}, "0", "metric")  # everything on runs on device 0
    _train(context, devices, {"A"}, "1", "crash")  # fewer rules on cannot crash for fusion's sake
    assert devices.retired == []
    _train(context, devices, {"B"}, "1", "crash")
    assert devices.retired == [("1",)]
    assert context.journaled[0]["device"] == ["1"] and "set aside" in context.said[0]


def test_a_device_that_ran_a_configuration_and_then_crashes_its_subsets_is_set_aside_too() -> None:
    context, devices = _devices()
    _train(context, devices, set(), "0", "metric")
    _train(context, devices, {"A", "B"}, "1", "metric")  # device 1 worked, then went bad
    _train(context, devices, {"A"}, "1", "crash")
    _train(context, devices, {"B"}, "1", "crash")
    assert devices.retired == [("1",)]


def test_a_crash_whose_configuration_crashes_on_every_device_never_counts() -> None:
    context, devices = _devices()
    _train(context, devices, set(), "0", "metric")
    for _ in range(3):  # retries on both devices: the configuration, not a device
        _train(context, devices, {"A"}, "0", "crash")
        _train(context, devices, {"A"}, "1", "crash")
    assert devices.retired == []
