"""The background writer of a running search's report.json: coalesced, never blocking, closed cleanly."""

from __future__ import annotations

import threading

from fusion_dd.store.snapshots import Snapshots


def test_requests_during_a_write_are_coalesced_into_one_more_write() -> None:
    started, release = threading.Event(), threading.Event()
    writes: list[int] = []

    def write() -> None:
        writes.append(len(writes))
        started.set()
        release.wait(30)

    snapshots = Snapshots(write, rest=0.0)
    snapshots.request()
    assert started.wait(30)
    for _ in range(5):
        snapshots.request()  # never blocks, although the first write is still running
    release.set()
    snapshots.close()
    assert len(writes) in (1, 2)  # the five requests made at most one more write; close may come first


def test_close_waits_for_the_write_in_flight_and_later_requests_write_nothing() -> None:
    inside, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def write() -> None:
        inside.set()
        release.wait(30)
        finished.append(True)

    snapshots = Snapshots(write, rest=0.0)
    snapshots.request()
    assert inside.wait(30)
    closer = threading.Thread(target=snapshots.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive(), "close returned while a snapshot was still being written"
    release.set()
    closer.join(30)
    assert finished == [True]
    snapshots.request()
    snapshots.close()
    assert finished == [True]


def test_a_request_after_the_writer_rested_is_written() -> None:
    done = threading.Semaphore(0)
    snapshots = Snapshots(done.release, rest=0.0)
    for _ in range(3):
        snapshots.request()
        assert done.acquire(timeout=30)
    snapshots.close()


def test_close_without_any_request_starts_no_thread() -> None:
    before = threading.active_count()
    Snapshots(lambda: None).close()
    assert threading.active_count() == before


def test_requests_within_the_settle_time_make_one_write_and_close_meanwhile_makes_none() -> None:
    writes: list[int] = []
    done = threading.Event()

    def write() -> None:
        writes.append(1)
        done.set()

    snapshots = Snapshots(write, rest=0.0, settle=0.3)
    for _ in range(5):
        snapshots.request()  # a search's trials ending together: one snapshot after them
    assert done.wait(30)
    snapshots.close()
    assert writes == [1]

    waiting = Snapshots(write, rest=0.0, settle=3600)
    waiting.request()
    closer = threading.Thread(target=waiting.close)
    closer.start()
    closer.join(30)  # close does not wait out the settle time
    assert not closer.is_alive()
    assert writes == [1]  # nothing was written after close
