"""The one module that talks to onnxruntime: sessions, the shared thread pool, optimization, watched and
reference runs, io binding, profiling, and which IR versions and opsets the runtime accepts.

Loading, running, overhead measurement and probes go through it, so the runtime's quirks (log
levels, exception types, the process-wide thread pool) are handled once.

**One thread pool.** Each onnxruntime session otherwise owns a pool whose idle threads keep spinning
for tens of milliseconds after each run. The plugin keeps one session per distinct brick, so the
threads of the bricks just timed steal the cores of the next: on 2 cores, bricks timed one after
another took up to 5x their time, and a model run after its bricks 40% more. With one shared pool,
a brick runs on threads exactly as its layers do inside the model. onnxruntime cannot go back: once
a process shares its pool, every session created afterwards must use it (:func:`new_options`).

**Profiles.** :func:`profile` gives the trace events of one run (each node's provider, types and
kernel time), for :mod:`.placement` and for whoever needs where a model's time goes inside it.

**Watched runs.** A ``Loop`` told to iterate 2**62 times runs for ever; one that also stacks a value
per iteration eats all the memory of the machine within a minute. Runs made before timing starts (a
whole model's, to learn its shapes; each brick's first, to check it) go through :func:`run_watched`:
a thread sets ``RunOptions.terminate`` once the run has taken :data:`RUN_TIME_LIMIT_S`, or has grown
the process by more than :func:`~pytest_dlbricks.core.graph.memory_limit` (where the resident size can be
read: Linux).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

# onnxruntime's only way to size the process-wide thread pool; it has no public Python API.
from onnxruntime.capi import _pybind_state

from .errors import ModelError, RuntimeRefusal, describe_error
from .graph import MIN_IR_VERSION, format_bytes, memory_limit
from .identity import cpuinfo_field
from .settings import DEFAULT_PROVIDERS, Settings
from .wording import plural

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
#: Seconds one watched run may take.
RUN_TIME_LIMIT_S = 120.0
#: Seconds between two looks at a watched run.
POLL_S = 0.05

#: The session type, for annotations in modules that take sessions from this one.
InferenceSession = ort.InferenceSession
#: Size of the pool this process's sessions share, once it shares one (0: onnxruntime's default).
_shared_threads: int | None = None
#: The pool and threads the run asked for (see :func:`ask_for_thread_pool`), until its first session.
_asked: tuple[str, int] | None = None


class ThreadPoolConflict(ValueError):
    """This process's onnxruntime thread pool cannot be what the run asks for."""


class RunStopped(Exception):
    """A run went over the time or memory limit and onnxruntime stopped it; the message says which."""


def use_thread_pool(pool: str, threads: int) -> None:
    """Make the sessions created from now on share one pool of ``threads`` (0: onnxruntime's default),
    or keep a pool each; raises :class:`ThreadPoolConflict` when an earlier run in this process
    already shared a pool of another size, or when it shared one and ``pool`` is per-session.
    """
    global _shared_threads
    if _shared_threads is None and _runtime_shares_a_pool():
        # An earlier run in this process shared it, and this module was imported again since
        # (pytester's in-process runs do that): its size is no longer known, take it as asked.
        _shared_threads = threads
    if _shared_threads is not None:
        if pool != "shared":
            raise ThreadPoolConflict(
                "this process already runs onnxruntime on one shared thread pool, and onnxruntime"
                " cannot give sessions their own pools again; run --dlbricks-thread-pool=per-session"
                " in a process of its own"
            )
        if threads != _shared_threads:
            raise ThreadPoolConflict(
                f"this process already shares one onnxruntime thread pool of {_describe_pool(_shared_threads)}, and"
                f" onnxruntime cannot resize it to {_describe_pool(threads)}; run in a process of its own"
            )
        return
    if pool == "shared":
        _pybind_state.set_global_thread_pool_sizes(threads, 0)
        _shared_threads = threads


def ask_for_thread_pool(pool: str, threads: int) -> None:
    """What :func:`use_thread_pool` does, done when the first session is created: a run whose bricks all
    come from the store creates none, and so pays neither for onnxruntime's pool nor for the session that
    finds whether this process already shares one. Raises :class:`ThreadPoolConflict` at once where this
    process is known to share a pool the run cannot have."""
    global _asked
    if _shared_threads is not None:
        use_thread_pool(pool, threads)
    _asked = (pool, threads)


def new_options() -> ort.SessionOptions:
    """Session options that run on the shared pool when this process has one, logging fatal errors only;
    the first sets up the pool the run asked for."""
    global _asked
    if _asked is not None:
        asked, _asked = _asked, None
        use_thread_pool(*asked)
    options = ort.SessionOptions()
    options.log_severity_level = _LOG_FATAL_ONLY
    if _shared_threads is not None:
        options.use_per_session_threads = False
    return options


def _runtime_shares_a_pool() -> bool:
    """Whether onnxruntime already refuses sessions a thread pool of their own, in this process."""
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # onnxruntime prints its retry there
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's exception types are not part of its API
        return "global thread pool" in str(error)
    return False


def _describe_pool(threads: int) -> str:
    return "onnxruntime's default size" if threads == 0 else plural(threads, "thread")


def runtime_version() -> str:
    return ort.__version__


def available_providers() -> list[str]:
    return list(ort.get_available_providers())


@functools.cache
def runtime_refusal(ir_version: int, opsets: tuple[tuple[str, int], ...]) -> str | None:
    """onnxruntime's reason to refuse an empty model stamped with these versions, or None."""
    probe = onnx.ModelProto(ir_version=ir_version)
    probe.opset_import.extend(onnx.helper.make_opsetid(domain, version) for domain, version in opsets)
    probe.graph.name = "probe"
    probe.graph.input.append(onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1]))
    probe.graph.output.append(onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1]))
    try:
        ort.InferenceSession(probe.SerializeToString(), new_options(), providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's exception types are not part of its API
        return describe_error(error)
    return None


def session_options(
    settings: Settings | None = None,
    data_dir: Path | None = None,
    *,
    parallel: bool = False,
    profile_to: Path | None = None,
    optimized: bool = False,
    once: bool = False,
) -> ort.SessionOptions:
    """Options for the user's thread count and optimization level (onnxruntime's defaults otherwise).

    ``data_dir`` is where external weights of a model given as bytes live; ``parallel`` selects the
    parallel executor (sequential is onnxruntime's default); ``profile_to`` (a file name prefix)
    profiles runs until ``end_profiling()``. ``optimized`` says the model is already a part of the
    graph onnxruntime made for these settings (see :func:`optimize_model`): it runs as it is.
    Optimizing it again would cost time at every session and change what runs: cut out of its
    model, a QDQ Conv loses the Q/DQ neighbours that kept it in NCHW inside the model, and gets
    layout reorders that the model never runs. ``once``: the session runs once, so pre-packing its
    weights would cost more than it saves.
    """
    options = new_options()
    if settings is not None:
        if options.use_per_session_threads:
            # On the shared pool the size is the pool's: onnxruntime warns of a size given a session there.
            options.intra_op_num_threads = settings.intra_op_threads
        options.graph_optimization_level = _OPTIMIZATION_LEVELS[settings.optimization]
    if optimized:
        options.graph_optimization_level = _OPTIMIZATION_LEVELS["disable"]
    if once:
        options.add_session_config_entry("session.disable_prepacking", "1")
    if data_dir is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(data_dir))
    if parallel:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    if profile_to is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_to)
    return options


def create_session(
    model: onnx.ModelProto | Path,
    settings: Settings | None = None,
    data_dir: Path | None = None,
    *,
    parallel: bool = False,
    profile_to: Path | None = None,
    optimized: bool = False,
    initializers: Mapping[str, np.ndarray] | None = None,
    once: bool = False,
) -> ort.InferenceSession:
    """A session for ``model`` (in memory, or a file onnxruntime reads itself) with the user's settings
    (``optimized``: see :func:`session_options`). ``initializers`` are the data of initializers the model
    marks as external, by name: onnxruntime copies them into its graph, as if it had read them."""
    providers = list(settings.providers) if settings is not None else list(DEFAULT_PROVIDERS)
    options = session_options(
        settings, data_dir, parallel=parallel, profile_to=profile_to, optimized=optimized, once=once
    )
    if initializers:
        values = [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array)) for array in initializers.values()]
        options.add_external_initializers(list(initializers), values)
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=providers)


#: onnxruntime's optimizer that lays convolutions out in blocks of channels (NCHWc), a block as wide as the vectors
#: MLAS finds on the processor: 16 floats with AVX-512, 8 with AVX2. valgrind hides AVX-512, so a brick cut from a
#: graph laid out for 16 cannot run under it (its ReorderOutput refuses the channels).
NCHWC_OPTIMIZER = "NchwcTransformer"


def disabled_optimizers(settings: Settings | None) -> list[str]:
    """The optimizers a run leaves out: for simulated costs on a processor with AVX-512, the NCHWc layout, in the
    graph it cuts and in the whole models it counts alike (see :data:`NCHWC_OPTIMIZER`); none otherwise."""
    simulated = settings is not None and settings.cost == "simulated"
    return [NCHWC_OPTIMIZER] if simulated and "avx512f" in _cpu_flags() else []


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The processor's features as Linux lists them (none where it does not: valgrind runs on Linux alone)."""
    return frozenset((cpuinfo_field("flags") or "").split())


def optimize_model(
    path: Path, model: onnx.ModelProto, data_dir: Path, folder: Path, settings: Settings
) -> onnx.ModelProto:
    """The graph onnxruntime runs for ``model`` under ``settings``, saved in ``folder``, weights apart.

    Fusions, eliminated nodes and layout changes (such as NCHWc convolutions) are the runtime's own,
    for this provider, optimization level and machine: bricks cut from this graph cost what they
    cost inside the model.
    """
    options = session_options(settings, data_dir, once=True)
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.data")
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", str(_EXTERNAL_WEIGHT_BYTES)
    )
    try:
        ort.InferenceSession(
            model.SerializeToString(),
            options,
            providers=list(settings.providers),
            disabled_optimizers=disabled_optimizers(settings) or None,
        )
        return onnx.load(str(folder / "optimized.onnx"), load_external_data=False)
    except Exception as error:  # onnxruntime's exception types are not part of its API
        raise RuntimeRefusal(path, f"onnxruntime cannot load the model: {describe_error(error)}") from error


def load_refusal(model: onnx.ModelProto, data_dir: Path) -> str | None:
    """onnxruntime's reason to refuse loading ``model`` (external weights in ``data_dir``), or None."""
    try:
        create_session(model, data_dir=data_dir)
    except Exception as error:  # onnxruntime's exception types are not part of its API
        return describe_error(error)
    return None


def run_reference(
    path: Path,
    model: onnx.ModelProto,
    data_dir: Path,
    names: list[str],
    feeds: dict[str, np.ndarray],
    *,
    optimized: bool = False,
) -> dict[str, np.ndarray]:
    """Run ``model`` once on ``feeds`` and return the values ``names`` took (tensors only); ``optimized``:
    the model is the graph onnxruntime made (see :func:`optimize_model`), which it runs as it is."""
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    present = {output.name for output in reference.graph.output}
    reference.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names if name not in present)
    cause = "onnxruntime cannot run the model to learn its shapes"
    try:
        session = create_session(reference, data_dir=data_dir, optimized=optimized, once=True)
        results = run_watched(session, names, feeds)
    except RunStopped as error:
        raise ModelError(path, f"{cause}: {error}") from error
    except Exception as error:  # onnxruntime raises several unrelated exception types
        raise RuntimeRefusal(path, f"{cause}: {describe_error(error)}") from error
    return {name: value for name, value in zip(names, results) if isinstance(value, np.ndarray)}


def run_watched(session: ort.InferenceSession, names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[Any]:
    """``session.run(names, feeds)``, stopped (raising :class:`RunStopped`) when it goes over a limit."""
    options = ort.RunOptions()
    options.log_severity_level = _LOG_FATAL_ONLY
    watch = _WATCHDOG.watch(options)
    try:
        return session.run(names, feeds, options)
    except Exception as error:  # onnxruntime's exception types are not part of its API
        reason = _WATCHDOG.release(watch)
        if reason is not None:
            raise RunStopped(f"{reason}, so onnxruntime stopped it") from error
        raise
    finally:
        _WATCHDOG.release(watch)


class _Watch:
    """One watched run: its options (to stop it), and where it started in time and memory."""

    def __init__(self, options: ort.RunOptions) -> None:
        self.options = options
        self.start, self.base, self.limit = time.monotonic(), _resident_bytes(), memory_limit()
        self.reason: str | None = None

    def over_limit(self) -> str | None:
        resident = _resident_bytes()
        if time.monotonic() - self.start > RUN_TIME_LIMIT_S:
            return f"one run did not finish within {RUN_TIME_LIMIT_S:g} s"
        if self.base is not None and resident is not None and resident - self.base > self.limit:
            return f"one run needed more than {format_bytes(self.limit)} of memory (the memory limit)"
        return None


class _Watchdog:
    """The process's one watchdog thread, started at the first watched run and asleep between runs.

    A thread started and joined for each run cost a brick's first run 0.2 ms at the median and
    several milliseconds on a busy machine, more than many bricks take to run.
    """

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._watches: set[_Watch] = set()
        self._thread: threading.Thread | None = None

    def watch(self, options: ort.RunOptions) -> _Watch:
        watch = _Watch(options)
        with self._wake:
            self._watches.add(watch)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="dlbricks-watchdog", daemon=True)
                self._thread.start()
            self._wake.notify()
        return watch

    def release(self, watch: _Watch) -> str | None:
        """Stop watching ``watch``'s run; returns why the watchdog stopped it, if it did."""
        with self._wake:
            self._watches.discard(watch)
            return watch.reason

    def _loop(self) -> None:
        with self._wake:
            while True:
                if not self._watches:
                    self._wake.wait()
                    continue
                self._wake.wait(POLL_S)
                for watch in list(self._watches):
                    reason = watch.over_limit() if watch.reason is None else None
                    if reason is not None:
                        watch.reason = reason
                        watch.options.terminate = True


_WATCHDOG = _Watchdog()


def _resident_bytes() -> int | None:
    """The process's resident memory, where the system tells it cheaply (Linux), else None."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def bind(
    session: ort.InferenceSession, feeds: dict[str, np.ndarray], placed: Mapping[str, np.ndarray] | None = None
) -> ort.SIOBinding | None:
    """Inputs bound in place and outputs left to onnxruntime's allocator (or written into the arrays
    ``placed`` gives by output name), for calls that copy nothing; None for inputs or outputs onnxruntime
    cannot bind (see :func:`_bindable`), which ``run()`` then takes, converting every output.

    ``run()`` would copy every output into a new numpy array: for a brick, a cost the layers do not
    pay inside the model, where a layer's output stays in onnxruntime's memory for the next layer.
    The inputs are the arrays of ``feeds`` themselves, so rewriting them in place is what runs.
    """
    if any(array.dtype.kind in "OSU" for array in feeds.values()) or not all(
        _bindable(output.type) for output in session.get_outputs()
    ):
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


def _bindable(output_type: str) -> bool:
    """Whether onnxruntime can hand an output of this type (``tensor(float)``, ``seq(map(int64,tensor(float)))``)
    to a binding call after call: tensors of numbers, and ZipMap's sequences of maps of numbers, which it
    fills anew each call. Not strings (a bound string output crashed the process), nor sequences of tensors
    (a bound one grew by the call's tensors each call)."""
    if "string" in output_type:
        return False
    return output_type.startswith(("tensor(", "seq(map("))


def declared_shapes_hold(session: ort.InferenceSession, results: Sequence[np.ndarray]) -> bool:
    """Whether every output has the rank and fixed sizes the model declares for it.

    A binding hands the outputs of one call to the next as arrays to write into, and onnxruntime
    checks those against the declared shapes: an output the model declares wrongly (``run()`` only
    warns) then fails every call but the first. Such a model needs its outputs bound afresh each call.
    """
    for output, result in zip(session.get_outputs(), results):
        declared = output.shape or ()
        if declared and (
            len(declared) != result.ndim
            or any(isinstance(size, int) and size != actual for size, actual in zip(declared, result.shape))
        ):
            return False
    return True


def rebind_outputs(session: ort.InferenceSession, binding: ort.SIOBinding) -> None:
    """The outputs left to onnxruntime's allocator again, for a model whose declared shapes do not hold."""
    binding.clear_binding_outputs()
    for output in session.get_outputs():
        binding.bind_output(output.name, "cpu")


def input_rewriter(array: np.ndarray) -> Callable[[], object]:
    """A call that writes ``array`` again in place, unchanged (it adds zero), on onnxruntime's threads."""
    session = _rewrite_session(array.dtype.str, array.shape)
    value = ort.OrtValue.ortvalue_from_numpy(array)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", value)
    binding.bind_ortvalue_output("y", value)
    return lambda: session.run_with_iobinding(binding)


@functools.lru_cache(maxsize=256)
def _rewrite_session(dtype: str, shape: tuple[int, ...]) -> ort.InferenceSession:
    """The session that adds zero to arrays of one type and shape, shared by their rewriters: each binds
    its own array, and a session costs more to create than a brick costs to run."""
    helper = onnx.helper
    element_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "zero"], ["y"])],
        "rewrite",
        [helper.make_tensor_value_info("x", element_type, shape)],
        [helper.make_tensor_value_info("y", element_type, shape)],
        [onnx.numpy_helper.from_array(np.zeros((), dtype), "zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = MIN_IR_VERSION
    options = session_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def profile(
    model: onnx.ModelProto,
    settings: Settings,
    feeds: dict[str, np.ndarray],
    *,
    parallel: bool = False,
    optimized: bool = False,
    runs: int = 1,
) -> list[dict[str, Any]]:
    """onnxruntime's profile of ``runs`` runs of ``model``: their trace events (each node's kernel,
    provider, types, time and use of the thread pool among them); ``optimized`` as for :func:`session_options`."""
    with tempfile.TemporaryDirectory(prefix="dlbricks-profile-") as folder:
        session = create_session(
            model, settings, parallel=parallel, profile_to=Path(folder) / "run", optimized=optimized
        )
        for _ in range(runs):
            session.run(None, feeds)
        events: list[dict[str, Any]] = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
        return events
