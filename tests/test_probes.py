"""Unit tests of the run's own measurements through onnxruntime: the machine's peak and model load times."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import tiny_models

from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.timing import probes
from pytest_dlbricks.timing.probes import (
    CONCURRENT_BELOW,
    LADDER_SIZES,
    MIN_RUNS,
    describe_machine,
    detect_executor,
    measure_peak,
    measure_pool_slowdown,
    measure_run,
    nodes_at_once,
    runs_nodes_at_once,
    time_session_creation,
)

ONE_THREAD = Settings(granularity=1, intra_op_threads=1)


def test_peak_is_measured_within_its_budget() -> None:
    start = time.perf_counter()
    peak = measure_peak(ONE_THREAD, budget_s=0.01, gemm_size=128)
    assert time.perf_counter() - start < 2.0
    # Any CPU of the last decades does a 128 x 128 GEMM faster than 10 MFLOP/s and moves more than 10 MB/s.
    assert 1e7 < peak.flops_per_s < 1e14
    assert 1e7 < peak.bytes_per_s < 1e13
    assert str(peak.method["gemm"]).startswith("MatMul float32 128x128 by 128x128, best of ")
    runs = int(str(peak.method["gemm"]).rsplit("best of ", 1)[1].split()[0])
    assert runs >= MIN_RUNS
    assert "Add float32" in str(peak.method["bandwidth"])


def test_session_creation_is_timed_from_the_file(tmp_path: Path) -> None:
    seconds = time_session_creation(tiny_models.chain(tmp_path), ONE_THREAD)
    assert 0 < seconds < 10


def test_measure_run_times_every_model_and_reports_those_it_cannot_load(tmp_path: Path) -> None:
    good = tiny_models.chain(tmp_path)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    measured = measure_run(ONE_THREAD, {"good.onnx": good, "bad.onnx": bad})
    assert set(measured.load_s) == {"good.onnx"} and measured.load_s["good.onnx"] > 0
    assert set(measured.load_errors) == {"bad.onnx"}
    assert measured.load_errors["bad.onnx"].startswith("onnxruntime cannot create a session for the model: ")
    assert measured.peak is not None and measured.peak.flops_per_s > 0
    assert measured.machine == describe_machine()


def test_machine_description() -> None:
    machine = describe_machine()
    assert set(machine) == {"cpu", "cores", "platform", "python"}
    assert machine["cpu"] and isinstance(machine["cores"], int)


def test_the_parallel_executor_is_tried_on_a_branchy_graph_and_decided_from_its_figures() -> None:
    """Whether nodes overlap depends on the onnxruntime release and the machine: only the verdict's
    consistency with its own figures is fixed."""
    start = time.perf_counter()
    found = detect_executor(ONE_THREAD, rounds=3)
    assert time.perf_counter() - start < 5.0
    assert found.sequential_s > 0 and found.parallel_s > 0 and found.rounds == 3
    assert found.concurrent == (found.ratio < CONCURRENT_BELOW and found.nodes_at_once != 0)
    assert found.nodes_at_once is not None and found.nodes_at_once >= 0, "the CPU provider's profile has node times"
    assert found.threads >= 1 and (found.concurrent or found.threads == 1)
    assert "MatMul" in found.graph
    assert found.as_json()["concurrent_below"] == CONCURRENT_BELOW


def test_the_parallel_executors_cost_for_layers_using_the_pool_is_measured_in_fresh_sessions() -> None:
    """How much slower such layers run depends on the machine and the scheduler: only the figures'
    consistency is fixed."""
    start = time.perf_counter()
    found = measure_pool_slowdown(ONE_THREAD, sessions=2)
    assert time.perf_counter() - start < 5.0
    assert len(found.sessions) == 2 and all(s > 0 and p > 0 for s, p in found.sessions)
    sequential, parallel = zip(*found.sessions)
    assert found.factor == pytest.approx(np.mean(parallel) / np.median(sequential))
    assert found.layer_s is None or 0 < found.layer_s < 1.0
    assert "MatMul" in found.graph and "2 fresh sessions of each executor, the sequential ones first" in found.graph
    detected = detect_executor(ONE_THREAD, rounds=3).as_json()
    pool = detected["pool"]
    assert isinstance(pool, dict) and set(pool) == {"factor", "layer_s", "sessions", "rounds", "graph"}


def test_every_sequential_session_is_timed_before_the_first_parallel_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parallel run slows the sequential runs that follow it: none may follow one."""
    order: list[bool] = []

    def timed(model: object, feeds: object, settings: object, rounds: int, *, parallel: bool) -> float:
        order.append(parallel)
        return 3e-3 if parallel else 1e-3

    monkeypatch.setattr(probes, "_session_median", timed)
    monkeypatch.setattr(probes, "_smallest_pool_layer", lambda settings: None)
    found = measure_pool_slowdown(ONE_THREAD, sessions=4)
    assert order == [False] * 4 + [True] * 4
    assert found.factor == pytest.approx(3.0) and found.sessions == [(1e-3, 3e-3)] * 4


def kernel_event(name: str, seconds: float, blocks: list[int] | None) -> dict[str, object]:
    """A node's kernel in onnxruntime's profile; ``blocks``: how the node divided its work (None: no stats)."""
    stats = None if blocks is None else {"main_thread": {"block_size": blocks}, "sub_threads": {}}
    return {
        "cat": "Node",
        "name": f"{name}_kernel_time",
        "dur": seconds * 1e6,
        "args": {"thread_scheduling_stats": stats},
    }


@pytest.mark.parametrize(
    ("pooled", "expected"),
    [
        ({128, 256, 512}, 128e-6),
        (set(LADDER_SIZES) - {32}, 64e-6),  # a smaller size that divided its work does not count
        (set(), None),
    ],
)
def test_layers_use_the_pool_from_the_smallest_size_whose_profile_says_so_with_all_larger_ones(
    monkeypatch: pytest.MonkeyPatch, pooled: set[int], expected: float | None
) -> None:
    """Each layer of a square MatMul of size n takes n us here; the sizes in ``pooled`` divide their work."""

    def profile(model: onnx.ModelProto, settings: Settings, feeds: dict[str, np.ndarray], runs: int) -> list[object]:
        size = feeds["x"].shape[0]
        blocks = [1, 1] if size in pooled else []
        return [kernel_event(f"n{layer}", size * 1e-6, blocks) for _ in range(runs) for layer in (0, 1)]

    monkeypatch.setattr(probes, "profile", profile)
    assert LADDER_SIZES == (16, 32, 64, 128, 256, 512)
    assert probes._smallest_pool_layer(ONE_THREAD) == (None if expected is None else pytest.approx(expected))


def test_a_layer_uses_the_pool_when_its_thread_scheduling_shows_a_division_of_work() -> None:
    events = [
        kernel_event("a", 3e-6, []),
        kernel_event("a", 5e-6, []),
        kernel_event("b", 7e-6, [4, 4]),
        kernel_event("c", 2e-6, None),
        {"cat": "Session", "name": "model_run", "dur": 100},
    ]
    assert probes._pool_layers(events) == [(4e-6, False), (7e-6, True), (2e-6, False)]


def kernel(name: str, start: int, duration: int) -> dict[str, object]:
    """A node's kernel event as onnxruntime's profile writes it (microseconds)."""
    return {"cat": "Node", "name": f"{name}_kernel_time", "ts": start, "dur": duration}


def test_nodes_at_once_counts_kernels_that_started_before_an_earlier_one_ended() -> None:
    one_by_one = [kernel("a", 0, 10), kernel("b", 10, 5), kernel("c", 20, 5)]
    assert nodes_at_once(one_by_one) == 0
    # b and c start while a (the longest) still runs; d starts after all of them.
    overlapped = [kernel("a", 0, 30), kernel("b", 5, 5), kernel("c", 12, 5), kernel("d", 31, 2)]
    assert nodes_at_once(overlapped) == 2
    assert nodes_at_once([{"cat": "Session", "name": "model_run", "ts": 0, "dur": 40}]) is None


def test_only_a_profile_that_shows_nodes_at_once_lets_a_faster_parallel_executor_count_as_concurrent() -> None:
    assert runs_nodes_at_once(0.55, 4)
    assert not runs_nodes_at_once(0.79, 0), "the machine's speed moved between rounds: the profile says no"
    assert runs_nodes_at_once(0.55, None), "no node times in the profile: the ratio decides"
    assert not runs_nodes_at_once(1.02, 4) and not runs_nodes_at_once(1.02, None)
