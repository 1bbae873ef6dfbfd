"""Everything that touches onnxruntime: sessions with the user's settings, reference runs, brick runners."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from . import threadpool
from .bricks import BrickSpec
from .composition import CallOverhead
from .errors import ModelError, runtime_cause
from .flops import VIEW_OPS
from .loading import MIN_IR_VERSION, TensorSpec
from .placement import Placement, read_profile
from .settings import DEFAULT_PROVIDERS, Settings
from .synthesis import SynthesisError, brick_feeds, build_brick_model, model_feeds
from .watchdog import RunStopped, run_watched

_OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "layout": getattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
#: onnxruntime logs warnings (unused initializers and the like) and errors to stderr; its errors reach
#: the user in our own messages, so keep only fatal ones.
_LOG_FATAL_ONLY = 4
#: Weights at least this large go to the external data file of an optimized model, so that loading
#: the optimized graph never reads them.
_EXTERNAL_WEIGHT_BYTES = 1024


def session_options(
    settings: Settings | None = None,
    data_dir: Path | None = None,
    *,
    parallel: bool = False,
    profile_to: Path | None = None,
) -> ort.SessionOptions:
    """Options for the user's thread count and optimization level (onnxruntime's defaults otherwise).

    ``data_dir`` is where external weights of a model given as bytes live; ``parallel`` selects the
    parallel executor (sequential is onnxruntime's default); ``profile_to`` (a file name prefix)
    profiles runs until ``end_profiling()``.
    """
    options = threadpool.new_options()
    options.log_severity_level = _LOG_FATAL_ONLY
    if settings is not None:
        options.intra_op_num_threads = settings.intra_op_threads
        options.graph_optimization_level = _OPTIMIZATION_LEVELS[settings.optimization]
    if data_dir is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(data_dir))
    if parallel:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    if profile_to is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_to)
    return options


def create_session(
    model: onnx.ModelProto,
    settings: Settings | None = None,
    data_dir: Path | None = None,
    *,
    parallel: bool = False,
    profile_to: Path | None = None,
) -> ort.InferenceSession:
    providers = list(settings.providers) if settings is not None else list(DEFAULT_PROVIDERS)
    options = session_options(settings, data_dir, parallel=parallel, profile_to=profile_to)
    return ort.InferenceSession(model.SerializeToString(), options, providers=providers)


def optimize_model(
    path: Path, model: onnx.ModelProto, data_dir: Path, folder: Path, settings: Settings
) -> onnx.ModelProto:
    """The graph onnxruntime runs for ``model`` under ``settings``, saved in ``folder``, weights apart.

    Fusions, eliminated nodes and layout changes (such as NCHWc convolutions) are the runtime's own,
    for this provider, optimization level and machine: bricks cut from this graph cost what they
    cost inside the model.
    """
    options = session_options(settings, data_dir)
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.data")
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", str(_EXTERNAL_WEIGHT_BYTES)
    )
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=list(settings.providers))
        return onnx.load(str(folder / "optimized.onnx"), load_external_data=False)
    except Exception as error:  # onnxruntime's exception types are not part of its API
        raise ModelError(path, f"onnxruntime cannot load the model: {_short(error)}") from error


def run_reference(path: Path, model: onnx.ModelProto, data_dir: Path, names: list[str]) -> dict[str, np.ndarray]:
    """Run ``model`` once on synthetic inputs and return the values ``names`` took (tensors only)."""
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    present = {output.name for output in reference.graph.output}
    reference.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names if name not in present)
    initializers = {t.name for t in reference.graph.initializer}
    inputs = [
        (value.name, _declared_spec(path, value)) for value in reference.graph.input if value.name not in initializers
    ]
    try:
        session = create_session(reference, data_dir=data_dir)
        results = run_watched(session, names, model_feeds(inputs))
    except SynthesisError as error:
        raise ModelError(path, f"cannot make inputs for a reference run: {error}") from error
    except RunStopped as error:
        raise ModelError(path, f"onnxruntime cannot run the model to learn its shapes: {error}") from error
    except Exception as error:  # onnxruntime raises several unrelated exception types
        raise ModelError(path, f"onnxruntime cannot run the model to learn its shapes: {_short(error)}") from error
    return {name: value for name, value in zip(names, results) if isinstance(value, np.ndarray)}


def _declared_spec(path: Path, value: onnx.ValueInfoProto) -> TensorSpec:
    tensor_type = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        raise ModelError(path, f"model input {value.name!r} is not a tensor; only tensor inputs are supported")
    return TensorSpec(tensor_type.elem_type, tuple(d.dim_value for d in tensor_type.shape.dim))


class BrickRunner:
    """A brick ready to time: its session and feeds are made once, each call is one inference.

    When the providers are not the default or the brick holds float16 tensors, :meth:`check` also
    runs the brick once in a profiled session of its own, to learn which provider ran each node
    (:attr:`placement`) and whether onnxruntime ran float16 operators in float32.

    ``whole_model`` marks the runner of a whole model, whose outputs are its own: they are never
    bound onto its inputs (see :func:`view_outputs`).
    """

    def __init__(
        self, brick: BrickSpec, settings: Settings, *, parallel: bool = False, whole_model: bool = False
    ) -> None:
        self.brick = brick
        self.settings = settings
        self.parallel = parallel
        self.placement: Placement | None = None
        self._rewrites: list[Callable[[], object]] | None = None
        try:
            self.feeds = brick_feeds(brick)
            self.session = create_session(build_brick_model(brick), settings, parallel=parallel)
        except SynthesisError as error:
            raise BrickError(str(error)) from error
        except Exception as error:  # onnxruntime's exception types are not part of its API
            if type(error).__name__ == "NotImplemented":
                raise UnsupportedByProvider(f"{'+'.join(settings.providers)} cannot run it: {_short(error)}") from error
            raise BrickError(f"onnxruntime cannot load the brick: {_short(error)}") from error
        self.provider = self.session.get_providers()[0]
        self._binding = bind(self.session, self.feeds, {} if whole_model else view_outputs(brick, self.feeds))
        self._outputs: list[np.ndarray] = []

    def __call__(self) -> None:
        """One inference, its outputs left where onnxruntime put them (see :func:`bind`)."""
        if self._binding is None:
            self._outputs = self.session.run(None, self.feeds)
        else:
            self.session.run_with_iobinding(self._binding)

    def outputs(self) -> list[np.ndarray]:
        """The outputs of the last call."""
        return self._outputs if self._binding is None else list(self._binding.copy_outputs_to_cpu())

    def rewrite_inputs(self) -> None:
        """Write the inputs again, in place, on onnxruntime's threads; not part of the brick's time.

        Inside the model, the layer before a brick has just written its inputs on the thread pool,
        so they sit in the caches of the cores that wrote them. Called again and again on the same
        inputs, a brick would find them in its own core's cache instead, and run faster than it
        does in the model (see README.rst, *Bricks timed as they run in the model*).
        """
        if self._rewrites is None:
            self._rewrites = [_input_rewriter(array) for array in self.feeds.values() if _rewritable(array)]
        for rewrite in self._rewrites:
            rewrite()

    def check(self) -> None:
        """Run once and check the outputs have the shapes they have inside the model, and where it ran."""
        try:
            results = run_watched(self.session, None, self.feeds)
        except RunStopped as error:
            raise BrickError(f"the brick never finished: {error}") from error
        except Exception as error:  # onnxruntime's exception types are not part of its API
            raise BrickError(f"onnxruntime cannot run the brick: {_short(error)}") from error
        for (name, spec), result in zip(self.brick.outputs, results):
            if tuple(result.shape) != spec.shape:
                raise BrickError(
                    f"output {name} has shape {list(result.shape)} but {list(spec.shape)} inside the model;"
                    " timing it would measure different work"
                )
        if _profiled(self.brick, self.settings):
            self.placement = self._profiled_run()
            self.provider = self.placement.provider or self.provider
            fallback = self.placement.float16_fallback()
            if fallback is not None:
                raise UnsupportedByProvider(fallback)

    def _profiled_run(self) -> Placement:
        with tempfile.TemporaryDirectory(prefix="dlbricks-profile-") as folder:
            model = build_brick_model(self.brick)
            session = create_session(model, self.settings, parallel=self.parallel, profile_to=Path(folder) / "brick")
            session.run(None, self.feeds)
            return read_profile(Path(session.end_profiling()))


def bind(
    session: ort.InferenceSession, feeds: dict[str, np.ndarray], placed: Mapping[str, np.ndarray] | None = None
) -> ort.SIOBinding | None:
    """Inputs bound in place and outputs left to onnxruntime's allocator (or written into the arrays
    ``placed`` gives by output name), for calls that copy nothing; None for inputs onnxruntime cannot
    bind (strings), which ``run()`` then takes.

    ``run()`` would copy every output into a new numpy array: for a brick, a cost the layers do not
    pay inside the model, where a layer's output stays in onnxruntime's memory for the next layer.
    The inputs are the arrays of ``feeds`` themselves, so rewriting them in place is what runs.
    """
    if any(array.dtype.kind in "OSU" for array in feeds.values()):
        return None
    placed = placed or {}
    binding = session.io_binding()
    for name, array in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array))
    for output in session.get_outputs():
        if output.name in placed:
            binding.bind_ortvalue_output(output.name, ort.OrtValue.ortvalue_from_numpy(placed[output.name]))
        else:
            binding.bind_output(output.name, "cpu")
    return binding


def view_outputs(brick: BrickSpec, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The brick's outputs that only reshape one of its inputs, each as a view of that input's array.

    Inside a model, onnxruntime gives the output of Reshape, Squeeze, Flatten and the like the memory
    of their input: they copy nothing. Left to onnxruntime's allocator, a brick's such output would
    be a copy, several times the layer's cost (5.9 us instead of 2.2 us for a 180 KB Reshape).
    Bound onto the input's memory, onnxruntime sees the same buffer and copies nothing, as inside
    the model. A view whose input is computed inside the brick cannot be bound so, and stays a copy.
    """
    shapes = dict(brick.outputs)
    views = {}
    for node in brick.nodes:
        source = feeds.get(node.input[0]) if _only_reshapes(node) else None
        target = shapes.get(node.output[0])
        if source is not None and target is not None and source.flags.c_contiguous:
            views[node.output[0]] = source.reshape(target.shape)
    return views


def _only_reshapes(node: onnx.NodeProto) -> bool:
    """A Dropout given ``training_mode`` may drop values: a computation, not a view."""
    return node.op_type in VIEW_OPS and bool(node.input) and not (node.op_type == "Dropout" and len(node.input) > 2)


#: Types onnxruntime's CPU Add kernel takes, the operator that rewrites inputs.
_ADDABLE = frozenset(np.dtype(name) for name in ("float32", "float64", "float16", "int32", "int64"))


def _rewritable(array: np.ndarray) -> bool:
    return array.dtype in _ADDABLE and array.size > 0 and array.flags.c_contiguous


def _input_rewriter(array: np.ndarray) -> Callable[[], object]:
    """A call that writes ``array`` again in place, unchanged (it adds zero), on onnxruntime's threads."""
    helper = onnx.helper
    element_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "zero"], ["y"])],
        "rewrite",
        [helper.make_tensor_value_info("x", element_type, array.shape)],
        [helper.make_tensor_value_info("y", element_type, array.shape)],
        [onnx.numpy_helper.from_array(np.zeros((), array.dtype), "zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = MIN_IR_VERSION
    options = session_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    value = ort.OrtValue.ortvalue_from_numpy(array)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", value)
    binding.bind_ortvalue_output("y", value)
    return lambda: session.run_with_iobinding(binding)


_REDUCED_FLOATS = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})


def _profiled(brick: BrickSpec, settings: Settings) -> bool:
    """Whether a brick's first run is profiled: other providers than the default, or float16 tensors."""
    specs = (*brick.inputs, *brick.weights, *brick.outputs)
    return settings.providers != DEFAULT_PROVIDERS or any(spec.dtype in _REDUCED_FLOATS for _, spec in specs)


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
    families: dict[str, list[ort.InferenceSession]], rounds: int, calls: int
) -> dict[str, list[float]]:
    """Median time of a call of each session, the sessions taking turns round after round."""
    samples: dict[str, list[list[float]]] = {name: [[] for _ in group] for name, group in families.items()}
    for _ in range(rounds):
        for name, group in families.items():
            for session, times in zip(group, samples[name]):
                times.append(_time_calls(session, calls))
    return {name: [float(np.median(times)) for times in group] for name, group in samples.items()}


def _time_calls(session: ort.InferenceSession, calls: int) -> float:
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


class BrickError(Exception):
    """A brick cannot be built or run by onnxruntime."""


class UnsupportedByProvider(BrickError):
    """The providers cannot run the brick at its types: no kernel, or float16 run in float32 between casts."""


def _short(error: BaseException) -> str:
    return runtime_cause(error)[:500]
