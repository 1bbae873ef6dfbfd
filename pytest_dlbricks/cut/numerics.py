"""Numeric types: a model converted to int8 or float16 before it is cut, with onnxruntime's own tooling.

``int8`` is onnxruntime's dynamic quantization (``onnxruntime.quantization.quantize_dynamic``): int8
weights, activations quantized at run time. ``fp16`` is onnxruntime's float16 converter
(``onnxruntime.transformers.float16``), inputs and outputs included. Before either sees the model,
its float weights are replaced by synthetic ones of the same shape (bricks never carry real weights,
and weight-derived values such as quantization scales then reveal nothing either). Values that steer
computation (integer tensors, float scalars) keep their real values, as everywhere else.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from ..core.errors import describe_error
from ..core.graph import TensorSpec
from ..core.synthetic import synthetic_array
from .bricks import BrickSpec

_SEED = 20200421


def convert(model: onnx.ModelProto, dtype: str, data_dir: Path) -> onnx.ModelProto:
    """``model`` (inputs with concrete shapes) in numeric type ``dtype``; ``fp32`` leaves it as written.

    ``data_dir`` is where the model's external data lives. Raises ``ValueError`` with onnxruntime's
    message when its tooling cannot convert the model.
    """
    if dtype == "fp32":
        return model
    synthetic = with_synthetic_weights(model, data_dir)
    try:
        if dtype == "int8":
            return _quantize_dynamic(synthetic)
        if dtype == "fp16":
            # Here, not at the top: only fp16 sweeps need onnxruntime's converter.
            from onnxruntime.transformers.float16 import convert_float_to_float16

            return convert_float_to_float16(synthetic, keep_io_types=False)  # type: ignore[no-any-return]
    except Exception as error:  # the tools raise whatever their internals raise
        raise ValueError(f"onnxruntime cannot convert the model to {dtype}: {describe_error(error)}") from error
    raise ValueError(f"unknown numeric type {dtype!r}")


def with_synthetic_weights(model: onnx.ModelProto, data_dir: Path) -> onnx.ModelProto:
    """A copy of ``model`` whose float weights (initializers and ``Constant`` nodes) hold synthetic values.

    Float ``Constant`` nodes become initializers, which is where onnxruntime's tools look for weights.
    Other initializers stored as external data are read in, so the copy stands alone.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    rng = np.random.default_rng(_SEED)
    initializers = []
    for tensor in graph.initializer:
        spec = TensorSpec(tensor.data_type, tuple(tensor.dims))
        if spec.is_float and not spec.steers(constant=True):
            initializers.append(numpy_helper.from_array(synthetic_array(spec, rng, weight=True), tensor.name))
        elif external_data_helper.uses_external_data(tensor):
            initializers.append(numpy_helper.from_array(numpy_helper.to_array(tensor, str(data_dir)), tensor.name))
        else:
            initializers.append(tensor)
    nodes = []
    for node in graph.node:
        value = _float_constant(node)
        if value is None:
            nodes.append(node)
            continue
        spec = TensorSpec(value.data_type, tuple(value.dims))
        initializers.append(numpy_helper.from_array(synthetic_array(spec, rng, weight=True), node.output[0]))
    graph.ClearField("initializer")
    graph.initializer.extend(initializers)
    graph.ClearField("node")
    graph.node.extend(nodes)
    return copy


def _float_constant(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor of a ``Constant`` node holding a float weight (not a scalar), else None."""
    if node.op_type != "Constant" or node.domain or len(node.attribute) != 1 or node.attribute[0].name != "value":
        return None
    tensor = node.attribute[0].t
    spec = TensorSpec(tensor.data_type, tuple(tensor.dims))
    return tensor if spec.is_float and not spec.steers(constant=True) else None


def _quantize_dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    # Here, not at the top: onnxruntime's quantization tools take ~90 ms to import, and only int8 sweeps use them.
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="dlbricks-int8-") as folder, _quiet_logging():
        output = Path(folder) / "int8.onnx"
        quantize_dynamic(model, output, weight_type=QuantType.QInt8)
        return onnx.load(str(output))


@contextmanager
def _quiet_logging() -> Iterator[None]:
    """Silence the quantizer's advice to pre-process the model, logged through the root logger."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def float32_work(brick: BrickSpec) -> str | None:
    """Why a brick of a float16 model does its work in float32, or None when it does not.

    onnxruntime's graph of a float16 model casts to float32 around every operator its provider has
    no float16 kernel for; the float16 converter keeps some operators in float32 too. Such a brick
    reads or writes float32 activations, or casts to float32.
    """
    float32 = onnx.TensorProto.FLOAT
    if any(spec.dtype == float32 for _, spec in (*brick.inputs, *brick.outputs)):
        return f"{'+'.join(brick.ops)} works on float32 activations in the float16 model"
    for node in brick.nodes:
        if node.op_type == "Cast" and any(a.name == "to" and a.i == float32 for a in node.attribute):
            return f"{'+'.join(brick.ops)} casts to float32 in the float16 model"
    return None
