"""Compose a model's latency from its bricks' times.

* Sequential: the sum of the bricks, what onnxruntime's sequential executor does.
* Parallel: what onnxruntime's parallel executor does here, as detected at run time (see
  :func:`.probes.detect_executor`): with one node at a time, the sum again, at the parallel
  executor's call cost; with nodes run at once, a list schedule of the brick graph on its threads.
  Either way, bricks whose layers split their work over the intra-op thread pool count at the
  slowdown the parallel executor was measured to cause such layers.
* Critical path: the heaviest path through the brick graph, the lower bound for an executor with
  unlimited parallelism.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import networkx as nx

from ..cut.bricks import BrickSpec
from ..cut.cutting import ModelPlan
from ..timing.overhead import NO_OVERHEAD, CallOverhead

_SOURCE = "source"


@dataclass(frozen=True)
class Estimate:
    """A model's composed latency in seconds; None when some brick has no time."""

    sequential_s: float | None
    critical_path_s: float | None
    measured_bricks: int
    total_bricks: int
    #: The parallel executor's time; None also when its behaviour or call cost is unknown.
    parallel_s: float | None = None

    @property
    def complete(self) -> bool:
        return self.measured_bricks == self.total_bricks


@dataclass(frozen=True)
class ParallelExecutor:
    """What composition needs of onnxruntime's parallel executor, as detected in the run."""

    #: Nodes it runs at once (1: one at a time).
    threads: int
    #: How much slower it runs the layers that split their work over the intra-op thread pool.
    pool_factor: float = 1.0
    #: Seconds from which a layer splits its work over the pool; None: no layer does.
    pool_layer_s: float | None = None

    @classmethod
    def from_report(cls, executor: object) -> ParallelExecutor | None:
        """The executor a report's ``executor`` entry describes; None when it has none, or a damaged one."""
        if not isinstance(executor, Mapping):
            return None
        threads, factor, layer_s = (
            executor.get("threads"),
            executor.get("pool_factor", 1.0),
            executor.get("pool_layer_s"),
        )
        if not (isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1):
            return None
        if not (is_number(factor) and factor > 0) or not (layer_s is None or (is_number(layer_s) and layer_s >= 0)):
            return None
        return cls(threads, float(factor), None if layer_s is None else float(layer_s))

    def brick_s(self, seconds: float, layers: int) -> float:
        """A brick's time under this executor, from its time under the sequential one: its layers
        use the pool when they take, on average, at least :attr:`pool_layer_s`."""
        if self.pool_layer_s is not None and seconds >= self.pool_layer_s * max(layers, 1):
            return seconds * self.pool_factor
        return seconds


#: What composition needs of one window of a model: brick signature, number of inputs and of outputs;
#: None for a window that has no time (a layer that cannot be built, a brick the provider cannot run).
BrickCall = tuple[str, int, int] | None


def compose(
    plan: ModelPlan,
    times: Mapping[str, float],
    overhead: CallOverhead = NO_OVERHEAD,
    parallel: ParallelExecutor | None = None,
    references: Mapping[str, float] | None = None,
) -> Estimate:
    """Estimate ``plan``'s latency from ``times`` (seconds by brick signature).

    The cost of a brick's timed call (``overhead``) is taken off every brick's time, scaled to the
    reference call's time around the brick's timing where ``references`` gives it (see
    :meth:`.CallOverhead.of_brick`), and the cost of one call is counted once for the model, with the
    model's own inputs and outputs. A brick never counts for less than nothing. ``parallel`` is what
    the parallel executor does here (None: unknown, no parallel estimate).
    """
    layers = {brick.signature: len(brick.ops) for brick in plan.bricks if isinstance(brick, BrickSpec)}
    return compose_calls(brick_calls(plan), plan.graph, plan.io, times, overhead, parallel, layers, references)


def brick_calls(plan: ModelPlan) -> list[BrickCall]:
    """The model's windows as composition sees them; windows the provider cannot run have no time."""
    return [
        (brick.signature, len(brick.inputs), brick.output_count)
        if isinstance(brick, BrickSpec) and index not in plan.unsupported
        else None
        for index, brick in enumerate(plan.bricks)
    ]


def compose_calls(
    calls: Sequence[BrickCall],
    graph: nx.DiGraph,
    io: tuple[int, int],
    times: Mapping[str, float],
    overhead: CallOverhead = NO_OVERHEAD,
    parallel: ParallelExecutor | None = None,
    layers: Mapping[str, int] | None = None,
    references: Mapping[str, float] | None = None,
) -> Estimate:
    """:func:`compose` from plain data: the windows, the brick graph between them and the model's io
    counts, the number of layers of each brick by signature (one where unknown) and the reference
    call's time around each brick's timing (``references``, by signature, where known)."""
    references = references or {}
    work: list[float] = []
    signatures: list[str] = []
    for call in calls:
        seconds = times.get(call[0]) if call is not None else None
        if call is None or seconds is None:
            continue
        work.append(max(seconds - overhead.of_brick(call[1], call[2], references.get(call[0])), 0.0))
        signatures.append(call[0])
    if len(work) < len(calls):
        return Estimate(None, None, len(work), len(calls))
    own = model_costs(calls, overhead, references)
    model_call = own.of(*io)
    # The critical path bounds every executor from below: at the cheaper call of the two, and never above
    # the parallel estimate (whose pool factor may read under 1).
    cheapest_call = model_call
    parallel_s = None
    if parallel is not None and own.parallel_fixed_s is not None:
        layers = layers or {}
        # Every layer is handed to the executor's threads: a cost the sequential bricks' times do not hold.
        per_layer = own.parallel_layer_s or 0.0
        slowed = [
            parallel.brick_s(seconds, layers.get(signature, 1)) + per_layer * layers.get(signature, 1)
            for seconds, signature in zip(work, signatures)
        ]
        span = sum(slowed) if parallel.threads == 1 else list_schedule(graph, slowed, parallel.threads)
        parallel_call = own.of(*io, parallel=True)
        parallel_s = span + parallel_call
        cheapest_call = min(model_call, parallel_call)
    critical_path_s = _longest_path(graph, work) + cheapest_call
    if parallel_s is not None:
        critical_path_s = min(critical_path_s, parallel_s)
    return Estimate(sum(work) + model_call, critical_path_s, len(work), len(calls), parallel_s)


def model_costs(
    calls: Sequence[BrickCall], overhead: CallOverhead, references: Mapping[str, float] | None = None
) -> CallOverhead:
    """The call costs the model's own call is counted at: at the speed its bricks were timed at (the
    median of their reference call's times), so that every part of its estimate holds at one speed.
    Counted at the moment the costs were measured instead, a model of one brick timed in a slow stretch
    of the machine lost the slow cost its brick paid and got the fast one back: estimates of such
    models read half their measured time. The costs as measured where no brick has a reference."""
    references = references or {}
    known = [references[call[0]] for call in calls if call is not None and call[0] in references]
    return overhead.at(statistics.median(known) if known else None)


def is_number(value: object) -> TypeGuard[float]:
    """A finite number read from JSON (a bool is not one, nor an integer beyond any float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_count(value: object) -> TypeGuard[int]:
    """A whole number of things read from JSON, zero included (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def list_schedule(graph: nx.DiGraph, brick_times: Sequence[float], threads: int) -> float:
    """When the last brick ends if ``threads`` run the bricks, each taking the ready brick with the
    heaviest path still ahead of it as soon as one is free (list scheduling by bottom level).

    Bricks are the nodes ``0..n-1``; an edge means the later brick reads what the earlier one wrote.
    """
    count = len(brick_times)
    if count == 0:
        return 0.0
    dag = nx.DiGraph()
    dag.add_nodes_from(range(count))
    dag.add_edges_from(graph.edges)
    ahead: dict[int, float] = {}
    for brick in reversed(list(nx.topological_sort(dag))):
        ahead[brick] = brick_times[brick] + max((ahead[after] for after in dag.successors(brick)), default=0.0)
    waiting = {brick: dag.in_degree(brick) for brick in dag}
    released = [(0.0, brick) for brick, count_in in waiting.items() if count_in == 0]  # (ready at, brick)
    heapq.heapify(released)
    ready: list[tuple[float, float, int]] = []  # (-path ahead, ready at, brick)
    free = [0.0] * threads
    ends: dict[int, float] = {}
    while released or ready:
        now = min(free)
        if not ready and released[0][0] > now:
            now = released[0][0]
        while released and released[0][0] <= now:
            at, brick = heapq.heappop(released)
            heapq.heappush(ready, (-ahead[brick], at, brick))
        _, at, brick = heapq.heappop(ready)
        thread = free.index(min(free))
        ends[brick] = max(free[thread], at) + brick_times[brick]
        free[thread] = ends[brick]
        for after in dag.successors(brick):
            waiting[after] -= 1
            if waiting[after] == 0:
                start = max(ends[before] for before in dag.predecessors(after))
                heapq.heappush(released, (start, after))
    return max(ends.values())


def critical_path(plan: ModelPlan, brick_times: list[float]) -> float:
    """Length of the heaviest path through the brick graph, a brick's time counted on the edges into it."""
    return _longest_path(plan.graph, brick_times)


def _longest_path(graph: nx.DiGraph, brick_times: Sequence[float]) -> float:
    weighted = nx.DiGraph()
    for brick, seconds in enumerate(brick_times):
        weighted.add_edge(_SOURCE, brick, seconds=seconds)
    for before, after in graph.edges:
        weighted.add_edge(before, after, seconds=brick_times[after])
    return float(nx.dag_longest_path_length(weighted, weight="seconds"))
