"""Unit tests of the pausable clock: what it leaves out of pytest-benchmark's timings."""

from __future__ import annotations

import time

from pytest_dlbricks.clock import PausableClock


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
