"""Unit tests of the canonical node order: fixed by the graph, chains kept together; and onnxruntime's
optimized graphs cut alike from session to session."""

from __future__ import annotations

import networkx as nx
import pytest

from conftest import SAMPLE_MODELS
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.cut.ordering import canonical_order


def test_a_chain_is_followed_before_a_smaller_key_elsewhere() -> None:
    # 0 -> 1 -> 2 and 0 -> 3: after 1, its successor 2 goes first although 3 has the smaller key.
    graph = nx.DiGraph()
    # Edges added, not given to the constructor: networkx 3.0 then warns when pandas is not installed.
    graph.add_edges_from([(0, 1), (1, 2), (0, 3)])
    keys = {0: "a", 1: "b", 2: "z", 3: "c"}
    assert canonical_order(graph, keys) == [0, 1, 2, 3]


def test_ready_nodes_go_by_key_not_by_index() -> None:
    graph = nx.DiGraph()
    graph.add_nodes_from([0, 1, 2])
    assert canonical_order(graph, {0: "c", 1: "a", 2: "b"}) == [1, 2, 0]


def test_a_node_waits_for_all_its_inputs() -> None:
    graph = nx.DiGraph()
    graph.add_edges_from([(0, 2), (1, 2)])
    order = canonical_order(graph, {0: "b", 1: "c", 2: "a"})
    assert order.index(2) == 2


@pytest.mark.parametrize("name", ["tiny_inception.onnx", "transformer_block.onnx"])
def test_the_graph_onnxruntime_optimized_is_cut_alike_every_time(name: str) -> None:
    """onnxruntime lists the parallel branches of the graph it optimizes differently from session to
    session; sibling convolutions it pads to one shape differ only in what reads them."""
    settings = Settings(granularity=3, intra_op_threads=1)
    cuts = set()
    for _ in range(3):
        plan = plan_model(load_model(SAMPLE_MODELS / name, {"batch": 1, "seq": 16}, settings), 3, name)
        cuts.add(tuple(brick.signature for brick in plan.bricks if isinstance(brick, BrickSpec)))
    assert len(cuts) == 1
