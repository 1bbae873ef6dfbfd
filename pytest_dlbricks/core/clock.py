"""Timing calls: a timer for pytest-benchmark that leaves out what is done to prepare each call, and
calls timed back to back."""

from __future__ import annotations

import time
from collections.abc import Callable


def time_calls(call: Callable[[], object], calls: int, clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Seconds of each of ``calls`` calls, timed one by one, each right after the one before, no other code
    run between them: a call of microseconds takes longer after other code ran (through ``timeit``, whose own code
    runs between calls, a chain of 16 one-element Adds read 4% to 7% longer). The call cost and the
    reference call it is scaled by are both read so (see :mod:`.overhead`), so that they compare."""
    times = []
    for _ in range(calls):
        start = clock()
        call()
        times.append(clock() - start)
    return times


class PausableClock:
    """pytest-benchmark's own timer, less the time spent in :meth:`untimed`.

    pytest-benchmark times a loop of calls; each brick call first writes its inputs again (see
    :meth:`~pytest_dlbricks.timing.running.BrickRunner.prepare_call`), which is not the brick's time.
    Brick items hand it to pytest-benchmark through the ``benchmark`` mark's ``timer`` option.
    """

    def __init__(self, timer: Callable[[], float]) -> None:
        self.timer = timer
        self.paused = 0.0

    def __call__(self) -> float:
        return self.timer() - self.paused

    def untimed(self, work: Callable[[], object]) -> None:
        start = self.timer()
        work()
        self.paused += self.timer() - start

    def __repr__(self) -> str:
        name = getattr(self.timer, "__qualname__", None) or repr(self.timer)
        return f"{getattr(self.timer, '__module__', None) or ''}.{name}".lstrip(".")
