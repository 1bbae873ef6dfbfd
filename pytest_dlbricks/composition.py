"""Compose a model's latency from its bricks' times: sum for a sequential executor, critical path for a parallel one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from .bricks import BrickSpec
from .cutting import ModelPlan

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


def compose(plan: ModelPlan, times: Mapping[str, float]) -> Estimate:
    """Estimate ``plan``'s latency from ``times`` (seconds by brick signature)."""
    brick_times = [times.get(brick.signature) if isinstance(brick, BrickSpec) else None for brick in plan.bricks]
    measured = sum(t is not None for t in brick_times)
    if measured < len(brick_times):
        return Estimate(None, None, measured, len(brick_times))
    known = [t for t in brick_times if t is not None]
    return Estimate(sum(known), critical_path(plan, known), measured, len(brick_times))


def critical_path(plan: ModelPlan, brick_times: list[float]) -> float:
    """Length of the heaviest path through the brick graph, a brick's time counted on the edges into it."""
    weighted = nx.DiGraph()
    for brick, seconds in enumerate(brick_times):
        weighted.add_edge(_SOURCE, brick, seconds=seconds)
    for before, after in plan.graph.edges:
        weighted.add_edge(before, after, seconds=brick_times[after])
    return float(nx.dag_longest_path_length(weighted, weight="seconds"))
