"""The cases of ``test_deadline.py``, run by it in a process of their own (see there): ``deadline.within``
stops pure Python past its deadline, in the thread that runs it, and never after the block has ended."""

from __future__ import annotations

import threading
import time

import pytest

from tb_attn_plugin.engine.deadline import Expired, within


def _spin() -> None:
    while True:
        pass


def test_a_loop_past_its_deadline_is_stopped() -> None:
    started = time.monotonic()
    with pytest.raises(Expired), within(time.monotonic() + 0.1):
        _spin()
    assert time.monotonic() - started < 30  # stopped, not run to the end (there is none)


def test_an_except_exception_does_not_swallow_it() -> None:
    def guarded() -> None:
        try:
            _spin()
        except Exception:  # what analysis code may hold
            pytest.fail("Expired was caught as an Exception")

    with pytest.raises(Expired), within(time.monotonic() + 0.1):
        guarded()


def test_a_block_done_in_time_is_left_alone_and_nothing_is_raised_later() -> None:
    with within(time.monotonic() + 0.2):
        total = sum(range(1000))
    assert total == 499500
    time.sleep(0.4)  # past the deadline: the watchdog was disarmed
    for _ in range(100_000):  # bytecode where a late exception would land
        total += 1


def test_a_deadline_already_past_raises_at_once_and_none_is_no_limit() -> None:
    with pytest.raises(Expired), within(time.monotonic() - 1):
        pytest.fail("the block ran")
    with within(None):
        pass


def test_it_stops_only_its_own_thread() -> None:
    other_done = threading.Event()

    def other() -> None:
        time.sleep(0.3)
        other_done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with pytest.raises(Expired), within(time.monotonic() + 0.05):
        _spin()
    thread.join(30)
    assert other_done.is_set()
