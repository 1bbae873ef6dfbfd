"""Everything that touches onnxruntime: sessions with the user's settings, reference runs, brick runners."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from .bricks import BrickSpec
from .errors import ModelError
from .loading import TensorSpec
from .settings import Settings
from .synthesis import SynthesisError, brick_feeds, build_brick_model, model_feeds

_OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "layout": getattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
#: onnxruntime logs warnings (unused initializers and the like) to stderr; keep errors only.
_LOG_ERRORS_ONLY = 3


def session_options(settings: Settings | None = None) -> ort.SessionOptions:
    """Session options for the user's thread count and optimization level (onnxruntime's defaults otherwise)."""
    options = ort.SessionOptions()
    options.log_severity_level = _LOG_ERRORS_ONLY
    if settings is not None:
        options.intra_op_num_threads = settings.intra_op_threads
        options.graph_optimization_level = _OPTIMIZATION_LEVELS[settings.optimization]
    return options


def create_session(model: onnx.ModelProto, settings: Settings | None = None) -> ort.InferenceSession:
    providers = list(settings.providers) if settings is not None else ["CPUExecutionProvider"]
    return ort.InferenceSession(model.SerializeToString(), session_options(settings), providers=providers)


def run_reference(path: Path, model: onnx.ModelProto, names: list[str]) -> dict[str, np.ndarray]:
    """Run ``model`` once on synthetic inputs and return the values ``names`` took (tensors only)."""
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    if any(onnx.external_data_helper.uses_external_data(t) for t in reference.graph.initializer):
        onnx.external_data_helper.load_external_data_for_model(reference, str(path.parent))
    present = {output.name for output in reference.graph.output}
    reference.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names if name not in present)
    initializers = {t.name for t in reference.graph.initializer}
    inputs = [
        (value.name, _declared_spec(path, value)) for value in reference.graph.input if value.name not in initializers
    ]
    try:
        session = create_session(reference)
        results = session.run(names, model_feeds(inputs))
    except SynthesisError as error:
        raise ModelError(path, f"cannot make inputs for a reference run: {error}") from error
    except Exception as error:  # onnxruntime raises several unrelated exception types
        raise ModelError(path, f"onnxruntime cannot run the model to learn its shapes: {_short(error)}") from error
    return {name: value for name, value in zip(names, results) if isinstance(value, np.ndarray)}


def _declared_spec(path: Path, value: onnx.ValueInfoProto) -> TensorSpec:
    tensor_type = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        raise ModelError(path, f"model input {value.name!r} is not a tensor; only tensor inputs are supported")
    return TensorSpec(tensor_type.elem_type, tuple(d.dim_value for d in tensor_type.shape.dim))


class BrickRunner:
    """A brick ready to time: its session and feeds are made once, each call is one inference."""

    def __init__(self, brick: BrickSpec, settings: Settings) -> None:
        self.brick = brick
        try:
            self.feeds = brick_feeds(brick)
            self.session = create_session(build_brick_model(brick), settings)
        except SynthesisError as error:
            raise BrickError(str(error)) from error
        except Exception as error:  # onnxruntime's exception types are not part of its API
            raise BrickError(f"onnxruntime cannot load the brick: {_short(error)}") from error
        self.provider = self.session.get_providers()[0]

    def __call__(self) -> list[np.ndarray]:
        return self.session.run(None, self.feeds)

    def check(self) -> None:
        """Run once and check the outputs have the shapes they have inside the model."""
        try:
            results = self()
        except Exception as error:  # onnxruntime's exception types are not part of its API
            raise BrickError(f"onnxruntime cannot run the brick: {_short(error)}") from error
        for (name, spec), result in zip(self.brick.outputs, results):
            if tuple(result.shape) != spec.shape:
                raise BrickError(
                    f"output {name} has shape {list(result.shape)} but {list(spec.shape)} inside the model;"
                    " timing it would measure different work"
                )


class BrickError(Exception):
    """A brick cannot be built or run by onnxruntime."""


def _short(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(text.split())[:500]
