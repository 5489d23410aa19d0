"""Which devices a session trains on, and setting aside a device that keeps failing to start trainings.

A training that ends without a metric this soon after its start did not really
run; two in a row on one device, while another device trains fine, mean the
device is broken rather than the configuration. Such a device is journaled as
retired and leaves the pool, so that the search does not blame configurations
for it.

A quick crash is held against its device only when the configuration is known
to run: a training ran it, or one with all of its rules on and more (a fused
kernel that crashes the training crashes every configuration that keeps its
rule on; fewer rules on than a configuration that ran cannot add that crash).
A culprit that crashes the training (``score.crash_is_failure``) then costs no
device, whichever device its configurations land on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..runner.executor import Device, DevicePool
from ..store.records import RecordType
from ..store.state import LOCALIZE_ROLE, TrialState
from .ports import Context

START_FAILURE_SECONDS = 30.0
START_FAILURES_TO_RETIRE = 2
#: The kinds of a training that ran: it reached a metric, or was stopped on its loss.
RAN = frozenset({"metric", "nonfinite", "diverged", "early_pass", "early_fail"})


class Devices:
    """The device pool of a session: train.devices, or a cluster launcher's own slots, less the retired ones."""

    def __init__(self, context: Context, launcher: Any, quiet_while: Callable[[], bool]) -> None:
        """``quiet_while``: true while failures to start say nothing about a device (configurations
        that cannot run crash on every device while the required passes are looked for)."""
        self._context = context
        self._launcher = launcher
        self._quiet_while = quiet_while
        self._start_failures: dict[Device, int] = {}
        self.retired: list[Device] = []
        self._in_service: list[Device] = []  # the devices (or a cluster's slots) of the last batch
        self._some_device_works = False
        self._pool: DevicePool | None = None
        self._lock = threading.Lock()

    def pool(self) -> DevicePool:
        """A pool of the devices still in service; ``watch`` retires broken ones from it."""
        # A cluster launcher offers its own slots (dask: one per device worker), else train.devices.
        slots = getattr(self._launcher, "slots", None)
        self._in_service = [tuple(d) for d in (slots() if slots is not None else self._context.config.train.devices)]
        active = [d for d in self._in_service if d not in self.retired]
        self._pool = DevicePool(active)
        return self._pool

    def count(self) -> int:
        """How many devices train at once: train.devices, or the cluster's device workers."""
        if not self._in_service and getattr(self._launcher, "slots", None) is not None:
            self.pool()
        return len(self._in_service or self._context.config.train.devices)

    def in_service(self) -> int:
        return self.count() - len(self.retired)

    def of_session(self) -> list[list[str]]:
        """The devices this session trains on, as ``session_started`` journals them: train.devices, or
        a cluster's own (dask: ``HOST:ID/WORKER`` per device worker), which status, estimate and report read."""
        if getattr(self._launcher, "slots", None) is not None:
            self.pool()
        return [list(entry) for entry in (self._in_service or self._context.config.train.devices)]

    def watch(self, device: Device, trial: TrialState) -> None:
        """Set a device aside when trainings keep failing to start on it while others train fine."""
        finished = trial.finished
        if finished is None or trial.role == LOCALIZE_ROLE or self._quiet_while():
            # A dumping training may end early and without a metric on purpose; while the
            # required passes are looked for, configurations that cannot run crash on any device.
            return
        # A retry of a configuration that crashed before proves nothing against this device: the
        # configuration itself may not run (a pass it cannot compile without); other ones tell.
        failed_to_start = (
            finished["kind"] in ("crash", "no_metric")
            and (finished.get("duration") or 0.0) < START_FAILURE_SECONDS
            and trial.attempt == 1
        )
        if failed_to_start and not self._runs(trial):
            return  # the configuration's own failure, as far as anything shows: no evidence against the device
        with self._lock:
            if not failed_to_start:
                self._start_failures[device] = 0
                self._some_device_works = self._some_device_works or finished["kind"] == "metric"
                return
            self._start_failures[device] = self._start_failures.get(device, 0) + 1
            retire = (
                self._start_failures[device] >= START_FAILURES_TO_RETIRE
                and self._some_device_works
                and self.in_service() > 1
                and device not in self.retired
            )
            if retire:
                self.retired.append(device)
        if retire:
            reason = (
                f"device {','.join(device)} set aside: {START_FAILURES_TO_RETIRE} trainings in a row ended "
                f"within {START_FAILURE_SECONDS:.0f} s without a metric (last: {finished.get('reason')}) while "
                "other devices train fine"
            )
            self._context.append({"type": RecordType.DEVICE_RETIRED, "device": list(device), "reason": reason})
            if self._pool is not None:
                self._pool.retire(device)
            self._context.events.message(f"warning: {reason}")

    def _runs(self, failed: TrialState) -> bool:
        """Did some training run this configuration, or one with all its rules on and more?"""
        config = failed.config
        return any(
            trial.finished is not None and trial.finished.get("kind") in RAN and trial.config >= config
            for trial in list(self._context.state.trials.values())
            if trial is not failed
        )
