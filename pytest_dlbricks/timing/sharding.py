"""Sharding: split the distinct bricks of a run among N machines, the same way on every machine.

Every shard collects and cuts all models, so every shard knows the same distinct bricks; each then
benchmarks only its own. The assignment depends on nothing but the bricks' signatures and expected
costs, so N identical machines agree on it without talking to each other. Bricks are dealt out
greedily, most expensive first, each to the shard with the least expected work so far (ties: the
lower shard), and no shard gets more than its equal share of bricks rounded up. The expected cost
of a brick is the bytes it reads and writes (inputs, weights, outputs): no FLOP counting, and the
same on every machine.
"""

from __future__ import annotations

import argparse
import heapq
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the options parse shards: importing this module must stay cheap
    from ..cut.bricks import BrickSpec


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N``: shard K (counting from 1) of N."""
    index, sep, count = text.strip().partition("/")
    try:
        shard, shards = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"shard must look like 2/3 (shard 2 of 3), not {text!r}") from None
    if not sep or shards < 1:
        raise argparse.ArgumentTypeError(f"shard must look like 2/3 (shard 2 of 3), not {text!r}")
    if not 1 <= shard <= shards:
        raise argparse.ArgumentTypeError(f"shard number must lie between 1 and {shards}, not {shard}")
    return shard, shards


def brick_cost(brick: BrickSpec) -> int:
    """Expected cost of benchmarking ``brick``: the bytes of its inputs, weights and outputs."""
    return sum(spec.nbytes for _, spec in (*brick.inputs, *brick.weights, *brick.outputs))


def assign(costs: Mapping[str, float], shards: int) -> dict[str, int]:
    """The shard (1 to ``shards``) of each brick, keyed like ``costs`` (signature to expected cost)."""
    if shards < 1:
        raise ValueError("there must be at least one shard")
    cap = math.ceil(len(costs) / shards)
    # (expected work, bricks, shard): the least loaded shard that still has room comes first.
    open_shards = [(0.0, 0, shard) for shard in range(1, shards + 1)]
    assignment: dict[str, int] = {}
    for signature in sorted(costs, key=lambda signature: (-costs[signature], signature)):
        load, count, shard = heapq.heappop(open_shards)
        assignment[signature] = shard
        if count + 1 < cap:
            heapq.heappush(open_shards, (load + costs[signature], count + 1, shard))
    return assignment
