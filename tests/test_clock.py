"""Unit tests of the pausable clock: what it leaves out of pytest-benchmark's timings."""

from __future__ import annotations

import time

from pytest_dlbricks.core.clock import PausableClock, time_calls


def test_time_spent_untimed_is_left_out() -> None:
    ticks = iter([0.0, 10.0, 13.0, 20.0, 21.0])
    clock = PausableClock(lambda: next(ticks))
    assert clock() == 0.0
    clock.untimed(lambda: None)  # reads 10.0 and 13.0
    assert clock.paused == 3.0
    assert clock() == 17.0, "20 less the 3 paused"
    assert clock() == 18.0


def test_it_is_named_after_the_timer_it_wraps() -> None:
    assert repr(PausableClock(time.perf_counter)) == "time.perf_counter"


def test_each_call_is_timed_alone_by_the_clock_given() -> None:
    now = [0.0]
    durations = iter([3.0, 1.0, 2.0])

    def call() -> None:
        now[0] += next(durations)

    assert time_calls(call, 3, lambda: now[0]) == [3.0, 1.0, 2.0]
