"""Unit tests of the run's speed trace, on a stub clock whose reference calls take the times a test gives."""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Iterable

import pytest

from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.timing.overhead import reference_call
from pytest_dlbricks.timing.speed_trace import (
    KNOWN_FROM_RUNS,
    MIN_MOMENTS,
    MIN_SAMPLES,
    MOMENT_CALLS,
    SAMPLE_CALLS,
    SLOW_BY,
    WAIT_MAX_S,
    WARM_CALLS,
    SpeedTrace,
    known_fast_s,
    timed_above,
)


class StubMachine:
    """A clock, and a reference call that advances it by the next of the durations given (warm-up calls too)."""

    def __init__(self, durations: Iterable[float]) -> None:
        self.now = 0.0
        self.durations = iter(durations)
        self.built = 0

    def clock(self) -> float:
        return self.now

    def make_call(self) -> Callable[[], None]:
        self.built += 1

        def call() -> None:
            self.now += next(self.durations)

        return call


def warm_then(*samples: list[float]) -> list[float]:
    """The durations of the warm-up calls, then of each sample's calls."""
    return [1e-3] * WARM_CALLS + [duration for sample in samples for duration in sample]


def test_a_sample_is_the_fastest_of_its_calls_and_samples_are_spaced_in_time() -> None:
    first = [30e-6, 12e-6, 20e-6] + [25e-6] * (SAMPLE_CALLS - 3)
    second = [40e-6] * (SAMPLE_CALLS - 1) + [22e-6]
    machine = StubMachine(warm_then(first, second))
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=0.25)
    trace.sample_if_due()
    assert trace.samples == [pytest.approx(12e-6)]
    machine.now += 0.1
    trace.sample_if_due()  # 0.1 s after the last sample: not due
    assert len(trace.samples) == 1
    machine.now += 0.2
    trace.sample_if_due()
    assert trace.samples == [pytest.approx(12e-6), pytest.approx(22e-6)]
    assert machine.built == 1, "the reference is built once"


def test_the_spread_is_half_the_interquartile_range_over_the_median() -> None:
    """A machine alternating between two speeds, 10 and 20 us: +-33% about the median of 15 us."""
    machine = StubMachine(warm_then(*([[10e-6] * SAMPLE_CALLS, [20e-6] * SAMPLE_CALLS] * 5)))
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=0.0)
    for taken in range(1, 11):
        trace.sample_if_due()
        if taken < MIN_SAMPLES:
            assert trace.summary() is None, "too few samples say nothing"
    assert trace.summary() == {
        "reference": "stub",
        "samples": 10,
        "every_s": 0.0,
        "q1_s": pytest.approx(10e-6),
        "median_s": pytest.approx(15e-6),
        "q3_s": pytest.approx(20e-6),
        "spread": pytest.approx(1 / 3),
        "p10_s": pytest.approx(10e-6),
        "p90_s": pytest.approx(20e-6),
        "swing": pytest.approx(1 / 3),
        "waits": 0,
        "waited_s": 0.0,
        "timed_slow": 0,
        "fast_s": None,  # no timing read the reference yet
    }


def test_the_swing_sees_a_slow_state_the_quartiles_miss() -> None:
    """Slow (20 us) a fifth of the time: no interquartile range, but a brick timed then is off by a third."""
    machine = StubMachine(warm_then(*([[10e-6] * SAMPLE_CALLS] * 8 + [[20e-6] * SAMPLE_CALLS] * 2)))
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=0.0)
    for _ in range(10):
        trace.sample_if_due()
    summary = trace.summary()
    assert summary is not None and summary["spread"] == 0.0
    assert summary["swing"] == pytest.approx(0.5 * (summary["p90_s"] - 10e-6) / 10e-6) and summary["swing"] > 0.2


def test_a_steady_machine_has_no_spread() -> None:
    machine = StubMachine(warm_then(*[[8e-6] * SAMPLE_CALLS] * MIN_SAMPLES))
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=0.0)
    for _ in range(MIN_SAMPLES):
        trace.sample_if_due()
    summary = trace.summary()
    assert summary is not None and summary["spread"] == 0.0


def test_the_reference_now_is_the_median_of_its_calls_after_an_untimed_one_and_no_sample() -> None:
    """As the call cost's measurement reads the reference (see CallOverhead.reference_s); anytime, not spaced."""
    timed = [10e-6] * (MOMENT_CALLS // 2) + [20e-6] * (MOMENT_CALLS - MOMENT_CALLS // 2 - 1) + [99e-6]
    machine = StubMachine(warm_then([1e-3, *timed], [1e-3, *timed]))
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=10.0)
    assert trace.now() == pytest.approx(statistics.median(timed))
    assert trace.now() == pytest.approx(statistics.median(timed))
    assert trace.samples == [] and machine.built == 1


def test_the_reference_is_timed_as_the_call_costs_chains_are() -> None:
    """Each call read by the clock right before and after it, the garbage collector left as it is, as the
    call cost's chains are timed: read through ``timeit`` (which switches the collector off and runs code
    of its own between calls), the reference read 4-7% longer than the chains, and every brick's call
    cost was scaled up with it."""
    collecting = gc.isenabled()
    machine = StubMachine(warm_then([10e-6] * (MOMENT_CALLS + 1)))
    reads = [0]
    seen: list[tuple[bool, int]] = []

    def counting_clock() -> float:
        reads[0] += 1
        return machine.clock()

    def watched() -> Callable[[], None]:
        call = machine.make_call()

        def run() -> None:
            seen.append((gc.isenabled(), reads[0]))
            call()

        return run

    trace = SpeedTrace(watched, "stub", clock=counting_clock, every_s=10.0)
    reads[0] = 0  # the trace read when the run started
    assert trace.now() == pytest.approx(10e-6)
    timed = seen[WARM_CALLS:]
    assert all(enabled == collecting for enabled, _ in timed)
    assert [count for _, count in timed] == [1 + 2 * index for index in range(MOMENT_CALLS + 1)]


def test_a_reference_that_cannot_run_stops_the_trace_not_the_run() -> None:
    built = []

    def broken() -> Callable[[], None]:
        built.append(1)
        raise RuntimeError("no provider")

    trace = SpeedTrace(broken, "stub", every_s=0.0)
    trace.sample_if_due()
    trace.sample_if_due()
    assert trace.now() is None
    assert trace.error == "RuntimeError: no provider"
    assert (trace.samples, trace.summary(), len(built)) == ([], None, 1)


def test_the_reference_is_a_real_call_that_the_trace_times() -> None:
    trace = SpeedTrace(lambda: reference_call(Settings(granularity=1)), "chain", every_s=0.0)
    for _ in range(MIN_SAMPLES):
        trace.sample_if_due()
    summary = trace.summary()
    assert summary is not None and trace.error is None
    assert 0 < summary["q1_s"] <= summary["median_s"] <= summary["q3_s"] < 0.1


def moments(*times: float) -> list[float]:
    """The durations of one moment's calls (an untimed one, then :data:`MOMENT_CALLS`) for each time given."""
    return [duration for time in times for duration in [time] * (1 + MOMENT_CALLS)]


class SleepingMachine(StubMachine):
    """A stub machine whose sleeps advance its clock and are counted."""

    def __init__(self, durations: Iterable[float]) -> None:
        super().__init__(durations)
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def fast_trace(machine: SleepingMachine, run_s: float = 100.0) -> SpeedTrace:
    """A trace that has read the fast state (10 us) at :data:`MIN_MOMENTS` moments, ``run_s`` into the run."""
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=10.0, sleep=machine.sleep)
    for _ in range(MIN_MOMENTS):
        trace.now()
    machine.now += run_s
    return trace


def test_a_timing_begun_in_the_slow_state_waits_for_the_fast_one() -> None:
    machine = SleepingMachine([1e-3] * WARM_CALLS + moments(*[10e-6] * MIN_MOMENTS, 16e-6, 17e-6, 16e-6, 10.5e-6))
    trace = fast_trace(machine)
    assert trace.fast_s() == pytest.approx(10e-6)
    assert trace.settled() == pytest.approx(10.5e-6), "the first fast reading ends the wait"
    assert len(machine.slept) == 3
    assert (trace.waits, trace.timed_slow) == (1, 0)
    assert trace.waited_s == pytest.approx(sum(machine.slept) + 3 * (1 + MOMENT_CALLS) * 16.3e-6, rel=0.01)
    assert trace.moments[-1] == pytest.approx(10.5e-6), "the readings taken while waiting are not moments"
    assert len(trace.moments) == MIN_MOMENTS + 1


def test_a_wait_keeps_the_machine_busy_with_the_reference_unless_told_otherwise() -> None:
    """Asleep, a machine wakes slower: the wait calls the reference between its readings, for as long as it would
    have slept, and its CPU time is counted apart (no brick's, no load)."""
    busy = [2e-3] * 3  # the calls of one wait of WAIT_EVERY_S = 5 ms
    machine = StubMachine([1e-3] * WARM_CALLS + moments(*[10e-6] * MIN_MOMENTS, 16e-6) + busy + moments(10.5e-6))
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=10.0, cpu_clock=machine.clock)
    for _ in range(MIN_MOMENTS):
        trace.now()
    machine.now += 100.0
    assert trace.settled() == pytest.approx(10.5e-6)
    assert next(machine.durations, None) is None, "every busy call made, then the reading that ended the wait"
    assert (trace.waits, trace.timed_slow) == (1, 0)
    assert trace.waited_cpu_s == trace.waited_s == pytest.approx(6e-3 + (1 + MOMENT_CALLS) * 10.5e-6)


def test_a_fast_or_a_little_slower_moment_waits_for_nothing() -> None:
    below = 10e-6 * SLOW_BY * 0.99
    machine = SleepingMachine([1e-3] * WARM_CALLS + moments(*[10e-6] * MIN_MOMENTS, below))
    trace = fast_trace(machine)
    assert trace.settled() == pytest.approx(below)
    assert (machine.slept, trace.waits) == ([], 0)


def test_before_the_fast_state_is_known_nothing_waits() -> None:
    machine = SleepingMachine([1e-3] * WARM_CALLS + moments(*[10e-6] * (MIN_MOMENTS - 2), 30e-6))
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=10.0, sleep=machine.sleep)
    for _ in range(MIN_MOMENTS - 2):
        trace.now()
    assert trace.fast_s() is None
    assert trace.settled() == pytest.approx(30e-6)
    assert machine.slept == []


def test_a_machine_that_stays_slow_is_timed_slow_after_the_wait_and_said_so() -> None:
    machine = SleepingMachine([1e-3] * WARM_CALLS + moments(*[10e-6] * MIN_MOMENTS) + [20e-6] * 10**6)
    trace = fast_trace(machine)
    assert trace.settled() == pytest.approx(20e-6)
    assert WAIT_MAX_S <= trace.waited_s < WAIT_MAX_S + 0.01
    assert (trace.waits, trace.timed_slow) == (1, 1)


def test_waits_take_a_share_of_the_run_at_most() -> None:
    """Two seconds into the run, a slow machine is waited for a fraction of a second in all."""
    machine = SleepingMachine([1e-3] * WARM_CALLS + moments(*[10e-6] * MIN_MOMENTS) + [20e-6] * 10**6)
    trace = fast_trace(machine, run_s=2.0)
    for _ in range(3):
        trace.settled()
    assert trace.waited_s < 0.25 * (machine.now - 0.0)
    assert (trace.waits, trace.timed_slow) == (3, 3)


def test_a_timing_waits_for_the_fast_state_earlier_runs_found_from_the_first() -> None:
    """A run whose moments all read 16 us knows no slow state of its own; earlier runs met 10 us, so it waits."""
    machine = SleepingMachine([1e-3] * WARM_CALLS + moments(16e-6, 16e-6, 10.5e-6))
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=10.0, sleep=machine.sleep)
    trace.known_fast_s = 10e-6
    machine.now += 100.0
    assert trace.fast_s() == pytest.approx(10e-6), "known before any moment of its own"
    assert trace.settled() == pytest.approx(10.5e-6)
    assert (trace.waits, trace.timed_slow, len(machine.slept)) == (1, 0, 2)


def test_the_fast_state_is_the_faster_of_the_runs_own_and_the_known_one() -> None:
    machine = SleepingMachine([1e-3] * WARM_CALLS + moments(*[10e-6] * MIN_MOMENTS))
    trace = fast_trace(machine)
    trace.known_fast_s = 12e-6
    assert (trace.own_fast_s(), trace.fast_s()) == (pytest.approx(10e-6), pytest.approx(10e-6))
    trace.known_fast_s = 8e-6
    assert (trace.own_fast_s(), trace.fast_s()) == (pytest.approx(10e-6), pytest.approx(8e-6))


@pytest.mark.parametrize(("own", "above"), [(16e-6, 0.6), (10e-6 * SLOW_BY * 0.99, 0.0), (9e-6, 0.0)])
def test_the_summary_says_how_far_above_the_known_fast_state_the_run_stayed(own: float, above: float) -> None:
    """Within :data:`SLOW_BY` of it, the run met it; a run faster than earlier ones is not above it either."""
    machine = StubMachine(warm_then(*[[own] * SAMPLE_CALLS] * MIN_SAMPLES) + moments(*[own] * MIN_MOMENTS))
    trace = SpeedTrace(machine.make_call, "stub", clock=machine.clock, every_s=0.0)
    for _ in range(MIN_SAMPLES):
        trace.sample_if_due()
    for _ in range(MIN_MOMENTS):
        trace.now()
    unknown = trace.summary()
    assert unknown is not None and "known_fast_s" not in unknown, "nothing known, nothing said"
    trace.known_fast_s = 10e-6
    summary = trace.summary()
    assert summary is not None and summary["swing"] == 0.0, "a run slow throughout has no swing of its own"
    assert (summary["known_fast_s"], summary["met_fast_s"]) == (10e-6, pytest.approx(own))
    assert summary["fast_s"] == pytest.approx(min(own, 10e-6)), "the fast state timings were held to"
    assert summary["above_known"] == pytest.approx(above)


def test_the_known_fast_state_is_the_fastest_of_the_last_runs_that_had_one() -> None:
    assert known_fast_s([]) is None and known_fast_s([None, None]) is None
    assert known_fast_s([10.2e-6, None, 16e-6]) == pytest.approx(10.2e-6), "one slow run does not move it"
    assert known_fast_s([9e-6] + [10e-6] * KNOWN_FROM_RUNS) == pytest.approx(10e-6), "the last runs only"
    slower_for_good = [10e-6] * 4 + [15e-6] * KNOWN_FROM_RUNS
    assert known_fast_s(slower_for_good) == pytest.approx(15e-6), "a machine slower for good moves it"
    assert known_fast_s([10e-6, float("nan"), -1.0, 0.0, float("inf")]) == pytest.approx(10e-6)


def test_a_model_s_timings_count_how_far_above_the_fast_state_they_read_by_their_part_of_its_estimate() -> None:
    """Read fast (within :data:`SLOW_BY`): nothing; read slow: the reading over the fast state less one."""
    assert timed_above([(3.0, 10e-6), (1.0, 10e-6 * SLOW_BY * 0.99)], 10e-6) == 0.0
    assert timed_above([(3.0, 10e-6), (1.0, 18e-6)], 10e-6) == pytest.approx(0.8 / 4)
    assert timed_above([(1.0, 18e-6), (5.0, None), (0.0, 30e-6)], 10e-6) == pytest.approx(0.8), "unknown: left out"
    assert timed_above([(1.0, 18e-6)], None) is None and timed_above([(1.0, None)], 10e-6) is None
    assert timed_above([], 10e-6) is None
