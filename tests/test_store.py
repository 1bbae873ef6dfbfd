"""Unit tests of the brick result store: records, shelves by machine and settings, models, robustness."""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pytest_dlbricks.core.identity import Identity
from pytest_dlbricks.storage import store as store_module
from pytest_dlbricks.storage.atomic_files import write_json
from pytest_dlbricks.storage.store import BrickStore, Shelf
from pytest_dlbricks.storage.store_records import (
    STORE_VERSION,
    ModelManifest,
    StoredBrick,
    StoredExecutor,
    StoredPeak,
    StoredRun,
    references_of,
    times_of,
)
from pytest_dlbricks.timing.neighbours import TIMING_METHOD
from pytest_dlbricks.timing.overhead import MEASUREMENT_METHOD, CallOverhead
from pytest_dlbricks.timing.probes import ExecutorDetection, Peak, PoolSlowdown

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
IDENTITY = Identity(
    machine={"cpu": "Test CPU @ 3.0GHz", "cores": 4, "arch": "x86_64", "system": "Linux", "python": "CPython 3.11"},
    timing={"onnxruntime": "1.31.1", "providers": ["CPUExecutionProvider"], "intra_op_threads": 0},
)
SIGNATURE = "ab" * 32


def window(letter: str, inputs: int = 1) -> tuple[str, int, int]:
    return (letter * 64, inputs, 1)


def brick(signature: str = SIGNATURE, median: float = 2e-5, measured_at: datetime = NOW) -> StoredBrick:
    stats = {"min": median / 2, "median": median, "mean": median * 1.1, "iqr": median / 10, "rounds": 7.0}
    return StoredBrick(signature, "Conv+Relu-abababab", stats, "CPUExecutionProvider", measured_at)


def test_a_brick_round_trips_through_its_shelf(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    assert shelf.get(SIGNATURE) is None
    shelf.put(brick())
    assert shelf.get(SIGNATURE, now=NOW) == brick()
    assert shelf.bricks() == {SIGNATURE: brick()}
    record = json.loads((shelf.path / "bricks" / f"{SIGNATURE}.json").read_text())
    assert record["version"] == STORE_VERSION
    assert record["measured_at"] == "2025-03-01T12:00:00+00:00"
    identity = json.loads((shelf.path / "identity.json").read_text())
    assert identity == {"version": STORE_VERSION, "machine": dict(IDENTITY.machine), "timing": dict(IDENTITY.timing)}


def test_a_brick_says_whether_it_was_timed_precisely_enough(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put(replace(brick(), precision=0.0))
    exact = shelf.get(SIGNATURE)
    assert exact is not None and exact.precision == 0.0, "identical rounds (a coarse timer) are a measurement"
    shelf.put(replace(brick(), precision=0.02))
    stored = shelf.get(SIGNATURE)
    assert stored is not None and stored.precision == 0.02
    assert [stored.precise_enough(asked) for asked in (None, 0.05, 0.02, 0.01)] == [True, True, True, False]
    assert brick().precise_enough(None) and not brick().precise_enough(0.05)


def test_a_brick_keeps_the_time_limit_it_ran_out_of(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put(replace(brick(), precision=0.04, timed_out_s=0.25))
    stored = shelf.get(SIGNATURE)
    assert stored is not None and stored.timed_out_s == 0.25
    assert [stored.timed_out_within(limit) for limit in (0.1, 0.25, 0.5)] == [True, True, False]
    assert not brick().timed_out_within(0.0), "reached its precision, or an older record"
    assert older_record(shelf, "timed_out_s").timed_out_s is None


@pytest.mark.parametrize(
    "field",
    [
        "probe_s",  # the time its precision was sized from
        "reference_s",  # the reference call's time around its timing, which its call cost is scaled to
    ],
)
def test_a_brick_keeps_the_times_it_was_timed_beside_and_older_records_lack_them(tmp_path: Path, field: str) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    figures: dict[str, Any] = {field: 2.1e-5}
    shelf.put(replace(brick(), **figures))
    stored = shelf.get(SIGNATURE)
    assert stored is not None and getattr(stored, field) == 2.1e-5
    assert getattr(older_record(shelf, field), field) is None


@pytest.mark.parametrize("field", ["cache_flush_bytes", "cold_input_bytes"])
def test_a_brick_keeps_the_bytes_read_before_its_calls_and_older_records_lack_them(tmp_path: Path, field: str) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    measured: dict[str, Any] = {field: 56 << 20}
    shelf.put(replace(brick(), **measured))
    stored = shelf.get(SIGNATURE)
    assert stored is not None and getattr(stored, field) == 56 << 20
    assert getattr(older_record(shelf, field), field) is None


def test_a_brick_keeps_how_its_calls_were_timed_and_older_records_read_as_timed_alone(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put(replace(brick(), timing_method=TIMING_METHOD))
    stored = shelf.get(SIGNATURE)
    assert stored is not None and stored.timing_method == TIMING_METHOD > 1
    assert older_record(shelf, "timing_method").timing_method == 1


def test_reference_times_are_those_of_the_bricks_that_have_one() -> None:
    timed = replace(brick(), reference_s=2.1e-5)
    assert references_of({"a" * 64: timed, SIGNATURE: brick()}) == {"a" * 64: 2.1e-5}


def older_record(shelf: Shelf, without: str) -> StoredBrick:
    """The stored brick read again from its record as a version without the field ``without`` wrote it."""
    path = shelf.path / "bricks" / f"{SIGNATURE}.json"
    older = json.loads(path.read_text())
    del older[without]
    path.write_text(json.dumps(older))
    again = shelf.get(SIGNATURE)
    assert again is not None
    return again


def test_shelf_folders_are_readable_and_differ_by_identity(tmp_path: Path) -> None:
    store = BrickStore(tmp_path)
    other = Identity(IDENTITY.machine, {**IDENTITY.timing, "intra_op_threads": 1})
    first, second = store.shelf(IDENTITY), store.shelf(other)
    assert first.path.name.startswith("test-cpu-3-0ghz-4c-ort1.31.1-t0-")
    assert second.path.name.startswith("test-cpu-3-0ghz-4c-ort1.31.1-t1-")
    assert store.shelf(IDENTITY).path == first.path, "the same identity always finds the same shelf"
    first.put(brick())
    second.put(brick(median=4e-5))
    shelves = {shelf.identity.timing["intra_op_threads"]: shelf for shelf in store.shelves()}
    assert shelves[0].get(SIGNATURE) == brick() and shelves[1].get(SIGNATURE) == brick(median=4e-5)


def test_a_write_replaces_the_record_and_leaves_no_temporary(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put(brick(median=1e-5))
    shelf.put(brick(median=3e-5))
    assert shelf.get(SIGNATURE) == brick(median=3e-5)
    assert os.listdir(shelf.path / "bricks") == [f"{SIGNATURE}.json"]


def test_old_records_are_not_reused(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put(brick(measured_at=NOW - timedelta(days=3)))
    assert shelf.get(SIGNATURE, max_age_s=2 * 86400, now=NOW) is None
    assert shelf.get(SIGNATURE, max_age_s=4 * 86400, now=NOW) is not None
    assert shelf.get(SIGNATURE, max_age_s=math.inf, now=NOW) is not None


@pytest.mark.parametrize(
    "content",
    [
        "",
        '{"version": 1, "signature": "ab',  # cut short, as by a full disk
        "[]",
        json.dumps({**brick().to_json(), "version": STORE_VERSION + 1}),
        json.dumps({**brick().to_json(), "signature": "cd" * 32}),
        json.dumps({**brick().to_json(), "measured_at": "yesterday"}),
        json.dumps({**brick().to_json(), "measured_at": "2025-03-01T12:00:00"}),  # no time zone
        json.dumps({key: value for key, value in brick().to_json().items() if key != "stats"}),
        json.dumps({**brick().to_json(), "stats": {"median": float("nan")}}),
        json.dumps({**brick().to_json(), "stats": {"median": -2e-5}}),
        json.dumps({**brick().to_json(), "stats": {"median": 0}}),
        json.dumps({**brick().to_json(), "stats": {"median": "2e-5"}}),
        json.dumps({**brick().to_json(), "stats": [2e-5]}),
        json.dumps({**brick().to_json(), "label": 7}),
        json.dumps({**brick().to_json(), "precision": float("inf")}),
        json.dumps({**brick().to_json(), "probe_s": 0}),
        json.dumps({**brick().to_json(), "probe_s": 10**400}),  # beyond any float: no measurement either
        json.dumps({**brick().to_json(), "precision": -0.01}),
        json.dumps({**brick().to_json(), "probe_s": "1e-5"}),
        json.dumps({**brick().to_json(), "reference_s": 0}),
        json.dumps({**brick().to_json(), "reference_s": [2e-5]}),
        json.dumps({**brick().to_json(), "cache_flush_bytes": 0}),
        json.dumps({**brick().to_json(), "cache_flush_bytes": 1.5e6}),
        json.dumps({**brick().to_json(), "cache_flush_bytes": True}),
        json.dumps({**brick().to_json(), "cold_input_bytes": -1}),
        json.dumps({**brick().to_json(), "cold_input_bytes": "12"}),
        json.dumps({**brick().to_json(), "timing_method": 0}),
        json.dumps({**brick().to_json(), "timing_method": TIMING_METHOD + 1}),  # a later version's
        json.dumps({**brick().to_json(), "timing_method": "2"}),
        b"\xff\xfe random bytes".decode("latin-1"),
    ],
)
def test_unusable_records_count_as_absent_and_are_counted(tmp_path: Path, content: str) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put(brick())
    (shelf.path / "bricks" / f"{SIGNATURE}.json").write_text(content)
    assert shelf.get(SIGNATURE) is None
    assert shelf.bricks() == {}
    assert shelf.discarded == {"brick times": 2}


def test_a_record_without_the_statistic_asked_for_is_discarded(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    stored = brick()
    shelf.put(replace(stored, stats={name: value for name, value in stored.stats.items() if name != "mean"}))
    assert shelf.get(SIGNATURE, statistic="median") is not None
    assert shelf.get(SIGNATURE, statistic="mean") is None
    assert shelf.discarded == {"brick times": 1}


RECORDED_OVERHEAD = {"fixed_s": 2e-6, "per_input_s": 0.0, "per_output_s": 0.0, "parallel_fixed_s": None}
RECORDED_OVERHEAD |= {"timing_s": 0.0, "reference_s": 6e-6}


@pytest.mark.parametrize(
    ("method", "overhead"),
    [
        *(
            (MEASUREMENT_METHOD, {**RECORDED_OVERHEAD, **change})
            for change in (
                {"fixed_s": "fast"},
                {"fixed_s": -1.0},
                {"fixed_s": float("nan")},
                {"parallel_fixed_s": float("inf")},
                {"reference_s": 0.0},
                {"reference_s": "6 us"},
                {"extra_s": 1.0},
            )
        ),
        *(
            (MEASUREMENT_METHOD, {name: value for name, value in RECORDED_OVERHEAD.items() if name != missing})
            for missing in ("fixed_s", "timing_s")
        ),
        (MEASUREMENT_METHOD, []),
        *((method, RECORDED_OVERHEAD) for method in (-1, 0, MEASUREMENT_METHOD + 1, "2", True, None)),
    ],
)
def test_an_unusable_call_overhead_is_discarded_and_counted(tmp_path: Path, method: object, overhead: object) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put_overhead(CallOverhead(fixed_s=2e-6))
    record = {"version": STORE_VERSION, "method": method, "overhead": overhead}
    (shelf.path / "overhead.json").write_text(json.dumps(record))
    assert shelf.get_overhead() is None
    assert shelf.discarded == {"call overhead": 1}


def test_a_call_overhead_measured_an_older_way_is_measured_again_without_a_word(tmp_path: Path) -> None:
    """Method 1 counted the cost of a Sum ahead of its chains in the fixed cost; its records did not say so."""
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put_overhead(CallOverhead(fixed_s=2e-6, reference_s=6e-6))
    assert shelf.get_overhead() == CallOverhead(fixed_s=2e-6, reference_s=6e-6)
    for old in ({"version": STORE_VERSION}, {"version": STORE_VERSION, "method": 1}):
        (shelf.path / "overhead.json").write_text(json.dumps({**old, "overhead": RECORDED_OVERHEAD}))
        assert shelf.get_overhead() is None
    assert not shelf.discarded, "not damaged: outdated"


def test_a_call_overhead_recorded_before_the_reference_was_timed_beside_it_is_read_without_it(
    tmp_path: Path,
) -> None:
    """Its bricks compose with it as they did (unscaled); a run timing bricks measures it again."""
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put_overhead(CallOverhead(fixed_s=2e-6, timing_s=1e-7, reference_s=6e-6))
    record = json.loads((shelf.path / "overhead.json").read_text())
    del record["overhead"]["reference_s"]
    (shelf.path / "overhead.json").write_text(json.dumps(record))
    assert shelf.get_overhead() == CallOverhead(fixed_s=2e-6, timing_s=1e-7)
    assert not shelf.discarded


def test_the_parallel_executors_cost_per_layer_is_kept_and_a_record_without_it_is_read_without_it(
    tmp_path: Path,
) -> None:
    """A run asking for a parallel estimate measures it again where the record lacks it (see the engine)."""
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    kept = CallOverhead(fixed_s=2e-6, parallel_fixed_s=3e-6, parallel_layer_s=4e-7, reference_s=6e-6)
    shelf.put_overhead(kept)
    assert shelf.get_overhead() == kept
    record = json.loads((shelf.path / "overhead.json").read_text())
    del record["overhead"]["parallel_layer_s"]
    (shelf.path / "overhead.json").write_text(json.dumps(record))
    assert shelf.get_overhead() == CallOverhead(fixed_s=2e-6, parallel_fixed_s=3e-6, reference_s=6e-6)
    record["overhead"]["parallel_layer_s"] = -1.0
    (shelf.path / "overhead.json").write_text(json.dumps(record))
    assert shelf.get_overhead() is None and shelf.discarded == {"call overhead": 1}


def test_a_damaged_identity_is_repaired_and_counted(tmp_path: Path) -> None:
    store = BrickStore(tmp_path)
    store.shelf(IDENTITY).put(brick())
    (shelf_path,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    (shelf_path / "identity.json").write_bytes(b"\x00\xff random")
    assert store.shelves() == [] and store.discarded == {"shelves": 1}
    shelf = store.shelf(IDENTITY)
    shelf.repair()
    assert shelf.repaired == {"identity": 1}
    assert [found.identity for found in BrickStore(tmp_path).shelves()] == [IDENTITY]


@pytest.mark.parametrize("change", [{"windows": "abc"}, {"windows": [["a", 1]]}, {"edges": [[0, 5]]}, {"dims": []}])
def test_an_unusable_model_record_is_discarded_and_counted(tmp_path: Path, change: dict[str, object]) -> None:
    store = BrickStore(tmp_path)
    manifest = ModelManifest("models/m.onnx", 2, {}, 2, (window("a"), window("b")), ((0, 1),))
    store.save_model(manifest)
    (path,) = (tmp_path / "models").iterdir()
    path.write_text(json.dumps({**manifest.to_json(), **change}))
    assert store.models() == [] and store.discarded == {"models": 1}
    store.save_model(manifest)
    assert store.models() == [manifest] and store.repaired == {"models": 1}


def test_temporary_files_left_by_a_crash_are_ignored(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    shelf.put(brick())
    (shelf.path / "bricks" / f".{'cd' * 32}.json.x1y2.tmp").write_text('{"version": 1, "sig')
    assert list(shelf.bricks()) == [SIGNATURE]


def test_folders_without_a_readable_identity_are_not_shelves(tmp_path: Path) -> None:
    BrickStore(tmp_path).shelf(IDENTITY).put(brick())
    (tmp_path / "stray").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "identity.json").write_text("{")
    assert [shelf.identity for shelf in BrickStore(tmp_path).shelves()] == [IDENTITY]


def test_models_are_saved_once_and_listed_in_order(tmp_path: Path) -> None:
    store = BrickStore(tmp_path)
    resnet = ModelManifest("models/resnet.onnx", 2, {"batch": 1}, 4, (window("a"), None), ((0, 1),), (1, 2))
    mlp = ModelManifest("models/mlp.onnx", 1, {}, 2, (window("b"), window("b", 2)), ((0, 1),))
    store.save_model(resnet)
    store.save_model(mlp)
    assert store.models() == [mlp, resnet]
    assert sorted(resnet.graph.edges) == [(0, 1)] and sorted(resnet.graph.nodes) == [0, 1]
    saved = tmp_path / "models" / f"{resnet.key}.json"
    before = saved.stat().st_mtime_ns
    os.utime(saved, ns=(before - 10**9, before - 10**9))
    store.save_model(resnet)
    assert saved.stat().st_mtime_ns == before - 10**9, "an unchanged model is not written again"
    regrown = ModelManifest("models/resnet.onnx", 2, {"batch": 1}, 4, (window("c"), None), ((0, 1),), (1, 2))
    store.save_model(regrown)
    assert store.models() == [mlp, regrown], "the same path, granularity and dimensions replace the model"
    store.save_model(ModelManifest("models/resnet.onnx", 2, {"batch": 8}, 4, (window("d"), None)))
    assert len(store.models()) == 3


def test_the_call_overhead_is_kept_with_its_brick_times(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    assert shelf.get_overhead() is None
    overhead = CallOverhead(fixed_s=4e-6, per_input_s=3e-7, per_output_s=2e-7, parallel_fixed_s=9e-6, reference_s=1e-5)
    shelf.put_overhead(overhead)
    assert shelf.get_overhead() == overhead
    assert [found.path for found in BrickStore(tmp_path).shelves()] == [shelf.path]
    (shelf.path / "overhead.json").write_text('{"version": 1, "overhead": {"fixed": 1}}')
    assert shelf.get_overhead() is None


def test_the_executor_detection_is_kept_under_the_conditions_it_was_made_in(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    conditions = {"method": 1, "inter_op_threads": 4}
    assert shelf.get_executor(conditions) is None
    pool = PoolSlowdown(2.5, 0.0, [(1e-3, 2.5e-3)], 3, "a chain of MatMuls")
    detection = ExecutorDetection(False, 1, 3e-4, 3.1e-4, 1.03, 7, "2 chains", pool)
    stored = StoredExecutor(detection, NOW, conditions)
    shelf.put_executor(stored)
    assert shelf.get_executor(conditions) == stored
    assert shelf.get_executor({**conditions, "method": 2}) is None, "made another way: made again"
    assert shelf.discarded == {}, "not damaged"
    record = json.loads((shelf.path / "executor.json").read_text())
    record["detection"]["pool"]["sessions"] = [[1e-3, -1.0]]
    (shelf.path / "executor.json").write_text(json.dumps(record))
    assert shelf.get_executor(conditions) is None
    assert shelf.discarded == {"executor detection": 1}
    shelf.put_executor(replace(stored, detection=replace(detection, pool=None)))
    assert shelf.get_executor(conditions) == replace(stored, detection=replace(detection, pool=None))


def test_the_machine_peak_is_kept_with_its_shelf_and_a_damaged_one_is_measured_again(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    assert shelf.get_peak() is None
    stored = StoredPeak(Peak(1.5e11, 3.5e10, {"gemm": "MatMul float32 512x512", "measure_s": 0.23}), NOW)
    shelf.put_peak(stored)
    assert shelf.get_peak() == stored
    assert shelf.discarded == {}
    record = json.loads((shelf.path / "peak.json").read_text())
    record["peak"]["bytes_per_s"] = 0
    (shelf.path / "peak.json").write_text(json.dumps(record))
    assert shelf.get_peak() is None
    assert shelf.discarded == {"machine peak": 1}


def test_the_runs_that_timed_bricks_are_kept_the_last_ones_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MAX_RUNS", 2)
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    assert shelf.get_runs() == []
    runs = [
        StoredRun(NOW + timedelta(minutes=m), NOW + timedelta(minutes=m, seconds=30), 0.1 * m, None) for m in range(3)
    ]
    for kept in runs:
        shelf.put_run(kept)
    assert shelf.get_runs() == runs[1:]
    assert runs[1].covers(NOW + timedelta(minutes=1, seconds=10)) and not runs[1].covers(NOW)
    older = json.loads((shelf.path / "runs.json").read_text())
    assert all(run["memory"] is None for run in older["runs"])
    shelf.put_run(replace(runs[2], memory=0.12))
    assert shelf.get_runs()[-1].memory == 0.12
    for run in older["runs"]:
        del run["memory"]  # as written before runs kept their memory part
    (shelf.path / "runs.json").write_text(json.dumps(older))
    assert [run.memory for run in shelf.get_runs()] == [None, None]
    (shelf.path / "runs.json").write_text('{"version": 1, "runs": [{"first": "late", "last": "early"}]}')
    assert shelf.get_runs() == []
    assert shelf.discarded == {"run verdicts": 1}


@pytest.mark.parametrize("damaged", [0.0, -1e-5, "10 us", True])
def test_a_run_keeps_the_fast_state_it_met_and_a_damaged_one_is_no_record(tmp_path: Path, damaged: object) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    met = StoredRun(NOW, NOW + timedelta(seconds=30), 0.1, None, fast_s=9.9e-6)
    shelf.put_run(met)
    shelf.put_run(replace(met, fast_s=None))  # too few moments to know it
    assert [run.fast_s for run in shelf.get_runs()] == [9.9e-6, None]
    record = json.loads((shelf.path / "runs.json").read_text())
    del record["runs"][1]["fast_s"]  # as written before runs kept it
    (shelf.path / "runs.json").write_text(json.dumps(record))
    assert [run.fast_s for run in shelf.get_runs()] == [9.9e-6, None]
    record["runs"][0]["fast_s"] = damaged
    (shelf.path / "runs.json").write_text(json.dumps(record))
    assert shelf.get_runs() == [] and shelf.discarded == {"run verdicts": 1}


@pytest.mark.parametrize("damaged", [0, True, ["loaded"]])
def test_a_run_keeps_why_it_was_not_trusted_and_a_damaged_reason_is_no_record(tmp_path: Path, damaged: object) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    loaded = StoredRun(NOW, NOW + timedelta(seconds=30), 0.1, None, untrusted="the timing thread was on a core 35%")
    shelf.put_run(loaded)
    shelf.put_run(replace(loaded, untrusted=None))
    assert [run.untrusted for run in shelf.get_runs()] == ["the timing thread was on a core 35%", None]
    record = json.loads((shelf.path / "runs.json").read_text())
    del record["runs"][1]["untrusted"]  # as written before runs kept it
    (shelf.path / "runs.json").write_text(json.dumps(record))
    assert [run.untrusted for run in shelf.get_runs()] == ["the timing thread was on a core 35%", None]
    record["runs"][0]["untrusted"] = damaged
    (shelf.path / "runs.json").write_text(json.dumps(record))
    assert shelf.get_runs() == [] and shelf.discarded == {"run verdicts": 1}


def test_the_nodes_a_profile_showed_at_once_are_kept_and_a_record_without_them_is_read(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(IDENTITY)
    conditions = {"method": 3, "inter_op_threads": 2}
    stored = StoredExecutor(
        ExecutorDetection(False, 1, 3e-4, 3.1e-4, 1.03, 7, "2 chains", nodes_at_once=0), NOW, conditions
    )
    shelf.put_executor(stored)
    assert shelf.get_executor(conditions) == stored
    record = json.loads((shelf.path / "executor.json").read_text())
    del record["detection"]["nodes_at_once"]
    (shelf.path / "executor.json").write_text(json.dumps(record))
    assert shelf.get_executor(conditions) == replace(stored, detection=replace(stored.detection, nodes_at_once=None))
    for damaged in (-1, 1.5, True, "0"):
        record["detection"]["nodes_at_once"] = damaged
        (shelf.path / "executor.json").write_text(json.dumps(record))
        assert shelf.get_executor(conditions) is None, damaged
    assert shelf.discarded == {"executor detection": 4}


def test_times_of_picks_one_statistic() -> None:
    bricks = {"a": brick("a", 1e-5), "b": brick("b", 3e-5)}
    assert times_of(bricks, "median") == {"a": 1e-5, "b": 3e-5}
    assert times_of(bricks, "stddev") == {}


# -- atomic writes ----------------------------------------------------------------------------


def test_write_json_creates_folders_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "out" / "deeper" / "report.json"
    write_json(path, {"models": [{"sequential_s": 1.5e-6}]})
    assert json.loads(path.read_text(encoding="utf-8")) == {"models": [{"sequential_s": 1.5e-6}]}
    assert path.read_text(encoding="utf-8").endswith("\n")
    assert os.listdir(path.parent) == ["report.json"]


def test_write_json_replaces_an_existing_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("old, and longer than the new content " * 10, encoding="utf-8")
    write_json(path, {"version": 2})
    assert json.loads(path.read_text(encoding="utf-8")) == {"version": 2}
    assert os.listdir(tmp_path) == ["report.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text('{"old": true}\n', encoding="utf-8")
    with pytest.raises(TypeError):
        write_json(path, {"not json": object()})
    assert path.read_text(encoding="utf-8") == '{"old": true}\n'
    assert os.listdir(tmp_path) == ["report.json"]


def test_the_report_file_gets_the_usual_permissions(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        write_json(tmp_path / "report.json", {})
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "report.json").stat().st_mode) == 0o644
