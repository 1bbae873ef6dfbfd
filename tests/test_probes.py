"""Unit tests of the run's own measurements through onnxruntime: the machine's peak and model load times."""

from __future__ import annotations

import time
from pathlib import Path

import tiny_models

from pytest_dlbricks.probes import (
    CONCURRENT_BELOW,
    MIN_RUNS,
    describe_machine,
    detect_executor,
    measure_peak,
    measure_run,
    time_session_creation,
)
from pytest_dlbricks.settings import Settings

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
    assert found.concurrent == (found.ratio < CONCURRENT_BELOW)
    assert found.threads >= 1 and (found.concurrent or found.threads == 1)
    assert "MatMul" in found.graph
    assert found.as_json()["concurrent_below"] == CONCURRENT_BELOW
