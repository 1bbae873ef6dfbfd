"""Turn a brick description into a standalone ONNX model with synthetic weights and inputs.

Synthetic values are deterministic and chosen so that no operator meets NaN, infinity or denormals
(which would change its speed): float weights are small positive numbers, float activations lie in
[0.5, 1.5), integers are zero. Values that steer computation keep their real values.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .bricks import BrickSpec
from .loading import MIN_IR_VERSION, TensorSpec

_SEED = 20200420
#: numpy dtype kinds of the tensors synthetic values exist for: floats, integers, booleans.
_SYNTHESISABLE_KINDS = "fiub"


class SynthesisError(Exception):
    """A tensor cannot be given synthetic values (for example a string or complex tensor)."""


def can_synthesise(dtype: int) -> bool:
    """Whether tensors of this ONNX element type can be given synthetic values: numbers and booleans."""
    try:
        return helper.tensor_dtype_to_np_dtype(dtype).kind in _SYNTHESISABLE_KINDS
    except KeyError:
        return False


def synthetic_array(spec: TensorSpec, rng: np.random.Generator, *, weight: bool) -> np.ndarray:
    """Deterministic values of ``spec``'s type and shape that keep operators on their normal fast path."""
    if not can_synthesise(spec.dtype):
        raise SynthesisError(f"tensors of type {spec.describe()} cannot be given synthetic values")
    dtype = helper.tensor_dtype_to_np_dtype(spec.dtype)
    if dtype.kind == "f":
        low, high = (0.01, 0.1) if weight else (0.5, 1.5)
        return rng.uniform(low, high, size=spec.shape).astype(dtype)
    return np.zeros(spec.shape, dtype=dtype)


def build_brick_model(brick: BrickSpec) -> onnx.ModelProto:
    """A runnable model of ``brick``: weights as initializers (so runtimes pre-pack them as in the model)."""
    rng = np.random.default_rng(_SEED)
    initializers = [
        numpy_helper.from_array(_value(brick, name, spec, rng, weight=True), name) for name, spec in brick.weights
    ]
    graph = helper.make_graph(
        list(brick.nodes),
        "brick",
        [_value_info(name, spec) for name, spec in brick.inputs],
        [_value_info(name, spec) for name, spec in brick.outputs],
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
    rng = np.random.default_rng(_SEED + 1)
    return {name: _value(brick, name, spec, rng, weight=False) for name, spec in brick.inputs}


def model_feeds(inputs: list[tuple[str, TensorSpec]]) -> dict[str, np.ndarray]:
    """Synthetic inputs for a whole model."""
    rng = np.random.default_rng(_SEED + 2)
    return {name: synthetic_array(spec, rng, weight=False) for name, spec in inputs}


def _value(brick: BrickSpec, name: str, spec: TensorSpec, rng: np.random.Generator, *, weight: bool) -> np.ndarray:
    kept = brick.values.get(name)
    return kept if kept is not None else synthetic_array(spec, rng, weight=weight)


def _value_info(name: str, spec: TensorSpec) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, spec.dtype, list(spec.shape))
