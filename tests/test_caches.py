"""Unit tests of pushing a brick's weights and inputs out of the caches as the rest of its model does: which
bricks, how many bytes, the machine's cache sizes, and a run that times such bricks so."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tiny_models
from onnx import helper

from conftest import QUICK_TIMING
from pytest_dlbricks.core.graph import TensorSpec
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import ModelPlan, plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.timing import caches
from pytest_dlbricks.timing.caches import (
    MAX_FLUSH_BYTES,
    CacheFlusher,
    ColdInputs,
    cache_sizes,
    flush_bytes,
    input_copies,
    read_bytes,
    rest_of_model,
    reuse_distances,
)
from pytest_dlbricks.timing.running import BrickRunner
from pytest_dlbricks.wiring import run_state

KIB, MIB = 1 << 10, 1 << 20
#: A core's cache and the last-level cache of the machine these tests pretend to run on.
SIZES = (512 * KIB, 32 * MIB)


def write_cache(folder: Path, index: int, level: int, kind: str, size: str) -> None:
    entry = folder / f"index{index}"
    entry.mkdir(parents=True)
    (entry / "level").write_text(f"{level}\n")
    (entry / "type").write_text(f"{kind}\n")
    (entry / "size").write_text(f"{size}\n")


def test_cache_sizes_are_read_as_linux_describes_them(tmp_path: Path) -> None:
    write_cache(tmp_path, 0, 1, "Data", "32K")
    write_cache(tmp_path, 1, 1, "Instruction", "32K")
    write_cache(tmp_path, 2, 2, "Unified", "512K")
    write_cache(tmp_path, 3, 3, "Unified", "32768K")
    assert cache_sizes(tmp_path) == (512 * KIB, 32 * MIB)


def test_cache_sizes_unknown_or_damaged_are_the_defaults(tmp_path: Path) -> None:
    defaults = (caches.DEFAULT_CORE_CACHE, caches.DEFAULT_LAST_LEVEL_CACHE)
    assert cache_sizes(tmp_path / "absent") == defaults
    write_cache(tmp_path, 0, 2, "Unified", "lots")
    assert cache_sizes(tmp_path) == defaults
    only_core = tmp_path / "core"
    write_cache(only_core, 0, 2, "Unified", "2M")
    assert cache_sizes(only_core) == (2 * MIB, caches.DEFAULT_LAST_LEVEL_CACHE), "no level beyond the core's"


def brick(
    weight_shape: tuple[int, ...],
    output_shape: tuple[int, ...] = (1, 1024),
    nodes: tuple[onnx.NodeProto, ...] = (helper.make_node("MatMul", ["i0", "w0"], ["o0"]),),
) -> BrickSpec:
    float32 = 1  # onnx.TensorProto.FLOAT
    return BrickSpec(
        nodes=nodes,
        inputs=(("i0", TensorSpec(float32, (1, weight_shape[0]))),),
        weights=(("w0", TensorSpec(float32, weight_shape)),),
        outputs=(("o0", TensorSpec(float32, output_shape)),),
        values={},
        opset_imports={"": 17},
        ir_version=8,
        functions=(),
        signature="s",
    )


def test_a_brick_reading_its_weights_for_little_arithmetic_is_flushed_as_far_as_the_rest_of_its_model_reads() -> None:
    projection = brick((1024, 1024))  # 4 MiB of weights, 2 FLOPs for each of their 4-byte elements
    flops = 2 * 1024 * 1024
    own = read_bytes(projection)
    assert own == 4 * MIB + 4 * KIB
    assert flush_bytes(projection, flops, rest_of_model(projection, [own + 10 * MIB]), SIZES) == 10 * MIB
    assert rest_of_model(projection, [own + 10 * MIB, own + 20 * MIB]) == 20 * MIB, "the largest model"
    assert rest_of_model(projection, [own]) == rest_of_model(projection, []) == 0, "nothing else in the model"
    assert flush_bytes(projection, flops, 500 * MIB, SIZES) == 64 * MIB, "twice the last-level cache"
    assert flush_bytes(projection, flops, 500 * MIB, (512 * KIB, 1 << 30)) == caches.MAX_FLUSH_BYTES
    assert flush_bytes(projection, flops, 0, SIZES) == 0, "nothing else in the model"


def test_an_embedding_table_read_a_few_rows_a_call_is_not_flushed() -> None:
    """A Gather reads the rows its indices select; the same table read whole by a MatMul is flushed."""
    lookup = brick((1024, 1024), nodes=(helper.make_node("Gather", ["w0", "i0"], ["o0"]),))
    assert caches.weight_bytes(lookup) == 4 * MIB and caches.streamed_weight_bytes(lookup) == 0
    assert flush_bytes(lookup, 2 * 1024, 500 * MIB, SIZES) == 0
    projection = brick((1024, 1024), nodes=(helper.make_node("MatMul", ["i0", "w0"], ["o0"]),))
    assert caches.streamed_weight_bytes(projection) == 4 * MIB
    assert flush_bytes(projection, 2 * 1024 * 1024, 500 * MIB, SIZES) == 64 * MIB


def test_other_bricks_are_not_flushed() -> None:
    projection = brick((1024, 1024))
    big_model = 500 * MIB
    assert flush_bytes(projection, 8 * 4 * MIB, big_model, SIZES) == 0, "arithmetic outlasting the reading"
    assert flush_bytes(projection, None, big_model, SIZES) == 0, "unknown FLOPs"
    small = brick((256, 256))  # 256 KiB: stays in a core's cache of 512 KiB
    assert flush_bytes(small, 2 * 256 * 256, big_model, SIZES) == 0


def test_the_flusher_reads_one_buffer_written_as_far_as_the_largest_request() -> None:
    flusher = CacheFlusher()
    small, large = flusher.reader(1 * MIB), flusher.reader(2 * MIB)
    buffer = flusher._buffer
    small()
    large()
    assert buffer.nbytes == MAX_FLUSH_BYTES, "set aside once, at the most any request asks"
    assert flusher._written * buffer.itemsize == 2 * MIB, "its pages written only as far as requests reach"
    assert (buffer[: flusher._written] == 1).all(), "every page read was written: none reads the zero page"
    assert flusher.reader(1 * MIB) is not None and flusher._buffer is buffer, "no buffer of its own for a smaller one"
    flusher.reader(MAX_FLUSH_BYTES + MIB)()
    assert flusher._buffer.nbytes == MAX_FLUSH_BYTES + MIB, "a request beyond it gets a buffer as large"


def test_the_flusher_takes_what_a_strict_limit_on_memory_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    empty = np.empty

    def strict(shape: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        if isinstance(shape, int) and shape * 8 > 4 * MIB:
            raise MemoryError("cannot set aside that much")
        return empty(shape, *args, **kwargs)

    monkeypatch.setattr(caches.np, "empty", strict)
    flusher = CacheFlusher()
    flusher.reader(1 * MIB)()
    assert flusher._buffer.nbytes == 1 * MIB, "as much as the request needs, no more"


def test_the_flusher_times_its_reads_and_sums_them_up_as_the_speed_trace_does() -> None:
    seconds = iter([1e-3, 2e-3, 1e-3, 1e-3, 1e-3, *[1e-5] * 5])
    ticks: list[float] = [0.0]

    def clock() -> float:
        """A read takes the next of ``seconds`` (a second passes before each)."""
        ticks.append(ticks[-1] + (1.0 if len(ticks) % 2 else next(seconds)))
        return ticks[-1]

    flusher = CacheFlusher(clock=clock)
    large, small = flusher.reader(8 * MIB), flusher.reader(1 * MIB)
    for _ in range(4):
        large()
    assert flusher.summary(0.5) is None, "too few reads to tell"
    large()
    for _ in range(5):
        small()  # from the caches, a hundred times faster: no move of the machine's
    summary = flusher.summary(0.5)
    assert summary is not None and summary["samples"] == 10 and summary["share"] == 0.5
    assert summary["bytes"] == 8 * MIB and summary["median_bytes_per_s"] == pytest.approx(8 * MIB / 1e-3)
    assert summary["swing"] == pytest.approx((1.1 - 1.0) / 2), "one read of ten at half the speed"


def test_a_runner_flushes_before_writing_its_inputs_again(tmp_path: Path) -> None:
    path = tiny_models.projections(tmp_path, layers=1, width=16)
    settings = Settings(granularity=2)
    spec = plan_model(load_model(path, {}, settings), 2, path.name).bricks[0]
    assert isinstance(spec, BrickSpec)
    flushes: list[str] = []
    runner = BrickRunner(spec, settings, flush=lambda: flushes.append("flush"))
    (inputs,) = runner.feeds.values()
    before = inputs.copy()
    runner.prepare_call()
    assert flushes == ["flush"]
    assert np.array_equal(inputs, before), "the inputs are written again with their own values"


def test_a_run_times_the_projections_with_their_weights_pushed_out(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine with a core's cache of 256 KiB and a last-level cache of 1 MiB, each 512x512 projection
    (1 MiB) is timed after reading what the two others and the Relu read (2 MiB and two rows), at most
    twice the last-level cache; the Relu, which has no weights, is not."""
    monkeypatch.setattr(run_state, "cache_sizes", lambda: (256 * KIB, 1 * MIB))
    tiny_models.projections(pytester.path)
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        *QUICK_TIMING,
        "--dlbricks-granularity=1",
        "--benchmark-json=bench.json",
        "--dlbricks-json=report.json",
    )
    result.assert_outcomes(passed=2)  # the three projections are one distinct brick
    report = json.loads((pytester.path / "report.json").read_text())
    memory = report["summary"]["memory"]
    assert memory["samples"] >= 5 and 0.5 < memory["share"] < 1, "the projections, not the Relu"
    assert report["verdict"]["sources"]["memory"] == pytest.approx(memory["swing"] * memory["share"])
    # A re-run reusing the bricks says what the run that timed them found of memory's speed.
    pytester.runpytest(
        "-p", "no:cacheprovider", *QUICK_TIMING, "--dlbricks-granularity=1", "--dlbricks-json=again.json"
    ).assert_outcomes(deselected=2)
    again = json.loads((pytester.path / "again.json").read_text())
    assert again["summary"]["reused_from"]["memory"] == pytest.approx(report["verdict"]["sources"]["memory"])
    assert again["verdict"]["sources"]["memory"] == pytest.approx(report["verdict"]["sources"]["memory"])
    benchmarks = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    bricks = [b["extra_info"] for b in benchmarks if "signature" in b["extra_info"]]  # not the models' entries
    flushed = {tuple(brick["ops"]): brick.get("cache_flush_bytes") for brick in bricks}
    assert flushed == {("MatMul",): 2 * MIB, ("Relu",): None}


def test_a_stored_time_taken_with_the_weights_in_the_caches_is_taken_again(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A brick store written before weights were pushed out of the caches holds such bricks' times as
    timed with their weights in cache: they are timed again, and the other bricks reused."""
    monkeypatch.setattr(run_state, "cache_sizes", lambda: (256 * KIB, 1 * MIB))
    tiny_models.projections(pytester.path)
    arguments = ("-p", "no:cacheprovider", *QUICK_TIMING, "--dlbricks-granularity=1")
    pytester.runpytest(*arguments).assert_outcomes(passed=2)
    pytester.runpytest(*arguments).assert_outcomes(deselected=2)
    records = list(pytester.path.glob(".benchmarks/dlbricks/**/bricks/*.json"))
    assert len(records) == 2
    for record in records:
        data = json.loads(record.read_text())
        assert (data["cache_flush_bytes"] is not None) == (data["label"].startswith("MatMul"))
        data.pop("cache_flush_bytes")  # as written before
        record.write_text(json.dumps(data))
    pytester.runpytest(*arguments).assert_outcomes(passed=1, deselected=1)


def test_a_suite_timed_elsewhere_pushes_the_weights_out_as_far_as_its_manifest_says(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever times an exported suite has no model to measure: the manifest gives each brick's FLOPs and what
    the rest of its model reads, and their machine's caches decide the rest."""
    monkeypatch.setattr(run_state, "cache_sizes", lambda: (256 * KIB, 1 * MIB))
    tiny_models.projections(pytester.path)
    export = ("-p", "no:cacheprovider", *QUICK_TIMING, "--dlbricks-granularity=1", "--dlbricks-store=none")
    pytester.runpytest(*export, "projections.onnx", "--dlbricks-export=suite").assert_outcomes(passed=2)
    entries = json.loads((pytester.path / "suite" / "manifest.json").read_text())["bricks"]
    matmul = next(entry for entry in entries if entry["ops"] == ["MatMul"])
    assert matmul["flops"] == 2 * 512 * 512
    assert matmul["rest_of_model_bytes"] == 2 * (1 * MIB + 2 * KIB) + 2 * KIB  # two projections and the Relu
    timed = pytester.runpytest(*export, "suite", "--benchmark-json=bench.json")
    timed.assert_outcomes(passed=2)
    benchmarks = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    flushed = {tuple(b["extra_info"]["ops"]): b["extra_info"].get("cache_flush_bytes") for b in benchmarks}
    assert flushed == {("MatMul",): 2 * MIB, ("Relu",): None}


def skip_plan(path: Path) -> tuple[ModelPlan, list[list[int]]]:
    settings = Settings(granularity=1)
    plan = plan_model(load_model(path, {}, settings), 1, path.name)
    return plan, reuse_distances(plan.bricks, plan.input_writers)


def test_an_input_written_long_before_is_as_far_as_what_the_layers_between_read(tmp_path: Path) -> None:
    """The Concat reads the Neg's output right after it was written, and the Relu's after three layers that
    each write a row of 16 KiB; the Relu reads the model's own input."""
    plan, distances = skip_plan(tiny_models.skip_concat(tmp_path, width=4096, between=3))
    ops = [brick.ops for brick in plan.bricks if isinstance(brick, BrickSpec)]
    assert ops == [("Relu",), ("Tanh",), ("Sigmoid",), ("Neg",), ("Concat",)]
    assert plan.input_writers == ((None,), (0,), (1,), (2,), (3, 0))
    assert distances == [[0], [0], [0], [0], [0, 3 * 4096 * 4]]


def test_cold_inputs_take_as_many_copies_as_push_each_out_that_far() -> None:
    core = SIZES[0]
    assert input_copies(1 * MIB, 5 * MIB, core) == 6, "five others read between two calls on the same copy"
    assert input_copies(1 * MIB, 5 * MIB + 1, core) == 7
    assert input_copies(1 * MIB, 0, core) == 1
    assert input_copies(caches.MAX_COPY_BYTES // 2, 1 << 40, core) == 2, "no more bytes than copies may hold"
    assert input_copies(64 * KIB, 64 * MIB, core) == caches.MAX_INPUT_COPIES, "each copy is bound in a call's time"
    assert input_copies(0, 5 * MIB, core) == 1
    assert input_copies(8, 5 * MIB, core) == 1, "255 copies of a value stay in a core's cache: none"
    assert input_copies(256 * KIB, 5 * MIB, core) == 21


def test_a_runner_takes_its_cold_inputs_copies_in_turn_and_writes_the_others_again(tmp_path: Path) -> None:
    plan, distances = skip_plan(tiny_models.skip_concat(tmp_path, width=4096, between=3))
    concat = plan.bricks[-1]
    assert isinstance(concat, BrickSpec)
    settings = Settings(granularity=1)
    hot = BrickRunner(concat, settings)
    cold = BrickRunner(concat, settings, cold=ColdInputs((1,), distances[-1][1], copies=4))
    hot.prepare_call()
    hot()
    seen = set()
    for _ in range(5):
        cold.prepare_call()
        cold()
        (output,) = cold.outputs()
        assert np.array_equal(output, hot.outputs()[0]), "every copy holds the input's values"
        seen.add(id(cold._binding))
    assert len(cold._bindings) == len(seen) == 4, "three others between two calls on the same copy"
    assert cold._hot == [cold.feeds[concat.inputs[0][0]]], "the input written right before is written again"


def test_a_run_times_a_join_with_its_skipped_input_out_of_the_caches(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a core's cache of 32 KiB, the Concat's input written three layers before it (48 KiB between) is
    cold; the item says how far, and a store written before cold inputs were copied has it timed again."""
    monkeypatch.setattr(run_state, "cache_sizes", lambda: (32 * KIB, 1 * MIB))
    tiny_models.skip_concat(pytester.path, width=4096, between=3)
    arguments = ("-p", "no:cacheprovider", *QUICK_TIMING, "--dlbricks-granularity=1")
    pytester.runpytest(*arguments, "--benchmark-json=bench.json").assert_outcomes(passed=5)
    benchmarks = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    bricks = [b["extra_info"] for b in benchmarks if "signature" in b["extra_info"]]  # not the model's entry
    cold = {brick["ops"][0]: brick.get("cold_input_bytes") for brick in bricks}
    assert cold == {"Relu": None, "Tanh": None, "Sigmoid": None, "Neg": None, "Concat": 3 * 4096 * 4}
    pytester.runpytest(*arguments).assert_outcomes(deselected=5)
    for record in pytester.path.glob(".benchmarks/dlbricks/**/bricks/*.json"):
        data = json.loads(record.read_text())
        assert (data["cold_input_bytes"] is not None) == data["label"].startswith("Concat")
        data.pop("cold_input_bytes")  # as written before
        record.write_text(json.dumps(data))
    pytester.runpytest(*arguments).assert_outcomes(passed=1, deselected=4)


def test_timed_cost_copies_cold_inputs_and_simulated_cost_none(tmp_path: Path) -> None:
    plan, _ = skip_plan(tiny_models.skip_concat(tmp_path))
    concat = plan.bricks[-1]
    assert isinstance(concat, BrickSpec)
    for cost, expected in (("timed", ColdInputs((1,), 3 * 4096 * 4, copies=4)), ("simulated", None)):
        state = run_state.RunState(Settings(granularity=1, cost=cost), time.perf_counter)
        state.cache_sizes = (32 * KIB, 1 * MIB)
        state.plans.append(plan)
        state.bricks[concat.signature] = concat
        assert state.cold_inputs(concat.signature) == expected


def test_a_suite_timed_elsewhere_copies_the_inputs_its_manifest_says_are_far(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest gives how far each input was written before its brick; the timing machine's core cache
    decides which are cold: here 32 KiB, then 64 KiB, beyond the Concat's 48 KiB."""
    tiny_models.skip_concat(pytester.path, width=4096, between=3)
    export = ("-p", "no:cacheprovider", *QUICK_TIMING, "--dlbricks-granularity=1", "--dlbricks-store=none")
    pytester.runpytest(*export, "skip_concat.onnx", "--dlbricks-export=suite").assert_outcomes(passed=5)
    entries = json.loads((pytester.path / "suite" / "manifest.json").read_text())["bricks"]
    distances = {entry["ops"][0]: entry["input_distances_bytes"] for entry in entries}
    assert distances == {"Relu": [0], "Tanh": [0], "Sigmoid": [0], "Neg": [0], "Concat": [0, 3 * 4096 * 4]}
    for core_cache, expected in ((32 * KIB, 3 * 4096 * 4), (64 * KIB, None)):
        monkeypatch.setattr(run_state, "cache_sizes", lambda core_cache=core_cache: (core_cache, 1 * MIB))
        pytester.runpytest(*export, "suite", "--benchmark-json=bench.json").assert_outcomes(passed=5)
        benchmarks = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
        cold = {b["extra_info"]["ops"][0]: b["extra_info"].get("cold_input_bytes") for b in benchmarks}
        assert cold == {"Relu": None, "Tanh": None, "Sigmoid": None, "Neg": None, "Concat": expected}


def test_a_brick_used_at_several_places_is_pushed_out_as_far_as_its_furthest(tmp_path: Path) -> None:
    """The same Concat joins an input written one layer before in one model and three in another."""
    for folder in ("near", "far"):
        (tmp_path / folder).mkdir()
    near, _ = skip_plan(tiny_models.skip_concat(tmp_path / "near", width=4096, between=1))
    far, _ = skip_plan(tiny_models.skip_concat(tmp_path / "far", width=4096, between=3))
    concat, same = far.bricks[-1], near.bricks[-1]
    assert isinstance(concat, BrickSpec) and isinstance(same, BrickSpec) and same.signature == concat.signature
    assert caches.furthest_distances([near])[concat.signature] == (0, 4096 * 4)
    assert caches.furthest_distances([near, far])[concat.signature] == (0, 3 * 4096 * 4)
    unwritten = dataclasses.replace(far, input_writers=())  # a plan made before writers were kept
    assert caches.furthest_distances([near, unwritten])[concat.signature] == (0, 4096 * 4)
