"""Unit tests of cutting: FindModelSubgraphs windows, SplitModel's fallback, the brick graph."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import networkx as nx
import pytest
import tiny_models

from conftest import plan_of
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import find_windows


def spans(windows: Sequence[tuple[int, int, object]]) -> list[tuple[int, int]]:
    return [(begin, end) for begin, end, _ in windows]


def accept_all(begin: int, end: int) -> str:
    return f"{begin}:{end}"


@pytest.mark.parametrize(
    ("count", "granularity", "expected"),
    [
        (1, 1, [(0, 1)]),
        (5, 1, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]),
        (5, 2, [(0, 2), (2, 4), (4, 5)]),
        (6, 3, [(0, 3), (3, 6)]),
        (3, 10, [(0, 3)]),
        (0, 3, []),
    ],
)
def test_windows_without_failures(count: int, granularity: int, expected: list[tuple[int, int]]) -> None:
    windows = find_windows(count, granularity, accept_all)
    assert spans(windows) == expected
    assert [brick for _, _, brick in windows] == [f"{b}:{e}" for b, e in expected]


def test_granularity_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        find_windows(3, 0, accept_all)


@pytest.mark.parametrize("seed", range(40))
def test_windows_cover_every_layer_once_and_never_exceed_g(seed: int) -> None:
    rng = random.Random(seed)
    count, granularity = rng.randint(1, 30), rng.randint(1, 6)
    rejected = {(b, e) for b in range(count) for e in range(b + 2, count + 1) if rng.random() < 0.4}

    def build(begin: int, end: int) -> str | None:
        return None if (begin, end) in rejected else f"{begin}:{end}"

    windows = find_windows(count, granularity, build)
    covered = [layer for begin, end, _ in windows for layer in range(begin, end)]
    assert covered == list(range(count))
    assert all(1 <= end - begin <= granularity for begin, end, _ in windows)
    assert all((begin, end) not in rejected for begin, end, _ in windows)
    assert all(brick == f"{begin}:{end}" for begin, end, brick in windows)


def test_split_model_fallback_emits_one_layer_and_shifts_the_window() -> None:
    """Algorithm 2: window (0, 3) fails, so layer 0 alone, then (1, 4); then (4, 7) as usual."""
    calls: list[tuple[int, int]] = []

    def build(begin: int, end: int) -> str | None:
        calls.append((begin, end))
        return None if (begin, end) == (0, 3) else f"{begin}:{end}"

    windows = find_windows(7, 3, build)
    assert spans(windows) == [(0, 1), (1, 4), (4, 7)]
    assert calls == [(0, 3), (0, 1), (1, 4), (4, 7)]


def test_split_model_fallback_repeats_until_a_window_builds() -> None:
    calls: list[tuple[int, int]] = []

    def build(begin: int, end: int) -> str | None:
        calls.append((begin, end))
        return None if end - begin > 1 and begin < 2 else f"{begin}:{end}"

    windows = find_windows(6, 3, build)
    assert spans(windows) == [(0, 1), (1, 2), (2, 5), (5, 6)]
    assert calls == [(0, 3), (0, 1), (1, 4), (1, 2), (2, 5), (5, 6)]


def test_shifted_window_is_clipped_at_the_end() -> None:
    """(3, 5) fails in a 5-layer model: layer 3 alone, then (4, 5), not (4, 6)."""
    windows = find_windows(5, 3, lambda b, e: None if (b, e) == (3, 5) else f"{b}:{e}")
    assert spans(windows) == [(0, 3), (3, 4), (4, 5)]


def test_a_single_layer_that_fails_is_kept_with_none() -> None:
    """Every window holding layer 1 fails, the single layer too: it is kept, with None."""
    windows = find_windows(4, 2, lambda b, e: None if b <= 1 < e else f"{b}:{e}")
    assert windows == [(0, 1, "0:1"), (1, 2, None), (2, 4, "2:4")]
    everything_fails = find_windows(3, 2, lambda b, e: None)
    assert everything_fails == [(0, 1, None), (1, 2, None), (2, 3, None)]


# -- plans of real (tiny) models -----------------------------------------------------------------


def test_plan_of_a_chain_counts_repeated_bricks(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path, blocks=3), 2)
    assert plan.layers == 6
    assert len(plan.bricks) == 3
    assert list(plan.signatures.values()) == [3]
    assert plan.path == "chain.onnx"
    assert list(plan.graph.edges) == [(0, 1), (1, 2)]


def test_last_window_is_shorter(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.chain(tmp_path, blocks=3), 4)
    assert [len(brick.nodes) for brick in plan.bricks if isinstance(brick, BrickSpec)] == [4, 2]


def test_diamond_brick_graph_at_g1(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.diamond(tmp_path), 1)
    assert [brick.ops for brick in plan.bricks if isinstance(brick, BrickSpec)] == [
        ("Relu",),
        ("Sigmoid",),
        ("Tanh",),
        ("Neg",),
        ("Add",),
    ]
    assert nx.is_directed_acyclic_graph(plan.graph)
    assert set(plan.graph.nodes) == {0, 1, 2, 3, 4}
    assert set(plan.graph.edges) == {(0, 1), (0, 2), (2, 3), (1, 4), (3, 4)}


def test_diamond_brick_graph_at_g2(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.diamond(tmp_path), 2)
    assert [brick.ops for brick in plan.bricks if isinstance(brick, BrickSpec)] == [
        ("Relu", "Sigmoid"),
        ("Tanh", "Neg"),
        ("Add",),
    ]
    assert set(plan.graph.edges) == {(0, 1), (0, 2), (1, 2)}


def test_outer_scope_reads_are_edges_of_the_brick_graph(tmp_path: Path) -> None:
    """The Relu's output reaches the If only through its branches: still an edge."""
    plan = plan_of(tiny_models.if_outer_scope(tmp_path), 1)
    assert set(plan.graph.edges) == {(0, 2), (1, 2)}


def test_guessed_dims_reach_the_plan(tmp_path: Path) -> None:
    assert plan_of(tiny_models.symbolic_batch(tmp_path), 1).guessed_dims == {"batch": 1}


def test_an_unbuildable_layer_is_a_broken_brick_not_dropped(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.sequence_boundary(tmp_path), 1)
    assert len(plan.bricks) == 3
    split, pick = plan.broken
    assert (split.layer_index, split.op_type, split.label) == (1, "SplitToSequence", "layer1-SplitToSequence")
    assert (pick.layer_index, pick.op_type) == (2, "SequenceAt")
    assert "not a tensor" in split.reason
    assert len(plan.signatures) == 1


def test_algorithm_2_shifts_the_window_past_an_invalid_one(tmp_path: Path) -> None:
    """At G=2, [Relu, SplitToSequence] would output a sequence: Relu alone, then the shifted window."""
    plan = plan_of(tiny_models.sequence_boundary(tmp_path), 2)
    assert [brick.ops for brick in plan.bricks if isinstance(brick, BrickSpec)] == [
        ("Relu",),
        ("SplitToSequence", "SequenceAt"),
    ]
    assert plan.broken == []


def test_a_dead_layer_does_not_make_the_model_unmeasurable(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.dead_end(tmp_path), 1)
    assert (plan.layers, plan.broken) == (1, [])
