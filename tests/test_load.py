"""Whether the run's timing thread got its core, from stubbed clocks and load averages."""

from __future__ import annotations

import pytest

from pytest_dlbricks.timing.load import LOADED_BELOW, MIN_WALL_S, LoadMeter, Readings, load_summary


class Clocks:
    """A wall clock and a thread CPU clock that the test moves."""

    def __init__(self) -> None:
        self.wall_s = 0.0
        self.cpu_s = 0.0

    def rounds(self, wall_s: float, cpu_s: float) -> None:
        self.wall_s += wall_s
        self.cpu_s += cpu_s


def meter(clocks: Clocks, load_average: float | None = 0.5) -> LoadMeter:
    return LoadMeter(wall=lambda: clocks.wall_s, cpu=lambda: clocks.cpu_s, load_average=lambda: load_average, cpus=2)


def test_a_thread_on_its_core_throughout_is_not_loaded() -> None:
    clocks = Clocks()
    load = meter(clocks)
    load.around(lambda: clocks.rounds(0.1, 0.098))
    load.around(lambda: clocks.rounds(0.2, 0.2))
    clocks.rounds(5.0, 0.0)  # between the timed rounds: not counted
    summary = load_summary(load.readings())
    assert summary is not None
    assert summary["core_share"] == pytest.approx(0.298 / 0.3)
    assert not summary["loaded"] and summary["trusted"]
    assert (summary["load_average"], summary["cpus"]) == (0.5, 2)


def test_a_thread_off_its_core_marks_the_run_loaded_then_untrusted() -> None:
    clocks = Clocks()
    load = meter(clocks, load_average=2.7)
    load.around(lambda: clocks.rounds(1.0, 0.75))
    summary = load_summary(load.readings())
    assert summary is not None and summary["loaded"] and summary["trusted"]
    load.around(lambda: clocks.rounds(1.0, 0.25))
    summary = load_summary(load.readings())
    assert summary is not None and summary["core_share"] == pytest.approx(0.5)
    assert summary["loaded"] and not summary["trusted"]


def test_rounds_that_raise_still_count() -> None:
    clocks = Clocks()
    load = meter(clocks)

    def failing() -> None:
        clocks.rounds(1.0, 0.5)
        raise RuntimeError("brick failed")

    with pytest.raises(RuntimeError):
        load.around(failing)
    assert load.readings().core_share == pytest.approx(0.5)


def test_too_short_a_time_says_nothing() -> None:
    assert load_summary(Readings(MIN_WALL_S / 2, 0.0, None, None)) is None
    assert Readings(1.0, 1.2, None, None).core_share == 1.0  # a coarse clock may read more than the wall
    assert load_summary(Readings(1.0, LOADED_BELOW, None, None))["loaded"] is False  # type: ignore[index]


def test_sleeping_on_purpose_inside_the_rounds_is_no_load() -> None:
    """Validation's rounds wait for the machine's fast state in their setup: asleep, off its core, unloaded."""
    clocks = Clocks()
    idle = [0.0]
    load = LoadMeter(wall=lambda: clocks.wall_s, cpu=lambda: clocks.cpu_s, idle=lambda: idle[0], cpus=2)

    def rounds_with_a_wait() -> None:
        clocks.rounds(0.5, 0.5)
        clocks.rounds(0.4, 0.0)
        idle[0] += 0.4
        clocks.rounds(0.5, 0.5)

    load.around(rounds_with_a_wait)
    assert load.readings().core_share == pytest.approx(1.0)
    assert load.readings().wall_s == pytest.approx(1.0)


def test_waiting_busy_on_purpose_inside_the_rounds_is_no_load_either() -> None:
    """A wait spent calling the reference is on its core: its CPU time leaves the share as its wall time does, so
    that the rounds' own share shows (here half of it: the machine is loaded)."""
    clocks = Clocks()
    idle, idle_cpu = [0.0], [0.0]
    load = LoadMeter(
        wall=lambda: clocks.wall_s,
        cpu=lambda: clocks.cpu_s,
        idle=lambda: idle[0],
        idle_cpu=lambda: idle_cpu[0],
        cpus=2,
    )

    def rounds_with_a_busy_wait() -> None:
        clocks.rounds(0.5, 0.25)
        clocks.rounds(0.4, 0.4)
        idle[0] += 0.4
        idle_cpu[0] += 0.4
        clocks.rounds(0.5, 0.25)

    load.around(rounds_with_a_busy_wait)
    assert load.readings().core_share == pytest.approx(0.5)
