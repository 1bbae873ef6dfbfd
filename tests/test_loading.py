"""Unit tests of loading: layers and weights apart, order, dimensions, value specs, kept values, errors."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hostile_models
import numpy as np
import onnx
import pytest
import tiny_models
from onnx import helper

from conftest import light_models, runtime_ops
from pytest_dlbricks.core.errors import ModelError, RuntimeRefusal
from pytest_dlbricks.core.graph import ModelGraph, TensorSpec, nested_tensors, node_inputs, subgraph_outer_names
from pytest_dlbricks.core.runtime import load_refusal
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut import loading
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model, whole_model
from pytest_dlbricks.cut.numerics import convert
from pytest_dlbricks.cut.samples import SampleInputs
from pytest_dlbricks.timing.running import BrickRunner

FLOAT, INT64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64

#: Every tiny model that loads, for the checks that hold for all of them.
LOADABLE = tiny_models.BUILDERS


def ops(graph: ModelGraph) -> list[str]:
    return [layer.op_type for layer in graph.layers]


def test_weights_are_not_layers(tmp_path: Path) -> None:
    graph = load_model(tiny_models.chain(tmp_path))
    assert ops(graph) == ["Conv", "Relu"] * 3
    assert graph.weights == {"w0", "w1", "w2"}
    assert graph.inputs == ["x"]
    assert graph.outputs == ["relu2"]
    assert graph.specs["w1"] == TensorSpec(FLOAT, (8, 8, 3, 3))


def test_weights_computed_by_constant_of_shape_are_folded(tmp_path: Path) -> None:
    """IR 3 / opset 9, as in onnx's light models: the weight comes out of ConstantOfShape."""
    graph = load_model(tiny_models.old_ir_constant_of_shape(tmp_path))
    assert ops(graph) == ["Conv", "Relu"]
    assert "w" in graph.weights
    assert graph.specs["w"] == TensorSpec(FLOAT, (8, 3, 3, 3))
    # An initializer listed among the graph inputs (required before IR 4) is a weight, not an input.
    assert graph.inputs == ["x"]
    assert graph.ir_version == 3
    assert graph.opset_imports == {"": 9}
    # 216 floats: too many to keep, so bricks get synthetic values.
    assert "w" not in graph.kept_values


def test_weights_listed_as_inputs_are_weights_onnxruntime_may_not_fold(tmp_path: Path) -> None:
    """From IR 4 on, a weight also listed as a graph input is one a caller may override: still a weight (no
    input to feed), but marked; before IR 4 every initializer is listed, and constant."""
    listed = load_model(tiny_models.weights_as_inputs(tmp_path))
    assert ops(listed) == ["Conv", "Relu"] * 3
    assert listed.inputs == ["x"]
    assert listed.weights_as_inputs == {"w0", "w0_b", "w1", "w1_b", "w2", "w2_b"} <= listed.weights
    assert not load_model(tiny_models.weights_as_inputs(tmp_path, ir_version=3)).weights_as_inputs
    assert not load_model(tiny_models.weights_as_inputs(tmp_path, listed=False)).weights_as_inputs


@pytest.mark.parametrize(
    "variant", [{}, {"listed": False}, {"ir_version": 3}], ids=["listed", "plain", "listed_before_ir4"]
)
def test_the_graph_cut_is_the_one_onnxruntime_runs_for_the_file(tmp_path: Path, variant: dict[str, Any]) -> None:
    """Weights listed as inputs change what onnxruntime makes of a model (no folding, no pre-packed or
    NCHWc convolutions): the graph the bricks are cut from is made of the file as the user's session reads it."""
    path = tiny_models.weights_as_inputs(tmp_path, **variant)
    graph = load_model(path, optimize=Settings(granularity=1, intra_op_threads=1))
    assert ops(graph) == runtime_ops(path, tmp_path)


def test_a_node_reading_a_weight_listed_as_input_is_a_layer(tmp_path: Path) -> None:
    """onnxruntime cannot fold what a caller may override: it runs such a node on every call, a brick too."""
    nodes = [helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("MatMul", ["x", "wt"], ["y"])]
    weight = tiny_models.array("w", np.ones((32, 16), np.float32))
    inputs = [tiny_models.tensor("x", [4, 16])]
    output = [tiny_models.tensor("y", [4, 32])]
    plain = load_model(tiny_models.save(tiny_models.finish(nodes, inputs, output, [weight]), tmp_path, "plain.onnx"))
    listed_model = tiny_models.finish(nodes, [*inputs, tiny_models.tensor("w", [32, 16])], output, [weight])
    listed = load_model(tiny_models.save(listed_model, tmp_path, "listed.onnx"))
    assert (ops(plain), ops(listed)) == (["MatMul"], ["Transpose", "MatMul"])
    assert "wt" in plain.weights and "wt" not in listed.weights


def test_a_converted_model_has_plain_weights(tmp_path: Path) -> None:
    """A conversion writes a new model, with its weights as initializers only."""
    path = tiny_models.weights_as_inputs(tmp_path)
    graph = load_model(path, convert=lambda model, data_dir: convert(model, "fp16", data_dir))
    assert not graph.weights_as_inputs


def test_a_model_of_constants_only_has_no_layers(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["c"], ["y"])]
    model = tiny_models.finish(
        nodes, [], [tiny_models.tensor("y", [2])], [tiny_models.array("c", np.ones(2, np.float32))]
    )
    path = tiny_models.save(model, tmp_path, "constants.onnx")
    with pytest.raises(ModelError, match="no layers") as caught:
        load_model(path)
    assert caught.value.path == str(path)


@pytest.mark.parametrize("name", sorted(LOADABLE))
def test_layers_come_in_topological_order(tmp_path: Path, name: str) -> None:
    graph = load_model(LOADABLE[name](tmp_path))
    available = set(graph.inputs) | set(graph.weights)
    assert graph.layers
    for layer, reads in zip(graph.layers, graph.layer_reads):
        assert set(reads) <= available, f"{layer.op_type} reads {set(reads) - available} before they exist"
        available.update(layer.output)


def test_a_branch_stays_together_in_the_order(tmp_path: Path) -> None:
    """Tanh then Neg, one branch, are never split by the other branch's Sigmoid."""
    order = ops(load_model(tiny_models.diamond(tmp_path)))
    assert order[0] == "Relu" and order[-1] == "Add"
    assert order.index("Neg") == order.index("Tanh") + 1


def test_the_order_does_not_depend_on_the_files_order(tmp_path: Path) -> None:
    """Files listing the same graph's nodes differently (as onnxruntime's optimizer does) cut alike."""
    model = onnx.load(str(tiny_models.diamond(tmp_path)))
    orders: list[tuple[list[str], list[str]]] = []
    for permutation in ([0, 1, 2, 3, 4], [0, 2, 3, 1, 4], [0, 3, 2, 1, 4]):
        shuffled = onnx.ModelProto()
        shuffled.CopyFrom(model)
        shuffled.graph.ClearField("node")
        shuffled.graph.node.extend(model.graph.node[i] for i in permutation)
        path = tmp_path / f"order{len(orders)}.onnx"
        onnx.save(shuffled, str(path))
        graph = load_model(path)
        orders.append((ops(graph), list(plan_model(graph, 2, path.name).signatures)))
    assert orders[0] == orders[1] == orders[2]


def test_an_unsorted_but_acyclic_model_loads(tmp_path: Path) -> None:
    nodes = [helper.make_node("Sigmoid", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])]
    model = tiny_models.finish(nodes, [tiny_models.tensor("x", [1, 4])], [tiny_models.tensor("y", [1, 4])])
    graph = load_model(tiny_models.save(model, tmp_path, "unsorted.onnx"))
    assert ops(graph) == ["Relu", "Sigmoid"]


def test_symbolic_dimensions_not_given_are_guessed_and_recorded(tmp_path: Path) -> None:
    graph = load_model(tiny_models.symbolic_batch(tmp_path))
    assert graph.guessed_dims == {"batch": 1}
    assert graph.specs["x"].shape == (1, 4)
    assert graph.specs["y"].shape == (1, 32)


def test_symbolic_dimensions_given_are_applied(tmp_path: Path) -> None:
    graph = load_model(tiny_models.symbolic_batch(tmp_path), {"batch": 8, "unused": 3})
    assert graph.guessed_dims == {}
    assert graph.specs["x"].shape == (8, 4)
    assert graph.specs["h"].shape == (8, 32)
    assert graph.specs["y"].shape == (8, 32)


def test_an_unnamed_unknown_dimension_is_named_after_its_input_and_axis(tmp_path: Path) -> None:
    model = tiny_models.finish(
        [helper.make_node("Relu", ["x"], ["y"])],
        [tiny_models.tensor("x", [None, 3])],
        [tiny_models.tensor("y", [None, 3])],
    )
    graph = load_model(tiny_models.save(model, tmp_path, "unnamed.onnx"))
    assert graph.guessed_dims == {"x[0]": 1}
    assert graph.specs["y"].shape == (1, 3)


@pytest.mark.parametrize("name", sorted(LOADABLE))
def test_every_value_a_layer_reads_or_hands_on_has_a_spec(tmp_path: Path, name: str) -> None:
    graph = load_model(LOADABLE[name](tmp_path))
    read = {value for reads in graph.layer_reads for value in reads} | set(graph.outputs)
    assert graph.layer_reads
    for reads in graph.layer_reads:
        assert all(value in graph.specs for value in reads)
    for layer in graph.layers:
        assert all(value in graph.specs for value in layer.output if value in read)


def test_int_values_that_steer_computation_keep_their_real_values(tmp_path: Path) -> None:
    graph = load_model(tiny_models.computed_reshape(tmp_path))
    assert ops(graph) == ["Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Relu"]
    target = graph.kept_values["target"]
    assert target.dtype == np.int64
    assert target.tolist() == [2, -1]
    assert graph.kept_values["shape"].tolist() == [2, 3, 4]
    assert graph.specs["target"] == TensorSpec(INT64, (2,))
    assert graph.specs["flat"] == TensorSpec(FLOAT, (2, 12))
    # Model inputs and big float activations are synthesised, never kept.
    assert "x" not in graph.kept_values
    assert "flat" not in graph.kept_values


def test_quantized_weights_activations_sums_and_biases_are_synthesized_zero_points_kept(tmp_path: Path) -> None:
    graph = load_model(tiny_models.quantized_matmul(tmp_path))
    assert ops(graph) == ["DynamicQuantizeLinear", "MatMulInteger", "Add", "Cast", "Mul"]
    assert graph.specs["w"] == TensorSpec(onnx.TensorProto.INT8, (64, 32))
    assert graph.specs["biased"] == TensorSpec(onnx.TensorProto.INT32, (4, 32))
    assert "w" not in graph.kept_values, "a quantized weight is a weight"
    assert "xq" not in graph.kept_values, "a quantized activation is data"
    assert "product" not in graph.kept_values, "the sums of quantized products are data"
    assert "biased" not in graph.kept_values, "and so are they with their bias"
    assert graph.kept_values["w_zero"].tolist() == [0] * 32, "per-column zero points may steer a kernel"
    assert "bias" not in graph.kept_values, "a bias added to them is data too"


def test_a_quantized_convolutions_kernel_and_bias_are_synthesized(tmp_path: Path) -> None:
    graph = load_model(tiny_models.quantized_conv(tmp_path))
    assert ops(graph) == ["QLinearConv"]
    assert "w" not in graph.kept_values and "bias" not in graph.kept_values
    assert graph.kept_values["w_zero"].tolist() == [0] * 8


@pytest.mark.parametrize(
    ("dtype", "shape", "steers"),
    [
        (onnx.TensorProto.INT8, (64, 32), False),
        (onnx.TensorProto.UINT8, (1, 3, 8, 8), False),
        (onnx.TensorProto.INT8, (32,), True),
        (onnx.TensorProto.UINT8, (), True),
        (onnx.TensorProto.INT64, (64, 32), True),
        (onnx.TensorProto.INT32, (4, 16), True),
        (onnx.TensorProto.BOOL, (4, 16), True),
    ],
)
def test_only_quantized_tensors_of_two_or_more_dimensions_are_data_among_integers(
    dtype: int, shape: tuple[int, ...], steers: bool
) -> None:
    assert TensorSpec(dtype, shape).steers(constant=True) is steers


def test_a_0d_value_is_kept_0d(tmp_path: Path) -> None:
    graph = load_model(tiny_models.scalar_range(tmp_path))
    assert graph.kept_values["n"].shape == ()
    assert int(graph.kept_values["n"]) == 5
    assert graph.kept_values["index"].shape == ()
    assert graph.specs["n"] == TensorSpec(INT64, ())
    assert graph.specs["positions"] == TensorSpec(INT64, (5,))


def test_a_size_shape_inference_cannot_tell_is_learned_and_kept(tmp_path: Path) -> None:
    """onnx's shape inference knows no shape for the com.microsoft Gelu's output: the size Shape and Gather
    take from it comes from the reference run alone, and must keep its value there (a Range brick of a
    transformer cut as its file declares its sizes ran on a size of zero)."""
    path = tiny_models.symbolic_positions(tmp_path)
    graph = load_model(path, {"n": 5})
    assert int(graph.kept_values["n"]) == 5
    settings = Settings(granularity=2, cut="original")
    for brick in plan_model(graph, 2, path.name).bricks:
        assert isinstance(brick, BrickSpec)
        BrickRunner(brick, settings).check()  # the outputs' shapes are those inside the model


def test_outer_scope_names_read_in_a_loop_body_count_as_reads_of_the_loop(tmp_path: Path) -> None:
    graph = load_model(tiny_models.loop_outer_scope(tmp_path))
    loop = graph.layers[1]
    assert loop.op_type == "Loop"
    assert subgraph_outer_names(loop) == ["r"]
    assert node_inputs(loop) == ["trips", "keep_going", "x", "r"]
    assert graph.readers["r"] == [1]
    assert graph.kept_values["trips"].shape == ()


def test_outer_scope_names_of_both_if_branches_are_collected(tmp_path: Path) -> None:
    graph = load_model(tiny_models.if_outer_scope(tmp_path))
    assert graph.layer_reads[2] == ["flag", "a", "b"]
    assert graph.inputs == ["x", "flag"]


def test_external_float_weights_are_never_read(tmp_path: Path) -> None:
    """Float weights only need their spec: the weight file is checked, not loaded."""
    path = tiny_models.external_weights(tmp_path)
    graph = load_model(path)
    assert graph.specs["w1"] == TensorSpec(FLOAT, (8, 8, 3, 3))
    assert graph.kept_values == {}


def test_external_data_escaping_the_model_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    path = tiny_models.external_weights(folder)
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../secret.bin"
    (tmp_path / "secret.bin").write_bytes((folder / "weights.bin").read_bytes())
    onnx.save(model, str(path))
    with pytest.raises(ModelError, match=r"outside the model's folder; refused, the file was not read"):
        load_model(path)


def test_truncated_external_data_is_a_model_error(tmp_path: Path) -> None:
    path = tiny_models.external_weights(tmp_path)
    data = tmp_path / "weights.bin"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ModelError, match=r"external data file 'weights.bin' holds 100 bytes"):
        load_model(path)


def test_external_data_file_missing_is_a_model_error(tmp_path: Path) -> None:
    path = tiny_models.external_weights(tmp_path)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ModelError) as caught:
        load_model(path)
    assert str(path) in str(caught.value)


def test_external_data_loads_from_any_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tiny_models.external_weights(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    graph = load_model(path)
    assert ops(graph) == ["Conv", "Relu", "Conv", "Relu"]
    assert graph.specs["w0"] == TensorSpec(FLOAT, (8, 8, 3, 3))


# -- errors: every one a ModelError that names the file ------------------------------------------


def _cycle() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
    return tiny_models.finish(nodes, [tiny_models.tensor("x", [2])], [tiny_models.tensor("b", [2])])


def _dangling() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "nowhere"], ["y"])]
    return tiny_models.finish(nodes, [tiny_models.tensor("x", [2])], [tiny_models.tensor("y", [2])])


BROKEN_FILES: dict[str, Callable[[], bytes]] = {
    "empty": lambda: b"",
    "random_bytes": lambda: np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
    "tensor_not_model": lambda: tiny_models.array("t", np.arange(12, dtype=np.int64)).SerializeToString(),
    "graph_not_model": lambda: _dangling().graph.SerializeToString(),
    "cycle": lambda: _cycle().SerializeToString(),
    "reads_nothing_produced": lambda: _dangling().SerializeToString(),
}


@pytest.mark.parametrize("kind", sorted(BROKEN_FILES))
def test_broken_files_raise_model_error_naming_the_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(BROKEN_FILES[kind]())
    with pytest.raises(ModelError) as caught:
        load_model(path)
    assert caught.value.path == str(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert caught.value.cause.strip()


def test_empty_file_says_so(tmp_path: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ModelError, match="empty"):
        load_model(path)


def test_a_protobuf_that_is_not_a_model_says_so(tmp_path: Path) -> None:
    path = tmp_path / "tensor.onnx"
    path.write_bytes(BROKEN_FILES["tensor_not_model"]())
    with pytest.raises(ModelError, match="not an ONNX model"):
        load_model(path)


def test_a_missing_file_raises_model_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.onnx"
    with pytest.raises(ModelError, match="cannot read the file") as caught:
        load_model(path)
    assert caught.value.path == str(path)


# -- the onnx wheel's light models ---------------------------------------------------------------


def test_light_models_of_the_onnx_wheel_load_and_cut() -> None:
    """The published anchor: 9 models, 1,719 layers, 780 distinct bricks at G=1 (loads and cuts only)."""
    paths = light_models()
    layers = 0
    constant_nodes = 0
    signatures: set[str] = set()
    plans = {}
    for path in paths:
        graph = load_model(path)
        plan = plan_model(graph, 1, path.name)
        assert plan.broken == [], path.name
        assert all(isinstance(brick, BrickSpec) for brick in plan.bricks)
        assert len(plan.bricks) == len(graph.layers)
        layers += len(graph.layers)
        constant_nodes += len(onnx.load(str(path), load_external_data=False).graph.node) - len(graph.layers)
        signatures.update(plan.signatures)
        plans[path.stem] = plan
    assert layers == 1719
    assert constant_nodes == 2306
    assert len(signatures) == 780
    resnet = plans["light_resnet50"]
    assert len(resnet.signatures) < len(resnet.bricks)
    # ResNet-50's bottleneck blocks repeat: some brick occurs many times.
    assert max(resnet.signatures.values()) >= 10


# -- onnxruntime is the authority: onnx's tools help, never gate ---------------------------------


def test_onnxruntimes_own_graph_is_not_put_to_onnxs_checker(tmp_path: Path) -> None:
    """onnxruntime writes its SimplifiedLayerNormalization fusion in the default domain, unknown to the checker."""
    graph = load_model(tiny_models.rms_norm(tmp_path), optimize=Settings(granularity=2))
    if "SimplifiedLayerNormalization" not in ops(graph):
        pytest.skip(f"onnxruntime no longer fuses RMS normalisation: {ops(graph)}")
    plan = plan_model(graph, 2, "rms_norm")
    assert plan.broken == []


def test_a_model_the_checker_rejects_loads_when_onnxruntime_loads_it(tmp_path: Path) -> None:
    """An exporter that put onnxruntime's fused operator in the default domain, as onnxruntime itself does."""
    optimized = tmp_path / "optimized"
    optimized.mkdir()
    source = load_model(tiny_models.rms_norm(tmp_path), optimize=Settings(granularity=2))
    if "SimplifiedLayerNormalization" not in ops(source):
        pytest.skip("onnxruntime no longer fuses RMS normalisation")
    fused = next(layer for layer in source.layers if layer.op_type == "SimplifiedLayerNormalization")
    node = helper.make_node(
        fused.op_type, ["x", "gamma"], ["y"], **{a.name: helper.get_attribute_value(a) for a in fused.attribute}
    )
    gamma = tiny_models.array("gamma", np.ones(64, np.float32))
    model = tiny_models.finish(
        [node], [tiny_models.tensor("x", [1, 8, 64])], [tiny_models.tensor("y", [1, 8, 64])], [gamma]
    )
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)
    graph = load_model(tiny_models.save(model, optimized, "exported_fused.onnx"))
    assert ops(graph) == ["SimplifiedLayerNormalization"]


def test_a_model_both_refuse_is_reported_in_onnxruntimes_words(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Secret", ["a"], ["y"])]
    model = tiny_models.finish(nodes, [tiny_models.tensor("x", [2, 4])], [tiny_models.tensor("y", [2, 4])])
    with pytest.raises(ModelError, match=r": onnxruntime cannot load the model: .*Secret"):
        load_model(tiny_models.save(model, tmp_path, "secret.onnx"))


def test_weights_inside_a_branch_are_read_into_the_layer(tmp_path: Path) -> None:
    """onnxruntime saves the If branch's weight to its optimized model's external data, in a folder that is
    gone once loaded: the layer must hold it."""
    graph = load_model(tiny_models.if_branch_weight(tmp_path), optimize=Settings(granularity=2))
    (layer,) = graph.layers
    stored = list(nested_tensors(onnx.GraphProto(node=[layer])))
    assert stored and not any(onnx.external_data_helper.uses_external_data(tensor) for tensor in stored)


def _branch_weight_outside(tmp_path: Path, location: str) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    path = tiny_models.if_branch_weight(folder)
    model = onnx.load(str(path))
    onnx.save_model(model, str(path), save_as_external_data=True, location="branch.bin", size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    for tensor in nested_tensors(model.graph):
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    (tmp_path / "secret.bin").write_bytes((folder / "branch.bin").read_bytes())
    onnx.save(model, str(path))
    return path


def test_external_data_of_a_branch_weight_escaping_the_model_folder_is_refused(tmp_path: Path) -> None:
    path = _branch_weight_outside(tmp_path, "../secret.bin")
    with pytest.raises(ModelError, match=r"weight 'W' points to external data '../secret.bin' outside the model"):
        load_model(path)


def test_external_data_of_a_branch_weight_in_the_model_folder_loads(tmp_path: Path) -> None:
    graph = load_model(_branch_weight_outside(tmp_path, "branch.bin"))
    assert ops(graph) == ["If"]


def test_a_non_tensor_model_output_is_returned_by_its_brick(tmp_path: Path) -> None:
    graph = load_model(tiny_models.zipmap_classifier(tmp_path), optimize=Settings(granularity=2))
    plan = plan_model(graph, 2, "zipmap")
    assert plan.broken == []
    (brick,) = plan.bricks
    assert isinstance(brick, BrickSpec)
    assert [name for name, _ in brick.non_tensor_outputs] and brick.output_count == 2


def test_onnxruntime_refusing_dimensions_left_at_1_names_them(tmp_path: Path) -> None:
    path = tiny_models.image_conv(tmp_path)
    with pytest.raises(ModelError, match=r"height, width left at 1: give them with --dlbricks-dim\)$"):
        load_model(path)
    assert ops(load_model(path, {"height": 8, "width": 8})) == ["Conv", "Relu"]


def refused_at_batch(path: Path, batch: int) -> bool:
    """Whether the installed onnxruntime refuses the model at ``path`` with its batch axis sized ``batch``."""
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
    return load_refusal(model, path.parent) is not None


@pytest.mark.parametrize("cut", ["original", "optimized"])
def test_a_model_onnxruntime_refuses_sized_is_given_its_sizes_by_its_inputs_only(tmp_path: Path, cut: str) -> None:
    """silero-vad's failure: a branch not taken squeezes the batch axis, valid at 1 only. onnxruntime runs the
    file at a batch of 2, but refuses it once the size is written into it, and so would it the bricks."""
    path = tiny_models.batch_squeeze_switch(tmp_path)
    if not refused_at_batch(path, 2):
        pytest.skip("this onnxruntime does not infer shapes in the branch not taken")
    settings = Settings(granularity=1, cut=cut, dims={"batch": 2})
    graph = load_model(path, settings.dims, optimize=settings if cut == "optimized" else None)
    assert graph.unsized
    assert graph.specs["x"].shape == graph.specs["r"].shape == (2, 8) and graph.specs["z"].shape == (8,)
    bricks = plan_model(graph, 1, "switch").bricks
    assert "If" in [op for brick in bricks if isinstance(brick, BrickSpec) for op in brick.ops]
    for brick in bricks:
        assert isinstance(brick, BrickSpec) and brick.unsized
        BrickRunner(brick, settings, optimized=cut == "optimized").check()
    assert not refused_at_batch(path, 1) and not load_model(path, {"batch": 1}).unsized, "sized where it loads"


def test_what_a_file_computes_from_its_symbolic_sizes_is_cut_as_onnxruntime_runs_it(tmp_path: Path) -> None:
    """At a concrete size onnxruntime folds Shape, Gather, Range and Cast into a constant; the file, whose
    size is symbolic, computes them on every call (T5's position buckets): they are layers of its cut, its
    bricks declare no sizes as the file does not, and each runs as it does inside the model."""
    path = tiny_models.symbolic_positions(tmp_path)
    settings = Settings(granularity=2, dims={"n": 5})
    graph = load_model(path, settings.dims, optimize=settings)
    assert graph.unsized
    assert {"Shape", "Range"} <= {layer.op_type for layer in graph.layers}
    sized_model = onnx.load(str(path))
    sized_model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 5
    sized_model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 5
    onnx.save(sized_model, str(tmp_path / "sized.onnx"))
    sized = load_model(tmp_path / "sized.onnx", optimize=settings)
    assert not sized.unsized and len(sized.layers) < len(graph.layers), "folded where the size is written in"
    bricks = plan_model(graph, 2, path.name).bricks
    for brick in bricks:
        assert isinstance(brick, BrickSpec) and brick.unsized
        BrickRunner(brick, settings, optimized=True).check()


def test_a_converted_model_is_measured_with_its_inputs_as_the_file_declares_them(tmp_path: Path) -> None:
    """Its cut keeps what it computes from its sizes (as above): the run it is validated against must too."""
    path = tiny_models.symbolic_positions(tmp_path)
    settings = Settings(granularity=2, dims={"n": 5})

    def fp16(model: onnx.ModelProto, data_dir: Path) -> onnx.ModelProto:
        return convert(model, "fp16", data_dir)

    assert load_model(path, settings.dims, optimize=settings, convert=fp16).unsized
    model, feeds = whole_model(path, settings.dims, fp16)
    assert isinstance(model, onnx.ModelProto)
    (declared,) = model.graph.input[0].type.tensor_type.shape.dim
    assert declared.dim_param == "n" and feeds["x"].shape == (5,)


def test_a_file_whose_symbolic_sizes_onnxruntime_computes_nothing_from_is_cut_at_its_sizes(tmp_path: Path) -> None:
    settings = Settings(granularity=2, dims={"batch": 3})
    graph = load_model(tiny_models.symbolic_batch(tmp_path), settings.dims, optimize=settings)
    assert not graph.unsized and graph.specs[graph.inputs[0]].shape == (3, 4)


# -- the sizes of symbolic dimensions ------------------------------------------------------------


def _image_model(tmp_path: Path, names: tuple[str, str], **metadata: str) -> Path:
    model = onnx.load(str(tiny_models.image_conv(tmp_path)))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = names
    helper.set_model_props(model, metadata)
    return tiny_models.save(model, tmp_path, "image.onnx")


def test_an_axis_is_sized_apart_from_the_others_of_its_name(tmp_path: Path) -> None:
    """Exporters name unknown dimensions '?', H and W alike: such axes answer to ``x[2]`` and ``x[3]``."""
    path = _image_model(tmp_path, ("?", "?"))
    graph = load_model(path, {"x[2]": 6, "x[3]": 9})
    assert graph.specs["x"].shape == (1, 3, 6, 9)
    assert graph.guessed_dims == {}
    assert set(graph.dim_names) == {"x[2]", "x[3]"}


def test_an_axis_size_wins_over_its_names(tmp_path: Path) -> None:
    graph = load_model(_image_model(tmp_path, ("side", "side")), {"side": 8, "x[3]": 12})
    assert graph.specs["x"].shape == (1, 3, 8, 12)
    assert set(graph.dim_names) == {"side", "x[2]", "x[3]"}


def test_sizes_the_models_metadata_states_are_used(tmp_path: Path) -> None:
    """Ultralytics writes ``imgsz = [H, W]``; an entry named after a dimension states its size."""
    graph = load_model(_image_model(tmp_path, ("height", "width"), imgsz="[10, 12]", batch="1"))
    assert graph.specs["x"].shape == (1, 3, 10, 12) and graph.guessed_dims == {}
    graph = load_model(_image_model(tmp_path, ("height", "width"), height="7", width="9", imgsz="[10, 12]"))
    assert graph.specs["x"].shape == (1, 3, 7, 9)
    graph = load_model(_image_model(tmp_path, ("height", "width"), imgsz="[10, 12]"), {"width": 5})
    assert graph.specs["x"].shape == (1, 3, 10, 5), "the user's sizes win"


def test_metadata_that_states_no_size_is_ignored(tmp_path: Path) -> None:
    path = _image_model(tmp_path, ("height", "width"), height="x" * 5000, width="9" * 5000, imgsz="big")
    with pytest.raises(ModelError, match=r"height, width left at 1"):
        load_model(path)


def test_sample_sizes_win_for_the_axes_they_give_and_given_sizes_fill_the_rest(tmp_path: Path) -> None:
    """``x`` comes from the sample; ``y`` shares its ``batch``, and takes the given sizes for the rest."""
    tensor = tiny_models.tensor
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["y"], ["b"])]
    inputs = [tensor("x", ["batch", "n"]), tensor("y", ["batch", "m", "?"])]
    model = tiny_models.finish(nodes, inputs, [tensor("a", ["batch", "n"]), tensor("b", ["batch", "m", "?"])])
    path = tiny_models.save(model, tmp_path, "two_inputs.onnx")
    sample = SampleInputs("s", {"x": np.ones((2, 3), np.float32)}, {"x": "s"})
    graph = load_model(path, {"batch": 7, "n": 9, "m": 5, "y[2]": 4}, sample=sample)
    assert (graph.specs["x"].shape, graph.specs["y"].shape, graph.guessed_dims) == ((2, 3), (2, 5, 4), {})
    graph = load_model(path, {"y[0]": 6}, sample=sample)
    assert (graph.specs["x"].shape, graph.specs["y"].shape) == ((2, 3), (6, 1, 1)), "an axis size wins"
    assert graph.guessed_dims == {"m": 1, "y[2]": 1}


# -- hostile files and the file system -----------------------------------------------------------


def test_a_file_over_protobufs_limit_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "huge.onnx"
    with path.open("wb") as stream:  # sparse: no disk space, no memory
        stream.truncate((2 << 30) + 1)

    def never(*args: object) -> bytes:
        raise AssertionError("the file was read")

    monkeypatch.setattr(Path, "read_bytes", never)
    with pytest.raises(
        ModelError, match=r"holds 2\.0 GiB, more than the 2 GiB protobuf can parse; refused, the file was not read"
    ):
        load_model(path)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="no /proc here")
def test_a_link_into_proc_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "environ.onnx"
    path.symlink_to("/proc/self/environ")
    monkeypatch.setattr(Path, "read_bytes", lambda *args: pytest.fail("the file was read"))
    with pytest.raises(ModelError, match=r"links to /proc/.*environ, a file of the system's /proc; refused, not read"):
        load_model(path)


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "pipe.onnx"
    os.mkfifo(path)
    with pytest.raises(ModelError, match="is not a regular file but a FIFO; refused, not read"):
        load_model(path)


def test_a_link_to_a_model_outside_the_folder_is_followed_as_pytest_follows_it(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    target = tiny_models.chain(tmp_path / "elsewhere")
    (tmp_path / "models").mkdir()
    link = tmp_path / "models" / "chain.onnx"
    link.symlink_to(target)
    assert ops(load_model(link)) == ops(load_model(target))


def test_sparse_initializers_are_weights_and_steering_ones_keep_their_values(tmp_path: Path) -> None:
    graph = load_model(tiny_models.sparse_weights(tmp_path))
    assert ops(graph) == ["Add", "Reshape", "Relu"]
    assert {"bias", "shape"} <= graph.weights
    assert graph.specs["bias"] == TensorSpec(FLOAT, (2, 4))
    np.testing.assert_array_equal(graph.kept_values["shape"], [4, 2])


def test_a_cycle_inside_a_subgraph_is_named_as_such(tmp_path: Path) -> None:
    path = tiny_models.save(hostile_models.subgraph_cycle(), tmp_path, "cycle.onnx")
    with pytest.raises(ModelError, match="the then_branch of node 'If' has a cycle, so it cannot be executed"):
        load_model(path)


def test_float_weights_claiming_more_raw_data_than_the_file_holds_are_refused(tmp_path: Path) -> None:
    weight = tiny_models.array("w", np.ones(4, np.float32))
    weight.ClearField("dims")
    weight.dims.extend([1 << 29])  # 2 GiB of float32 claimed, 16 bytes stored
    model = tiny_models.finish(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [tiny_models.tensor("x", [1 << 29])],
        [tiny_models.tensor("y", [1 << 29])],
        [weight],
    )
    path = tiny_models.save(model, tmp_path, "claims.onnx")
    with pytest.raises(
        ModelError, match=r"weight 'w' declares 536870912 values .* but the file stores at most \d\d bytes of them"
    ):
        load_model(path)


def optimized_in(monkeypatch: pytest.MonkeyPatch, memory: Path, *, full: bool = False) -> list[Path]:
    """The folders the optimized graphs are written in, from now on, with ``memory`` as the memory folder
    (``full``: writing there fails, as onnxruntime's refusal)."""
    memory.mkdir(exist_ok=True)
    folders: list[Path] = []
    optimize_model = loading.optimize_model

    def recorded(path: Path, model: onnx.ModelProto, data_dir: Path, folder: Path, settings: Settings) -> Any:
        folders.append(folder)
        if full and folder.parent == memory:
            raise RuntimeRefusal(path, "onnxruntime cannot load the model: no space left on device")
        return optimize_model(path, model, data_dir, folder, settings)

    monkeypatch.setattr(loading, "optimize_model", recorded)
    monkeypatch.setattr(loading, "MEMORY_FOLDER", memory)
    return folders


def test_the_optimized_graph_is_written_in_memory_when_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime writes the optimized graph's weights apart: in a memory-backed folder when it has room
    for them, else in the system's temporary folder; the model loads the same either way."""
    memory = tmp_path / "memory"
    folders = optimized_in(monkeypatch, memory)
    path = tiny_models.chain(tmp_path)
    settings = Settings(granularity=1)
    in_memory = load_model(path, optimize=settings)
    assert folders[-1].parent == memory and not any(memory.iterdir()), "written there, then removed"
    monkeypatch.setattr(loading, "MEMORY_FOLDER", tmp_path / "absent")
    on_disk = load_model(path, optimize=settings)
    assert folders[-1].parent == Path(tempfile.gettempdir())
    assert [node.op_type for node in on_disk.layers] == [node.op_type for node in in_memory.layers]
    assert loading.scratch_folder(1 << 62) is None, "no folder has room for that"


def test_a_memory_folder_that_filled_up_falls_back_to_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = tmp_path / "memory"
    folders = optimized_in(monkeypatch, memory, full=True)
    graph = load_model(tiny_models.chain(tmp_path), optimize=Settings(granularity=1))
    assert graph.layers and [folder.parent for folder in folders] == [memory, Path(tempfile.gettempdir())]
    assert not graph.unsized, "the model is not taken for one onnxruntime refuses sized"
