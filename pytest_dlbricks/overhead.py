"""What an inference call costs beyond its layers' work, and its measurement on this machine.

Every brick is timed as a model of its own and pays that cost once; composition takes it off each
brick and counts it once for the whole model.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import onnx

from .graph import MIN_IR_VERSION
from .runtime import InferenceSession, bind, create_session
from .settings import Settings


@dataclass(frozen=True)
class CallOverhead:
    """What one inference call costs beyond its layers' work, in seconds, on this machine.

    Every brick was timed as a model of its own and paid it once; the whole model pays it once.
    A call with more inputs or outputs costs more, so the cost is fixed plus a part per extra one.
    """

    fixed_s: float = 0.0
    per_input_s: float = 0.0
    per_output_s: float = 0.0
    #: The fixed cost under onnxruntime's parallel executor, measured only by a validation run that
    #: times it and reported there. Estimates never count it: the critical path is a lower bound for an
    #: executor with unlimited parallelism, which pays a call as the sequential one does, so a plain
    #: run composes the same estimates whether or not a validation run measured it before.
    parallel_fixed_s: float | None = None

    def of(self, inputs: int, outputs: int) -> float:
        return self.fixed_s + self.per_input_s * max(inputs - 1, 0) + self.per_output_s * max(outputs - 1, 0)

    def composed(self) -> CallOverhead:
        """What estimates compose with, without the figures only validation measures (kept in the store)."""
        return dataclasses.replace(self, parallel_fixed_s=None)


NO_OVERHEAD = CallOverhead()


def measure_call_overhead(settings: Settings, rounds: int = 11, calls: int = 100) -> CallOverhead:
    """What an inference call costs beyond its layers, as intercepts and slopes of tiny models' times.

    Chains of 1 to 16 trivial layers give the fixed cost (the time a chain of no layers would take;
    a one-layer model's time would also remove the per-layer cost the whole model pays, and
    over-correct); one layer reading 1 to 8 inputs, and 1 to 8 layers each writing an output, give
    the cost of each further input and output. All are timed interleaved, back to back, so the
    machine's noise hits them alike.
    """
    families = {
        "chain": [_tiny_model(size, 1, 1) for size in _SIZES],
        "inputs": [_tiny_model(1, size, 1) for size in _SIZES[:4]],
        "outputs": [_tiny_model(size, 1, size) for size in _SIZES[:4]],
    }
    medians = _interleaved_medians(
        {name: [create_session(model, settings) for model in models] for name, models in families.items()},
        rounds,
        calls,
    )
    layer_s, fixed_s = np.polyfit(_SIZES, medians["chain"], 1)
    per_input_s, _ = np.polyfit(_SIZES[:4], medians["inputs"], 1)
    per_output_s, _ = np.polyfit(_SIZES[:4], medians["outputs"], 1)
    return CallOverhead(
        fixed_s=max(float(fixed_s), 0.0),
        per_input_s=max(float(per_input_s), 0.0),
        per_output_s=max(float(per_output_s - layer_s), 0.0),
    )


def measure_parallel_fixed_cost(settings: Settings, rounds: int = 5, calls: int = 20) -> float:
    """The fixed cost of a call under the parallel executor (thread hand-offs), as a chain's intercept."""
    sessions = {"parallel": [create_session(_tiny_model(size, 1, 1), settings, parallel=True) for size in _SIZES]}
    _, fixed_s = np.polyfit(_SIZES, _interleaved_medians(sessions, rounds, calls)["parallel"], 1)
    return max(float(fixed_s), 0.0)


_SIZES = (1, 2, 4, 8, 16)


def _interleaved_medians(
    families: dict[str, list[InferenceSession]], rounds: int, calls: int
) -> dict[str, list[float]]:
    """Median time of a call of each session, the sessions taking turns round after round."""
    samples: dict[str, list[list[float]]] = {name: [[] for _ in group] for name, group in families.items()}
    for _ in range(rounds):
        for name, group in families.items():
            for session, times in zip(group, samples[name]):
                times.append(_time_calls(session, calls))
    return {name: [float(np.median(times)) for times in group] for name, group in samples.items()}


def _time_calls(session: InferenceSession, calls: int) -> float:
    """Seconds per call, called as bricks are (see :func:`bind`)."""
    binding = bind(session, {value.name: np.ones(1, np.float32) for value in session.get_inputs()})
    assert binding is not None  # float inputs always bind
    session.run_with_iobinding(binding)
    start = time.perf_counter()
    for _ in range(calls):
        session.run_with_iobinding(binding)
    return (time.perf_counter() - start) / calls


def _tiny_model(layers: int, inputs: int, outputs: int) -> onnx.ModelProto:
    """One-element tensors: ``inputs`` summed, then ``layers`` additions, the last ``outputs`` returned."""
    helper = onnx.helper
    names = [f"x{i}" for i in range(inputs)]
    nodes = [helper.make_node("Sum", names, ["v0"])]
    nodes += [helper.make_node("Add", [f"v{i}", f"v{i}"], [f"v{i + 1}"]) for i in range(layers)]
    returned = [f"v{i}" for i in range(layers + 1 - outputs, layers + 1)]
    graph = helper.make_graph(
        nodes,
        "calibration",
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [1]) for name in names],
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [1]) for name in returned],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = MIN_IR_VERSION
    return model
