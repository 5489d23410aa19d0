"""Event-driven waits (fusion_dd.runner.wakeup): a wait wakes on the supervisor's exit or a cancellation."""

from __future__ import annotations

import subprocess
import sys
import threading

from fusion_dd.runner.wakeup import CancelEvent, watch_exit


def test_setting_a_cancel_event_wakes_the_waits_registered_on_it_and_no_forgotten_one() -> None:
    cancel = CancelEvent()
    woken, forgotten = threading.Event(), threading.Event()
    cancel.also_wake(woken)
    cancel.also_wake(forgotten)
    cancel.forget(forgotten)
    cancel.set()
    assert cancel.is_set() and woken.is_set() and not forgotten.is_set()
    late = threading.Event()
    cancel.also_wake(late)  # registered after the cancellation: woken at once
    assert late.is_set()


def test_the_exit_of_our_own_child_wakes_the_wait_and_is_reaped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    wake = threading.Event()
    assert watch_exit(child, child.pid, wake)
    assert not wake.wait(0.2)  # still running: nothing woke it
    assert child.stdin is not None
    child.stdin.close()  # lets it end
    assert wake.wait(60)
    assert child.returncode == 0


def test_the_exit_of_a_process_that_is_not_our_child_wakes_the_wait_too() -> None:
    """An adopted supervisor: watched by its pid (a pidfd), where the system has them."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    wake = threading.Event()
    if not watch_exit(None, child.pid, wake):
        child.kill()
        child.wait()
        return  # no pidfds here: the caller polls instead, as before
    assert not wake.wait(0.2)
    assert child.stdin is not None
    child.stdin.close()
    child.wait()
    assert wake.wait(60)


def test_nothing_to_watch_says_so() -> None:
    assert not watch_exit(None, None, threading.Event())
