"""Compose a model's latency from its bricks' times: sum for a sequential executor, critical path for a parallel one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from .bricks import BrickSpec
from .cutting import ModelPlan

_SOURCE = "source"


@dataclass(frozen=True)
class CallOverhead:
    """What one inference call costs beyond its layers' work, in seconds, on this machine.

    Every brick was timed as a model of its own and paid it once; the whole model pays it once.
    A call with more inputs or outputs costs more, so the cost is fixed plus a part per extra one.
    """

    fixed_s: float = 0.0
    per_input_s: float = 0.0
    per_output_s: float = 0.0
    #: The fixed cost under onnxruntime's parallel executor, when measured; the critical path
    #: counts it (or, unmeasured, the sequential one: an ideal parallel executor).
    parallel_fixed_s: float | None = None

    def of(self, inputs: int, outputs: int, *, parallel: bool = False) -> float:
        fixed = self.parallel_fixed_s if parallel and self.parallel_fixed_s is not None else self.fixed_s
        return fixed + self.per_input_s * max(inputs - 1, 0) + self.per_output_s * max(outputs - 1, 0)


NO_OVERHEAD = CallOverhead()


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


def compose(plan: ModelPlan, times: Mapping[str, float], overhead: CallOverhead = NO_OVERHEAD) -> Estimate:
    """Estimate ``plan``'s latency from ``times`` (seconds by brick signature).

    The cost of a call (``overhead``) is taken off every brick's time and counted once for the
    model, with the model's own inputs and outputs. A brick never counts for less than nothing.
    """
    work: list[float] = []
    for brick in plan.bricks:
        seconds = times.get(brick.signature) if isinstance(brick, BrickSpec) else None
        if seconds is None or not isinstance(brick, BrickSpec):
            continue
        work.append(max(seconds - overhead.of(len(brick.inputs), len(brick.outputs)), 0.0))
    if len(work) < len(plan.bricks):
        return Estimate(None, None, len(work), len(plan.bricks))
    sequential = sum(work) + overhead.of(*plan.io)
    return Estimate(
        sequential, critical_path(plan, work) + overhead.of(*plan.io, parallel=True), len(work), len(plan.bricks)
    )


def critical_path(plan: ModelPlan, brick_times: list[float]) -> float:
    """Length of the heaviest path through the brick graph, a brick's time counted on the edges into it."""
    weighted = nx.DiGraph()
    for brick, seconds in enumerate(brick_times):
        weighted.add_edge(_SOURCE, brick, seconds=seconds)
    for before, after in plan.graph.edges:
        weighted.add_edge(before, after, seconds=brick_times[after])
    return float(nx.dag_longest_path_length(weighted, weight="seconds"))
