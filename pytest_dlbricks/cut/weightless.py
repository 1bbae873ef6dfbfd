"""The identity of a model's graph, weights aside: fine-tuned variants of one model share it, and so their cut.

A variant differs from its model only in the values of its weights, which no brick holds (bricks time
synthetic weights of the same shapes), so the model's cut is the variant's: loading, optimizing with
onnxruntime and cutting it again would make the same bricks. The identity is a digest of the model file
with the values of its weights left out, weights being float tensors of more than :data:`MAX_KEPT_FLOATS`
values and quantized ones (:func:`~.graph.is_quantized_data`, :func:`~.graph.quantized_accumulators`: no
brick keeps them either). Every other value is part of it: integer and boolean tensors steer computation
(Reshape shapes, indices, masks, conditions), and so may small float ones (epsilons, exponents, Resize
scales, the constants onnxruntime's fusions check), which the loader and onnxruntime read.
"""

from __future__ import annotations

import hashlib
import math

import onnx

from ..core.graph import FLOAT_TYPES, is_quantized_data, nested_tensors, quantized_accumulators

#: Float tensors of at most this many values are part of a graph's identity, as values that may steer
#: computation or decide what onnxruntime fuses; larger ones are weights.
MAX_KEPT_FLOATS = 16
#: Where a tensor keeps a weight's values (float16, bfloat16 and 8-bit integers keep theirs as 32-bit integers).
_WEIGHT_FIELDS = ("raw_data", "float_data", "double_data", "int32_data")


def graph_digest(model: onnx.ModelProto) -> str | None:
    """Digest of ``model`` with its weights' values left out (and cleared from ``model``: the caller parsed it for
    this and what it reads first); None for a model whose weights lie in external data files, not read for it."""
    sums = quantized_accumulators(model.graph.node)
    for tensor in [*model.graph.initializer, *nested_tensors(model.graph)]:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            return None
        floats = tensor.data_type in FLOAT_TYPES and math.prod(tensor.dims) > MAX_KEPT_FLOATS
        if floats or is_quantized_data(tensor.data_type, tuple(tensor.dims)) or tensor.name in sums:
            for name in _WEIGHT_FIELDS:
                tensor.ClearField(name)  # type: ignore[arg-type]
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()
