"""Compose a model's latency from its bricks' times: sum for a sequential executor, critical path for a parallel one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from .bricks import BrickSpec
from .cutting import ModelPlan
from .overhead import NO_OVERHEAD, CallOverhead

_SOURCE = "source"


@dataclass(frozen=True)
class Estimate:
    """A model's composed latency in seconds; None when some brick has no time."""

    sequential_s: float | None
    critical_path_s: float | None
    measured_bricks: int
    total_bricks: int

    @property
    def complete(self) -> bool:
        return self.measured_bricks == self.total_bricks


#: What composition needs of one window of a model: brick signature, number of inputs and of outputs;
#: None for a window that has no time (a layer that cannot be built, a brick the provider cannot run).
BrickCall = tuple[str, int, int] | None


def compose(plan: ModelPlan, times: Mapping[str, float], overhead: CallOverhead = NO_OVERHEAD) -> Estimate:
    """Estimate ``plan``'s latency from ``times`` (seconds by brick signature).

    The cost of a call (``overhead``) is taken off every brick's time and counted once for the
    model, with the model's own inputs and outputs. A brick never counts for less than nothing.
    """
    return compose_calls(brick_calls(plan), plan.graph, plan.io, times, overhead)


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
) -> Estimate:
    """:func:`compose` from plain data: the windows, the brick graph between them and the model's io counts."""
    work: list[float] = []
    for call in calls:
        seconds = times.get(call[0]) if call is not None else None
        if call is None or seconds is None:
            continue
        work.append(max(seconds - overhead.of(call[1], call[2]), 0.0))
    if len(work) < len(calls):
        return Estimate(None, None, len(work), len(calls))
    model_call = overhead.of(*io)
    return Estimate(sum(work) + model_call, _longest_path(graph, work) + model_call, len(work), len(calls))


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
