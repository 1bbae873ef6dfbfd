"""Unit tests of brick descriptions: canonical names, signatures, labels, subgraph renaming."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import tiny_models
from onnx import helper, numpy_helper

from conftest import plan_of
from pytest_dlbricks.core.graph import ModelGraph, TensorSpec
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut import bricks
from pytest_dlbricks.cut.bricks import BrickSpec, UnbuildableBrick, describe_brick
from pytest_dlbricks.cut.cutting import BrokenBrick
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.timing.running import BrickRunner
from pytest_dlbricks.timing.synthesis import build_brick_model

ONE_THREAD = Settings(granularity=1, intra_op_threads=1)


def bricks_of(path: Path, granularity: int) -> list[BrickSpec]:
    plan = plan_of(path, granularity)
    assert plan.broken == []
    return [brick for brick in plan.bricks if isinstance(brick, BrickSpec)]


def signatures(path: Path, granularity: int) -> list[str]:
    return [brick.signature for brick in bricks_of(path, granularity)]


def subgraph(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(attribute.g for attribute in node.attribute if attribute.name == name)


@pytest.mark.parametrize("granularity", [1, 2, 4])
def test_same_layers_in_two_models_have_the_same_signature(tmp_path: Path, granularity: int) -> None:
    """Different value names, node names and weight values; the same work."""
    first = tiny_models.chain(tmp_path, "a.onnx", seed=0)
    second = tiny_models.chain(tmp_path, "b.onnx", seed=1, prefix="other_")
    assert signatures(first, granularity) == signatures(second, granularity)


def test_repeated_blocks_share_one_signature(tmp_path: Path) -> None:
    bricks = bricks_of(tiny_models.chain(tmp_path, blocks=3), 2)
    assert len(bricks) == 3
    assert len({brick.signature for brick in bricks}) == 1
    # The first block reads the model input, the others an activation: both are input_0.
    assert [name for name, _ in bricks[0].inputs] == ["input_0"]
    assert [name for name, _ in bricks[0].weights] == ["weight_0"]


def test_different_shapes_give_different_signatures(tmp_path: Path) -> None:
    small = signatures(tiny_models.chain(tmp_path, "small.onnx", size=6), 1)
    large = signatures(tiny_models.chain(tmp_path, "large.onnx", size=7), 1)
    assert not set(small) & set(large)


def test_different_attributes_give_different_signatures(tmp_path: Path) -> None:
    one = signatures(tiny_models.single_layer(tmp_path, "LeakyRelu", [1, 64], "one.onnx", alpha=0.1), 1)
    same = signatures(tiny_models.single_layer(tmp_path, "LeakyRelu", [1, 64], "same.onnx", alpha=0.1), 1)
    other = signatures(tiny_models.single_layer(tmp_path, "LeakyRelu", [1, 64], "other.onnx", alpha=0.2), 1)
    assert one == same
    assert one != other


def test_different_operators_give_different_signatures(tmp_path: Path) -> None:
    relu = signatures(tiny_models.single_layer(tmp_path, "Relu", [1, 64], "relu.onnx"), 1)
    sigmoid = signatures(tiny_models.single_layer(tmp_path, "Sigmoid", [1, 64], "sigmoid.onnx"), 1)
    assert relu != sigmoid


def test_weight_values_never_change_the_signature(tmp_path: Path) -> None:
    seeds = [signatures(tiny_models.chain(tmp_path, f"seed{seed}.onnx", seed=seed), 1) for seed in range(3)]
    assert seeds[0] == seeds[1] == seeds[2]


def test_small_weights_never_change_the_signature(tmp_path: Path) -> None:
    """Conv with 8 output channels and a bias: the bias (8 floats) is a weight like any other."""
    first = signatures(tiny_models.chain(tmp_path, "a.onnx", seed=0, bias=True), 1)
    second = signatures(tiny_models.chain(tmp_path, "b.onnx", seed=1, bias=True), 1)
    assert first == second
    assert len(set(first)) == 2  # one Conv, one Relu: the three blocks are the same bricks


def test_small_activations_do_not_tie_the_signature_to_earlier_weights(tmp_path: Path) -> None:
    """Activations of 2x2x2 = 8 floats; weights of 2*2*3*3 = 36 floats (too big to be kept)."""
    first = signatures(tiny_models.chain(tmp_path, "a.onnx", seed=0, channels=2, size=2), 1)
    second = signatures(tiny_models.chain(tmp_path, "b.onnx", seed=1, channels=2, size=2), 1)
    assert first == second


def test_labels_name_the_operators_and_the_signature(tmp_path: Path) -> None:
    bricks = bricks_of(tiny_models.chain(tmp_path), 2)
    assert re.fullmatch(r"Conv\+Relu-[0-9a-f]{8}", bricks[0].label)
    assert bricks[0].label.endswith(bricks[0].signature[:8])
    assert bricks[0].short_signature == bricks[0].signature[:8]
    assert re.fullmatch(r"[0-9a-f]{64}", bricks[0].signature)


def test_long_labels_summarise_the_remaining_operators(tmp_path: Path) -> None:
    (brick,) = bricks_of(tiny_models.diamond(tmp_path), 5)
    assert brick.ops == ("Relu", "Sigmoid", "Tanh", "Neg", "Add")
    assert re.fullmatch(r"Relu\+Sigmoid\+Tanh\+2more-[0-9a-f]{8}", brick.label)


def test_bricks_hold_no_name_of_the_source_model(tmp_path: Path) -> None:
    path = tiny_models.chain(tmp_path, prefix="secret_")
    bricks = bricks_of(path, 2)
    assert bricks
    for brick in bricks:
        data = build_brick_model(brick).SerializeToString()
        assert b"secret_" not in data
        for node in brick.nodes:
            assert node.name == ""
            assert all(re.fullmatch(r"(input|weight|value)_\d+", name) for name in [*node.input, *node.output])


def test_outputs_are_the_values_read_outside_the_brick(tmp_path: Path) -> None:
    graph = load_model(tiny_models.diamond(tmp_path))
    brick = describe_brick(graph, 0, 2)  # Relu, Sigmoid: Tanh reads the Relu output, Add the Sigmoid one
    assert [name for name, _ in brick.outputs] == ["value_0", "value_1"]
    assert brick.outputs[0][1] == TensorSpec(onnx.TensorProto.FLOAT, (1, 64))
    inner = describe_brick(graph, 2, 4)  # Tanh, Neg: only the Neg output leaves
    assert [name for name, _ in inner.outputs] == ["value_1"]


def test_a_value_read_twice_is_one_input(tmp_path: Path) -> None:
    model = tiny_models.finish(
        [helper.make_node("Mul", ["x", "x"], ["y"])], [tiny_models.tensor("x", [4])], [tiny_models.tensor("y", [4])]
    )
    (brick,) = bricks_of(tiny_models.save(model, tmp_path, "square.onnx"), 1)
    assert [name for name, _ in brick.inputs] == ["input_0"]
    assert list(brick.nodes[0].input) == ["input_0", "input_0"]


def test_a_value_that_is_not_a_tensor_cannot_cross_a_brick_boundary(tmp_path: Path) -> None:
    graph = load_model(tiny_models.sequence_boundary(tmp_path))
    with pytest.raises(UnbuildableBrick, match="'parts' crosses the brick boundary but is not a tensor"):
        describe_brick(graph, 1, 2)
    assert describe_brick(graph, 1, 3).ops == ("SplitToSequence", "SequenceAt")


def test_kept_values_are_carried_under_canonical_names(tmp_path: Path) -> None:
    graph = load_model(tiny_models.computed_reshape(tmp_path))
    reshape = describe_brick(graph, 4, 5)
    assert reshape.ops == ("Reshape",)
    assert [name for name, _ in reshape.inputs] == ["input_0", "input_1"]
    assert reshape.values["input_1"].tolist() == [2, -1]


def test_a_quantized_weight_inside_a_branch_is_blanked_its_shape_kept(tmp_path: Path) -> None:
    weight = np.arange(512).astype(np.int8).reshape(2, 256)
    then_branch = helper.make_graph(
        [
            helper.make_node("Cast", ["Wq"], ["Wf"], to=onnx.TensorProto.FLOAT),
            helper.make_node("Reshape", ["Wf", "row"], ["Wr"]),
            helper.make_node("Add", ["x", "Wr"], ["added"]),
        ],
        "then",
        [],
        [tiny_models.tensor("added", [1, 512])],
        [tiny_models.array("Wq", weight), tiny_models.array("row", np.array([1, 512], np.int64))],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["same"])], "else", [], [tiny_models.tensor("same", [1, 512])]
    )
    model = tiny_models.finish(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        [tiny_models.tensor("x", [1, 512]), tiny_models.tensor("c", [], tiny_models.BOOL)],
        [tiny_models.tensor("y", [1, 512])],
    )
    brick = describe_brick(load_model(tiny_models.save(model, tmp_path, "quantized_branch.onnx")), 0, 1)
    held = {
        tensor.data_type: numpy_helper.to_array(tensor)
        for tensor in subgraph(brick.nodes[0], "then_branch").initializer
    }
    assert held[onnx.TensorProto.INT8].shape == weight.shape
    assert len(np.unique(held[onnx.TensorProto.INT8])) == 1, "the branch's int8 weight is blanked"
    assert held[onnx.TensorProto.INT64].tolist() == [1, 512], "its shape steers, and is kept"


# -- subgraphs: outer-scope names ----------------------------------------------------------------


def _graph_and_bricks(path: Path, granularity: int) -> tuple[ModelGraph, list[BrickSpec]]:
    graph = load_model(path)
    return graph, bricks_of(path, granularity)


def test_loop_body_reads_the_renamed_outer_value(tmp_path: Path) -> None:
    _, bricks = _graph_and_bricks(tiny_models.loop_outer_scope(tmp_path), 1)
    loop = bricks[1]
    assert loop.ops == ("Loop",)
    # trips and the condition are weights; x (the initial value) and r (read in the body) are inputs.
    assert [name for name, _ in loop.inputs] == ["input_0", "input_1"]
    assert [name for name, _ in loop.weights] == ["weight_0", "weight_1"]
    # The trip count and the condition steer the work: real values, 0-d as in the model.
    assert loop.values["weight_0"].shape == () and int(loop.values["weight_0"]) == 3
    assert bool(loop.values["weight_1"]) is True
    body = subgraph(loop.nodes[0], "body")
    add = next(node for node in body.node if node.op_type == "Add")
    assert list(add.input) == [body.input[2].name, "input_1"]
    assert body.input[2].name.startswith("body0_")


def test_loop_body_reads_a_value_computed_inside_the_brick(tmp_path: Path) -> None:
    _, bricks = _graph_and_bricks(tiny_models.loop_outer_scope(tmp_path), 2)
    relu_loop = bricks[0]
    assert relu_loop.ops == ("Relu", "Loop")
    body = subgraph(relu_loop.nodes[1], "body")
    add = next(node for node in body.node if node.op_type == "Add")
    assert list(add.input) == [body.input[2].name, "value_0"]


def test_if_branches_read_the_renamed_outer_values(tmp_path: Path) -> None:
    _, bricks = _graph_and_bricks(tiny_models.if_outer_scope(tmp_path), 1)
    branch = bricks[2]
    assert branch.ops == ("If",)
    assert [name for name, _ in branch.inputs] == ["input_0", "input_1", "input_2"]
    assert list(subgraph(branch.nodes[0], "then_branch").node[0].input) == ["input_1", "input_2"]
    assert list(subgraph(branch.nodes[0], "else_branch").node[0].input) == ["input_1", "input_2"]


@pytest.mark.parametrize("builder", [tiny_models.loop_outer_scope, tiny_models.if_outer_scope])
@pytest.mark.parametrize("granularity", [1, 2, 3])
def test_subgraph_bricks_run(tmp_path: Path, builder: Callable[[Path], Path], granularity: int) -> None:
    bricks = bricks_of(builder(tmp_path), granularity)
    assert any({"If", "Loop"} & set(brick.ops) for brick in bricks), "the subgraph node is in a brick"
    for brick in bricks:
        runner = BrickRunner(brick, ONE_THREAD)
        runner.check()
        runner()
        assert len(runner.outputs()) == len(brick.outputs), f"{brick.ops} returns its outputs"


def test_renaming_leaves_the_source_model_untouched(tmp_path: Path) -> None:
    graph = load_model(tiny_models.loop_outer_scope(tmp_path))
    before = graph.layers[1].SerializeToString()
    describe_brick(graph, 1, 2)
    assert graph.layers[1].SerializeToString() == before


def test_subgraph_local_names_do_not_change_the_signature(tmp_path: Path) -> None:
    first = signatures(tiny_models.loop_outer_scope(tmp_path, inner="acc"), 1)
    second = signatures(tiny_models.loop_outer_scope(tmp_path, inner="other"), 1)
    assert first == second


def test_weights_inside_a_subgraph_do_not_change_the_signature(tmp_path: Path) -> None:
    first = signatures(tiny_models.loop_outer_scope(tmp_path, body_seed=1), 1)
    second = signatures(tiny_models.loop_outer_scope(tmp_path, body_seed=2), 1)
    assert first == second


def test_renaming_never_captures_a_body_local_name(tmp_path: Path) -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Add", ["value_0", "r"], ["o"])],
        "body",
        [
            tiny_models.tensor("i", [], tiny_models.INT64),
            tiny_models.tensor("c", [], tiny_models.BOOL),
            tiny_models.tensor("value_0", [4, 8]),
        ],
        [tiny_models.tensor("c2", [], tiny_models.BOOL), tiny_models.tensor("o", [4, 8])],
    )
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Loop", ["n", "go", "x"], ["y"], body=body)]
    initializers = [tiny_models.array("n", np.array(2, np.int64)), tiny_models.array("go", np.array(True))]
    model = tiny_models.finish(
        nodes, [tiny_models.tensor("x", [4, 8])], [tiny_models.tensor("y", [4, 8])], initializers
    )
    (brick,) = bricks_of(tiny_models.save(model, tmp_path, "capture.onnx"), 2)
    add = subgraph(brick.nodes[1], "body").node[1]
    assert len(set(add.input)) == 2, f"the body's Add reads {list(add.input)}"


def test_a_brick_whose_tensors_together_exceed_the_memory_limit_is_not_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three layers of 64 KiB weights on 64 KiB values: the limit holds for a brick's tensors together."""
    size = 1 << 14
    nodes = [helper.make_node("Add", [f"v{i}", f"w{i}"], [f"v{i + 1}"]) for i in range(3)]
    weights = [tiny_models.array(f"w{i}", np.full(size, i, np.float32)) for i in range(3)]
    model = tiny_models.finish(nodes, [tiny_models.tensor("v0", [size])], [tiny_models.tensor("v3", [size])], weights)
    path = tiny_models.save(model, tmp_path, "adds.onnx")
    monkeypatch.setattr(bricks, "memory_limit", lambda: 200 << 10)
    plan = plan_of(path, 3)
    assert [brick.ops for brick in plan.bricks if isinstance(brick, BrickSpec)] == [("Add",)] * 3
    monkeypatch.setattr(bricks, "memory_limit", lambda: 128 << 10)
    reasons = {brick.reason for brick in plan_of(path, 3).bricks if isinstance(brick, BrokenBrick)}
    assert reasons == {
        "its inputs, weights and outputs together would need 192.0 KiB, more than the 128.0 KiB memory limit;"
        " refused before allocating them"
    }
