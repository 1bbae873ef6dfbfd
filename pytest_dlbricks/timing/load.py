"""Whether the run's threads got their cores: the timing thread's CPU time against the wall time of its rounds.

Other processes busy on the machine slow a brick without widening its rounds: every round waits alike,
and the speed trace (a one-thread chain of tiny additions, see :mod:`.speed_trace`) cannot see a pool
thread that lost its core. What does see it is the thread that times: it runs the call, and waits when
the call's other intra-op threads lag, or when the scheduler hands its core to another process. Over
rounds that are pure computation its CPU time should equal their wall time; the share it falls short
of that is time the timings include that was not the brick's. On 2 cores shared with other work (load
average 1.4), a 3x3 convolution of 32 channels on 2 intra-op threads kept its timing thread on a core
49% of the wall time and ran half as many calls as on one thread, whose timing thread kept it 90%.

The load average beside it says what the machine was doing, over the last minute, for the report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Share of the timed rounds' wall time the timing thread must spend on a core for the run to count as
#: unloaded: the rounds are computation, and the waits for pool threads that have their cores are short.
LOADED_BELOW = 0.9
#: Below this share the run's estimates are not trusted to any margin: they may hold twice the work's time.
UNTRUSTED_BELOW = 0.6
#: Wall seconds of timed rounds the share needs before it says anything.
MIN_WALL_S = 0.05


@dataclass(frozen=True)
class Readings:
    """What the timing thread's clocks read over the timed rounds, and the load average at the end."""

    wall_s: float
    cpu_s: float
    load_average: float | None
    cpus: int | None

    @property
    def core_share(self) -> float | None:
        """The share of the rounds' wall time the timing thread spent on a core (None over too short a time)."""
        if self.wall_s < MIN_WALL_S:
            return None
        return min(1.0, self.cpu_s / self.wall_s)


class LoadMeter:
    """Created by the run's engine; the brick and model items call :meth:`around` their timed rounds.

    ``wall`` and ``cpu`` are the clocks (wall time, and the calling thread's CPU time); ``load_average``
    reads the machine's one-minute load average (None where the platform has none). ``idle`` reads the
    seconds the run has waited so far on purpose (for the machine's fast state, see
    :meth:`.speed_trace.SpeedTrace.settled`), and ``idle_cpu`` the timing thread's CPU time in those waits: they
    are no one's load, and are left out of the wall and the CPU time alike.
    """

    def __init__(
        self,
        *,
        wall: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.thread_time,
        load_average: Callable[[], float | None] | None = None,
        cpus: int | None = None,
        idle: Callable[[], float] = lambda: 0.0,
        idle_cpu: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.wall = wall
        self.idle = idle
        self.idle_cpu = idle_cpu
        self.cpu = cpu
        self.load_average = load_average or _load_average
        self.cpus = os.cpu_count() if cpus is None else cpus
        self.wall_s = 0.0
        self.cpu_s = 0.0

    def around(self, timed: Callable[[], None]) -> None:
        """Run ``timed`` (an item's timed rounds) and add its wall and CPU time to the run's."""
        wall, cpu, idle, idle_cpu = self.wall(), self.cpu(), self.idle(), self.idle_cpu()
        try:
            timed()
        finally:
            self.wall_s += self.wall() - wall - (self.idle() - idle)
            self.cpu_s += self.cpu() - cpu - (self.idle_cpu() - idle_cpu)

    def readings(self) -> Readings:
        return Readings(self.wall_s, self.cpu_s, self.load_average(), self.cpus)


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has none; a platform may fail to read it
        return None


def load_summary(readings: Readings) -> dict[str, Any] | None:
    """The run's load for the report: the timing thread's ``core_share``, whether the run was ``loaded`` and
    whether so much that its estimates cannot be ``trusted``; None when too little was timed to tell."""
    share = readings.core_share
    if share is None:
        return None
    return {
        "core_share": share,
        "wall_s": readings.wall_s,
        "cpu_s": readings.cpu_s,
        "load_average": readings.load_average,
        "cpus": readings.cpus,
        "loaded": share < LOADED_BELOW,
        "trusted": share >= UNTRUSTED_BELOW,
    }
