"""How fast the machine ran through a run: a reference call timed every so often between the items.

Each brick is timed within a fraction of a second, so the spread of its rounds (the run's *noise*,
see :mod:`.noise`) cannot see a machine whose speed moves over seconds: a shared or throttled machine,
or a virtual one whose speed alternates between states. Bricks timed in a slow stretch then add up to a
slower model than bricks timed in a fast one, while every brick looks precise. The trace shows it: the
fastest of a few calls of a tiny reference network, taken before an item when enough time has passed
since the last sample, follows the machine's speed at that moment; the spread of those samples over
the run says how far that speed moved.

The reference is a chain of one-element additions: pure dispatch, the kind of work that follows the
machine's speed most closely. Layers bound by arithmetic or memory move less with it (a convolution
of tens of channels about a fifth as much on a 2-core machine), so the trace's spread bounds what
happened to the bricks rather than measuring it for each. What does follow it is the cost of an
inference call, which every brick pays: the reference is also timed right around each brick's
timing (:meth:`SpeedTrace.now`), and that brick's call cost scaled to it (see :mod:`.overhead`).

Bricks and validation rounds are timed in the machine's fast state (:meth:`SpeedTrace.settled`): where
the reference reads slow right before a timing, the timing waits until it reads fast again, within a
budget. It waits busy, calling the reference, not asleep: on a 2-core AMD EPYC a machine left idle runs its
next calls slower (a small convolution 1.3 to 1.9 times for 2 to 3 ms after 20 to 100 ms asleep), so waits spent
asleep ended slow more often, and the timings after them began slow. Two validated runs of the onnx wheel's CNNs
and the samples each way, alternating: 108 of 294 and 518 of 705 waits timed slow all the same waiting busy,
1,094 of 1,206 and 701 of 810 asleep; accuracy 0.889 and 0.912 against 0.837 and 0.851 (the paired rounds 0.948
both times against 0.946 and 0.940), under verdicts of +-113% to +-256%.

Scaling what was timed in the slow state does not correct it (convolutions move less than the
reference, or as much, depending on what slows the machine), and what was timed at different moments in
different states differs by up to the ratio of the two (a validated run of the onnx wheel's CNNs: a
ZFNet's bricks timed fast, 58 ms, and the model in a slow stretch, 78 ms, its reference 16 us against 11).

A run spent wholly in the slow state cannot see it in its own moments: their lower quartile is as slow as the rest
(three first runs of the CNNs on a 2-core AMD EPYC, one thread: the reference's fast state read 9.9 us in two and
15.7 us in the third, whose estimates all read 8% to 40% higher). So the fast state earlier runs on the same
machine found is kept with their verdicts in the brick store (:attr:`SpeedTrace.known_fast_s`, see
:func:`known_fast_s`): timings wait for it from the first, and where the run never came near it, the report says
how far above it the run stayed (``above_known``), which the verdict counts as the machine's speed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..core.clock import time_calls

#: Seconds between samples at least: the machine's speed states last seconds, a sample costs a few
#: hundred microseconds, so the trace costs a fraction of a percent of the run.
SAMPLE_EVERY_S = 0.25
#: Calls of the reference per sample, of which the fastest counts: one interrupted call says nothing of
#: the machine's speed, the fastest of ten follows it.
SAMPLE_CALLS = 10
#: Untimed calls of the reference when it is made (first-run allocations).
WARM_CALLS = 20
#: Samples a trace needs before its spread says anything.
MIN_SAMPLES = 5
#: Calls of the reference whose median is its time at a moment (see :meth:`SpeedTrace.now`).
MOMENT_CALLS = 10
#: A moment is in the machine's slow state when its reference takes this much longer than in the fast
#: state (the lower quartile of the run's moments so far): the two states lie about 1.6x apart, a moment's
#: reading within a few percent of its state.
SLOW_BY = 1.25
#: Moments the run needs before its fast state is known and timings wait for it.
MIN_MOMENTS = 8
#: Seconds one timing waits for the fast state at most, and between two readings while it waits.
WAIT_MAX_S = 1.0
WAIT_EVERY_S = 0.005
#: Share of the run's time so far that its waits may take in all: a machine slow most of the time is
#: timed as it is, and the verdict says how far its speed moved.
WAIT_SHARE = 0.2
#: Earlier runs whose fast state makes the machine's known one (the fastest of theirs): one run in a slow stretch
#: does not move it, a machine that became slower for good moves it after that many runs. Each run's is the lower
#: quartile of its readings, a state it held for a quarter of its timings; a median of two runs, one of them slow
#: throughout, read 13.9 us where the machine's fast state was 10.1 us.
KNOWN_FROM_RUNS = 5


class SpeedTrace:
    """Samples of a reference call's time through a run (see the module's description).

    ``make_call`` builds the reference call once, at the first sample; ``clock`` times it and spaces
    the samples, at least ``every_s`` seconds apart (:data:`SAMPLE_EVERY_S` unless given).
    """

    def __init__(
        self,
        make_call: Callable[[], Callable[[], None]],
        description: str,
        *,
        clock: Callable[[], float] = time.perf_counter,
        every_s: float | None = None,
        sleep: Callable[[float], None] | None = None,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.make_call = make_call
        self.description = description
        self.clock = clock
        #: How a wait passes the time between two readings: busy, calling the reference, unless told otherwise.
        self.sleep = sleep or self._keep_busy
        self.cpu_clock = cpu_clock
        self.every_s = SAMPLE_EVERY_S if every_s is None else every_s
        #: Seconds of the fastest of :data:`SAMPLE_CALLS` reference calls, one entry per sample.
        self.samples: list[float] = []
        #: The reference's time at each moment :meth:`now` or :meth:`settled` returned.
        self.moments: list[float] = []
        #: Seconds spent waiting for the fast state, how many timings waited, and how many were timed slow
        #: all the same (the wait's budget ran out).
        self.waited_s = 0.0
        #: The timing thread's CPU time in those waits: they are no brick's, nor load (see :class:`.load.LoadMeter`).
        self.waited_cpu_s = 0.0
        self.waits = 0
        self.timed_slow = 0
        self._started = clock()
        #: Why no sample could be taken (the reference could not be built or run), else None.
        self.error: str | None = None
        self._call: Callable[[], None] | None = None
        self._last: float | None = None
        #: The reference's time in the machine's fast state as earlier runs found it (see :func:`known_fast_s`),
        #: None where none is known.
        self.known_fast_s: float | None = None

    def sample_if_due(self) -> None:
        """Take a sample when :attr:`every_s` seconds have passed since the last one (or there was none)."""
        if self.error is not None or (self._last is not None and self.clock() - self._last < self.every_s):
            return
        timings = self._time(SAMPLE_CALLS)
        if timings is not None:
            self.samples.append(min(timings))
        self._last = self.clock()

    def now(self) -> float | None:
        """The reference call's time at this moment, the median of :data:`MOMENT_CALLS` calls after an
        untimed one, as the call cost's measurement reads it (see :attr:`.overhead.CallOverhead.reference_s`);
        None when the reference cannot run. Not a sample of the trace, which spaces its samples."""
        return self._kept(self._moment())

    def settled(self) -> float | None:
        """:meth:`now`, after waiting (see :data:`WAIT_MAX_S`, :data:`WAIT_SHARE`) while it reads the
        machine's slow state; what follows it is timed in the fast state, unless the budget ran out."""
        reading = self._moment()
        fast = self.fast_s()
        if fast is None or not _slow(reading, fast):
            return self._kept(reading)
        start, cpu = self.clock(), self.cpu_clock()
        limit = min(WAIT_MAX_S, WAIT_SHARE * (start - self._started) - self.waited_s)
        while _slow(reading, fast) and self.clock() - start < limit:
            self.sleep(WAIT_EVERY_S)
            reading = self._moment()
        self.waits += 1
        self.waited_s += self.clock() - start
        self.waited_cpu_s += self.cpu_clock() - cpu
        self.timed_slow += _slow(reading, fast)
        return self._kept(reading)

    def _keep_busy(self, seconds: float) -> None:
        """Call the reference for ``seconds``: the machine stays as a timing finds it (see the module's description)."""
        until = self.clock() + seconds
        while self._call is not None and self.error is None and self.clock() < until:
            try:
                self._call()
            except Exception as error:  # onnxruntime's exception types are not part of its API
                self.error = f"{type(error).__name__}: {error}"

    def fast_s(self) -> float | None:
        """The reference's time in the machine's fast state: the faster of this run's (see :meth:`own_fast_s`) and
        the one earlier runs found (:attr:`known_fast_s`); None while neither is known."""
        known = [fast for fast in (self.own_fast_s(), self.known_fast_s) if fast is not None]
        return min(known) if known else None

    def own_fast_s(self) -> float | None:
        """The reference's time in the fast state as this run met it: the lower quartile of the moments so far;
        None before :data:`MIN_MOMENTS` of them."""
        if len(self.moments) < MIN_MOMENTS:
            return None
        return float(np.percentile(self.moments, 25))

    def _moment(self) -> float | None:
        timings = self._time(1 + MOMENT_CALLS)
        return float(np.median(timings[1:])) if timings is not None else None

    def _kept(self, reading: float | None) -> float | None:
        """``reading``, kept among the run's moments when there is one."""
        if reading is not None:
            self.moments.append(reading)
        return reading

    def _time(self, calls: int) -> list[float] | None:
        """Seconds of ``calls`` calls of the reference, timed back to back as the call cost's chains are
        (see :func:`.clock.time_calls`); None once it failed."""
        if self.error is not None:
            return None
        try:
            if self._call is None:
                self._call = self.make_call()
                for _ in range(WARM_CALLS):
                    self._call()
            return time_calls(self._call, calls, self.clock)
        except Exception as error:  # onnxruntime's exception types are not part of its API
            self.error = f"{type(error).__name__}: {error}"
            return None

    def summary(self) -> dict[str, Any] | None:
        """The trace for the report: its samples' quartiles and ``spread``, half the interquartile range over
        the median, as the run's noise figure reads the bricks' rounds (see :func:`.noise.run_noise`), so
        that the two compare; and ``swing``, half the distance from its 10th to its 90th percentile over the
        median: how far apart the machine's speed states lay, which a brick timed in the other state is off
        by (a machine slow a fifth of the time has no interquartile range of it). None with fewer than
        :data:`MIN_SAMPLES` samples."""
        if len(self.samples) < MIN_SAMPLES:
            return None
        p10, q1, median, q3, p90 = (float(v) for v in np.percentile(self.samples, [10, 25, 50, 75, 90]))
        return {
            "reference": self.description,
            "samples": len(self.samples),
            "every_s": self.every_s,
            "q1_s": q1,
            "median_s": median,
            "q3_s": q3,
            "spread": (q3 - q1) / (2 * median) if median > 0 else None,
            "p10_s": p10,
            "p90_s": p90,
            "swing": (p90 - p10) / (2 * median) if median > 0 else None,
            "waits": self.waits,
            "waited_s": self.waited_s,
            "timed_slow": self.timed_slow,
            "fast_s": self.fast_s(),
            **self._against_known(),
        }

    def _against_known(self) -> dict[str, Any]:
        """Where earlier runs found the machine's fast state: it, this run's own, and how far above it this run's
        stayed (0 where it came within :data:`SLOW_BY` of it: it was met; None where this run has no fast state)."""
        if self.known_fast_s is None:
            return {}
        own = self.own_fast_s()
        above = None if own is None else own / self.known_fast_s - 1
        return {
            "known_fast_s": self.known_fast_s,
            "met_fast_s": own,
            "above_known": None if above is None else (above if above > SLOW_BY - 1 else 0.0),
        }


def timed_above(timings: Iterable[tuple[float, float | None]], fast_s: float | None) -> float | None:
    """How far above the fast state ``fast_s`` a model's bricks were timed: each timing is its weight (its part of
    the estimate) and the reference read around it; one read slow (see :data:`SLOW_BY`) counts its reading over the
    fast state less one, one read fast counts 0, and the weights average them. None where the fast state, or every
    reading, is unknown. The swing of the run's trace says how far its speed moved; this says how much of a model's
    estimate was timed in the slow state, which a run that waited out its budget did for most of its bricks (a VGG-19
    read 423 ms at two threads, 242 ms to 287 ms in three runs beside it, under a verdict of +-40%)."""
    known = [(weight, reading) for weight, reading in timings if reading is not None and weight > 0]
    total = sum(weight for weight, _ in known)
    if fast_s is None or fast_s <= 0 or total <= 0:
        return None
    return sum(weight * (reading / fast_s - 1 if _slow(reading, fast_s) else 0.0) for weight, reading in known) / total


def known_fast_s(fast_states: Iterable[float | None]) -> float | None:
    """The machine's fast state from the fast states of the runs before (oldest first; None where a run had none):
    the fastest of the last :data:`KNOWN_FROM_RUNS` that had one; None where none had."""
    known = [fast for fast in fast_states if fast is not None and math.isfinite(fast) and fast > 0]
    return float(min(known[-KNOWN_FROM_RUNS:])) if known else None


def _slow(reading: float | None, fast: float) -> bool:
    """Whether a reading of the reference is in the machine's slow state, ``fast`` being its time in the fast one."""
    return reading is not None and reading > SLOW_BY * fast
