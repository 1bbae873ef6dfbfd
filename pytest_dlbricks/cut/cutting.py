"""Cut a model into bricks (DLBricks' FindModelSubgraphs and SplitModel) and keep its brick graph.

Windows of at most G layers are taken in topological order, so a window never needs a value that is
computed after it and the bricks of a model form a DAG. A window that cannot be built into a model
falls back, as in the paper's Algorithm 2, to a single-layer brick and a window shifted by one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

import networkx as nx

from ..core.graph import ModelGraph
from .bricks import BrickSpec, UnbuildableBrick, brick_input_names, describe_brick
from .samples import SYNTHETIC

T = TypeVar("T")


@dataclass(frozen=True)
class BrokenBrick:
    """A single layer that cannot be built into a runnable brick: reported, never dropped."""

    layer_index: int
    op_type: str
    reason: str

    @property
    def label(self) -> str:
        return f"layer{self.layer_index}-{self.op_type}"


Brick = BrickSpec | BrokenBrick


@dataclass
class ModelPlan:
    """A model cut into bricks: what composition needs, with no reference to the model file's contents."""

    path: str
    layers: int
    #: One entry per window, in topological order.
    bricks: list[Brick]
    #: Window indices; an edge means the second window reads a value of the first.
    graph: nx.DiGraph = field(repr=False)
    guessed_dims: dict[str, int] = field(default_factory=dict)
    #: Sizes the sample inputs gave (see :attr:`ModelGraph.sampled_dims`): the point the model ran at holds them.
    sampled_dims: dict[str, int] = field(default_factory=dict)
    #: Names the model's symbolic input dimensions answer to (see :attr:`ModelGraph.dim_names`).
    dim_names: tuple[str, ...] = ()
    #: Number of the model's own inputs and outputs (a call's cost depends on them).
    io: tuple[int, int] = (1, 1)
    #: The model file as pytest shows it (``path`` adds the sweep point, if any); empty: ``path``.
    file: str = ""
    #: The sweep point: every dimension's size and the numeric type.
    point: dict[str, object] = field(default_factory=dict)
    #: Windows the provider cannot run in the point's numeric type, with the reason.
    unsupported: dict[int, str] = field(default_factory=dict)
    #: What the model ran on: the source of its sample inputs, or ``synthetic``.
    inputs: str = SYNTHETIC
    #: Its operators whose work depends on the values of their inputs (see ``graph.DATA_DEPENDENT_OPS``).
    data_dependent: tuple[str, ...] = ()
    #: How many of its weights it lists as graph inputs, which onnxruntime runs as no constants (see
    #: :attr:`.ModelGraph.weights_as_inputs`).
    weights_as_inputs: int = 0
    #: Per window, the window that wrote each input of its brick (None: an input of the model's own), by which
    #: a brick's inputs are found in the caches or pushed out of them (see :func:`.caches.reuse_distances`).
    input_writers: tuple[tuple[int | None, ...], ...] = ()

    @cached_property
    def signatures(self) -> Counter[str]:
        """How many times each distinct runnable brick occurs in the model (computed once: asked for every item)."""
        return Counter(b.signature for b in self.bricks if isinstance(b, BrickSpec))

    @property
    def broken(self) -> list[BrokenBrick]:
        return [b for b in self.bricks if isinstance(b, BrokenBrick)]


def find_windows(
    count: int, granularity: int, build: Callable[[int, int], T | None]
) -> list[tuple[int, int, T | None]]:
    """FindModelSubgraphs: cover ``range(count)`` with non-overlapping windows of at most ``granularity``.

    ``build(begin, end)`` returns the brick for a window, or None when the window cannot form a valid
    model; a single-layer window is kept even then, with None, so no layer is ever dropped.
    """
    if granularity < 1:
        raise ValueError("granularity must be at least 1")
    windows: list[tuple[int, int, T | None]] = []
    begin = 0
    while begin < count:
        end = min(begin + granularity, count)
        # SplitModel: on failure emit verts[begin] alone and retry with (begin + 1, end + 1).
        while True:
            brick = build(begin, end)
            if brick is not None or end - begin == 1:
                windows.append((begin, end, brick))
                break
            windows.append((begin, begin + 1, build(begin, begin + 1)))
            begin, end = begin + 1, min(end + 1, count)
        begin = end
    return windows


def plan_model(graph: ModelGraph, granularity: int, display_path: str) -> ModelPlan:
    """Cut ``graph`` into bricks of at most ``granularity`` layers."""
    failures: dict[tuple[int, int], str] = {}

    def build(begin: int, end: int) -> BrickSpec | None:
        try:
            return describe_brick(graph, begin, end)
        except UnbuildableBrick as error:
            failures[(begin, end)] = str(error)
            return None

    windows = find_windows(len(graph.layers), granularity, build)
    bricks: list[Brick] = [
        brick if brick is not None else BrokenBrick(begin, graph.layers[begin].op_type, failures[(begin, end)])
        for begin, end, brick in windows
    ]
    spans = [(begin, end) for begin, end, _ in windows]
    return ModelPlan(
        path=display_path,
        layers=len(graph.layers),
        bricks=bricks,
        graph=_brick_graph(graph, spans),
        input_writers=_input_writers(graph, spans),
        guessed_dims=dict(graph.guessed_dims),
        sampled_dims=dict(graph.sampled_dims),
        dim_names=graph.dim_names,
        io=(len(graph.inputs), len(graph.outputs)),
        data_dependent=graph.data_dependent,
        weights_as_inputs=len(graph.weights_as_inputs),
    )


def _writers(graph: ModelGraph, windows: list[tuple[int, int]]) -> dict[str, int]:
    """The window that writes each value a layer writes."""
    window_of_layer = {layer: index for index, (begin, end) in enumerate(windows) for layer in range(begin, end)}
    return {name: window_of_layer[i] for i, layer in enumerate(graph.layers) for name in layer.output if name}


def _input_writers(graph: ModelGraph, windows: list[tuple[int, int]]) -> tuple[tuple[int | None, ...], ...]:
    writer = _writers(graph, windows)
    return tuple(tuple(writer.get(name) for name in brick_input_names(graph, begin, end)) for begin, end in windows)


def _brick_graph(graph: ModelGraph, windows: list[tuple[int, int]]) -> nx.DiGraph:
    window_of_layer = {layer: index for index, (begin, end) in enumerate(windows) for layer in range(begin, end)}
    producer = _writers(graph, windows)
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(windows)))
    for layer_index, reads in enumerate(graph.layer_reads):
        consumer = window_of_layer[layer_index]
        for name in reads:
            source = producer.get(name)
            if source is not None and source != consumer:
                dag.add_edge(source, consumer)
    return dag
