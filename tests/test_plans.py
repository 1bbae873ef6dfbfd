"""Unit tests of the plan cache: models cut once, found again only when nothing that decides them changed."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import tiny_models

from conftest import run_dlbricks
from pytest_dlbricks.core.errors import RuntimeRefusal
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.core.sweeps import SweepPoint
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.estimating.analysis import plan_work
from pytest_dlbricks.storage import file_digests
from pytest_dlbricks.storage.plans import (
    ONE_POINT,
    PLAN_VERSION,
    UNUSED_FOR_S,
    CutModel,
    PlanCache,
    cut_model_from_json,
    cut_model_to_json,
)
from pytest_dlbricks.wiring import engine

SETTINGS = Settings(granularity=2, cut="original")


def cut(path: Path, settings: Settings = SETTINGS) -> CutModel:
    graph = load_model(path, settings.dims)
    plan = plan_model(graph, settings.granularity, path.name)
    plan.inputs = "test_data_set_0"
    return CutModel(plan, plan_work(graph, plan))


def assert_same_brick(found: object, expected: object) -> None:
    assert type(found) is type(expected)
    if not isinstance(expected, BrickSpec):
        assert found == expected
        return
    assert isinstance(found, BrickSpec)
    fields = ("nodes", "inputs", "weights", "outputs", "non_tensor_outputs", "opset_imports", "ir_version", "functions")
    for name in (*fields, "signature", "activations", "unsized", "weights_as_inputs"):
        assert getattr(found, name) == getattr(expected, name), name
    assert found.values.keys() == expected.values.keys()
    for name, value in expected.values.items():
        assert found.values[name].dtype == value.dtype and found.values[name].shape == value.shape
        np.testing.assert_array_equal(found.values[name], value)
        assert found.values[name].flags.writeable, "a value read back is an array like any other"


BUILDERS: list[Callable[[Path], Path]] = [
    tiny_models.diamond,
    tiny_models.computed_reshape,
    tiny_models.scalar_range,
    tiny_models.loop_outer_scope,
    tiny_models.if_outer_scope,
    tiny_models.sequence_boundary,
    tiny_models.zipmap_classifier,
    tiny_models.weights_as_inputs,
]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda build: build.__name__)
def test_a_cut_model_round_trips_through_json(tmp_path: Path, build: Callable[[Path], Path]) -> None:
    original = cut(build(tmp_path))
    data = json.loads(json.dumps(cut_model_to_json(original)))
    found = cut_model_from_json(data, "renamed.onnx")
    plan, expected = found.plan, original.plan
    assert plan.path == "renamed.onnx"
    assert (plan.layers, plan.io, plan.guessed_dims) == (expected.layers, expected.io, expected.guessed_dims)
    assert plan.sampled_dims == expected.sampled_dims
    assert sorted(plan.graph.edges) == sorted(expected.graph.edges)
    assert sorted(plan.graph.nodes) == sorted(expected.graph.nodes)
    assert len(plan.bricks) == len(expected.bricks)
    for brick, expected_brick in zip(plan.bricks, expected.bricks):
        assert_same_brick(brick, expected_brick)
    assert (plan.inputs, plan.data_dependent) == (expected.inputs, expected.data_dependent)
    assert plan.weights_as_inputs == expected.weights_as_inputs
    assert plan.input_writers == expected.input_writers
    assert found.work == original.work
    assert plan.signatures == expected.signatures


def test_a_cut_with_unsupported_bricks_round_trips_through_json(tmp_path: Path) -> None:
    """The reasons a numeric type's bricks cannot run (an fp16 point's) come back by brick index: JSON writes the
    indices as text, and every run reading them back reported the plan as damaged and cut the model again."""
    original = cut(tiny_models.diamond(tmp_path))
    original.plan.unsupported = {0: "runs in float32", 2: "no float16 kernel"}
    found = cut_model_from_json(json.loads(json.dumps(cut_model_to_json(original))), "diamond.onnx")
    assert found.plan.unsupported == {0: "runs in float32", 2: "no float16 kernel"}


@pytest.mark.parametrize("key", ["-1", "1.0", "x", ""])
def test_a_plan_whose_unsupported_bricks_are_not_indices_is_a_miss(tmp_path: Path, key: str) -> None:
    data = cut_model_to_json(cut(tiny_models.diamond(tmp_path)))
    data["unsupported"] = {key: "runs in float32"}
    with pytest.raises(ValueError, match="is not a count"):
        cut_model_from_json(json.loads(json.dumps(data)), "diamond.onnx")


def test_an_unsized_cut_round_trips_through_json(tmp_path: Path) -> None:
    """Bricks of a model onnxruntime refuses with its sizes written in declare none, and say so in the plan."""
    graph = replace(load_model(tiny_models.batch_squeeze_switch(tmp_path), {"batch": 2}), unsized=True)
    plan = plan_model(graph, SETTINGS.granularity, "switch.onnx")
    original = CutModel(plan, plan_work(graph, plan))
    found = cut_model_from_json(json.loads(json.dumps(cut_model_to_json(original))), "switch.onnx")
    assert found.plan.signatures == original.plan.signatures
    for brick, expected in zip(found.plan.bricks, original.plan.bricks, strict=True):
        assert_same_brick(brick, expected)
        assert isinstance(brick, BrickSpec) and brick.unsized


def test_the_cache_finds_a_model_again_until_something_changes(tmp_path: Path) -> None:
    path = tiny_models.chain(tmp_path)
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    assert cache.get(path, "chain.onnx") is None
    cache.put(path, ONE_POINT, cut(path))
    found = cache.get(path, "models/chain.onnx")
    assert found is not None and found.plan.path == "models/chain.onnx"
    assert PlanCache(tmp_path / "plans", replace(SETTINGS, granularity=3)).get(path, "c") is None
    assert PlanCache(tmp_path / "plans", replace(SETTINGS, cut="optimized")).get(path, "c") is None
    assert cache.get(path, "c", SweepPoint({"batch": 2}, label="batch=2")) is None
    assert cache.get(path, "c", SweepPoint({}, "int8", label="int8")) is None
    point = SweepPoint({"batch": 2}, "int8", label="batch=2,int8")
    cache.put(path, point, cut(path))
    at_point = cache.get(path, "models/chain.onnx", point)
    assert at_point is not None and at_point.plan.path == "models/chain.onnx[batch=2,int8]"
    assert (at_point.plan.file, at_point.plan.point) == ("models/chain.onnx", {"batch": 2, "dtype": "int8"})
    tiny_models.chain(tmp_path, kernel=5)
    assert cache.get(path, "chain.onnx") is None, "a changed model is cut again"


def test_a_brick_many_plans_hold_is_read_once(tmp_path: Path) -> None:
    """Models that share a brick (two chains of the same Conv+Relu blocks, one longer, 7 bricks in all) read it back
    as one object, as the run keeps one brick per signature: a re-run of many models builds each brick once."""
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    paths = [tiny_models.chain(tmp_path, "short.onnx", seed=1), tiny_models.chain(tmp_path, "long.onnx", blocks=4)]
    for path in paths:
        cache.put(path, ONE_POINT, cut(path))
    found = [cache.get(path, path.name) for path in paths]
    assert all(model is not None for model in found)
    bricks = [
        brick for model in found if model is not None for brick in model.plan.bricks if isinstance(brick, BrickSpec)
    ]
    assert len(bricks) == 7 and len({brick.signature for brick in bricks}) == 1
    assert len({id(brick) for brick in bricks}) == 1


def test_a_damaged_plan_leaves_no_brick_to_the_plans_read_after_it(tmp_path: Path) -> None:
    """Its bricks parse, its writers do not hold: a miss, and the next plan of the same brick builds its own."""
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    damaged, sound = tiny_models.chain(tmp_path, "damaged.onnx", seed=1), tiny_models.chain(tmp_path, "sound.onnx")
    cache.put(damaged, ONE_POINT, cut(damaged))
    (saved,) = (tmp_path / "plans").iterdir()
    data = read_plan(saved)
    data["input_writers"][0] = [1]
    data["bricks"][0]["weights"][0][0] = "renamed"  # the brick as no plan of the model's would hold it
    write_plan(saved, data)
    cache.put(sound, ONE_POINT, cut(sound))
    assert cache.get(damaged, "damaged.onnx") is None and cache.discarded == 1
    found = cache.get(sound, "sound.onnx")
    assert found is not None
    assert all(brick.weights[0][0] != "renamed" for brick in found.plan.bricks if isinstance(brick, BrickSpec))


def test_external_data_is_part_of_the_key(tmp_path: Path) -> None:
    path = tiny_models.external_weights(tmp_path)
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    cache.put(path, ONE_POINT, cut(path))
    assert cache.get(path, "x") is not None
    (data,) = [file for file in tmp_path.iterdir() if file.is_file() and file.suffix != ".onnx"]
    stat = data.stat()
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert cache.get(path, "x") is None


def read_plan(saved: Path) -> dict:
    return json.loads(saved.read_bytes().partition(b"\n")[2])


def write_plan(saved: Path, data: dict) -> None:
    """``data`` as a plan file its header vouches for: what the checks of its content must catch."""
    payload = json.dumps(data).encode()
    header = json.dumps({"version": PLAN_VERSION, "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    saved.write_bytes(header + b"\n" + payload)


def test_a_plan_changed_since_it_was_written_is_a_miss(tmp_path: Path) -> None:
    """One byte of a brick's kept value changed, still valid JSON and base64: its header says so."""
    path = tiny_models.computed_reshape(tmp_path)
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    cache.put(path, ONE_POINT, cut(path))
    (saved,) = (tmp_path / "plans").iterdir()
    assert cache.get(path, "reshape.onnx") is not None
    data = read_plan(saved)
    brick = next(brick for brick in data["bricks"] if brick.get("values"))
    name = next(iter(brick["values"]))
    kind, shape, content = brick["values"][name]
    brick["values"][name] = [kind, shape, ("B" if content[0] != "B" else "C") + content[1:]]
    header = saved.read_bytes().partition(b"\n")[0]
    saved.write_bytes(header + b"\n" + json.dumps(data).encode())
    assert cache.get(path, "reshape.onnx") is None
    assert cache.discarded == 1
    write_plan(saved, data)
    assert cache.get(path, "reshape.onnx") is not None, "the same content, vouched for"


def test_plans_no_run_used_for_long_are_removed_and_nothing_else(tmp_path: Path) -> None:
    old, used, fresh = (
        tiny_models.chain(tmp_path, f"{name}.onnx", kernel=k) for name, k in [("o", 1), ("u", 3), ("f", 5)]
    )
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    for path in (old, used, fresh):
        cache.put(path, ONE_POINT, cut(path))
        cache.put_by_graph(hashlib.sha256(path.name.encode()).hexdigest(), cut(path))
    foreign = [tmp_path / "plans" / "notes.json", tmp_path / "plans" / f"{'b' * 64}.txt"]
    for other in foreign:
        other.write_text("{}")
    now = time.time()
    long_ago = now - UNUSED_FOR_S - 60
    for file in [*(tmp_path / "plans").rglob("*.*")]:
        os.utime(file, (long_ago, long_ago))
    os.utime(tmp_path / "plans" / f"{cache.key(fresh)}.json")
    assert cache.get(used, "u.onnx") is not None, "reading a plan marks it used"
    assert cache.prune(now) == 4, "the unused plan and the three graph copies"
    left = sorted(file.name for file in (tmp_path / "plans").rglob("*") if file.is_file())
    assert left == sorted([f"{cache.key(used)}.json", f"{cache.key(fresh)}.json", *(other.name for other in foreign)])
    assert cache.get(old, "o.onnx") is None
    assert cache.prune(now) == 0


def test_a_run_removes_the_plans_no_run_used_for_long_and_says_so(pytester: pytest.Pytester) -> None:
    tiny_models.chain(pytester.path, "model.onnx")
    args = ("--dlbricks-granularity=2", "--dlbricks-precision=off", "model.onnx")
    assert run_dlbricks(pytester, *args, dims=()).ret == pytest.ExitCode.OK
    (plans,) = (pytester.path / ".benchmarks" / "dlbricks").glob("*/plans")
    (kept,) = plans.glob("*.json")
    stale = plans / f"{'0' * 64}.json"
    stale.write_bytes(kept.read_bytes())
    long_ago = time.time() - UNUSED_FOR_S - 60
    for file in plans.rglob("*.json"):
        os.utime(file, (long_ago, long_ago))
    result = run_dlbricks(pytester, *args, dims=())
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["dlbricks: 2 cut models no run used for 30 days removed from store .benchmarks*"])
    assert kept.exists() and not stale.exists(), "the plan this run read stays; its graph copy, unread, went too"
    result = run_dlbricks(pytester, *args, dims=())
    assert "removed from store" not in result.stdout.str()


def test_pruning_a_store_without_plans_is_no_error(tmp_path: Path) -> None:
    assert PlanCache(tmp_path / "absent", SETTINGS).prune() == 0
    assert PlanCache(None, SETTINGS).prune() == 0


@pytest.mark.parametrize("content", ["", "{", '{"version": 2}', '{"version": 1, "bricks": [{"nodes": ["%%"]}]}'])
def test_an_unreadable_plan_is_a_miss(tmp_path: Path, content: str) -> None:
    path = tiny_models.chain(tmp_path)
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    cache.put(path, ONE_POINT, cut(path))
    (saved,) = (tmp_path / "plans").iterdir()
    saved.write_text(content)
    assert cache.get(path, "chain.onnx") is None


@pytest.mark.parametrize("damage", ["bytes", "flops", "layers", "broken_layer", "writer_after", "writers_short"])
def test_a_plan_with_numbers_no_cut_makes_is_a_miss(tmp_path: Path, damage: str) -> None:
    """Sizes beyond 64 bits overflowed the report's arithmetic; a broken brick beyond the model's layers
    named an error of a layer that is not there; an input written after its brick, or a brick without the
    writers of its inputs, would time bricks with inputs pushed out of the caches as far as nothing says."""
    path = tiny_models.chain(tmp_path)
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    cache.put(path, ONE_POINT, cut(path))
    (saved,) = (tmp_path / "plans").iterdir()
    data = read_plan(saved)
    layer = next(iter(data["work"].values()))["layers"][0]
    if damage == "bytes":
        layer[2] = 10**400
    elif damage == "flops":
        layer[1] = 10**30
    elif damage == "layers":
        data["layers"] = 2**63
    elif damage == "broken_layer":
        data["bricks"].append({"broken": [data["layers"], "Relu", "no kernel"]})
        data["input_writers"].append([])
        data["edges"] = []
    elif damage == "writer_after":
        data["input_writers"][0] = [1]  # the first brick's input written by the brick after it
    else:
        data["input_writers"].pop()
    write_plan(saved, data)
    assert cache.get(path, "chain.onnx") is None
    assert cache.discarded == 1


@pytest.mark.parametrize(
    "damage",
    [
        ["<i8", [2], "AAAA"],
        ["|O", [1], "AAAAAAAAAAA="],
        ["<i8", [-1], "AAAAAAAAAAA="],
        ["<i8", [3], "AAAAAAAAAAA="],
        "AAAA",
    ],
    ids=["short", "objects", "negative", "wrong_shape", "not_a_list"],
)
def test_a_plan_whose_values_disagree_with_their_type_and_shape_is_a_miss(tmp_path: Path, damage: object) -> None:
    path = tiny_models.computed_reshape(tmp_path)
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    cache.put(path, ONE_POINT, cut(path))
    (saved,) = (tmp_path / "plans").iterdir()
    data = read_plan(saved)
    brick = next(brick for brick in data["bricks"] if brick.get("values"))
    brick["values"][next(iter(brick["values"]))] = damage
    write_plan(saved, data)
    assert cache.get(path, "reshape.onnx") is None
    assert cache.discarded == 1


def test_a_missing_or_broken_model_file_is_a_miss(tmp_path: Path) -> None:
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    assert cache.get(tmp_path / "gone.onnx", "gone.onnx") is None
    (tmp_path / "broken.onnx").write_bytes(b"not a protobuf \xff\xfe")
    assert cache.get(tmp_path / "broken.onnx", "broken.onnx") is None


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path: Path) -> None:
    path = tiny_models.chain(tmp_path)
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the cache's folder should be")
    cache = PlanCache(blocker / "plans", SETTINGS)
    cache.put(path, ONE_POINT, cut(path))  # raises nothing: the next run only cuts again
    assert cache.get(path, "chain.onnx") is None
    assert blocker.read_text() == "a file where the cache's folder should be"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked", "chain.onnx"]


def test_a_file_loading_refuses_is_never_read_for_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pipe.onnx"
    os.mkfifo(path)  # reading it would wait for a writer forever
    monkeypatch.setattr(file_digests, "_digest_file", lambda *args, **kwargs: pytest.fail("the file was read"))
    assert PlanCache(tmp_path / "plans", SETTINGS).key(path) is None


def test_a_cut_is_shared_by_graph_only_where_weights_cannot_decide_its_bricks(tmp_path: Path) -> None:
    """Where a layer's work depends on the values it reads (a Loop's trip count, NonZero), a variant's weights
    could give its bricks other shapes: its model is cut for itself."""
    cache = PlanCache(None, SETTINGS)
    plain = tiny_models.chain(tmp_path)
    key = cache.graph_key(plain)
    assert key is not None and cache.get_by_graph(key, "chain.onnx") is None
    cache.put_by_graph(key, cut(plain))
    shared = cache.get_by_graph(key, "tuned.onnx")
    assert shared is not None and shared.plan.path == "tuned.onnx"
    looping = tiny_models.loop_outer_scope(tmp_path)
    key = cache.graph_key(looping)
    assert key is not None
    cache.put_by_graph(key, cut(looping))
    assert cache.get_by_graph(key, "loop.onnx") is None


def unproduced_output(directory: Path) -> Path:
    """A model onnxruntime refuses to load: it declares an output ``z`` nothing produces."""
    nodes = [onnx.helper.make_node("Relu", ["x"], ["y"])]
    model = tiny_models.finish(nodes, [tiny_models.tensor("x", (2,))], [tiny_models.tensor("z", (2,))])
    return tiny_models.save(model, directory, "refused.onnx")


def test_a_refusal_is_kept_until_something_that_decides_it_changes(tmp_path: Path) -> None:
    path = tiny_models.chain(tmp_path)
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    cache.put_refusal(path, ONE_POINT, "onnxruntime cannot run the model to learn its shapes: LSTM")
    with pytest.raises(RuntimeRefusal, match=r"^models/chain\.onnx: onnxruntime cannot run the model .*: LSTM$"):
        cache.get(path, "models/chain.onnx")
    assert cache.get(path, "c", SweepPoint({"batch": 2}, label="batch=2")) is None
    assert cache.get(path, "c", samples="other inputs") is None
    assert PlanCache(tmp_path / "plans", replace(SETTINGS, granularity=3)).get(path, "c") is None
    tiny_models.chain(tmp_path, kernel=5)
    assert cache.get(path, "chain.onnx") is None, "a changed model is loaded again"


@pytest.mark.parametrize(
    "cause",
    [
        "onnxruntime cannot load the model: Failed to allocate memory",
        "cannot load the model: no space left on device",
        "cannot load the model: Read-only file system",
        "cannot load the model: Too many open files",
    ],
)
def test_a_refusal_for_want_of_memory_or_disk_is_not_kept(tmp_path: Path, cause: str) -> None:
    path = tiny_models.chain(tmp_path)
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    cache.put_refusal(path, ONE_POINT, cause)
    assert cache.get(path, "chain.onnx") is None
    assert not (tmp_path / "plans").exists()


def test_a_damaged_refusal_is_a_miss(tmp_path: Path) -> None:
    path = tiny_models.chain(tmp_path)
    cache = PlanCache(tmp_path / "plans", SETTINGS)
    cache.put_refusal(path, ONE_POINT, "onnxruntime cannot load the model: z")
    (saved,) = (tmp_path / "plans").iterdir()
    write_plan(saved, {"refused": ["not", "text"]})
    assert cache.get(path, "chain.onnx") is None
    assert cache.discarded == 1


def test_a_model_onnxruntime_refused_is_not_loaded_again_on_the_next_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    unproduced_output(pytester.path)
    tiny_models.chain(pytester.path, "model.onnx", channels=tiny_models.UNBLOCKED_CHANNELS)
    args = (
        "--dlbricks-granularity=2",
        "--dlbricks-precision=off",
        "--dlbricks-json=r.json",
        "refused.onnx",
        "model.onnx",
    )
    first = run_dlbricks(pytester, *args, dims=())
    first.assert_outcomes(passed=1, errors=1)
    first.stdout.fnmatch_lines(["*refused.onnx: onnxruntime cannot load the model:*z*"])
    monkeypatch.setattr(engine, "load_model", lambda *args: pytest.fail("a model was loaded again"))
    again = run_dlbricks(pytester, *args, dims=())
    again.assert_outcomes(errors=1)
    again.stdout.fnmatch_lines(["*refused.onnx: onnxruntime cannot load the model:*z*", "*1 deselected, 1 error*"])
    (failed,) = [model for model in json.loads((pytester.path / "r.json").read_text())["models"] if "error" in model]
    assert failed["path"] == "refused.onnx" and "cannot load the model" in failed["error"]
