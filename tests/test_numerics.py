"""Unit tests of numeric types (int8, float16) and of where onnxruntime runs a brick (providers, fallbacks)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tiny_models
from onnx import helper, numpy_helper

from pytest_dlbricks.core.errors import ModelError
from pytest_dlbricks.core.placement import read_profile
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.cut.numerics import convert, float32_work, with_synthetic_weights
from pytest_dlbricks.timing.running import BrickRunner, UnsupportedByProvider

P = onnx.TensorProto
ONE_THREAD = Settings(granularity=1, intra_op_threads=1)


def bricks_in(path: Path, dtype: str, granularity: int = 1) -> list[BrickSpec]:
    graph = load_model(path, {"batch": 2}, None, lambda model, folder: convert(model, dtype, folder))
    return [brick for brick in plan_model(graph, granularity, path.name).bricks if isinstance(brick, BrickSpec)]


def float_weights(model: onnx.ModelProto) -> list[np.ndarray]:
    return [numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == P.FLOAT and len(t.dims)]


def layer_norm(directory: Path, dtype: int = P.FLOAT16) -> Path:
    """LayerNormalization, an operator onnxruntime's CPU provider runs in float16."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1)
    weights = [
        tiny_models.array("scale", np.ones(64, np_dtype)),
        tiny_models.array("bias", np.zeros(64, np_dtype)),
    ]
    shape = [4, 64]
    model = tiny_models.finish(
        [node], [tiny_models.tensor("x", shape, dtype)], [tiny_models.tensor("y", shape, dtype)], weights
    )
    return tiny_models.save(model, directory, "layer_norm.onnx")


# -- conversion ----------------------------------------------------------------------------------


def test_int8_is_onnxruntime_dynamic_quantization_of_synthetic_weights(tmp_path: Path) -> None:
    path = tiny_models.chain(tmp_path, bias=True)
    real = float_weights(onnx.load(str(path)))
    quantized = convert(onnx.load(str(path)), "int8", tmp_path)
    assert {"DynamicQuantizeLinear", "ConvInteger"} <= {node.op_type for node in quantized.graph.node}
    stored = [numpy_helper.to_array(t) for t in quantized.graph.initializer]
    for weight in real:
        assert not any(value.shape == weight.shape and np.allclose(value, weight) for value in stored)


def test_int8_bricks_run(tmp_path: Path) -> None:
    bricks = bricks_in(tiny_models.symbolic_batch(tmp_path), "int8")
    assert "MatMulInteger" in {op for brick in bricks for op in brick.ops}
    for brick in bricks:
        BrickRunner(brick, ONE_THREAD).check()


def test_fp16_converts_inputs_weights_and_outputs(tmp_path: Path) -> None:
    converted = convert(onnx.load(str(tiny_models.symbolic_batch(tmp_path))), "fp16", tmp_path)
    assert converted.graph.input[0].type.tensor_type.elem_type == P.FLOAT16
    assert converted.graph.output[0].type.tensor_type.elem_type == P.FLOAT16
    assert {t.data_type for t in converted.graph.initializer} == {P.FLOAT16}


def test_the_model_as_written_is_left_alone(tmp_path: Path) -> None:
    model = onnx.load(str(tiny_models.chain(tmp_path)))
    assert convert(model, "fp32", tmp_path) is model


def test_synthetic_weights_replace_float_initializers_and_constants_only(tmp_path: Path) -> None:
    model = onnx.load(str(tiny_models.loop_outer_scope(tmp_path, body_seed=1)), load_external_data=False)
    constant = helper.make_node("Constant", [], ["c"], value=tiny_models.array("v", np.full((3, 3), 7.0, np.float32)))
    scalar = helper.make_node("Constant", [], ["eps"], value=tiny_models.array("e", np.array(1e-5, np.float32)))
    model.graph.node.insert(0, constant)
    model.graph.node.insert(0, scalar)
    synthetic = with_synthetic_weights(model, tmp_path)
    initializers = {t.name: numpy_helper.to_array(t) for t in synthetic.graph.initializer}
    assert initializers["trips"] == 3, "integers steer computation and keep their values"
    assert initializers["c"].shape == (3, 3) and (initializers["c"] < 1).all(), "a float Constant becomes a weight"
    assert [node.output[0] for node in synthetic.graph.node if node.op_type == "Constant"] == ["eps"]
    assert len(model.graph.node) == len(synthetic.graph.node) + 1, "the model given is not changed"


def test_external_weights_are_read_in_or_replaced(tmp_path: Path) -> None:
    model = onnx.load(str(tiny_models.external_weights(tmp_path)), load_external_data=False)
    synthetic = with_synthetic_weights(model, tmp_path)
    assert not any(t.data_location == P.EXTERNAL for t in synthetic.graph.initializer)


def test_a_model_the_tools_cannot_convert_is_a_model_error(tmp_path: Path) -> None:
    def refuse(model: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
        raise ValueError("onnxruntime cannot convert the model to int8: no")

    with pytest.raises(ModelError, match=r"chain\.onnx: onnxruntime cannot convert the model to int8: no"):
        load_model(tiny_models.chain(tmp_path), None, None, refuse)


def test_float32_work_in_a_float16_model_is_named(tmp_path: Path) -> None:
    (float32,) = bricks_in(tiny_models.single_layer(tmp_path, "Relu", [2, 8]), "fp32")
    assert float32_work(float32) == "Relu works on float32 activations in the float16 model"
    (float16,) = bricks_in(layer_norm(tmp_path), "fp32")
    assert float32_work(float16) is None
    cast = helper.make_node("Cast", ["x"], ["y"], to=P.FLOAT)
    model = tiny_models.finish([cast], [tiny_models.tensor("x", [4], P.FLOAT16)], [tiny_models.tensor("y", [4])])
    (casting,) = bricks_in(tiny_models.save(model, tmp_path, "cast.onnx"), "fp32")
    assert "float32" in str(float32_work(casting))


# -- where bricks run ----------------------------------------------------------------------------


def test_a_float16_operator_run_in_float32_is_unsupported(tmp_path: Path) -> None:
    op = tiny_models.op_without_kernel(P.FLOAT16)
    (brick,) = bricks_in(tiny_models.single_layer(tmp_path, op, [2, 8]), "fp16")
    runner = BrickRunner(brick, ONE_THREAD)
    with pytest.raises(UnsupportedByProvider, match=f"CPUExecutionProvider has no float16 kernel for {op}"):
        runner.check()


def test_a_float16_operator_the_provider_runs_is_placed(tmp_path: Path) -> None:
    (brick,) = bricks_in(layer_norm(tmp_path), "fp32")
    runner = BrickRunner(brick, ONE_THREAD)
    runner.check()
    assert runner.placement is not None
    assert runner.placement.providers == {"CPUExecutionProvider": 1}
    assert runner.provider == "CPUExecutionProvider"
    runner()
    assert runner.outputs()[0].dtype == np.float16


def test_an_operator_without_a_kernel_is_unsupported(tmp_path: Path) -> None:
    op = tiny_models.op_without_kernel(P.DOUBLE)
    model = onnx.load(str(tiny_models.single_layer(tmp_path, op, [2, 8])))
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.elem_type = P.DOUBLE
    (brick,) = bricks_in(tiny_models.save(model, tmp_path, "double.onnx"), "fp32")
    with pytest.raises(UnsupportedByProvider, match=rf"CPUExecutionProvider cannot run it: .*{op}"):
        BrickRunner(brick, ONE_THREAD)


def test_default_runs_are_not_profiled(tmp_path: Path) -> None:
    (brick, *_) = bricks_in(tiny_models.chain(tmp_path), "fp32")
    runner = BrickRunner(brick, ONE_THREAD)
    runner.check()
    assert runner.placement is None and runner.provider == "CPUExecutionProvider"


@pytest.mark.skipif(
    "AzureExecutionProvider" not in ort.get_available_providers(), reason="needs a second provider in the wheel"
)
def test_the_provider_that_ran_the_brick_is_recorded_not_the_first_asked(tmp_path: Path) -> None:
    """The Azure provider runs only its own operators: onnxruntime places a Conv on the CPU."""
    (brick, *_) = bricks_in(tiny_models.chain(tmp_path), "fp32")
    settings = Settings(granularity=1, providers=("AzureExecutionProvider", "CPUExecutionProvider"))
    runner = BrickRunner(brick, settings)
    runner.check()
    assert runner.session.get_providers()[0] == "AzureExecutionProvider"
    assert runner.provider == "CPUExecutionProvider"


def test_a_profile_is_read_into_executed_nodes(tmp_path: Path) -> None:
    def event(name: str, op: str, provider: str, types: list[str]) -> dict[str, object]:
        args = {"op_name": op, "provider": provider, "input_type_shape": [{kind: [2]} for kind in types]}
        return {"cat": "Node", "name": f"{name}_kernel_time", "args": args}

    events = [
        {"cat": "Session", "name": "model_run"},
        event("InsertedPrecisionFreeCast_x", "Cast", "CPUExecutionProvider", ["float16"]),
        event("Gemm_0", "Gemm", "CPUExecutionProvider", ["float", "float"]),
        event("Relu_1", "Relu", "CUDAExecutionProvider", ["float16"]),
        {"cat": "Node", "name": "Relu_1_fence_before", "args": {}},
    ]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(events))
    placement = read_profile(path)
    assert [node.op for node in placement.nodes] == ["Cast", "Gemm", "Relu"]
    assert placement.providers == {"CPUExecutionProvider": 2, "CUDAExecutionProvider": 1}
    assert placement.provider == "CPUExecutionProvider+CUDAExecutionProvider"
    assert placement.float16_fallback() == (
        "CPUExecutionProvider has no float16 kernel for Gemm: onnxruntime would run it in float32 between casts"
    )
