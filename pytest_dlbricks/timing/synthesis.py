"""Turn a brick description into a standalone ONNX model with synthetic weights and inputs.

Synthetic values (see :mod:`.synthetic`) keep operators on their normal fast path; values that
steer computation keep their real values.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..core.graph import MIN_IR_VERSION, TensorSpec
from ..core.synthetic import SEED, SharedWeights, synthetic_array
from ..cut.bricks import BrickSpec

#: Weights of at least this many bytes that :func:`brick_model_and_weights` leaves out of the model.
APART_BYTES = 1024
#: numpy dtype kinds onnxruntime takes as arrays beside a model: numbers and booleans.
_APART_KINDS = "fiub"


def build_brick_model(brick: BrickSpec) -> onnx.ModelProto:
    """A runnable model of ``brick``: weights as initializers (so runtimes pre-pack them as in the model),
    those the model also lists as graph inputs listed so too (so runtimes neither fold nor pre-pack them,
    as in the model)."""
    return _model(brick, [numpy_helper.from_array(value, name) for name, value in _weights(brick).items()])


def brick_model_and_weights(
    brick: BrickSpec, shared: SharedWeights | None = None
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """:func:`build_brick_model`'s model with its large weights left out, each marked as external data, and
    those weights, for onnxruntime to take as arrays (see :func:`.runtime.create_session`); synthetic
    weights come from ``shared`` when given, else are made for this brick alone.

    They still are initializers to onnxruntime, pre-packed as in the model; but they are not copied
    into the model, serialized and parsed again, which cost a weight-heavy brick more than its session.
    """
    values = _weights(brick) if shared is None else _shared_weights(brick, shared)
    apart = {
        name: value
        for name, value in values.items()
        if value.nbytes >= APART_BYTES and value.dtype.kind in _APART_KINDS
    }
    initializers = [
        _external(name, value) if name in apart else numpy_helper.from_array(value, name)
        for name, value in values.items()
    ]
    return _model(brick, initializers), apart


def _weights(brick: BrickSpec) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    return {name: _value(brick, name, spec, rng, weight=True) for name, spec in brick.weights}


def _shared_weights(brick: BrickSpec, shared: SharedWeights) -> dict[str, np.ndarray]:
    made = iter(shared.arrays([spec for name, spec in brick.weights if brick.values.get(name) is None]))
    return {name: kept if (kept := brick.values.get(name)) is not None else next(made) for name, _ in brick.weights}


def _external(name: str, value: np.ndarray) -> onnx.TensorProto:
    """An initializer that says its data lies elsewhere: its name, type and shape only."""
    tensor = onnx.TensorProto(name=name, dims=value.shape, data_type=helper.np_dtype_to_tensor_dtype(value.dtype))
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, text in (("location", name), ("offset", "0"), ("length", str(value.nbytes))):
        tensor.external_data.add(key=key, value=text)
    return tensor


def _model(brick: BrickSpec, initializers: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(brick.nodes),
        "brick",
        [_value_info(name, spec, brick.unsized) for name, spec in brick.inputs]
        + [_value_info(name, spec, False) for name, spec in brick.weights if name in brick.weights_as_inputs],
        [_value_info(name, spec, brick.unsized) for name, spec in brick.outputs]
        + [helper.make_value_info(name, onnx.TypeProto.FromString(kind)) for name, kind in brick.non_tensor_outputs],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(domain, version) for domain, version in brick.opset_imports.items()],
        functions=list(brick.functions),
        producer_name="pytest-dlbricks",
    )
    # make_model stamps the newest IR version, which runtimes may not accept yet.
    model.ir_version = max(brick.ir_version, MIN_IR_VERSION)
    return model


def brick_feeds(brick: BrickSpec) -> dict[str, np.ndarray]:
    """Input values for one run of ``brick``."""
    rng = np.random.default_rng(SEED + 1)
    return {name: _value(brick, name, spec, rng, weight=False) for name, spec in brick.inputs}


def _value(brick: BrickSpec, name: str, spec: TensorSpec, rng: np.random.Generator, *, weight: bool) -> np.ndarray:
    kept = brick.values.get(name)
    return kept if kept is not None else synthetic_array(spec, rng, weight=weight)


def _value_info(name: str, spec: TensorSpec, unsized: bool) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, spec.dtype, None if unsized else list(spec.shape))
