"""Turn a brick description into a standalone ONNX model with synthetic weights and inputs.

Synthetic values (see :mod:`.synthetic`) keep operators on their normal fast path; values that
steer computation keep their real values.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .bricks import BrickSpec
from .graph import MIN_IR_VERSION, TensorSpec
from .synthetic import SEED, synthetic_array


def build_brick_model(brick: BrickSpec) -> onnx.ModelProto:
    """A runnable model of ``brick``: weights as initializers (so runtimes pre-pack them as in the model)."""
    rng = np.random.default_rng(SEED)
    initializers = [
        numpy_helper.from_array(_value(brick, name, spec, rng, weight=True), name) for name, spec in brick.weights
    ]
    graph = helper.make_graph(
        list(brick.nodes),
        "brick",
        [_value_info(name, spec, brick.unsized) for name, spec in brick.inputs],
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
