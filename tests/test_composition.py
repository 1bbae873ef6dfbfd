"""Unit tests of composition: the sequential sum and the critical path of a model's brick times."""

from __future__ import annotations

import random
from pathlib import Path

import networkx as nx
import pytest
import tiny_models

from conftest import plan_of
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import BrokenBrick, ModelPlan
from pytest_dlbricks.estimating.composition import (
    Estimate,
    ParallelExecutor,
    compose,
    compose_calls,
    critical_path,
    list_schedule,
)
from pytest_dlbricks.timing.overhead import CallOverhead


def times_by_op(plan: ModelPlan, seconds: dict[str, float]) -> dict[str, float]:
    """Brick times keyed by signature, from times given by the brick's operators joined with '+'."""
    return {b.signature: seconds["+".join(b.ops)] for b in plan.bricks if isinstance(b, BrickSpec)}


@pytest.mark.parametrize(
    ("seconds", "critical"),
    [
        # Left branch (Sigmoid) heavier than the right one (Tanh then Neg).
        ({"Relu": 1.0, "Sigmoid": 10.0, "Tanh": 2.0, "Neg": 3.0, "Add": 0.5}, 11.5),
        # Right branch heavier.
        ({"Relu": 1.0, "Sigmoid": 4.0, "Tanh": 2.0, "Neg": 3.0, "Add": 0.5}, 6.5),
    ],
)
def test_diamond_critical_path_takes_the_heavier_branch(
    tmp_path: Path, seconds: dict[str, float], critical: float
) -> None:
    plan = plan_of(tiny_models.diamond(tmp_path), 1)
    estimate = compose(plan, times_by_op(plan, seconds))
    assert estimate.sequential_s == pytest.approx(sum(seconds.values()))
    assert estimate.critical_path_s == pytest.approx(critical)
    assert estimate.critical_path_s is not None and estimate.sequential_s is not None
    assert estimate.critical_path_s < estimate.sequential_s
    assert estimate.complete
    assert (estimate.measured_bricks, estimate.total_bricks) == (5, 5)


def test_a_chain_has_equal_estimates(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path, blocks=3), 1)
    estimate = compose(plan, times_by_op(plan, {"Conv": 2e-6, "Relu": 5e-7}))
    assert estimate.sequential_s == pytest.approx(3 * 2.5e-6)
    assert estimate.critical_path_s == pytest.approx(estimate.sequential_s)


def test_a_repeated_brick_counts_every_time_it_occurs(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path, blocks=3), 2)
    (signature,) = plan.signatures
    estimate = compose(plan, {signature: 0.25})
    assert estimate == Estimate(sequential_s=0.75, critical_path_s=0.75, measured_bricks=3, total_bricks=3)


def test_a_missing_time_makes_the_estimate_incomplete(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.diamond(tmp_path), 1)
    times = times_by_op(plan, {"Relu": 1.0, "Sigmoid": 1.0, "Tanh": 1.0, "Neg": 1.0, "Add": 1.0})
    neg = plan.bricks[3]
    assert isinstance(neg, BrickSpec) and neg.ops == ("Neg",)
    times.pop(neg.signature)
    estimate = compose(plan, times)
    assert estimate == Estimate(sequential_s=None, critical_path_s=None, measured_bricks=4, total_bricks=5)
    assert not estimate.complete
    assert compose(plan, {}) == Estimate(None, None, 0, 5)


def test_a_broken_brick_makes_the_estimate_incomplete(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.sequence_boundary(tmp_path), 1)
    relu, split, pick = plan.bricks
    assert isinstance(relu, BrickSpec) and isinstance(split, BrokenBrick) and isinstance(pick, BrokenBrick)
    estimate = compose(plan, {relu.signature: 1.0})
    assert (estimate.sequential_s, estimate.complete, estimate.measured_bricks) == (None, False, 1)


def test_critical_path_of_independent_bricks_is_the_slowest() -> None:
    graph = nx.DiGraph()
    graph.add_nodes_from(range(3))
    plan = ModelPlan(path="parallel", layers=3, bricks=[], graph=graph)
    assert critical_path(plan, [1.0, 3.0, 2.0]) == pytest.approx(3.0)
    graph.add_edge(0, 2)
    assert critical_path(plan, [1.0, 3.0, 2.5]) == pytest.approx(3.5)


def test_the_call_overhead_is_counted_once_per_model(tmp_path: Path) -> None:
    """Each of the chain's three bricks paid a call; the model pays one."""
    plan = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = plan.signatures
    overhead = CallOverhead(fixed_s=1.0)
    estimate = compose(plan, {signature: 5.0}, overhead)
    assert estimate.sequential_s == pytest.approx(3 * (5.0 - 1.0) + 1.0)
    assert estimate.critical_path_s == pytest.approx(estimate.sequential_s)


def test_inputs_and_outputs_beyond_the_first_cost_extra(tmp_path: Path) -> None:
    overhead = CallOverhead(fixed_s=1.0, per_input_s=0.5, per_output_s=0.25)
    assert overhead.of(1, 1) == 1.0
    assert overhead.of(3, 2) == pytest.approx(1.0 + 2 * 0.5 + 0.25)


def test_the_model_pays_one_call_for_all_its_inputs_and_outputs() -> None:
    """A small model with several inputs and outputs: each brick's call is taken off at its own counts, the
    model's added once at the model's, whatever its bricks read."""
    overhead = CallOverhead(fixed_s=1.0, per_input_s=0.5, per_output_s=0.25)
    chain = nx.DiGraph([(0, 1)])
    calls = [("a", 2, 1), ("b", 1, 3)]
    estimate = compose_calls(calls, chain, (4, 3), {"a": 5.0, "b": 5.0}, overhead)
    bricks_work = (5.0 - overhead.of(2, 1)) + (5.0 - overhead.of(1, 3))
    assert estimate.sequential_s == pytest.approx(bricks_work + 1.0 + 3 * 0.5 + 2 * 0.25)


def test_the_parallel_executors_call_cost_enters_only_the_parallel_estimate(tmp_path: Path) -> None:
    """The critical path, a lower bound, pays the cheaper of the two calls, here the sequential one."""
    diamond = plan_of(tiny_models.diamond(tmp_path), 1)
    times = times_by_op(diamond, {"Relu": 3.0, "Sigmoid": 3.0, "Tanh": 3.0, "Neg": 3.0, "Add": 3.0})
    measured = CallOverhead(fixed_s=1.0, parallel_fixed_s=10.0)
    estimate = compose(diamond, times, measured, ParallelExecutor(1))
    assert estimate.sequential_s == pytest.approx(5 * 2.0 + 1.0)
    assert estimate.critical_path_s == pytest.approx(4 * 2.0 + 1.0)
    assert estimate.parallel_s == pytest.approx(5 * 2.0 + 10.0), "one node at a time: the sum, at its call cost"
    chain = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = chain.signatures
    branchless = compose(chain, {signature: 5.0}, measured, ParallelExecutor(2))
    assert branchless.critical_path_s == pytest.approx(branchless.sequential_s), "no branches: nothing overlaps"
    assert branchless.sequential_s is not None
    assert branchless.parallel_s == pytest.approx(branchless.sequential_s - 1.0 + 10.0)


def test_the_critical_path_takes_the_cheaper_call_and_stays_below_both_estimates(tmp_path: Path) -> None:
    """A parallel executor whose call reads cheaper than the sequential one's: the lower bound still bounds it."""
    chain = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = chain.signatures
    estimate = compose(chain, {signature: 5.0}, CallOverhead(fixed_s=1.0, parallel_fixed_s=0.5), ParallelExecutor(1))
    assert estimate.sequential_s is not None and estimate.parallel_s is not None
    assert estimate.parallel_s == pytest.approx(estimate.sequential_s - 1.0 + 0.5)
    assert estimate.critical_path_s == pytest.approx(estimate.parallel_s), "no branches: the sum at the cheaper call"


def test_a_parallel_executor_running_nodes_at_once_gets_a_schedule_on_its_threads(tmp_path: Path) -> None:
    diamond = plan_of(tiny_models.diamond(tmp_path), 1)
    # Relu, then Sigmoid beside Tanh -> Neg, then Add.
    times = times_by_op(diamond, {"Relu": 1.0, "Sigmoid": 4.0, "Tanh": 2.0, "Neg": 3.0, "Add": 0.5})
    call = CallOverhead(parallel_fixed_s=0.0)
    estimates = {threads: compose(diamond, times, call, ParallelExecutor(threads)) for threads in (1, 2, 8)}
    assert estimates[1].parallel_s == pytest.approx(10.5)
    assert estimates[2].parallel_s == pytest.approx(1.0 + 5.0 + 0.5), "the branches overlap on two threads"
    assert estimates[8].parallel_s == pytest.approx(estimates[8].critical_path_s), "more threads than branches"


def test_there_is_no_parallel_estimate_without_the_executors_behaviour_and_call_cost(tmp_path: Path) -> None:
    diamond = plan_of(tiny_models.diamond(tmp_path), 1)
    times = times_by_op(diamond, {"Relu": 1.0, "Sigmoid": 1.0, "Tanh": 1.0, "Neg": 1.0, "Add": 1.0})
    assert compose(diamond, times, CallOverhead(parallel_fixed_s=1.0)).parallel_s is None
    assert compose(diamond, times, CallOverhead(), ParallelExecutor(1)).parallel_s is None


def test_bricks_whose_layers_use_the_thread_pool_count_at_the_parallel_executors_slowdown(tmp_path: Path) -> None:
    """A brick's layers use the pool when they take, on average, at least the measured layer time."""
    chain = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = chain.signatures
    assert [len(brick.ops) for brick in chain.bricks if isinstance(brick, BrickSpec)] == [2, 2, 2]
    call = CallOverhead(fixed_s=1.0, parallel_fixed_s=2.0)
    estimates = {
        layer_s: compose(chain, {signature: 7.0}, call, ParallelExecutor(1, pool_factor=3.0, pool_layer_s=layer_s))
        for layer_s in (None, 3.0, 3.5)
    }
    # Three bricks of two layers, each brick 7 s timed, 6 s of work once its call is taken off.
    assert estimates[None].parallel_s == pytest.approx(3 * 6.0 + 2.0), "no layer uses the pool"
    assert estimates[3.0].parallel_s == pytest.approx(3 * 3.0 * 6.0 + 2.0), "layers of 3 s each use it"
    assert estimates[3.5].parallel_s == pytest.approx(3 * 6.0 + 2.0), "layers under 3.5 s each do not"
    assert {e.sequential_s for e in estimates.values()} == {3 * 6.0 + 1.0}, "the sequential estimate is left alone"


def test_every_layer_costs_the_parallel_executor_its_cost_per_layer_and_the_sequential_estimate_nothing(
    tmp_path: Path,
) -> None:
    """It hands every node to its threads: a brick of two layers pays twice what one layer costs it more."""
    chain = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = chain.signatures
    call = CallOverhead(fixed_s=1.0, parallel_fixed_s=2.0, parallel_layer_s=0.25)
    slowed = ParallelExecutor(1, pool_factor=3.0, pool_layer_s=3.0)
    assert compose(chain, {signature: 7.0}, call, ParallelExecutor(1)).parallel_s == pytest.approx(
        3 * (6.0 + 0.5) + 2.0
    )
    assert compose(chain, {signature: 7.0}, call, slowed).parallel_s == pytest.approx(3 * (18.0 + 0.5) + 2.0)
    assert compose(chain, {signature: 7.0}, call, slowed).sequential_s == pytest.approx(3 * 6.0 + 1.0)
    diamond = plan_of(tiny_models.diamond(tmp_path), 1)
    times = times_by_op(diamond, {"Relu": 1.0, "Sigmoid": 4.0, "Tanh": 2.0, "Neg": 3.0, "Add": 0.5})
    estimate = compose(diamond, times, CallOverhead(parallel_fixed_s=0.0, parallel_layer_s=0.5), ParallelExecutor(2))
    assert estimate.parallel_s == pytest.approx(1.5 + max(4.5, 2.5 + 3.5) + 1.0), "scheduled with their bricks"


def test_a_scheduled_parallel_executor_schedules_the_slowed_bricks(tmp_path: Path) -> None:
    diamond = plan_of(tiny_models.diamond(tmp_path), 1)
    times = times_by_op(diamond, {"Relu": 1.0, "Sigmoid": 4.0, "Tanh": 2.0, "Neg": 3.0, "Add": 0.5})
    executor = ParallelExecutor(2, pool_factor=2.0, pool_layer_s=2.0)
    estimate = compose(diamond, times, CallOverhead(parallel_fixed_s=0.0), executor)
    assert estimate.parallel_s == pytest.approx(1.0 + max(8.0, 4.0 + 6.0) + 0.5)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"threads": 2, "pool_factor": 1.5, "pool_layer_s": 1e-5}, ParallelExecutor(2, 1.5, 1e-5)),
        ({"threads": 1, "pool_factor": 2, "pool_layer_s": None}, ParallelExecutor(1, 2.0, None)),
        ({"threads": 1}, ParallelExecutor(1)),  # reports written before the pool's slowdown was measured
        (None, None),
        ([1], None),
        ({"model": None, "error": "no parallel executor"}, None),
        ({"threads": 0}, None),
        ({"threads": True}, None),
        ({"threads": 1.5}, None),
        ({"threads": 1, "pool_factor": "2"}, None),
        ({"threads": 1, "pool_factor": -1.0}, None),
        ({"threads": 1, "pool_factor": float("nan")}, None),
        ({"threads": 1, "pool_layer_s": -1.0}, None),
        ({"threads": 1, "pool_layer_s": [1]}, None),
    ],
)
def test_a_reports_executor_entry_is_read_back_and_a_damaged_one_counts_as_absent(
    entry: object, expected: ParallelExecutor | None
) -> None:
    assert ParallelExecutor.from_report(entry) == expected


@pytest.mark.parametrize("threads", [1, 2, 3, 64])
def test_a_list_schedule_lies_between_the_critical_path_and_the_sum(threads: int) -> None:
    rng = random.Random(threads)
    for _ in range(50):
        count = rng.randint(1, 25)
        graph = nx.DiGraph((a, b) for a in range(count) for b in range(a + 1, count) if rng.random() < 0.15)
        seconds = [rng.random() for _ in range(count)]
        span = list_schedule(graph, seconds, threads)
        assert critical_path_of(graph, seconds) - 1e-9 <= span <= sum(seconds) + 1e-9
        if threads == 1:
            assert span == pytest.approx(sum(seconds))
        if threads >= count:
            assert span == pytest.approx(critical_path_of(graph, seconds))


def critical_path_of(graph: nx.DiGraph, seconds: list[float]) -> float:
    longest = list(seconds)
    for brick in nx.topological_sort(graph):
        for after in graph.successors(brick):
            longest[after] = max(longest[after], longest[brick] + seconds[after])
    return max(longest)


def test_timing_a_brick_costs_each_brick_but_not_the_model(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path, blocks=3), 2)
    (signature,) = plan.signatures
    estimate = compose(plan, {signature: 5.0}, CallOverhead(fixed_s=1.0, timing_s=0.5))
    assert estimate.sequential_s == pytest.approx(3 * (5.0 - 1.0 - 0.5) + 1.0)


def test_the_model_s_own_call_counts_at_the_median_speed_of_its_bricks(tmp_path: Path) -> None:
    """A model of one brick timed in a slow stretch: the slow cost its brick paid is the one its own call
    pays, so its estimate is its brick's time less the item's loop; a brick without a reference counts
    for nothing in the median."""
    chain = plan_of(tiny_models.chain(tmp_path), 6)
    (signature,) = chain.signatures
    overhead = CallOverhead(fixed_s=1.0, timing_s=0.5, parallel_fixed_s=3.0, reference_s=10.0)
    alone = compose(chain, {signature: 5.0}, overhead, ParallelExecutor(1), {signature: 20.0})
    assert alone.sequential_s == pytest.approx(5.0 - 2 * 0.5)
    assert alone.parallel_s == pytest.approx(5.0 - 2 * 1.5 + 2 * 3.0)
    diamond = plan_of(tiny_models.diamond(tmp_path), 1)
    times = dict.fromkeys(diamond.signatures, 5.0)
    first, second, *_ = diamond.signatures
    speeds = {first: 10.0, second: 30.0}
    counted = compose(diamond, times, overhead, references=speeds).sequential_s
    work = sum((5.0 - 1.5 * speeds.get(s, 10.0) / 10.0) * n for s, n in diamond.signatures.items())
    assert counted == pytest.approx(work + 1.0 * 2.0), "the median of 10 and 30 us: twice the cost measured"


def test_a_brick_never_counts_for_less_than_nothing(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path), 2)
    (signature,) = plan.signatures
    assert compose(plan, {signature: 0.5}, CallOverhead(fixed_s=1.0)).sequential_s == pytest.approx(1.0)


def test_a_brick_timed_while_the_machine_ran_slower_pays_its_call_cost_in_proportion(tmp_path: Path) -> None:
    """The reference call took 20 us around the brick's timing and 10 us beside the call cost's measurement:
    the brick paid twice the measured cost, and the model's own call counts at its bricks' speed too."""
    plan = plan_of(tiny_models.chain(tmp_path, blocks=3), 2)
    (signature,) = plan.signatures
    overhead = CallOverhead(fixed_s=1.0, timing_s=0.5, reference_s=10.0)
    slower = compose(plan, {signature: 5.0}, overhead, references={signature: 20.0})
    assert slower.sequential_s == pytest.approx(3 * (5.0 - 2 * 1.5) + 2 * 1.0)
    assert compose(plan, {signature: 5.0}, overhead).sequential_s == pytest.approx(3 * (5.0 - 1.5) + 1.0), "unknown"
    unmeasured = CallOverhead(fixed_s=1.0, timing_s=0.5)  # a call cost of an older record
    assert compose(plan, {signature: 5.0}, unmeasured, references={signature: 20.0}).sequential_s == pytest.approx(
        3 * (5.0 - 1.5) + 1.0
    )
