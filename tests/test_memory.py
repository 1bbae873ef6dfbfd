"""Collection reads no float weight: a model with a large external weight file costs almost nothing to cut.

``bench/memory.py`` measures peak resident memory; this test guards the promise cheaply with a
sparse weight file (its size on disk is nearly zero) and ``tracemalloc``, which sees every bytes
object and numpy array Python allocates: reading the weights would show up as their full size.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import tiny_models
from onnx import TensorProto, helper

from conftest import plan_of
from pytest_dlbricks.cut.bricks import BrickSpec

WIDTH = 8192
WEIGHT_BYTES = WIDTH * WIDTH * 4  # 256 MiB
#: What loading and cutting may allocate in Python for this two-layer model.
ALLOWED_BYTES = 16 << 20


def large_external_model(folder: Path) -> Path:
    """MatMul by a [WIDTH, WIDTH] float weight stored in a sparse ``weights.bin``, then Relu."""
    with (folder / "weights.bin").open("wb") as data:
        data.truncate(WEIGHT_BYTES)
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[WIDTH, WIDTH])
    weight.external_data.add(key="location", value="weights.bin")
    weight.data_location = TensorProto.EXTERNAL
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    inputs, outputs = [tiny_models.tensor("x", [1, WIDTH])], [tiny_models.tensor("y", [1, WIDTH])]
    return tiny_models.save(tiny_models.finish(nodes, inputs, outputs, [weight]), folder, "large.onnx")


def test_collecting_a_model_never_reads_its_external_float_weights(tmp_path: Path) -> None:
    path = large_external_model(tmp_path)
    tracemalloc.start()
    try:
        plan = plan_of(path, 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [brick.ops for brick in plan.bricks if isinstance(brick, BrickSpec)] == [("MatMul",), ("Relu",)]
    assert peak < ALLOWED_BYTES, f"collection allocated {peak / (1 << 20):.0f} MiB for a 256 MiB weight"
