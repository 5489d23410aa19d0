"""The device pool executor: in-order answers, cancellation of what no longer matters, one training per device."""

import subprocess
import sys
import threading
import time

import pytest

from fusion_dd.runner.executor import DevicePool, Pools, run_batch


def make_job(log, value, delay, busy):
    def job(device, cancel):
        with busy["lock"]:
            assert device not in busy["devices"], "two jobs on one device"
            busy["devices"].add(device)
        log.append(("start", value, device))
        try:
            deadline = time.monotonic() + delay
            while time.monotonic() < deadline:
                if cancel.is_set():
                    return ("cancelled", value)
                time.sleep(0.005)
            return ("done", value)
        finally:
            with busy["lock"]:
                busy["devices"].discard(device)

    return job


def busy_state():
    return {"lock": threading.Lock(), "devices": set()}


@pytest.fixture(params=["own pool", "run's pools"])
def pools(request):
    """Each batch with a pool of its own, or through the run-long pools the engine keeps (Pools)."""
    if request.param == "own pool":
        yield None
        return
    shared = Pools()
    yield shared
    shared.close()


def test_all_jobs_run_and_devices_are_never_shared(pools):
    log, busy = [], busy_state()
    jobs = [make_job(log, i, 0.02, busy) for i in range(10)]
    results = run_batch(jobs, DevicePool([("0",), ("1",), ("2",)]), pools=pools)
    assert results == [("done", i) for i in range(10)]
    assert {device for _, _, device in log} <= {("0",), ("1",), ("2",)}


def test_first_failure_in_list_order_cancels_only_later_jobs(pools):
    log, busy = [], busy_state()
    # job 1 "fails" fast; job 0 is slow and must still finish; jobs 2.. are cancelled or never start.
    delays = [0.3, 0.01, 0.5, 0.5, 0.5, 0.5]
    jobs = [make_job(log, i, delay, busy) for i, delay in enumerate(delays)]
    results = run_batch(jobs, DevicePool([("0",), ("1",), ("2",)]), stop_after=lambda r: r == ("done", 1), pools=pools)
    assert results[0] == ("done", 0)
    assert results[1] == ("done", 1)
    for result in results[2:]:
        assert result is None or result[0] == "cancelled"


def test_an_interrupt_cancels_running_jobs_and_waits_for_them(pools):
    started = threading.Event()
    finished = []

    def slow(device, cancel):
        started.set()
        cancel.wait(30)
        finished.append(device)
        return "stopped"

    def explode(device, cancel):
        started.wait(10)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_batch([slow, explode], DevicePool([("0",), ("1",)]), cleanup_timeout=30, pools=pools)
    assert finished == [("0",)]
    if pools is not None:  # the aborted call's pool was closed; the next batch gets a working one
        assert run_batch([lambda device, cancel: "again"], DevicePool([("0",), ("1",)]), pools=pools) == ["again"]


LONE_JOB_INTERRUPTED = """
import _thread, signal, threading
from fusion_dd.runner.executor import DevicePool, run_batch

# Ctrl-C as a terminal gives it, whatever the test runner's worker inherited (it may ignore SIGINT).
signal.signal(signal.SIGINT, signal.default_int_handler)

started = threading.Event()
seen = []

def lone(device, cancel):
    started.set()
    seen.append("cancelled" if cancel.wait(30) else "ran to its end")
    return "stopped"

def interrupt_when_started():
    if started.wait(30):
        _thread.interrupt_main()

helper = threading.Thread(target=interrupt_when_started)
helper.start()
try:
    run_batch([lone], DevicePool([("0",)]), cleanup_timeout=30)
    print("returned", seen)
except KeyboardInterrupt:
    print("interrupted", seen)
helper.join(30)
"""


def test_an_interrupt_of_the_caller_cancels_a_job_that_runs_alone():
    """One job (so joblib would run it sequentially): Ctrl-C in the caller must still cancel it.

    Python delivers Ctrl-C to the main thread, where ``run_batch`` is called. The
    test runs it in a fresh interpreter with Python's own SIGINT handler: a
    pytest-xdist worker may ignore SIGINT, and then ``interrupt_main`` does nothing.
    """
    done = subprocess.run(
        [sys.executable, "-c", LONE_JOB_INTERRUPTED], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted ['cancelled']", done.stdout + done.stderr


def test_an_error_of_a_job_reaches_the_caller(pools):
    def broken(device, cancel):
        raise ValueError("unreadable")

    with pytest.raises(ValueError, match="unreadable"):
        run_batch([broken], DevicePool([("0",)]), pools=pools)


def test_batches_through_the_runs_pools_reuse_their_threads_and_close_joins_them():
    before = threading.active_count()
    pools = Pools()
    devices = DevicePool([("0",), ("1",)])
    workers = set()  # thread names are never reused within a process: a new pool, new names

    def job(device, cancel, value=None):
        workers.add(threading.current_thread().name)
        return value

    for batch in range(20):
        jobs = [lambda device, cancel, i=i, batch=batch: job(device, cancel, (batch, i)) for i in range(2)]
        assert run_batch(jobs, devices, pools=pools) == [(batch, 0), (batch, 1)]
    assert len(workers) <= 4, workers  # two pools taking turns, two threads each
    pools.close()
    deadline = time.monotonic() + 30
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before
    with pytest.raises(RuntimeError, match="closed"):
        run_batch([lambda device, cancel: None], devices, pools=pools)
