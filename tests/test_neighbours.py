"""Unit tests of calling the brick before a brick before each of its calls, as its model runs it: which brick,
which runner, the order of a call's preparation, the brick store, and a run that times bricks so."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tiny_models

from conftest import QUICK_TIMING
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import ModelPlan, plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.timing import neighbours
from pytest_dlbricks.timing.neighbours import TIMING_METHOD, RecentRunners, bricks_before
from pytest_dlbricks.timing.running import BrickError, BrickRunner
from pytest_dlbricks.wiring.engine import DLBricksRun


def plan_of(path: Path, granularity: int) -> ModelPlan:
    return plan_model(load_model(path, {}, Settings(granularity=granularity)), granularity, path.name)


def ops_before(plans: list[ModelPlan]) -> dict[str, list[str]]:
    """:func:`bricks_before` by the bricks' operators."""
    labels = {b.signature: "+".join(b.ops) for plan in plans for b in plan.bricks if isinstance(b, BrickSpec)}
    return {labels[s]: [labels[b] for b in before] for s, before in bricks_before(plans).items()}


def first_two(tmp_path: Path) -> tuple[BrickSpec, BrickSpec]:
    """The diamond's Relu and Sigmoid, one layer a brick."""
    relu, sigmoid = plan_of(tiny_models.diamond(tmp_path), 1).bricks[:2]
    assert isinstance(relu, BrickSpec) and isinstance(sigmoid, BrickSpec)
    return relu, sigmoid


def diamond_run(tmp_path: Path, **settings: Any) -> tuple[DLBricksRun, list[BrickSpec]]:
    """A run of the diamond cut one layer a brick, and its bricks in order."""
    plan = plan_of(tiny_models.diamond(tmp_path), 1)
    run = DLBricksRun(Settings(granularity=1, **settings), time.perf_counter)
    run.plans.append(plan)
    bricks = [b for b in plan.bricks if isinstance(b, BrickSpec)]
    run.bricks.update((b.signature, b) for b in bricks)
    return run, bricks


def noting(steps: list[str], step: str, then: Callable[[], None]) -> Callable[[], None]:
    """``then``, noted in ``steps`` first."""

    def noted() -> None:
        steps.append(step)
        then()

    return noted


def test_each_brick_follows_the_window_before_it_and_the_first_the_last(tmp_path: Path) -> None:
    assert ops_before([plan_of(tiny_models.diamond(tmp_path), 1)]) == {
        "Relu": ["Add"],  # the call before ended with it
        "Sigmoid": ["Relu"],
        "Tanh": ["Sigmoid"],
        "Neg": ["Tanh"],
        "Add": ["Neg"],
    }


def test_a_brick_met_at_several_places_follows_each_brick_before_them_first_met_first(tmp_path: Path) -> None:
    diamond = plan_of(tiny_models.diamond(tmp_path), 1)
    skip = plan_of(tiny_models.skip_concat(tmp_path, width=64, between=2), 1)  # Relu, Tanh, Sigmoid, Concat
    before = ops_before([diamond, skip])
    assert before["Relu"] == ["Add", "Concat"] and before["Tanh"] == ["Sigmoid", "Relu"]


def test_a_brick_whose_only_neighbour_is_itself_follows_none(tmp_path: Path) -> None:
    """Three times the same Conv+Relu: the brick before each is the brick itself, whose calls precede it anyway."""
    repeated = tiny_models.chain(tmp_path, blocks=3, channels=tiny_models.UNBLOCKED_CHANNELS)
    assert bricks_before([plan_of(repeated, 2)]) == {}
    assert bricks_before([plan_of(tiny_models.chain(tmp_path, blocks=1), 1000)]) == {}


def test_the_runners_built_last_are_kept_and_older_ones_let_go(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.diamond(tmp_path), 1)
    runners = {b.signature: BrickRunner(b, Settings(granularity=1)) for b in plan.bricks if isinstance(b, BrickSpec)}
    recent = RecentRunners(kept=2)
    for signature, runner in runners.items():
        recent.add(signature, runner)
    *older, second, last = runners
    assert recent.get(last) is runners[last] and recent.get(second) is runners[second]
    assert all(recent.get(signature) is None for signature in older)
    recent.discard(last)
    recent.discard(last)
    assert recent.get(last) is None and recent.get(second) is runners[second]


def test_a_call_is_prepared_by_flushing_then_running_the_brick_before_then_writing_its_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    relu, sigmoid = first_two(tmp_path)
    settings = Settings(granularity=1)
    steps: list[str] = []
    before = BrickRunner(relu, settings)
    monkeypatch.setattr(before, "run_before", lambda: steps.append("the brick before"))
    runner = BrickRunner(sigmoid, settings, flush=lambda: steps.append("flush"), before=before)
    monkeypatch.setattr(runner, "_write_inputs", noting(steps, "its inputs", runner._write_inputs))
    (inputs,) = runner.feeds.values()
    kept = inputs.copy()
    runner.prepare_call()
    assert steps == ["flush", "the brick before", "its inputs"]
    assert np.array_equal(inputs, kept), "the inputs are written again with their own values"


def test_the_brick_before_runs_once_on_its_inputs_written_again_without_its_own_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    relu, sigmoid = first_two(tmp_path)
    settings = Settings(granularity=1)
    steps: list[str] = []
    earlier = BrickRunner(sigmoid, settings)
    monkeypatch.setattr(earlier, "run_before", lambda: steps.append("the brick before it"))
    before = BrickRunner(relu, settings, flush=lambda: steps.append("its flush"), before=earlier)
    monkeypatch.setattr(before, "_write_inputs", noting(steps, "its inputs", before._write_inputs))
    before.run_before()
    assert steps == ["its inputs"], "its flush and the brick before it are the other brick's to leave out"
    assert [output.shape for output in before.outputs()] == [(1, 64)], "it ran"


def test_the_brick_before_is_taken_at_hand_or_built_last_or_else_built(tmp_path: Path) -> None:
    run, bricks = diamond_run(tmp_path)
    relu, sigmoid, tanh = (b.signature for b in bricks[:3])
    built = run.brick_runner(sigmoid)
    assert built.before is not None and built.before.brick.signature == relu, "none at hand: built"
    assert run.brick_runner(tanh).before is built, "the runner built last"
    at_hand = {sigmoid: BrickRunner(bricks[1], run.settings)}
    assert run.brick_runner(tanh, at_hand=at_hand).before is at_hand[sigmoid]


def test_a_brick_before_that_cannot_run_is_tried_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that fails, or never ends within its limit, is not paid again for every brick after it."""
    run, bricks = diamond_run(tmp_path)
    checked: list[tuple[str, ...]] = []
    check = BrickRunner.check

    def failing(runner: BrickRunner) -> None:
        checked.append(runner.brick.ops)
        if runner.brick.ops == ("Relu",):
            raise BrickError("the Relu never finished")
        check(runner)

    monkeypatch.setattr(BrickRunner, "check", failing)
    sigmoid = bricks[1].signature
    assert run.brick_runner(sigmoid).before is None
    run.recent_runners.discard(sigmoid)
    assert run.brick_runner(sigmoid).before is None
    assert checked == [("Relu",)]


def test_simulated_cost_follows_no_brick(tmp_path: Path) -> None:
    run, bricks = diamond_run(tmp_path, cost="simulated")
    assert all(run.bricks_before(b.signature) == () for b in bricks)


def test_a_run_times_each_brick_after_the_brick_before_it_and_keeps_which(pytester: pytest.Pytester) -> None:
    """Each brick's benchmark and brick store record name the brick its calls followed; a stored time taken
    without one (a record of an older version) is timed again, the others reused."""
    tiny_models.diamond(pytester.path)
    arguments = ("-p", "no:cacheprovider", *QUICK_TIMING, "--dlbricks-granularity=1")
    pytester.runpytest(*arguments, "--benchmark-json=bench.json", "--dlbricks-validate").assert_outcomes(passed=6)
    benchmarks = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    bricks = {b["extra_info"]["signature"]: b["extra_info"] for b in benchmarks if "signature" in b["extra_info"]}
    label = {signature: info["ops"][0] for signature, info in bricks.items()}
    assert {label[s]: label[info["timed_after"]] for s, info in bricks.items()} == {
        "Relu": "Add",
        "Sigmoid": "Relu",
        "Tanh": "Sigmoid",
        "Neg": "Tanh",
        "Add": "Neg",
    }
    records = {path: json.loads(path.read_text()) for path in pytester.path.glob(".benchmarks/**/bricks/*.json")}
    assert sorted(data["timing_method"] for data in records.values()) == [TIMING_METHOD] * 5
    path, data = next((path, data) for path, data in records.items() if label[data["signature"]] == "Neg")
    data.pop("timing_method")  # as written before
    path.write_text(json.dumps(data))
    pytester.runpytest(*arguments).assert_outcomes(passed=1, deselected=4)


def test_a_brick_longer_than_brief_follows_none_and_its_stored_time_is_kept(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where even the diamond's bricks count as long, none follows another; their records, timed alone by the
    rule, are reused whichever way they were timed."""
    monkeypatch.setattr(neighbours, "FOLLOWS_UNDER_S", 0.0)
    tiny_models.diamond(pytester.path)
    arguments = ("-p", "no:cacheprovider", *QUICK_TIMING, "--dlbricks-granularity=1")
    pytester.runpytest(*arguments, "--benchmark-json=bench.json").assert_outcomes(passed=5)
    benchmarks = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    assert not any("timed_after" in b["extra_info"] for b in benchmarks)
    for path in pytester.path.glob(".benchmarks/**/bricks/*.json"):
        data = json.loads(path.read_text())
        data.pop("timing_method")  # as written before
        path.write_text(json.dumps(data))
    pytester.runpytest(*arguments).assert_outcomes(deselected=5)
