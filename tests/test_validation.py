"""Unit tests of validation: rounds paired with their bricks, ratios, accuracy, and the round budget."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
import tiny_models

from conftest import plan_of
from pytest_dlbricks.core.settings import STATISTICS
from pytest_dlbricks.estimating.composition import ParallelExecutor
from pytest_dlbricks.estimating.validation import (
    MAX_ROUNDS,
    MIN_ROUNDS,
    OVER_ROUNDS,
    BrickRounds,
    Validation,
    accuracy,
    rounds_for,
)
from pytest_dlbricks.timing import retiming
from pytest_dlbricks.timing.overhead import NO_OVERHEAD, CallOverhead


class Clock:
    """A clock that moves only when a recorded brick says it spent time."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class Recorded:
    """A brick that records its calls and the rewriting of its inputs, each taking its time on ``clock``."""

    def __init__(self, name: str, calls: list[str], clock: Clock, seconds: float = 0.0) -> None:
        self.name = name
        self.calls = calls
        self.clock = clock
        self.seconds = seconds

    def __call__(self) -> None:
        self.calls.append(self.name)
        self.clock.now += self.seconds

    def prepare_call(self) -> None:
        self.calls.append(f"{self.name} inputs")
        self.clock.now += 1.0  # never on a brick's clock


def test_each_round_times_every_brick_then_warms_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    clock = Clock()
    monkeypatch.setattr(retiming, "time", clock)
    speeds = iter([2e-5, 4e-5])
    rounds = BrickRounds(
        {"a": Recorded("a", calls, clock, 0.001), "b": Recorded("b", calls, clock, 0.002)},
        Recorded("model", calls, clock, 0.5),
        lambda: next(speeds),
    )
    rounds()
    rounds()
    assert rounds.references == [2e-5, 4e-5], "the reference call's time as each round starts"
    warm = retiming.WARM_CALLS
    timed = ["a"] * warm + ["a inputs", "a"] * 3 + ["b"] * warm + ["b inputs", "b"] * 3
    # The model's 0.5 s call is warm after one: more would cost a large model's validation for nothing.
    assert calls == [*timed, "model", "model inputs"] * 2, "three timed calls on rewritten inputs per brick"
    assert rounds.rounds == [{"a": pytest.approx(0.001), "b": pytest.approx(0.002)}] * 2, "each call alone is timed"


def test_rounds_are_paired_with_the_model_times_that_follow_them(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = plan.signatures
    # The first brick round belongs to pytest-benchmark's warm-up round and has no measurement.
    brick_rounds = [{signature: 100.0}, {signature: 1.0}, {signature: 2.0}, {signature: 3.0}]
    validation = Validation("sequential", [3.0, 6.0, 9.0], brick_rounds)
    summary = validation.summarize(plan, NO_OVERHEAD)
    assert summary["ratio"] == pytest.approx(1.0), "each round's estimate is 3x its brick time, as the model"
    assert summary["spread"] == pytest.approx(0.0)
    assert (summary["measured_s"], summary["estimate_s"], summary["rounds"]) == (6.0, 6.0, 3)


def test_the_parallel_executor_is_compared_with_the_critical_path(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.diamond(tmp_path), 1)
    times = {signature: 1.0 for signature in plan.signatures}
    summary = Validation("parallel", [4.0], [times]).summarize(plan, CallOverhead())
    assert summary["estimate_s"] == pytest.approx(4.0), "Relu, the longer branch (Tanh, Neg), Add"


def test_paired_rounds_time_bricks_alone_so_no_item_timing_cost_is_taken_off(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = plan.signatures
    overhead = CallOverhead(fixed_s=0.5, timing_s=0.25)
    summary = Validation("sequential", [6.5], [{signature: 2.5}]).summarize(plan, overhead)
    assert summary["estimate_s"] == pytest.approx(3 * (2.5 - 0.5) + 0.5)


def test_a_round_s_bricks_and_model_pay_the_call_costs_of_its_moment(tmp_path: Path) -> None:
    """The reference took twice as long in the second round as beside the call cost's measurement: that
    round's bricks paid twice the cost, and so did the model, measured in the same round."""
    plan = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = plan.signatures
    overhead = CallOverhead(fixed_s=0.5, timing_s=0.25, reference_s=10.0)
    rounds = [{signature: 2.5}, {signature: 3.0}]
    paired = Validation("sequential", [6.5, 7.0], rounds, [10.0, 20.0]).summarize(plan, overhead)
    assert paired["estimate_s"] == pytest.approx(statistics.median([3 * 2.0 + 0.5, 3 * 2.0 + 1.0]))
    unknown = Validation("sequential", [6.5, 7.0], rounds).summarize(plan, overhead)
    assert unknown["estimate_s"] == pytest.approx(statistics.median([3 * 2.0 + 0.5, 3 * 2.5 + 0.5]))


def test_the_parallel_estimate_is_paired_too(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.diamond(tmp_path), 1)
    times = {signature: 1.0 for signature in plan.signatures}
    validation = Validation("parallel", [6.0], [times])
    overhead = CallOverhead(parallel_fixed_s=1.0)
    assert validation.summarize(plan, overhead, ParallelExecutor(1), "parallel_s")["estimate_s"] == pytest.approx(6.0)
    assert validation.summarize(plan, overhead, None, "parallel_s")["estimate_s"] is None


def test_ratios_are_medians_over_rounds_robust_to_one_disturbed_round(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = plan.signatures
    rounds = [{signature: 1.0}] * 5
    summary = Validation("sequential", [3.0, 3.0, 30.0, 3.0, 3.0], rounds).summarize(plan, NO_OVERHEAD)
    assert summary["ratio"] == pytest.approx(1.0)


def test_accuracy_of_ratios() -> None:
    result = accuracy([1.0, 1.04, 0.8, 1.06])
    assert result is not None
    assert result["models"] == 4
    assert (result["within_5_percent"], result["within_10_percent"]) == (2, 3)
    assert result["geometric_mean_ratio"] == pytest.approx((1.0 * 1.04 * 0.8 * 1.06) ** (1 / 4))
    logs = [0, math.log(1.04), abs(math.log(0.8)), math.log(1.06)]
    assert result["accuracy"] == pytest.approx(math.exp(-sum(logs) / 4))
    assert accuracy([]) is None


def test_over_and_under_estimates_do_not_cancel_in_accuracy() -> None:
    result = accuracy([1.25, 0.8])
    assert result is not None
    assert result["geometric_mean_ratio"] == pytest.approx(1.0)
    assert result["accuracy"] == pytest.approx(0.8)


@pytest.mark.parametrize(("seconds", "rounds"), [(0.0, MAX_ROUNDS), (1e-6, MAX_ROUNDS), (0.1, 20), (10.0, MIN_ROUNDS)])
def test_rounds_fit_the_time_budget(seconds: float, rounds: int) -> None:
    assert rounds_for(seconds) == rounds


def test_a_model_without_an_estimate_is_measured_but_gets_no_ratio(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path), 2)
    summary = Validation("sequential", [3.0, 4.0], [{}, {}]).summarize(plan, NO_OVERHEAD)
    assert summary == {"measured_s": 3.5, "estimate_s": None, "ratio": None, "spread": None, "rounds": 2}


def test_every_statistic_bricks_are_composed_in_is_one_a_model_is_measured_in() -> None:
    assert set(OVER_ROUNDS) == set(STATISTICS)
