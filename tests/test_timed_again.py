"""Unit tests of bricks timed again at a run's end: how they are timed, and the drift of the estimates they give."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tiny_models
from test_validation import Clock

from conftest import plan_of
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.reporting.entries import BrickResult
from pytest_dlbricks.reporting.report import build_report
from pytest_dlbricks.timing import retiming
from pytest_dlbricks.timing.overhead import CallOverhead
from pytest_dlbricks.timing.retiming import (
    AGAIN_BRICK_S,
    AGAIN_MIN_ROUNDS,
    AGAIN_ROUNDS,
    AGAIN_WARM_S,
    CALLS_PER_ROUND,
    TimedAgain,
    again_by_model,
    time_again,
)

PROVIDER = "CPUExecutionProvider"


class Brick:
    """A brick whose calls take ``seconds`` each on ``clock``, the rewriting of its inputs none; it counts both."""

    def __init__(self, clock: Clock, seconds: list[float]) -> None:
        self.clock, self.seconds = clock, seconds
        self.calls = self.prepared = 0

    def __call__(self) -> None:
        self.clock.now += self.seconds[min(self.calls, len(self.seconds) - 1)]
        self.calls += 1

    def prepare_call(self) -> None:
        self.prepared += 1


def test_a_brick_is_timed_again_after_its_first_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(retiming, "time", clock)
    # Its first calls after the session was made are slow, as on a real machine: they must not be timed.
    warming = math.ceil(AGAIN_WARM_S / 1.5e-3)
    brick = Brick(clock, [1.5e-3] * warming + [1e-5] * 1000)
    rounds = time_again(brick, rounds=4)
    assert rounds == pytest.approx((1e-5,) * 4), "the slow first calls are left out"
    assert brick.calls == warming + 4 * CALLS_PER_ROUND, "no untimed calls between rounds: nothing else ran"
    assert brick.prepared == brick.calls, "each call on inputs written again"


def test_a_brick_of_milliseconds_is_timed_again_in_fewer_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(retiming, "time", clock)
    # One call in each round's three is interrupted: the round reads the other two.
    calls = [4e-3] + [4e-3, 9e-3, 4e-3] * AGAIN_ROUNDS
    brick = Brick(clock, calls)
    assert time_again(brick) == pytest.approx((4e-3,) * AGAIN_MIN_ROUNDS)
    assert brick.calls == 1 + AGAIN_MIN_ROUNDS * CALLS_PER_ROUND, "a warm call, and the fewest rounds past their time"
    assert AGAIN_MIN_ROUNDS * 3 * 4e-3 > AGAIN_BRICK_S


def _timing_again(models: list[list[str]], budget_s: float, seconds: float = 1.0) -> list[str]:
    """The bricks :func:`again_by_model` times of ``models`` within ``budget_s``, each taking ``seconds``."""
    clock, timed = Clock(), []

    def time_one(signature: str) -> None:
        clock.now += seconds
        timed.append(signature)

    again_by_model(models, time_one, budget_s, clock.perf_counter)
    return timed


def test_a_model_begun_is_timed_again_whole_past_the_budget() -> None:
    # Left at its second brick, as the budget alone would leave it, the model would have no drift.
    assert _timing_again([["a", "b", "c"], ["d"]], budget_s=1.5) == ["a", "b", "c"]


def test_a_model_that_would_run_far_past_the_budget_is_given_up_at_once() -> None:
    assert _timing_again([[f"b{i}" for i in range(10)]], budget_s=2.0) == ["b0"]


def test_a_model_that_does_not_fit_is_passed_over_for_one_that_does() -> None:
    # The second model needs four bricks at a second each where 1.5 s are left; the third needs one.
    timed = _timing_again([["a"], ["b", "c", "d", "e"], ["a", "b"], ["f", "g"]], budget_s=2.5)
    assert timed == ["a", "b"], "a brick done once is not timed again; nothing is begun past the budget"


def test_nothing_is_timed_again_without_a_budget() -> None:
    assert _timing_again([["a"]], budget_s=0.0) == []


def _report(tmp_path: Path, again: dict[str, TimedAgain], reused: set[str] = frozenset()) -> dict:  # type: ignore[assignment,type-arg]
    """The report of the diamond cut at G=1 (five bricks of 10 us), its bricks timed again as ``again`` gives."""
    plan = plan_of(tiny_models.diamond(tmp_path), 1)
    bricks = {brick.signature: brick for brick in plan.bricks if isinstance(brick, BrickSpec)}
    results = {
        signature: BrickResult(
            stats={"median": 1e-5, "mean": 1e-5, "min": 1e-5},
            provider="CPUExecutionProvider",
            reused=signature in reused,
        )
        for signature in bricks
    }
    overhead = CallOverhead(fixed_s=2e-6, timing_s=5e-7, reference_s=1e-5)
    return build_report(
        Settings(granularity=1), [plan], [], bricks, results, overhead=overhead, timed_again=again, timed_again_s=0.25
    ).as_json()


def test_the_drift_is_the_estimate_over_the_one_its_bricks_give_timed_again(tmp_path: Path) -> None:
    signatures = list(_report(tmp_path, {})["bricks"])
    plan_signatures = [brick["signature"] for brick in signatures]
    # Timed again, each call alone: no item loop to take off. Each brick's work then reads 7.5 us as in its item,
    # but one brick's 19 us (its call cost at a reference read twice as slow: 4 us of 23 us).
    again = {signature: TimedAgain((1e-5 - 5e-7,) * 3, 1e-5) for signature in plan_signatures}
    again[plan_signatures[0]] = TimedAgain((2.3e-5,) * 3, 2e-5)
    report = _report(tmp_path, again)
    (model,) = report["models"]
    estimate = model["sequential_s"]
    assert estimate == pytest.approx(5 * 7.5e-6 + 2e-6)
    assert model["estimate_drift"] == pytest.approx(estimate / (estimate + 1.15e-5))
    assert report["summary"]["timed_again"] == {"bricks": 5, "timed": 5, "models": 1, "seconds": 0.25}
    assert report["verdict"]["widest_drift"] == ["diamond.onnx", model["estimate_drift"]]


def test_a_model_with_a_brick_not_timed_again_has_no_drift(tmp_path: Path) -> None:
    signatures = [brick["signature"] for brick in _report(tmp_path, {})["bricks"]]
    again = {signature: TimedAgain((1e-5,) * 3, None) for signature in signatures[1:]}
    report = _report(tmp_path, again)
    assert "estimate_drift" not in report["models"][0], "the budget ran out before its last brick"
    assert report["summary"]["timed_again"]["models"] == 0
    assert "drift" not in report["verdict"]["sources"]
    # A brick reused from the store was not timed by this run: the others are all it had to time again, and the
    # reused one weighs the same in both estimates (7.5 us); the others' work reads 8 us timed again.
    reused = _report(tmp_path, again, reused={signatures[0]})
    assert reused["models"][0]["estimate_drift"] == pytest.approx(39.5 / 41.5)


def test_a_run_that_times_nothing_again_reports_none(tmp_path: Path) -> None:
    report = _report(tmp_path, {})
    assert report["summary"]["timed_again"] is None
    assert "estimate_drift" not in report["models"][0]
