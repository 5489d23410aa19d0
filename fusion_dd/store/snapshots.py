"""Keep a running search's ``report.json`` fresh without the search ever waiting for it.

A snapshot of the report is rebuilt by replaying the whole journal
(:mod:`fusion_dd.coordinator.replay`), so its cost grows with the search. Written by the
trial that just finished, it made every trial wait for a replay of all the
trials before it: with instant trainings (a compiler run of 0.3 s) nine tenths
of a search's wall time went to snapshots, and the cost per trial grew with the
journal. Here one background thread writes them instead: requests that arrive
while a snapshot is being written or while the writer rests are coalesced into
one, and after a snapshot that took ``t`` seconds the writer rests ``rest * t``
seconds, so snapshots take at most ``1 / (1 + rest)`` of one core. A write starts
``settle`` seconds after its request, when the coordinator has launched what the
ended trial made it ask next. With
trainings of minutes or hours every finished trial still gets its own snapshot
at once; only a search of instant trainings sees report.json lag by a few.

The thread is this module's only state; :meth:`Snapshots.close` waits for a
snapshot in flight, so the final report written after it is never overwritten
by a stale snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: After a snapshot that took t seconds, the writer rests REST * t seconds (≤ 10% of one core).
REST = 9.0
#: Seconds between a request and its write. A request comes when a trial ends, which is just
#: when the coordinator asks the next question and launches it; a snapshot written at that
#: moment held the GIL for them. Waiting this long moves it into the next trainings' time,
#: which is nothing against a training of seconds.
SETTLE = 0.02


class Snapshots:
    """A coalescing background writer: ``request`` is cheap and never blocks on ``write``."""

    def __init__(self, write: Callable[[], None], rest: float = REST, settle: float = SETTLE) -> None:
        self._write = write
        self._rest = rest
        self._settle = settle
        self._wanted = threading.Condition()
        self._pending = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        """Ask for a snapshot of what the journal holds now (written soon, in the background)."""
        with self._wanted:
            if self._closed:
                return
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="fusion-dd-report-snapshots", daemon=True)
                self._thread.start()
            self._wanted.notify()

    def close(self) -> None:
        """Stop: no snapshot is started after this returns, and none is still being written."""
        with self._wanted:
            self._closed = True
            thread = self._thread
            self._wanted.notify()
        if thread is not None:
            thread.join()

    def _loop(self) -> None:
        while True:
            with self._wanted:
                while not self._pending and not self._closed:
                    self._wanted.wait()
                if self._closed:
                    return
                # Requests until the write starts are part of this one (they coalesce).
                settled_at = time.monotonic() + self._settle
                while not self._closed and time.monotonic() < settled_at:
                    self._wanted.wait(settled_at - time.monotonic())
                if self._closed:
                    return
                self._pending = False
            start = time.monotonic()
            self._write()
            resume_at = time.monotonic() + self._rest * (time.monotonic() - start)
            with self._wanted:
                while not self._closed and time.monotonic() < resume_at:
                    self._wanted.wait(resume_at - time.monotonic())
