"""Measurements made once per run through onnxruntime, beside the brick benchmarks.

* The machine's peak: a float32 GEMM (MatMul by a weight onnxruntime pre-packs, as in a model) and a
  large elementwise Add, each run for a short time budget with the run's session settings; the best
  run gives the GEMM FLOP/s and the bandwidth. Together they take a few hundred milliseconds at most.
* Each model's load time: how long onnxruntime takes to create a session for the model file with
  the run's settings (reading the file, optimizing the graph, pre-packing weights), measured once.
"""

from __future__ import annotations

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
