"""Unit tests of the runtime module: what a process may ask of onnxruntime's shared thread pool, and watched
runs stopped when they go over the time or memory limit."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tiny_models
from hostile_models import never_ending_loop
from onnx import helper

from pytest_dlbricks.core import runtime
from pytest_dlbricks.core.placement import placement_of
from pytest_dlbricks.core.runtime import (
    RunStopped,
    ThreadPoolConflict,
    bind,
    create_session,
    new_options,
    run_watched,
    session_options,
    use_thread_pool,
)
from pytest_dlbricks.core.settings import Settings


@pytest.fixture
def pool_sizes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """A process that has not chosen yet; the sizes it gives onnxruntime are recorded, not applied."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(runtime, "_shared_threads", None)
    monkeypatch.setattr(runtime, "_asked", None)
    monkeypatch.setattr(runtime, "_runtime_shares_a_pool", lambda: False)
    monkeypatch.setattr(runtime._pybind_state, "set_global_thread_pool_sizes", lambda *sizes: calls.append(sizes))
    return calls


def test_sharing_sizes_the_pool_once_and_sessions_then_use_it(pool_sizes: list[tuple[int, int]]) -> None:
    assert new_options().use_per_session_threads
    use_thread_pool("shared", 2)
    use_thread_pool("shared", 2)
    assert pool_sizes == [(2, 0)]
    assert not new_options().use_per_session_threads


def test_sessions_on_the_shared_pool_are_given_no_size_of_their_own(pool_sizes: list[tuple[int, int]]) -> None:
    """The shared pool has the run's size; a size given a session there makes onnxruntime print a warning
    at every session (40 of them in a run of the samples on the parallel executor)."""
    settings = Settings(granularity=1, intra_op_threads=1)
    assert session_options(settings).intra_op_num_threads == 1
    use_thread_pool("shared", 1)
    assert session_options(settings).intra_op_num_threads == 0
    assert pool_sizes == [(1, 0)]


def test_per_session_pools_leave_onnxruntime_alone(pool_sizes: list[tuple[int, int]]) -> None:
    use_thread_pool("per-session", 3)
    assert pool_sizes == []
    assert new_options().use_per_session_threads


def test_a_shared_pool_cannot_be_resized_or_given_up(pool_sizes: list[tuple[int, int]]) -> None:
    use_thread_pool("shared", 0)
    with pytest.raises(ThreadPoolConflict, match=r"pool of onnxruntime.s default size.*to 4 threads"):
        use_thread_pool("shared", 4)
    with pytest.raises(ThreadPoolConflict, match="cannot give sessions their own pools again"):
        use_thread_pool("per-session", 0)
    assert pool_sizes == [(0, 0)]


def test_a_pool_shared_before_this_module_was_imported_again_is_kept(
    pool_sizes: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "_runtime_shares_a_pool", lambda: True)
    use_thread_pool("shared", 2)
    assert pool_sizes == [], "onnxruntime's pool is already there"
    assert not new_options().use_per_session_threads
    with pytest.raises(ThreadPoolConflict, match="cannot give sessions their own pools again"):
        use_thread_pool("per-session", 2)


def test_the_runtime_is_asked_whether_it_shares_a_pool() -> None:
    """Whatever this test process did before, the answer and the module's record agree."""
    assert runtime._runtime_shares_a_pool() == (runtime._shared_threads is not None)


def test_a_second_run_asking_for_other_threads_is_a_usage_error(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "_shared_threads", 0)
    result = pytester.runpytest("--dlbricks-granularity=1", "--dlbricks-threads=3", "models/mlp.onnx")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dlbricks-thread-pool: this process already shares one onnxruntime thread pool*"])


# -- watched runs -------------------------------------------------------------------------------

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


def test_runs_within_the_limits_return_their_results_and_share_one_watchdog_thread() -> None:
    relu = tiny_models.finish(
        [helper.make_node("Relu", ["x"], ["y"])], [tiny_models.tensor("x", [2, 4])], [tiny_models.tensor("y", [2, 4])]
    )
    quick = create_session(relu)
    run_watched(quick, None, FEEDS)
    threads = threading.active_count()
    for _ in range(3):
        (result,) = run_watched(quick, None, {"x": -FEEDS["x"]})
        assert not result.any()
    assert threading.active_count() == threads
    assert [thread.name for thread in threading.enumerate()].count("dlbricks-watchdog") == 1


# -- profiles -------------------------------------------------------------------------------------


def test_a_profile_lists_each_node_run_with_its_provider() -> None:
    """What placement and the accuracy work read: every node's kernel, named with its provider."""
    model = tiny_models.chain_model(blocks=2)
    model.ir_version = tiny_models.IR_VERSION
    session = create_session(model)
    feeds = {value.name: np.ones(value.shape, np.float32) for value in session.get_inputs()}
    settings = Settings(granularity=1, optimization="disable")
    kernels = [event for event in runtime.profile(model, settings, feeds) if event.get("cat") == "Node"]
    ops = [event["args"]["op_name"] for event in kernels if event["name"].endswith("_kernel_time")]
    assert ops == ["Conv", "Relu", "Conv", "Relu"]
    assert placement_of(kernels).providers == {"CPUExecutionProvider": 4}


def test_zipmap_maps_are_bound_but_strings_and_sequences_of_tensors_are_left_to_run(tmp_path: Path) -> None:
    """Bound, scikit-learn's usual export is timed like any model, without run()'s conversion of every output
    into Python objects (6 to 14 us a call, more than the model). Bound, a string output crashed the process and
    a sequence of tensors grew by the call's tensors each call: those take run()."""
    settings, feeds = Settings(granularity=2), {"x": np.ones((1, 4), np.float32)}
    session = create_session(tiny_models.zipmap_classifier(tmp_path), settings)
    binding = bind(session, feeds)
    assert binding is not None
    for _ in range(3):
        session.run_with_iobinding(binding)
    labels, maps = binding.copy_outputs_to_cpu()
    assert labels.shape == (1,) and [set(row) for row in maps] == [{0, 1, 2}], "filled anew, not appended to"
    for left in (tiny_models.zipmap_classifier(tmp_path, string_labels=True), tiny_models.tensor_sequence(tmp_path)):
        assert bind(create_session(left, settings), feeds) is None, left.name


@pytest.mark.parametrize(
    ("cost", "flags", "left_out"),
    [
        ("simulated", {"avx2", "avx512f"}, ["NchwcTransformer"]),
        ("simulated", {"avx2"}, []),
        ("wall-clock", {"avx2", "avx512f"}, []),
    ],
)
def test_simulated_costs_leave_the_nchwc_layout_out_where_valgrind_would_lay_it_out_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cost: str, flags: set[str], left_out: list[str]
) -> None:
    """valgrind hides AVX-512, so MLAS under it lays NCHWc blocks of 8 where the processor laid 16: a brick cut from
    the processor's graph fails under valgrind. Leaving the layout out of the cut (and of the whole models counted)
    keeps both alike."""
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: frozenset(flags))
    settings = Settings(granularity=1, cost=cost)
    assert runtime.disabled_optimizers(settings) == left_out
    path = tiny_models.chain(tmp_path, kernel=3)
    model = runtime.optimize_model(path, onnx.load(path), tmp_path, tmp_path, settings)
    domains = {node.domain for node in model.graph.node}
    assert "com.microsoft.nchwc" not in domains or not left_out, "no NCHWc node where the layout is left out"
