"""Unit tests of screening: what a model is refused for before anything is allocated or run."""

from __future__ import annotations

from pathlib import Path

import hostile_models
import numpy as np
import onnxruntime
import pytest
import tiny_models
from onnx import TensorProto, helper

from pytest_dlbricks.core import graph, runtime
from pytest_dlbricks.core.errors import ModelError, describe_error
from pytest_dlbricks.core.synthetic import can_synthesise
from pytest_dlbricks.cut import screening
from pytest_dlbricks.cut.loading import load_model


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (3 << 29, "1.5 GiB"), (1 << 62, "4.0 EiB")],
)
def test_byte_counts_read_in_binary_units(count: int, text: str) -> None:
    assert graph.format_bytes(count) == text


def test_the_memory_limit_is_half_the_physical_memory() -> None:
    physical = graph.os.sysconf("SC_PAGE_SIZE") * graph.os.sysconf("SC_PHYS_PAGES")
    assert graph.memory_limit() == int(physical * graph.MEMORY_SHARE)


@pytest.mark.parametrize(("elements", "refused"), [(256, False), (257, True)])
def test_a_tensor_over_the_memory_limit_is_refused_naming_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, elements: int, refused: bool
) -> None:
    monkeypatch.setattr(screening, "memory_limit", lambda: 1024)
    path = tiny_models.single_layer(tmp_path, "Relu", [elements])
    if not refused:
        assert load_model(path).specs["y"].nbytes == elements * 4
        return
    with pytest.raises(ModelError) as caught:
        load_model(path)
    assert caught.value.cause == (
        "input 'x' (float[257]) would need 1.0 KiB, more than the 1.0 KiB memory limit (half of this"
        " machine's memory); refused before allocating it"
    )


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (TensorProto.FLOAT, True),
        (TensorProto.FLOAT16, True),
        (TensorProto.INT8, True),
        (TensorProto.BOOL, True),
        (TensorProto.STRING, False),
        (TensorProto.COMPLEX128, False),
        (TensorProto.UNDEFINED, False),
        (12345, False),
    ],
    ids=lambda value: str(value),
)
def test_synthetic_values_exist_for_numbers_and_booleans(dtype: int, expected: bool) -> None:
    assert can_synthesise(dtype) is expected


def test_non_utf8_text_inside_a_subgraph_is_found(tmp_path: Path) -> None:
    path = tiny_models.loop_outer_scope(tmp_path, inner="innermost")
    data = path.read_bytes().replace(b"innermost_sum", b"innermost_s\xff\xfe")
    path.write_bytes(data)
    with pytest.raises(ModelError, match=r"a value name b'innermost_s\\xff\\xfe' is not valid UTF-8"):
        load_model(path)


def test_the_runtime_probe_runs_once_per_set_of_versions(tmp_path: Path) -> None:
    runtime.runtime_refusal.cache_clear()
    for seed in range(3):
        load_model(tiny_models.chain(tmp_path, f"chain{seed}.onnx", seed=seed))
    assert runtime.runtime_refusal.cache_info().misses == 1


def test_the_runtime_says_why_it_refuses_a_version() -> None:
    refused = hostile_models.RUNTIME_REFUSED_IR
    with pytest.raises(ModelError) as raised:
        screening.check_runtime_accepts(Path("m.onnx"), refused, {"": 17})
    model = tiny_models.chain_model()
    model.ir_version = refused
    with pytest.raises(Exception) as direct:  # what onnxruntime itself says, in this release's words
        onnxruntime.InferenceSession(
            model.SerializeToString(), runtime.new_options(), providers=["CPUExecutionProvider"]
        )
    assert f"IR version {refused} " in str(raised.value)
    assert str(raised.value).endswith(f": {describe_error(direct.value)}")


def test_runtime_messages_lose_error_codes_and_source_locations() -> None:
    raw = (
        "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256"
        " onnxruntime::Model::Model(onnx::ModelProto&&, const onnxruntime::PathString&) Unsupported model IR"
        " version: 14,\n max supported IR version: 13"
    )
    assert describe_error(RuntimeError(raw)) == "Unsupported model IR version: 14, max supported IR version: 13"
    plain = "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Secret(1)"
    assert describe_error(RuntimeError(plain)) == "Could not find an implementation for Secret(1)"


def test_a_weight_of_no_onnx_type_is_refused_before_its_size_is_computed(tmp_path: Path) -> None:
    weight = tiny_models.array("w", np.ones(4, np.float32))
    weight.data_type = 99
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    model = tiny_models.finish(nodes, [tiny_models.tensor("x", [4])], [tiny_models.tensor("y", [4])], [weight])
    with pytest.raises(ModelError, match="weight 'w' has element type 99, which is not an ONNX tensor type"):
        load_model(tiny_models.save(model, tmp_path, "typeless.onnx"))


def test_a_value_declared_with_no_onnx_type_is_unknown_to_the_loader(tmp_path: Path) -> None:
    """No spec is made of the declaration; the run meant to learn the value's spec then names the cause."""
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])]
    model = tiny_models.finish(nodes, [tiny_models.tensor("x", [4])], [tiny_models.tensor("y", [4])])
    model.graph.value_info.append(helper.make_tensor_value_info("h", 99, [4]))
    with pytest.raises(ModelError, match=r"cannot run the model to learn its shapes: .*Invalid tensor data type 99"):
        load_model(tiny_models.save(model, tmp_path, "odd_declaration.onnx"))


def _constant_of_shape_into_matmul(folder: Path, rows: int, columns: int) -> Path:
    """A MatMul whose right-hand side a ConstantOfShape makes: a file of bytes, a weight onnxruntime folds."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [rows, columns])
    fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [0.5])
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["w"], value=fill),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    model = tiny_models.finish(
        nodes,
        [tiny_models.tensor("x", [1, rows])],
        [tiny_models.tensor("y", [1, columns])],
        [shape],
    )
    return tiny_models.save(model, folder, f"packed_{rows}x{columns}.onnx")


@pytest.mark.parametrize(("rows", "columns", "refused"), [(4096, 1, True), (1024, 16, False), (1200, 17, True)])
def test_a_matmul_weight_too_large_once_packed_is_refused_before_the_session_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int, columns: int, refused: bool
) -> None:
    """onnxruntime pads a constant right-hand side's columns to 16 when it makes the session: [4096, 1]
    floats take 256 KiB packed, [1024, 16] 64 KiB, [1200, 17] 150 KiB (32 columns)."""
    monkeypatch.setattr(screening, "memory_limit", lambda: 128 << 10)
    path = _constant_of_shape_into_matmul(tmp_path, rows, columns)
    if not refused:
        assert load_model(path).specs["y"].shape == (1, columns)
        return
    with pytest.raises(
        ModelError,
        match=r"MatMul weight 'w' \(float\[\d+,\d+\]\) would need (256|150)\.0 KiB once onnxruntime packs it",
    ):
        load_model(path)
