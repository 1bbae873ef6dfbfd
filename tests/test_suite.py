"""Unit tests of the exported brick suite: files, manifest, reading bricks back, and what never leaks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tiny_models
from onnx import helper, numpy_helper

from conftest import plan_of
from pytest_dlbricks.core.graph import TensorSpec
from pytest_dlbricks.core.runtime import new_options
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec, brick_signature
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.estimating.analysis import BrickWork, plan_work
from pytest_dlbricks.reporting.maps import MapError, read_json
from pytest_dlbricks.reporting.suite import (
    MANIFEST,
    SuiteError,
    brick_file_name,
    check_export_folder,
    export_suite,
    exported_distances,
    exported_reads,
    exported_work,
    read_brick,
    read_manifest,
)
from pytest_dlbricks.timing.running import BrickRunner
from pytest_dlbricks.timing.synthesis import build_brick_model

SECRET = "acme_secret"
SETTINGS = Settings(granularity=2, intra_op_threads=1, cut="original")


def plan_work_of(path: Path, granularity: int = 2) -> dict[str, BrickWork]:
    graph = load_model(path, {})
    return plan_work(graph, plan_model(graph, granularity, path.name))


def distinct(*paths: Path, granularity: int = 2) -> list[BrickSpec]:
    bricks: dict[str, BrickSpec] = {}
    for path in paths:
        for brick in plan_of(path, granularity).bricks:
            if isinstance(brick, BrickSpec):
                bricks.setdefault(brick.signature, brick)
    return list(bricks.values())


def unsized_bricks(path: Path) -> list[BrickSpec]:
    """The bricks of the model at ``path`` as they are when onnxruntime refuses the model with its sizes written in."""
    graph = dataclasses.replace(load_model(path, {"batch": 2}), unsized=True)
    return [brick for brick in plan_model(graph, 2, path.name).bricks if isinstance(brick, BrickSpec)]


def secret_model(directory: Path) -> tuple[Path, list[np.ndarray]]:
    """A chain whose every name, string and weight is the owner's: none may reach the suite."""
    model = tiny_models.chain_model(blocks=2, bias=True, prefix=f"{SECRET}_")
    model.graph.name = f"{SECRET}_graph"
    model.graph.doc_string = f"{SECRET} doc"
    model.producer_name = f"{SECRET}_exporter"
    model.producer_version = "9.9"
    model.domain = f"com.{SECRET}"
    model.doc_string = f"{SECRET} model"
    helper.set_model_props(model, {"owner": SECRET})
    model.opset_import.append(helper.make_opsetid(f"com.{SECRET}.ops", 1))
    for node in model.graph.node:
        node.doc_string = f"{SECRET} node"
    weights = [numpy_helper.to_array(t) for t in model.graph.initializer]
    return tiny_models.save(model, directory, "secret.onnx"), weights


def test_every_distinct_brick_is_written_with_a_manifest(tmp_path: Path) -> None:
    bricks = distinct(tiny_models.chain(tmp_path), tiny_models.diamond(tmp_path), granularity=1)
    assert export_suite(tmp_path / "suite", bricks, SETTINGS.describe()) == len(bricks) == 7
    entries = read_manifest(tmp_path / "suite")
    assert entries is not None
    assert sorted(entries) == sorted(brick_file_name(brick) for brick in bricks)
    assert sorted(path.name for path in (tmp_path / "suite").iterdir()) == sorted([*entries, MANIFEST])
    conv = next(entry for entry in entries.values() if entry["ops"] == ["Conv"])
    assert conv["inputs"] == [{"name": "input_0", "dtype": "float", "shape": [1, 8, 6, 6]}]
    assert conv["weights"] == [{"name": "weight_0", "dtype": "float", "shape": [8, 8, 3, 3]}]
    assert conv["opsets"] == {"ai.onnx": tiny_models.OPSET}
    manifest = json.loads((tmp_path / "suite" / MANIFEST).read_text())
    assert manifest["cut"] == "original" and manifest["settings"]["optimization"] == "all"


@pytest.mark.parametrize(
    "layers",
    [
        None,
        [],
        [["Conv", 1, 2]],
        [["Conv", 1, 2], ["Add", 1, 2]],
        [["Conv", -1, 2], ["Relu", 0, 0]],
        [["Conv", 1.5, 2], ["Relu", 0, 0]],
        [["Conv", 1, True], ["Relu", 0, 0]],
        [["Conv", 1], ["Relu", 0, 0]],
    ],
)
def test_a_layers_work_no_export_writes_is_unknown(tmp_path: Path, layers: object) -> None:
    (brick,) = distinct(tiny_models.chain(tmp_path))
    assert exported_work({"layers": layers}, brick) is None


def test_a_bricks_layers_work_goes_with_it(tmp_path: Path) -> None:
    (brick,) = distinct(tiny_models.chain(tmp_path))
    (work,) = plan_work_of(tiny_models.chain(tmp_path)).values()
    export_suite(tmp_path / "suite", [brick], SETTINGS.describe(), work={brick.signature: work})
    (entry,) = (read_manifest(tmp_path / "suite") or {}).values()
    assert exported_work(entry, brick) == work and work.flops


def test_file_names_carry_operators_and_sixteen_hex_digits(tmp_path: Path) -> None:
    (brick,) = distinct(tiny_models.chain(tmp_path))
    assert brick_file_name(brick) == f"Conv+Relu-{brick.signature[:16]}.onnx"


def test_a_brick_read_back_is_the_brick_written(tmp_path: Path) -> None:
    bricks = distinct(
        tiny_models.computed_reshape(tmp_path),
        tiny_models.loop_outer_scope(tmp_path, body_seed=3),
        tiny_models.zipmap_classifier(tmp_path),
        tiny_models.weights_as_inputs(tmp_path),
    ) + unsized_bricks(tiny_models.batch_squeeze_switch(tmp_path))
    assert any(brick.non_tensor_outputs for brick in bricks)
    export_suite(tmp_path / "suite", bricks, SETTINGS.describe())
    entries = read_manifest(tmp_path / "suite") or {}
    assert bricks and len(entries) == len(bricks)
    for brick in bricks:
        name = brick_file_name(brick)
        again = read_brick(tmp_path / "suite" / name, entries[name])
        assert again.signature == brick.signature == brick_signature(again)
        assert [n.SerializeToString() for n in again.nodes] == [n.SerializeToString() for n in brick.nodes]
        assert (again.inputs, again.weights, again.outputs) == (brick.inputs, brick.weights, brick.outputs)
        assert (again.non_tensor_outputs, again.unsized) == (brick.non_tensor_outputs, brick.unsized)
        assert again.weights_as_inputs == brick.weights_as_inputs
        assert entries[name]["weights_as_inputs"] == sorted(brick.weights_as_inputs)
        assert sorted(again.values) == sorted(set(brick.values) - brick.activations)
        assert entries[name]["withheld_values"] == sorted(brick.activations)
        assert build_brick_model(again).graph == build_brick_model(brick).graph
        BrickRunner(again, SETTINGS).check()
    assert any(brick.activations for brick in bricks), "the Loop's outer-scope input is an activation"
    assert any(brick.weights_as_inputs for brick in bricks)


def test_activations_leave_only_when_asked_and_the_manifest_lists_what_leaves(tmp_path: Path) -> None:
    bricks = distinct(tiny_models.loop_outer_scope(tmp_path, body_seed=3))
    (loop,) = (brick for brick in bricks if brick.activations)
    for asked in (False, True):
        export_suite(tmp_path / f"suite{asked}", [loop], SETTINGS.describe(), activations=asked)
        (entry,) = (read_manifest(tmp_path / f"suite{asked}") or {}).values()
        carried = sorted(loop.values) if asked else sorted(set(loop.values) - loop.activations)
        assert entry["real_values"] == [value["name"] for value in entry["kept_values"]] == carried
        assert {value["kind"] for value in entry["kept_values"]} == (
            {"steering", "activation"} if asked else {"steering"}
        )
        again = read_brick(tmp_path / f"suite{asked}" / entry["file"], entry)
        assert again.signature == loop.signature


def test_a_brick_file_runs_as_it_is_with_its_steering_values(tmp_path: Path) -> None:
    """The Reshape's computed shape [2, -1] is an input inside the model: the file holds it as its default."""
    (reshape,) = (b for b in distinct(tiny_models.computed_reshape(tmp_path), granularity=1) if b.ops == ("Reshape",))
    export_suite(tmp_path / "suite", [reshape], SETTINGS.describe())
    path = tmp_path / "suite" / brick_file_name(reshape)
    session = ort.InferenceSession(str(path), new_options(), providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {"input_0": np.ones((2, 3, 4), np.float32)})
    assert output.shape == (2, 12)


def test_nothing_of_the_model_leaks_into_the_suite(tmp_path: Path) -> None:
    path, weights = secret_model(tmp_path)
    bricks = distinct(path, granularity=1) + distinct(path, granularity=2)
    export_suite(tmp_path / "suite", bricks, SETTINGS.describe())
    assert any(file.suffix == ".onnx" for file in (tmp_path / "suite").iterdir())
    for file in (tmp_path / "suite").iterdir():
        data = file.read_bytes()
        assert SECRET.encode() not in data, file.name
        if file.suffix != ".onnx":
            continue
        model = onnx.load(str(file))
        assert (model.producer_name, model.graph.name, model.doc_string, model.domain) == (
            "pytest-dlbricks",
            "brick",
            "",
            "",
        )
        assert not model.metadata_props
        assert {opset.domain for opset in model.opset_import} == {""}
        assert all(not node.name and not node.doc_string for node in model.graph.node)
        for tensor in model.graph.initializer:
            stored = numpy_helper.to_array(tensor)
            assert not any(stored.shape == w.shape and np.allclose(stored, w) for w in weights), "a real weight"


def test_a_quantized_models_weights_never_reach_the_suite(tmp_path: Path) -> None:
    path = tiny_models.quantized_matmul(tmp_path)
    (weight,) = [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer if t.name == "w"]
    bricks = distinct(path, granularity=1) + distinct(path, granularity=2)
    export_suite(tmp_path / "suite", bricks, SETTINGS.describe())
    exported = [
        numpy_helper.to_array(tensor)
        for file in (tmp_path / "suite").glob("*.onnx")
        for tensor in onnx.load(str(file)).graph.initializer
    ]
    assert any(stored.shape == weight.shape for stored in exported), "the weight's brick was exported"
    assert not any(stored.shape == weight.shape and np.array_equal(stored, weight) for stored in exported)


def test_a_changed_brick_file_is_refused(tmp_path: Path) -> None:
    (brick,) = distinct(tiny_models.chain(tmp_path))
    export_suite(tmp_path / "suite", [brick], SETTINGS.describe())
    path = tmp_path / "suite" / brick_file_name(brick)
    model = onnx.load(str(path))
    model.graph.node[0].attribute[0].ints[:] = [0, 0, 0, 0]  # other pads: other work
    path.write_bytes(model.SerializeToString())
    with pytest.raises(SuiteError, match="does not match the signature its manifest gives"):
        read_brick(path, (read_manifest(tmp_path / "suite") or {})[path.name])
    path.write_bytes(b"not a model")
    with pytest.raises(SuiteError, match="is not a readable ONNX model"):
        read_brick(path, (read_manifest(tmp_path / "suite") or {})[path.name])


def test_a_new_export_replaces_the_old_one(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    export_suite(suite, distinct(tiny_models.diamond(tmp_path), granularity=1), SETTINGS.describe())
    (chain,) = distinct(tiny_models.chain(tmp_path))
    export_suite(suite, [chain], SETTINGS.describe())
    assert sorted(path.name for path in suite.iterdir()) == sorted([brick_file_name(chain), MANIFEST])


def test_a_previous_manifest_naming_the_manifest_or_a_folder_removes_neither(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    (chain,) = distinct(tiny_models.chain(tmp_path))
    export_suite(suite, [chain], SETTINGS.describe())
    manifest = json.loads((suite / MANIFEST).read_text())
    manifest["bricks"] += [dict(manifest["bricks"][0], file=MANIFEST), dict(manifest["bricks"][0], file="kept")]
    (suite / MANIFEST).write_text(json.dumps(manifest))
    (suite / "kept").mkdir()
    export_suite(suite, [chain], SETTINGS.describe())
    assert read_manifest(suite) is not None and (suite / "kept").is_dir()


def test_only_a_new_empty_or_suite_folder_takes_an_export(tmp_path: Path) -> None:
    assert check_export_folder(tmp_path / "new") is None
    (tmp_path / "empty").mkdir()
    assert check_export_folder(tmp_path / "empty") is None
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "model.onnx").write_bytes(b"")
    assert "is not empty and holds no brick suite" in str(check_export_folder(tmp_path / "models"))
    (tmp_path / "file").write_text("")
    assert "is not a folder" in str(check_export_folder(tmp_path / "file"))


def test_other_manifests_are_not_suites(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text('{"name": "some web app"}')
    assert read_manifest(tmp_path) is None
    (tmp_path / MANIFEST).write_text('{"kind": "pytest-dlbricks brick suite", "version": 99}')
    with pytest.raises(SuiteError, match="is version 99 of the suite format"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text("{")
    with pytest.raises(SuiteError, match="cannot be read as JSON"):
        read_manifest(tmp_path)


@pytest.mark.parametrize("named", ["../victim.txt", "{victim}", "sub/../../victim.txt", ".", ""])
def test_a_manifest_naming_a_file_outside_its_folder_is_an_error_that_deletes_nothing(
    tmp_path: Path, named: str
) -> None:
    suite = tmp_path / "suite"
    (chain,) = distinct(tiny_models.chain(tmp_path))
    export_suite(suite, [chain], SETTINGS.describe())
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    manifest = json.loads((suite / MANIFEST).read_text())
    manifest["bricks"].append({**manifest["bricks"][0], "file": named.format(victim=victim)})
    (suite / MANIFEST).write_text(json.dumps(manifest))
    before = sorted(path.name for path in suite.iterdir())

    with pytest.raises(SuiteError, match="names a file outside its folder"):
        read_manifest(suite)
    with pytest.raises(SuiteError, match="names a file outside its folder"):
        export_suite(suite, [], SETTINGS.describe())
    assert victim.read_text() == "keep me"
    assert sorted(path.name for path in suite.iterdir()) == before


def test_an_export_writes_no_file_through_a_link_in_its_folder(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    (chain,) = distinct(tiny_models.chain(tmp_path))
    export_suite(suite, [chain], SETTINGS.describe())
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (suite / brick_file_name(chain)).unlink()
    (suite / brick_file_name(chain)).symlink_to(victim)
    export_suite(suite, [chain], SETTINGS.describe())
    assert victim.read_text() == "keep me"
    assert not (suite / brick_file_name(chain)).is_symlink()


def test_a_brick_file_referring_to_external_data_is_refused_unread(tmp_path: Path) -> None:
    (chain,) = distinct(tiny_models.chain(tmp_path))
    suite = tmp_path / "suite"
    export_suite(suite, [chain], SETTINGS.describe())
    path = suite / brick_file_name(chain)
    model = onnx.load(str(path))
    (tmp_path / "secret.bin").write_bytes(b"\0" * 4096)
    for tensor in model.graph.initializer:
        onnx.external_data_helper.set_external_data(tensor, "../secret.bin")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        tensor.ClearField("raw_data")
    path.write_bytes(model.SerializeToString())
    with pytest.raises(SuiteError, match="refers to external data, which no exported brick does; refused, not read"):
        read_brick(path, (read_manifest(suite) or {})[path.name])


def test_a_manifest_or_map_nested_deeper_than_json_is_read_is_an_error_naming_it(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / MANIFEST).write_text(deep)
    with pytest.raises(SuiteError, match=r"manifest\.json cannot be read as JSON"):
        read_manifest(tmp_path)
    (tmp_path / "model.map.json").write_text(deep)
    with pytest.raises(MapError, match=r"model\.map\.json is not JSON"):
        read_json(tmp_path / "model.map.json")


@pytest.mark.parametrize(
    ("entry", "reads"),
    [
        ({"flops": 524288, "rest_of_model_bytes": 3 << 20}, (524288.0, 3 << 20)),
        ({"flops": None, "rest_of_model_bytes": 3 << 20}, (None, 3 << 20)),
        ({}, (None, 0)),  # a suite exported before manifests gave them
        ({"flops": -1, "rest_of_model_bytes": 7}, (None, 7)),
        ({"flops": float("nan"), "rest_of_model_bytes": 7}, (None, 7)),
        ({"flops": True, "rest_of_model_bytes": 7}, (None, 7)),
        ({"flops": 10, "rest_of_model_bytes": -7}, (None, 0)),
        ({"flops": 10, "rest_of_model_bytes": 7.5}, (None, 0)),
        ({"flops": 10, "rest_of_model_bytes": "7"}, (None, 0)),
    ],
)
def test_a_manifest_entry_gives_what_decides_a_bricks_cache_flush_or_nothing(entry: dict, reads: tuple) -> None:
    assert exported_reads(entry) == reads


@pytest.mark.parametrize(
    ("distances", "expected"),
    [
        ([0, 49152], (0, 49152)),
        (None, ()),  # a suite exported before manifests gave them
        ([49152], ()),  # not one per input
        ([0, -1], ()),
        ([0, 1.5], ()),
        ([0, True], ()),
        ("0,49152", ()),
    ],
)
def test_a_manifest_entry_gives_how_far_each_input_was_written_or_nothing(distances: object, expected: tuple) -> None:
    join = BrickSpec(
        nodes=(helper.make_node("Concat", ["i0", "i1"], ["o0"], axis=1),),
        inputs=(("i0", TensorSpec(1, (1, 4))), ("i1", TensorSpec(1, (1, 4)))),
        weights=(),
        outputs=(("o0", TensorSpec(1, (1, 8))),),
        values={},
        opset_imports={"": 17},
        ir_version=8,
        functions=(),
        signature="s",
    )
    entry = {} if distances is None else {"input_distances_bytes": distances}
    assert exported_distances(entry, join) == expected
