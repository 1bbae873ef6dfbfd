"""A topological order of a model's nodes that depends on the graph alone, not on how a file lists it.

Bricks are windows of this order, and their signatures key benchmark histories, so the same graph
must always give the same order. onnxruntime, for one, writes the parallel branches of the graph it
optimizes in a different order from run to run. Each node gets a key from what it computes (its
operator, attributes and the keys of what it reads); among the nodes ready to run, the order
follows the chain it just placed when it can (so that a window holds consecutive layers of one
branch, not layers of several), and otherwise takes the smallest key.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Mapping, Sequence

import networkx as nx
import onnx


def content_keys(
    nodes: Sequence[onnx.NodeProto],
    graph: nx.DiGraph,
    reads: Sequence[Sequence[str]],
    sources: Mapping[str, str],
    outputs: Sequence[str] = (),
) -> dict[int, str]:
    """A key per node (index) that only depends on what is computed before and after the node.

    ``reads`` are the values each node reads; ``sources`` gives a key to values no node produces
    (model inputs by position, weights by type and shape); ``outputs`` are the model's outputs.
    Looking both ways matters: two nodes may compute alike yet feed different work (onnxruntime
    pads convolutions of 4 and 8 channels to one shape and only the next node tells them apart).
    """
    produced = {
        name: (index, position) for index, node in enumerate(nodes) for position, name in enumerate(node.output)
    }
    order = list(nx.topological_sort(graph))
    before: dict[int, str] = {}
    for index in order:
        parts = _own_parts(nodes[index])
        for name in reads[index]:
            if name in produced:
                producer, position = produced[name]
                parts.append(f"{before[producer]}:{position}")
            else:
                parts.append(sources.get(name, ""))
        before[index] = _digest(parts)
    readers: dict[str, list[tuple[int, int]]] = {}
    for index, names in enumerate(reads):
        for position, name in enumerate(names):
            readers.setdefault(name, []).append((index, position))
    after: dict[int, str] = {}
    for index in reversed(order):
        parts = _own_parts(nodes[index])
        for name in nodes[index].output:
            uses = sorted(f"{after[reader]}:{position}" for reader, position in readers.get(name, ()))
            if name in outputs:
                uses.append(f"output{list(outputs).index(name)}")
            parts.append(",".join(uses))
        after[index] = _digest(parts)
    return {index: _digest([before[index], after[index]]) for index in order}


def _own_parts(node: onnx.NodeProto) -> list[str]:
    attributes = sorted(node.attribute, key=lambda attribute: attribute.name)
    return [node.domain, node.op_type, *(_digest([a.SerializeToString(deterministic=True).hex()]) for a in attributes)]


def _digest(parts: Sequence[str]) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def canonical_order(graph: nx.DiGraph, keys: Mapping[int, str]) -> list[int]:
    """Nodes of the DAG ``graph`` in a topological order fixed by ``keys`` (see the module docstring)."""
    waiting = {node: graph.in_degree(node) for node in graph}
    ready = [(keys[node], node) for node, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    placed: set[int] = set()
    order: list[int] = []
    last: int | None = None
    while ready:
        follow = [] if last is None else [(keys[n], n) for n in graph.successors(last) if waiting[n] == 0]
        if follow:
            node = min(follow)[1]
        else:
            node = heapq.heappop(ready)[1]
            if node in placed:
                continue
        placed.add(node)
        order.append(node)
        last = node
        for successor in graph.successors(node):
            waiting[successor] -= 1
            if waiting[successor] == 0:
                heapq.heappush(ready, (keys[successor], successor))
    return order
