"""Unit tests of the watchdog: onnxruntime runs that go over the time or memory limit are stopped."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnxruntime as ort
import pytest
import tiny_models
from hostile_models import never_ending_loop
from onnx import helper

from pytest_dlbricks import runtime
from pytest_dlbricks.runtime import RunStopped, create_session, run_watched

FEEDS = {"x": np.ones((2, 4), np.float32)}


def session(*, stacking: bool) -> ort.InferenceSession:
    model = never_ending_loop(stacking=stacking)
    return create_session(model)


def test_a_run_over_the_time_limit_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "RUN_TIME_LIMIT_S", 0.3)
    start = time.perf_counter()
    with pytest.raises(RunStopped, match=r"^one run did not finish within 0.3 s, so onnxruntime stopped it$"):
        run_watched(session(stacking=False), None, FEEDS)
    assert time.perf_counter() - start < 10


@pytest.mark.skipif(runtime._resident_bytes() is None, reason="the resident size cannot be read here")
def test_a_run_over_the_memory_limit_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "memory_limit", lambda: 64 << 20)
    with pytest.raises(RunStopped, match=r"^one run needed more than 64.0 MiB of memory \(the memory limit\)"):
        run_watched(session(stacking=True), None, FEEDS)


def test_a_run_within_the_limits_returns_its_results_and_leaves_no_thread() -> None:
    relu = tiny_models.finish(
        [helper.make_node("Relu", ["x"], ["y"])], [tiny_models.tensor("x", [2, 4])], [tiny_models.tensor("y", [2, 4])]
    )
    quick = create_session(relu)
    threads = threading.active_count()
    (result,) = run_watched(quick, None, {"x": -FEEDS["x"]})
    assert not result.any()
    assert threading.active_count() == threads
