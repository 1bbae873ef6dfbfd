"""Measurements made once per run through onnxruntime, beside the brick benchmarks.

* The machine's peak: a float32 GEMM (MatMul by a weight onnxruntime pre-packs, as in a model) and a
  large elementwise Add, each run for a short time budget with the run's session settings; the best
  run gives the GEMM FLOP/s and the bandwidth. Together they take a few hundred milliseconds at most.
* Each model's load time: how long onnxruntime takes to create a session for the model file with
  the run's settings (reading the file, optimizing the graph, pre-packing weights), measured once.
* What onnxruntime's parallel executor does with independent nodes (:func:`detect_executor`): since
  1.14, onnxruntime puts every CPU node into one stream, so ORT_PARALLEL runs one node at a time
  there; another version or provider may not. Decided from a measurement, never assumed.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import describe_error
from .graph import MIN_IR_VERSION
from .runtime import create_session
from .settings import Settings

#: Side of the square GEMM: large enough to reach the peak, small enough to run in milliseconds.
GEMM_SIZE = 512
#: Elements of each operand of the bandwidth Add (16 MiB each in float32): larger than the usual L2.
BANDWIDTH_ELEMENTS = 1 << 22
#: Seconds each micro-benchmark runs for, after one warm-up run; it stops earlier at MAX_RUNS.
BUDGET_S = 0.1
MIN_RUNS = 3
MAX_RUNS = 100
_OPSET = 13


@dataclass(frozen=True)
class Peak:
    """What this machine reaches through onnxruntime with the run's settings, measured in the run."""

    flops_per_s: float
    bytes_per_s: float
    #: How it was measured, as recorded in the report.
    method: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class RunMeasurements:
    """Measurements made once per run beside the brick benchmarks."""

    peak: Peak | None = None
    #: onnxruntime session creation time by model path, in seconds.
    load_s: Mapping[str, float] = field(default_factory=dict)
    #: Why a model's session could not be created, by model path.
    load_errors: Mapping[str, str] = field(default_factory=dict)
    machine: Mapping[str, object] = field(default_factory=dict)


def measure_peak(settings: Settings | None = None, budget_s: float = BUDGET_S, gemm_size: int = GEMM_SIZE) -> Peak:
    """The best GEMM FLOP/s and elementwise bandwidth onnxruntime reaches here with ``settings``."""
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    gemm_s, gemm_runs = _best_time(
        _model("MatMul", [("a", [gemm_size, gemm_size])], [gemm_size, gemm_size], weight=(gemm_size, gemm_size)),
        {"a": rng.uniform(0.5, 1.5, (gemm_size, gemm_size)).astype(np.float32)},
        settings,
        budget_s,
    )
    elements = BANDWIDTH_ELEMENTS
    add_s, add_runs = _best_time(
        _model("Add", [("a", [elements]), ("b", [elements])], [elements]),
        {"a": np.ones(elements, np.float32), "b": np.ones(elements, np.float32)},
        settings,
        budget_s,
    )
    return Peak(
        flops_per_s=2 * gemm_size**3 / gemm_s,
        bytes_per_s=3 * 4 * elements / add_s,
        method={
            "gemm": f"MatMul float32 {gemm_size}x{gemm_size} by {gemm_size}x{gemm_size}, best of {gemm_runs} runs",
            "bandwidth": f"Add float32 of {elements} elements (reads 2, writes 1), best of {add_runs} runs",
            "measure_s": time.perf_counter() - started,
        },
    )


def time_session_creation(path: Path, settings: Settings | None = None) -> float:
    """Seconds onnxruntime takes to create a session from the model file, with the run's settings."""
    start = time.perf_counter()
    create_session(path, settings)
    return time.perf_counter() - start


def measure_run(settings: Settings, models: Mapping[str, Path]) -> RunMeasurements:
    """The machine's peak, and the load time of each model (by report path) in ``models``."""
    peak = measure_peak(settings)  # first: it also warms onnxruntime up for the load times
    load_s: dict[str, float] = {}
    load_errors: dict[str, str] = {}
    for name, path in models.items():
        try:
            load_s[name] = time_session_creation(path, settings)
        except Exception as error:  # onnxruntime's exception types are not part of its API
            load_errors[name] = f"onnxruntime cannot create a session for the model: {describe_error(error)}"
    return RunMeasurements(peak=peak, load_s=load_s, load_errors=load_errors, machine=describe_machine())


def describe_machine() -> dict[str, object]:
    """The processor, its logical cores, the operating system and Python, as the report records them."""
    return {
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _model(
    op: str, inputs: list[tuple[str, list[int]]], output: list[int], weight: tuple[int, int] | None = None
) -> onnx.ModelProto:
    initializers = []
    names = [name for name, _ in inputs]
    if weight is not None:
        initializers.append(numpy_helper.from_array(np.full(weight, 0.01, np.float32), "w"))
        names.append("w")
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"])],
        f"peak_{op.lower()}",
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape) for name, shape in inputs],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, output)],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="pytest-dlbricks")
    model.ir_version = max(MIN_IR_VERSION, 7)
    return model


def _best_time(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], settings: Settings | None, budget_s: float
) -> tuple[float, int]:
    """The fastest of repeated runs of ``model`` within ``budget_s`` seconds, and how many runs there were."""
    session = create_session(model, settings)
    session.run(None, feeds)  # warm-up: first-run allocations and thread pool start
    best = float("inf")
    runs = 0
    deadline = time.perf_counter() + budget_s
    while runs < MIN_RUNS or (runs < MAX_RUNS and time.perf_counter() < deadline):
        start = time.perf_counter()
        session.run(None, feeds)
        best = min(best, time.perf_counter() - start)
        runs += 1
    return best, runs


#: The branchy graph the parallel executor is tried on: two independent chains of MatMuls, big enough
#: to measure (each run takes milliseconds) and small enough to detect in a fraction of a second.
BRANCHES = 2
CHAIN_LENGTH = 6
CHAIN_SIZE = 128
DETECTION_ROUNDS = 7
#: Parallel over sequential time below which the parallel executor runs independent nodes at once.
#: Two equal chains overlapped take half the time (0.5); one node at a time takes the sequential
#: time plus the executor's own cost (1 or more). The margin between lies far outside the noise.
CONCURRENT_BELOW = 0.8


@dataclass(frozen=True)
class ExecutorDetection:
    """What onnxruntime's parallel executor does with independent nodes here, measured in the run.

    The same branchy graph is timed under the sequential and the parallel executor, interleaved; the
    median of the rounds' parallel / sequential ratios decides (see :data:`CONCURRENT_BELOW`).
    """

    concurrent: bool
    #: Nodes the parallel executor may run at once: its inter-op threads, 1 when it runs one at a time.
    threads: int
    sequential_s: float
    parallel_s: float
    ratio: float
    rounds: int
    graph: str

    def as_json(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "concurrent_below": CONCURRENT_BELOW}


def detect_executor(settings: Settings | None = None, rounds: int = DETECTION_ROUNDS) -> ExecutorDetection:
    """Whether the installed onnxruntime and the run's providers run independent nodes at once under
    the parallel executor, with the run's thread settings: the executor a user of these settings gets."""
    model = _branchy_model(BRANCHES, CHAIN_LENGTH, CHAIN_SIZE)
    feeds = {"x": np.full((CHAIN_SIZE, CHAIN_SIZE), 1.0, np.float32)}
    sessions = {parallel: create_session(model, settings, parallel=parallel) for parallel in (False, True)}
    for session in sessions.values():
        session.run(None, feeds)  # first-run allocations and thread start
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for parallel, session in sessions.items():
            start = time.perf_counter()
            session.run(None, feeds)
            times[parallel].append(time.perf_counter() - start)
    ratio = float(np.median([p / s for p, s in zip(times[True], times[False])]))
    concurrent = ratio < CONCURRENT_BELOW
    return ExecutorDetection(
        concurrent=concurrent,
        threads=inter_op_threads() if concurrent else 1,
        sequential_s=float(np.median(times[False])),
        parallel_s=float(np.median(times[True])),
        ratio=ratio,
        rounds=rounds,
        graph=f"{BRANCHES} independent chains of {CHAIN_LENGTH} MatMuls {CHAIN_SIZE}x{CHAIN_SIZE} float32",
    )


def inter_op_threads() -> int:
    """The threads onnxruntime's parallel executor gets by default here: one per core."""
    return os.cpu_count() or 1


def _branchy_model(branches: int, length: int, size: int) -> onnx.ModelProto:
    nodes, weights, outputs = [], [], []
    for branch in range(branches):
        previous = "x"
        for step in range(length):
            weight, output = f"w{branch}_{step}", f"y{branch}_{step}"
            weights.append(numpy_helper.from_array(np.full((size, size), 1.0 / size, np.float32), weight))
            nodes.append(helper.make_node("MatMul", [previous, weight], [output]))
            previous = output
        outputs.append(previous)
    graph = helper.make_graph(
        nodes,
        "branches",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [size, size])],
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [size, size]) for name in outputs],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="pytest-dlbricks")
    model.ir_version = max(MIN_IR_VERSION, 7)
    return model
