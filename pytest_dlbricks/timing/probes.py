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
import itertools
import os
import platform
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..core.errors import describe_error
from ..core.graph import MIN_IR_VERSION
from ..core.identity import cpuinfo_field
from ..core.placement import kernel_events
from ..core.runtime import create_session, profile
from ..core.settings import Settings
from ..core.wording import plural

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
    """What this machine reaches through onnxruntime with the run's settings, measured in a run with them."""

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


def measure_run(settings: Settings, models: Mapping[str, Path], peak: Peak | None = None) -> RunMeasurements:
    """The machine's peak (``peak``, measured now where not given), and the load time of each model (by report
    path) in ``models``."""
    if peak is None:
        peak = measure_peak(settings)
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
    return cpuinfo_field("model name") or platform.processor() or platform.machine() or "unknown"


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
#: Bump whenever the detection changes (its graphs, rounds, sessions, what it decides): detections kept
#: in the brick store by the old way are then made again. 3: onnxruntime's profile must show nodes at once.
DETECTION_METHOD = 3
#: Parallel over sequential time below which the parallel executor runs independent nodes at once.
#: Two equal chains overlapped take half the time (0.5); one node at a time takes the sequential
#: time plus the executor's own cost (1 or more). On a quiet machine the margin between lies far outside
#: the noise; on a shared one a detection of one node at a time came within 0.01 of it, so the profile has
#: a say too.
CONCURRENT_BELOW = 0.8
#: Profiled runs of the branchy graph under the parallel executor, whose node times say whether any ran at once.
PROFILED_RUNS = 3
#: The chain the parallel executor's cost for layers using the intra-op pool is timed on: MatMuls of
#: MIXED_ROWS rows whose widths cycle through MIXED_WIDTHS, layers of tens to hundreds of
#: microseconds, as in a model. Its time under the parallel executor takes one of a few values that
#: stay with the session (a layer's share of work may wait for the scheduler's next time slice, or
#: not: 3.5 or 8 ms on a 2-core machine where the sequential executor takes 1.75 ms), so the chain is
#: timed in MIXED_SESSIONS fresh sessions of each executor, and the parallel ones' times averaged.
MIXED_ROWS = 128
MIXED_WIDTHS = (64, 256, 128, 512, 192, 384)
MIXED_CYCLES = 3
MIXED_SESSIONS = 12
#: Timed runs of each session (the state that matters stays with the session).
MIXED_ROUNDS = 3
#: The sizes of the square MatMuls whose profile says from which time on a layer uses the pool: from
#: layers onnxruntime runs on one thread to layers it splits over its intra-op thread pool.
LADDER_SIZES = (16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class PoolSlowdown:
    """How much slower the layers that split their work over onnxruntime's intra-op thread pool run
    under the parallel executor than under the sequential one, measured in the run.

    Under the parallel executor a run goes through its inter-op threads, which compete with the
    intra-op pool for the cores: where the pool has more than one thread, a layer that splits its
    work waits for its share to be scheduled (on 2 cores with onnxruntime's defaults, such layers
    take two to five times as long); layers that run on one thread are not slowed. Which layers
    split their work, onnxruntime decides from their size: its profile says from which time on.

    A session keeps the speed it starts with: of 12 fresh sessions of the parallel executor, each ran
    the chain in 3.4-4.6 ms or in 7.4-8.0 ms, call after call, the share of slow ones 3 to 9 of 12 from
    run to run (2 cores, onnxruntime 1.32; with the intra-op pool told not to spin,
    ``session.intra_op.allow_spinning=0``, 24 of 24 ran in 3.5-4.6 ms). Hence fresh sessions, and their mean:
    a model's one session may have either speed.
    """

    #: The chain's mean time under the parallel executor, over fresh sessions, over its median time under
    #: the sequential one, over as many fresh sessions timed before them.
    factor: float
    #: Sequential seconds of the smallest layer that split its work over the pool (all larger ones did
    #: too); None when none did (one intra-op thread, or a profile that does not say).
    layer_s: float | None
    #: Each session's median seconds: the i-th sequential session's and the i-th parallel session's.
    sessions: list[tuple[float, float]]
    rounds: int
    graph: str


@dataclass(frozen=True)
class ExecutorDetection:
    """What onnxruntime's parallel executor does with independent nodes here, measured in the run.

    The same branchy graph is timed under the sequential and the parallel executor, interleaved, and
    profiled under the parallel one: it runs nodes at once where the median of the rounds' parallel /
    sequential ratios is under :data:`CONCURRENT_BELOW` and its profile shows nodes running at once (the
    ratio alone where the profile gives no node times). Timings alone are at the mercy of the machine's
    speed between rounds; a profile is not.
    """

    concurrent: bool
    #: Nodes the parallel executor may run at once: its inter-op threads, 1 when it runs one at a time.
    threads: int
    sequential_s: float
    parallel_s: float
    ratio: float
    rounds: int
    graph: str
    #: Its cost for the layers that use the intra-op thread pool (None: not measured).
    pool: PoolSlowdown | None = None
    #: Nodes onnxruntime's profile of :data:`PROFILED_RUNS` runs under the parallel executor shows starting
    #: while another ran; None where the profile gave no node times (reports of older versions lack it).
    nodes_at_once: int | None = None

    def as_json(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "concurrent_below": CONCURRENT_BELOW}


def detect_executor(
    settings: Settings | None = None, rounds: int = DETECTION_ROUNDS, *, pool: bool = True
) -> ExecutorDetection:
    """Whether the installed onnxruntime and the run's providers run independent nodes at once under
    the parallel executor, with the run's thread settings, and (``pool``) what it costs the layers that
    use the intra-op thread pool: the executor a user of these settings gets. The branchy graph alone
    takes a fraction of the whole: the pool's cost, most of a second, is measured only for a parallel
    estimate (see :func:`with_pool_slowdown`)."""
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
    # Released before the pool is measured: the parallel session's threads would compete with it.
    del sessions, session
    ratio = float(np.median([p / s for p, s in zip(times[True], times[False])]))
    at_once = nodes_at_once(
        profile(model, settings or Settings(granularity=1), feeds, parallel=True, runs=PROFILED_RUNS)
    )
    concurrent = runs_nodes_at_once(ratio, at_once)
    return ExecutorDetection(
        concurrent=concurrent,
        threads=inter_op_threads() if concurrent else 1,
        sequential_s=float(np.median(times[False])),
        parallel_s=float(np.median(times[True])),
        ratio=ratio,
        rounds=rounds,
        graph=f"{BRANCHES} independent chains of {CHAIN_LENGTH} MatMuls {CHAIN_SIZE}x{CHAIN_SIZE} float32",
        pool=measure_pool_slowdown(settings) if pool else None,
        nodes_at_once=at_once,
    )


def with_pool_slowdown(detection: ExecutorDetection, settings: Settings | None = None) -> ExecutorDetection:
    """``detection`` with the parallel executor's cost for layers that use the intra-op pool, measured
    now where it lacks it."""
    if detection.pool is not None:
        return detection
    return dataclasses.replace(detection, pool=measure_pool_slowdown(settings))


def runs_nodes_at_once(ratio: float, at_once: int | None) -> bool:
    """The verdict: the parallel executor was faster by the margin, and its profile, where it gives node
    times, shows nodes that ran at once."""
    return ratio < CONCURRENT_BELOW and at_once != 0


def nodes_at_once(events: list[dict[str, Any]]) -> int | None:
    """How many of the profile's node kernels started before an earlier one ended (runs follow one another,
    so only nodes of one run can overlap); None when the profile has no node times."""
    spans = sorted((event["ts"], event["ts"] + event["dur"]) for event in kernel_events(events))
    if not spans:
        return None
    ends = itertools.accumulate((end for _, end in spans[:-1]), max)
    return sum(1 for (start, _), latest_end in zip(spans[1:], ends, strict=True) if start < latest_end)


def measure_pool_slowdown(settings: Settings | None = None, sessions: int = MIXED_SESSIONS) -> PoolSlowdown:
    """The parallel executor's cost for layers that split their work over the intra-op pool (see
    :class:`PoolSlowdown`), with the run's settings.

    Every sequential session is timed before the first parallel one: after a run of the parallel
    executor, its threads slow the sequential runs of the next tens of milliseconds. Timed in pairs,
    the sequential half of each pair followed the last pair's parallel half: on a 2-core machine its
    runs took 1.6 to 8.0 ms where, timed apart, they take 1.5 to 2.3 ms, and the factor read 1.9-2.8x
    where it is 3.2-4.3x.
    """
    widths = (*MIXED_WIDTHS * MIXED_CYCLES, MIXED_WIDTHS[0])
    chain = _matmul_chain(MIXED_ROWS, widths)
    feeds = {"x": np.full((MIXED_ROWS, widths[0]), 1.0, np.float32)}
    layer_s = _smallest_pool_layer(settings or Settings(granularity=1))
    sequential = [_session_median(chain, feeds, settings, MIXED_ROUNDS, parallel=False) for _ in range(sessions)]
    parallel = [_session_median(chain, feeds, settings, MIXED_ROUNDS, parallel=True) for _ in range(sessions)]
    return PoolSlowdown(
        factor=float(np.mean(parallel) / np.median(sequential)),
        layer_s=layer_s,
        sessions=list(zip(sequential, parallel)),
        rounds=MIXED_ROUNDS,
        graph=f"a chain of {len(widths) - 1} MatMuls of {MIXED_ROWS} rows float32, widths"
        f" {', '.join(map(str, MIXED_WIDTHS))} in turn, in {plural(sessions, 'fresh session')} of each executor,"
        " the sequential ones first",
    )


def _smallest_pool_layer(settings: Settings, runs: int = MIXED_ROUNDS) -> float | None:
    """Sequential seconds of the smallest square MatMul of :data:`LADDER_SIZES` that split its work over
    the intra-op pool, all larger ones too, from onnxruntime's profile; None when the largest did not."""
    smallest = None
    for size in reversed(LADDER_SIZES):
        feeds = {"x": np.full((size, size), 1.0, np.float32)}
        layers = _pool_layers(profile(_matmul_chain(size, (size, size, size)), settings, feeds, runs=runs))
        if not layers or not all(pooled for _, pooled in layers):
            break
        smallest = float(np.median([seconds for seconds, _ in layers]))
    return smallest


def _session_median(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], settings: Settings | None, rounds: int, *, parallel: bool
) -> float:
    """Median seconds of a run of ``model`` in a new session of the sequential or the parallel executor."""
    session = create_session(model, settings, parallel=parallel)
    session.run(None, feeds)  # first-run allocations and thread start
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _pool_layers(events: list[dict[str, Any]]) -> list[tuple[float, bool]]:
    """Each layer's median seconds and whether it split its work over the intra-op thread pool, from
    onnxruntime's profile (a layer's thread scheduling says how it divided its work, if it did)."""
    durations: dict[str, list[float]] = {}
    pooled: dict[str, bool] = {}
    for event in kernel_events(events):
        name = event["name"]
        durations.setdefault(name, []).append(event["dur"] * 1e-6)
        stats = event.get("args", {}).get("thread_scheduling_stats") or {}
        pooled[name] = pooled.get(name, False) or bool((stats.get("main_thread") or {}).get("block_size"))
    return [(float(np.median(seconds)), pooled[name]) for name, seconds in durations.items()]


def detection_conditions() -> dict[str, int]:
    """What a detection depends on besides the machine and the settings the brick store keys it by:
    how it is made, and the parallel executor's threads."""
    return {"method": DETECTION_METHOD, "inter_op_threads": inter_op_threads()}


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


def _matmul_chain(rows: int, widths: tuple[int, ...]) -> onnx.ModelProto:
    """MatMuls of ``rows`` rows, each from one width of ``widths`` to the next."""
    nodes, weights = [], []
    previous = "x"
    for step, (width_in, width_out) in enumerate(itertools.pairwise(widths)):
        weight, output = f"w{step}", f"y{step}"
        weights.append(numpy_helper.from_array(np.full((width_in, width_out), 1.0 / width_in, np.float32), weight))
        nodes.append(helper.make_node("MatMul", [previous, weight], [output]))
        previous = output
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [rows, widths[0]])],
        [helper.make_tensor_value_info(previous, onnx.TensorProto.FLOAT, [rows, widths[-1]])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="pytest-dlbricks")
    model.ir_version = max(MIN_IR_VERSION, 7)
    return model
