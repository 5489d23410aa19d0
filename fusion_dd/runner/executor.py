"""Parallel trainings over a pool of devices, through joblib's threading backend.

Each joblib task only waits on its training's supervisor process, so threads are
enough locally; the same ``Parallel`` call runs on a dask cluster through joblib's
dask backend when one machine is not enough (docs/architecture.md 4.5).

Why the results are collected in list order: a search strategy asks "which is the
first failing configuration of these, in this order". Answering with whichever
training finished first would make the answer, and so the whole search, depend on
timing, and resume (which replays the strategy) would diverge. So a failure at
position i only cancels positions after i; positions before i still run to the end.

Devices: a task takes a device from the pool before it launches and returns it
when its training has ended, so two trainings never share a device.

Interrupts: the caller's thread never runs a job; it only waits for the batch.
Python delivers Ctrl-C and SIGTERM (as ``KeyboardInterrupt``) to the main thread,
so the interrupt always lands in that wait, which cancels every job and waits
for their trainings to be killed. joblib runs a one-job batch (or any batch with
``n_jobs=1``) sequentially in the calling thread; there the interrupt used to
land inside the job's own wait and abandon its training, still running.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from .wakeup import CancelEvent

R = TypeVar("R")
Device = tuple[str, ...]
Job = Callable[[Device, threading.Event], R]


class DevicePool:
    """The free devices; blocking take, always give back."""

    def __init__(self, devices: Sequence[Device]) -> None:
        self.size = len(devices)
        self._free: queue.Queue[Device] = queue.Queue()
        self._retired: set[Device] = set()
        for device in devices:
            self._free.put(tuple(device))

    def take(self, cancel: threading.Event) -> Device | None:
        """A free device, or None once ``cancel`` is set while waiting."""
        while not cancel.is_set():
            try:
                device = self._free.get(timeout=0.1)
            except queue.Empty:
                continue
            if device not in self._retired:
                return device
        return None

    def give_back(self, device: Device) -> None:
        if device not in self._retired:
            self._free.put(device)

    def retire(self, device: Device) -> None:
        """Never hand this device out again (trainings keep failing to start on it)."""
        self._retired.add(tuple(device))


class _Turn:
    """One joblib ``Parallel`` kept open, and whether a call of it is running."""

    def __init__(self) -> None:
        self.parallel: Any = None
        self.n_jobs = 0
        self.free = threading.Event()
        self.free.set()

    def close(self) -> None:
        if self.parallel is not None:
            with contextlib.suppress(Exception):
                self.parallel.__exit__(None, None, None)
            self.parallel = None


class Pools:
    """joblib thread pools that stay open for a whole run, so that a batch only dispatches.

    Opening a ``Parallel`` with the threading backend starts its worker threads and
    three helper threads, and closing it joins them: about 3 ms of CPU per batch, on
    every question of a search whose trainings may take a fraction of a second. One
    ``Parallel`` runs one call at a time, and a batch's call may still be draining
    joblib's side (:class:`BatchRun`) when the next batch starts, so two take turns:
    a batch waits only for the call two batches back, long over by then. Close
    with :meth:`close` when the run ends (the engine does).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns = [_Turn(), _Turn()]
        self._next = 0
        self._closed = False

    @contextlib.contextmanager
    def parallel(self, n_jobs: int) -> Iterator[Any]:
        """A ``Parallel`` of at least ``n_jobs`` threads for one call; a call that fails closes it."""
        from joblib import Parallel  # here: joblib (and numpy under it) costs 0.2 s to import

        with self._lock:
            if self._closed:
                raise RuntimeError("the pools of this run are closed")
            turn = self._turns[self._next]
            self._next = 1 - self._next
        turn.free.wait()
        turn.free.clear()
        try:
            if turn.parallel is None or turn.n_jobs < n_jobs:
                turn.close()
                turn.parallel = Parallel(n_jobs=n_jobs, backend="threading", return_as="generator_unordered")
                turn.parallel.__enter__()
                turn.n_jobs = n_jobs
            yield turn.parallel
        except BaseException:
            turn.close()  # an aborted call may leave it unusable: the next batch opens a new one
            raise
        finally:
            turn.free.set()

    def close(self, timeout: float = 5.0) -> None:
        """Join every pool's threads; a call still draining gets ``timeout`` seconds to end first."""
        with self._lock:
            self._closed = True
        for turn in self._turns:
            if turn.free.wait(timeout):
                turn.close()


class BatchRun(Generic[R]):
    """One batch of jobs, with in-order cancellation and a clean stop on interrupt.

    joblib dispatches the jobs; each job records its own result, applies
    ``stop_after`` and says it has settled, and the caller wakes on that. joblib's
    own collection of results polls every 10 ms, which for trainings of a
    fraction of a second is a tenth of the device time; so it only drains
    joblib's side in the driver thread, and nobody waits for it.
    """

    def __init__(self, jobs: Sequence[Job[R]], pool: DevicePool, pools: Pools | None = None) -> None:
        self.jobs = list(jobs)
        self.pool = pool
        self.pools = pools
        self.cancel = [CancelEvent() for _ in self.jobs]  # also wakes a training's wait at once
        self._active = 0
        self._active_lock = threading.Condition()
        self._results: list[R | None] = [None] * len(self.jobs)
        self._failures: list[BaseException] = []
        self._stop_after: Callable[[R], bool] | None = None
        self._settled = 0
        self._driver_done = False
        self._changed = threading.Condition()

    def _task(self, index: int) -> int:
        with self._active_lock:
            self._active += 1
        try:
            result = self._run(index)
            self._results[index] = result
            if self._stop_after is not None and result is not None and self._stop_after(result):
                for later in range(index + 1, len(self.jobs)):
                    self.cancel[later].set()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._failures.append(exc)
            self.cancel_all()
        finally:
            with self._active_lock:
                self._active -= 1
                self._active_lock.notify_all()
            with self._changed:
                self._settled += 1
                self._changed.notify_all()
        return index

    def _run(self, index: int) -> R | None:
        if self.cancel[index].is_set():
            return None
        device = self.pool.take(self.cancel[index])
        if device is None:
            return None
        try:
            if self.cancel[index].is_set():
                return None
            return self.jobs[index](device, self.cancel[index])
        finally:
            self.pool.give_back(device)

    def cancel_all(self) -> None:
        for event in self.cancel:
            event.set()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no task is running; used after an interrupt so no training is orphaned."""
        deadline = time.monotonic() + timeout
        with self._active_lock:
            while self._active:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._active_lock.wait(remaining)
        return True

    def _over(self) -> bool:
        """Every job settled, or joblib gave up on the batch (call with ``_changed`` held)."""
        return self._settled == len(self.jobs) or self._driver_done

    def run(self, stop_after: Callable[[R], bool] | None, cleanup_timeout: float) -> list[R | None]:
        """Run every job; once job i satisfies ``stop_after``, jobs after i are cancelled.

        Returns one entry per job, None for a job that never launched. The jobs
        run in joblib's threads, driven from a driver thread (see the module
        docstring); an exception of a job is raised here. An interrupt here
        cancels every job and waits up to ``cleanup_timeout`` for them to end,
        ignoring further interrupts meanwhile: a second Ctrl-C must not abandon
        trainings that are being killed.
        """
        if not self.jobs:
            return []
        self._stop_after = stop_after

        def drive() -> None:
            try:
                self._drive(cleanup_timeout)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                self._failures.append(exc)
            finally:
                with self._changed:
                    self._driver_done = True
                    self._changed.notify_all()

        # A daemon: if a training cannot be stopped within cleanup_timeout,
        # fusion-dd must still be able to exit (its supervisor goes on killing it).
        driver = threading.Thread(target=drive, name="fusion-dd-batch", daemon=True)
        try:
            driver.start()
            with self._changed:
                while not self._over():
                    self._changed.wait(0.5)
        except BaseException:
            self.cancel_all()
            if driver.ident is not None:  # it started: wait for its clean-up
                self._wait_shielded(cleanup_timeout)
            raise
        if self._failures:
            raise self._failures[0]
        return list(self._results)

    def _wait_shielded(self, timeout: float) -> None:
        """Wait for every started job to end; further interrupts only wait on."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self._changed:
                    while not self._over() and time.monotonic() < deadline:
                        self._changed.wait(max(0.0, min(0.5, deadline - time.monotonic())))
                self.wait_idle(max(0.0, deadline - time.monotonic()))
                return
            except KeyboardInterrupt:
                if time.monotonic() >= deadline:
                    return

    def _drive(self, cleanup_timeout: float) -> None:
        from joblib import Parallel, delayed  # here: joblib (and numpy under it) costs 0.2 s to import

        try:
            if self.pools is not None:
                opened = self.pools.parallel(max(1, self.pool.size))
            else:
                n_jobs = max(1, min(self.pool.size, len(self.jobs)))
                opened = Parallel(n_jobs=n_jobs, backend="threading", return_as="generator_unordered")
            with opened as parallel:
                for _ in parallel(delayed(self._task)(i) for i in range(len(self.jobs))):
                    pass
        except BaseException:
            self.cancel_all()
            self.wait_idle(cleanup_timeout)
            raise


def run_batch(
    jobs: Sequence[Job[R]],
    pool: DevicePool,
    *,
    stop_after: Callable[[R], bool] | None = None,
    cleanup_timeout: float = 60.0,
    pools: Pools | None = None,
) -> list[R | None]:
    """Run jobs over the device pool; see ``BatchRun.run``. ``pools``: the run's open joblib pools
    (:class:`Pools`), else the batch opens and closes its own."""
    return BatchRun(jobs, pool, pools).run(stop_after, cleanup_timeout)
