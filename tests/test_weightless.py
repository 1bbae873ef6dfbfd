"""Variants of one graph, weights aside, share its cut: one model is loaded, optimized and cut for all of them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import tiny_models
from onnx import helper, numpy_helper

from conftest import run_dlbricks
from pytest_dlbricks.cut.weightless import MAX_KEPT_FLOATS, graph_digest
from pytest_dlbricks.wiring import engine


def digest_of(model: onnx.ModelProto) -> str | None:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return graph_digest(copy)


def with_initializer(model: onnx.ModelProto, name: str, values: np.ndarray) -> onnx.ModelProto:
    """A copy of ``model`` whose initializer ``name`` holds ``values``."""
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    (tensor,) = [t for t in changed.graph.initializer if t.name == name]
    tensor.CopyFrom(numpy_helper.from_array(values.astype(numpy_helper.to_array(tensor).dtype), name))
    return changed


def test_weights_are_no_part_of_a_graph_s_identity() -> None:
    assert digest_of(tiny_models.chain_model(seed=0)) == digest_of(tiny_models.chain_model(seed=1))
    assert digest_of(tiny_models.chain_model(seed=0)) != digest_of(tiny_models.chain_model(seed=0, kernel=5))
    half = tiny_models.chain_model(seed=0)
    half.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(numpy_helper.to_array(half.graph.initializer[0]).astype(np.float16), "w0")
    )
    assert digest_of(half) != digest_of(tiny_models.chain_model(seed=0)), "a weight's type is part of it"


def test_quantized_weights_are_no_part_of_it_their_zero_points_are(tmp_path: Path) -> None:
    first = onnx.load(tiny_models.quantized_matmul(tmp_path, seed=0, name="q0.onnx"))
    tuned = onnx.load(tiny_models.quantized_matmul(tmp_path, seed=1, name="q1.onnx"))
    assert digest_of(first) == digest_of(tuned)
    shifted = with_initializer(first, "w_zero", np.ones(32))
    assert digest_of(shifted) != digest_of(first)


def test_a_quantized_convolutions_kernel_and_bias_are_no_part_of_it(tmp_path: Path) -> None:
    first, tuned = tmp_path / "first", tmp_path / "tuned"
    first.mkdir()
    tuned.mkdir()
    assert digest_of(onnx.load(tiny_models.quantized_conv(first, seed=0))) == digest_of(
        onnx.load(tiny_models.quantized_conv(tuned, seed=1))
    )


def test_values_that_may_steer_computation_are_part_of_it() -> None:
    shape = tiny_models.finish(
        [
            helper.make_node("Reshape", ["x", "shape"], ["flat"]),
            helper.make_node("Mul", ["flat", "scale"], ["y"]),
        ],
        [tiny_models.tensor("x", [2, 3, 4])],
        [tiny_models.tensor("y", [2, 12])],
        [
            tiny_models.array("shape", np.array([2, 12], dtype=np.int64)),
            tiny_models.array("scale", np.ones(MAX_KEPT_FLOATS, dtype=np.float32)),
        ],
    )
    other_shape = with_initializer(shape, "shape", np.array([2, -1]))
    other_scale = with_initializer(shape, "scale", np.full(MAX_KEPT_FLOATS, 2.0))
    assert len({digest_of(shape), digest_of(other_shape), digest_of(other_scale)}) == 3


def test_a_model_with_external_weights_has_no_identity_of_its_own(tmp_path: Path) -> None:
    assert graph_digest(onnx.load(tiny_models.external_weights(tmp_path), load_external_data=False)) is None


def loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The model files the engine loads from now on."""
    loaded: list[Path] = []
    original = engine.load_model

    def counting(path: Path, *args: object, **kwargs: object) -> object:
        loaded.append(path)
        return original(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "load_model", counting)
    return loaded


def test_variants_take_the_cut_of_the_first(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in range(3):
        tiny_models.chain(pytester.path, f"variant{seed}.onnx", seed=seed)
    tiny_models.chain(pytester.path, "other.onnx", kernel=5)
    loaded = loads(monkeypatch)
    args = ("--dlbricks-granularity=2", "--dlbricks-json=r.json", "--dlbricks-store=none")
    result = run_dlbricks(pytester, *args, "variant0.onnx", "variant1.onnx", "variant2.onnx", "other.onnx", dims=())
    assert result.ret == pytest.ExitCode.OK
    assert sorted(path.name for path in loaded) == ["other.onnx", "variant0.onnx"]
    result.stdout.fnmatch_lines(["dlbricks: 2 models took the cut of a model of the same graph, weights aside, *"])
    report = json.loads((pytester.path / "r.json").read_text())
    models = {Path(model["path"]).name: model for model in report["models"]}
    assert all(model["complete"] for model in models.values())
    assert {models[f"variant{seed}.onnx"]["sequential_s"] for seed in range(3)} == {
        models["variant0.onnx"]["sequential_s"]
    }, "the same bricks, the same estimate"
    assert models["other.onnx"]["sequential_s"] != models["variant0.onnx"]["sequential_s"]


def test_quantized_variants_share_their_cut_and_every_brick(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for seed in range(2):
        tiny_models.quantized_matmul(pytester.path, seed=seed, name=f"tuned{seed}.onnx")
    loaded = loads(monkeypatch)
    args = ("--dlbricks-granularity=2", "--dlbricks-json=r.json", "--dlbricks-store=none", "--benchmark-disable")
    result = run_dlbricks(pytester, *args, "tuned0.onnx", "tuned1.onnx", dims=())
    assert result.ret == pytest.ExitCode.OK
    assert [path.name for path in loaded] == ["tuned0.onnx"]
    report = json.loads((pytester.path / "r.json").read_text())
    assert [model["unique_bricks"] for model in report["models"]] == [3, 3]
    assert len(report["bricks"]) == 3, "the second variant's bricks are the first's"


def test_a_variant_takes_a_cut_kept_in_the_store(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny_models.chain(pytester.path, "first.onnx", seed=0)
    args = ("--dlbricks-granularity=2", "--dlbricks-precision=off")
    assert run_dlbricks(pytester, *args, "first.onnx", dims=()).ret == pytest.ExitCode.OK
    tiny_models.chain(pytester.path, "tuned.onnx", seed=1)
    loaded = loads(monkeypatch)
    result = run_dlbricks(pytester, *args, "first.onnx", "tuned.onnx", dims=())
    assert result.ret == pytest.ExitCode.OK
    assert loaded == []
    result.stdout.fnmatch_lines(["dlbricks: 1 model took the cut of a model of the same graph, *"])
