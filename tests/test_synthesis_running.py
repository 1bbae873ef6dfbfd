"""Unit tests of brick model synthesis and of running bricks (and whole models) in onnxruntime."""

from __future__ import annotations

import dataclasses
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tiny_models

from conftest import plan_of, runtime_ops
from pytest_dlbricks.core import runtime, synthetic
from pytest_dlbricks.core.errors import ModelError
from pytest_dlbricks.core.graph import MIN_IR_VERSION, TensorSpec
from pytest_dlbricks.core.placement import placement_of
from pytest_dlbricks.core.runtime import create_session, input_rewriter, profile, run_reference, session_options
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.core.synthetic import SharedWeights, SynthesisError, model_feeds, synthetic_array
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model, whole_model
from pytest_dlbricks.timing import overhead as call_overhead
from pytest_dlbricks.timing.overhead import CallOverhead, ParallelCosts, measure_call_overhead, measure_parallel_costs
from pytest_dlbricks.timing.probes import ExecutorDetection, PoolSlowdown
from pytest_dlbricks.timing.running import BrickError, BrickRunner, ModelRunner, _rewritable, view_outputs
from pytest_dlbricks.timing.synthesis import APART_BYTES, brick_feeds, brick_model_and_weights, build_brick_model
from pytest_dlbricks.wiring import engine
from pytest_dlbricks.wiring.engine import DLBricksRun

P = onnx.TensorProto
BUILDERS = tiny_models.BUILDERS


@pytest.fixture
def settings() -> Settings:
    """One intra-op thread and onnxruntime's default optimizations: quick sessions, no thread pool."""
    return Settings(granularity=1, intra_op_threads=1)


def bricks_of(path: Path, granularity: int) -> list[BrickSpec]:
    plan = plan_of(path, granularity)
    return [brick for brick in plan.bricks if isinstance(brick, BrickSpec)]


def brick_with_ops(path: Path, ops: tuple[str, ...]) -> BrickSpec:
    return next(brick for brick in bricks_of(path, len(ops)) if brick.ops == ops)


# -- synthetic values ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [P.FLOAT, P.DOUBLE, P.FLOAT16], ids=P.DataType.Name)
def test_float_values_are_deterministic_and_in_range(dtype: int) -> None:
    spec = TensorSpec(dtype, (3, 50))
    weights = synthetic_array(spec, np.random.default_rng(1), weight=True)
    again = synthetic_array(spec, np.random.default_rng(1), weight=True)
    activations = synthetic_array(spec, np.random.default_rng(1), weight=False)
    np.testing.assert_array_equal(weights, again)
    assert weights.dtype == onnx.helper.tensor_dtype_to_np_dtype(dtype)
    assert weights.shape == (3, 50)
    assert weights.min() >= 0.0099 and weights.max() <= 0.1001
    assert activations.min() >= 0.499 and activations.max() <= 1.501
    assert np.isfinite(activations).all()


@pytest.mark.parametrize("dtype", [P.FLOAT, P.DOUBLE, P.FLOAT16], ids=P.DataType.Name)
def test_float_values_need_no_temporary_the_size_of_the_tensor(dtype: int) -> None:
    spec = TensorSpec(dtype, (1 << 21,))
    tracemalloc.start()
    try:
        values = synthetic_array(spec, np.random.default_rng(1), weight=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < values.nbytes * 1.25, f"{peak} bytes at the peak for a tensor of {values.nbytes}"


@pytest.mark.parametrize("dtype", [P.INT64, P.INT32, P.UINT8, P.BOOL], ids=P.DataType.Name)
def test_integer_and_bool_values_are_zero(dtype: int) -> None:
    values = synthetic_array(TensorSpec(dtype, (2, 5)), np.random.default_rng(0), weight=False)
    assert values.dtype == onnx.helper.tensor_dtype_to_np_dtype(dtype)
    assert values.shape == (2, 5)
    assert not values.any()


def test_a_0d_spec_gives_a_0d_array() -> None:
    assert synthetic_array(TensorSpec(P.FLOAT, ()), np.random.default_rng(0), weight=False).shape == ()


def test_string_tensors_cannot_be_synthesised() -> None:
    with pytest.raises(SynthesisError, match="string"):
        synthetic_array(TensorSpec(P.STRING, (2,)), np.random.default_rng(0), weight=False)


def test_shared_weights_are_read_only_views_of_one_buffer_whatever_the_order() -> None:
    """Every brick reads the same memory: nothing is filled afresh, and nothing may write into it."""
    small, large = TensorSpec(P.FLOAT, (3, 50)), TensorSpec(P.FLOAT, (1 << 17,))
    first, second = SharedWeights(), SharedWeights()
    (a,), (b,) = first.arrays([small]), first.arrays([large])
    (c,), (d,) = second.arrays([large]), second.arrays([small])
    np.testing.assert_array_equal(a, d)
    np.testing.assert_array_equal(b, c)
    assert np.shares_memory(c, d) and np.shares_memory(b, first.arrays([TensorSpec(P.FLOAT, (7,))])[0])
    assert not (a.flags.writeable or c.flags.writeable)
    assert a.shape == (3, 50) and a.dtype == np.float32
    assert c.min() >= 0.0099 and c.max() <= 0.1001
    assert first.arrays([TensorSpec(P.FLOAT16, (4,))])[0].dtype == np.float16
    assert not first.arrays([TensorSpec(P.INT64, (2, 5))])[0].any()
    with pytest.raises(SynthesisError, match="string"):
        first.arrays([TensorSpec(P.STRING, (2,))])


def test_shared_weights_are_set_aside_once_and_written_as_far_as_a_brick_reaches() -> None:
    """Allocated anew at each larger brick, the onnx wheel's CNNs wrote 208 and then 392 MiB of fresh memory."""
    shared = SharedWeights()
    shared.arrays([TensorSpec(P.FLOAT, (3, 50))])
    buffer = shared._buffers[np.dtype(np.float32)]
    (large,) = shared.arrays([TensorSpec(P.FLOAT, (3 << 16,))])
    assert shared._buffers[np.dtype(np.float32)] is buffer and np.shares_memory(large, buffer), "no new buffer"
    assert shared._written[np.dtype(np.float32)] == 3 << 16, "written only as far as the largest brick reaches"
    alone = SharedWeights().arrays([TensorSpec(P.FLOAT, (3 << 16,))])[0]
    np.testing.assert_array_equal(large, alone)  # the values of a buffer written in one go


def test_shared_weights_take_what_a_strict_limit_on_memory_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    empty = np.empty

    def strict(shape: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        if isinstance(shape, int) and shape > 1 << 20:
            raise MemoryError("cannot set aside that much")
        return empty(shape, *args, **kwargs)

    monkeypatch.setattr(synthetic.np, "empty", strict)
    shared = SharedWeights()
    (values,) = shared.arrays([TensorSpec(P.FLOAT, (1000,))])
    assert shared._buffers[np.dtype(np.float32)].size == 1000, "as much as the brick needs, no more"
    assert values.min() >= 0.0099


def test_the_weights_of_one_brick_each_have_memory_of_their_own() -> None:
    """Weights that all read the same memory fill a fraction of the caches they fill in the model: a whole
    transformer graph so ran 18% faster than with its real weights."""
    specs = [TensorSpec(P.FLOAT, (3, 50)), TensorSpec(P.FLOAT, (1 << 17,)), TensorSpec(P.INT64, (5,))]
    specs.append(TensorSpec(P.FLOAT, (3, 50)))
    shared = SharedWeights()
    arrays = shared.arrays(specs)
    assert [array.shape for array in arrays] == [spec.shape for spec in specs]
    assert not any(np.shares_memory(x, y) for i, x in enumerate(arrays) for y in arrays[i + 1 :])
    assert all(array.ctypes.data % 64 == 0 for array in arrays), "each on a cache line of its own"
    assert np.shares_memory(arrays[0], shared.arrays([specs[0]])[0]), "the next brick reads the same memory again"


def test_bricks_with_shared_weights_run_as_with_their_own(tmp_path: Path, settings: Settings) -> None:
    shared = SharedWeights()
    bricks = [brick for brick in bricks_of(tiny_models.chain(tmp_path), 1) if brick.weights]
    handed: list[np.ndarray] = []
    for brick in bricks:
        model, weights = brick_model_and_weights(brick, shared)
        handed.extend(weights.values())
        outputs = create_session(model, settings, initializers=weights).run(None, brick_feeds(brick))
        assert [np.asarray(output).shape for output in outputs] == [spec.shape for _, spec in brick.outputs]
    assert len(handed) >= 2 and np.shares_memory(handed[0], handed[1]), "bricks read the same memory"


def test_feeds_are_deterministic(tmp_path: Path) -> None:
    (brick, *_) = bricks_of(tiny_models.chain(tmp_path), 2)
    first, second = brick_feeds(brick), brick_feeds(brick)
    assert list(first) == ["input_0"]
    np.testing.assert_array_equal(first["input_0"], second["input_0"])
    inputs = [("x", TensorSpec(P.FLOAT, (4,))), ("n", TensorSpec(P.INT64, (2,)))]
    np.testing.assert_array_equal(model_feeds(inputs)["x"], model_feeds(inputs)["x"])
    assert model_feeds(inputs)["n"].tolist() == [0, 0]


def test_a_0d_kept_value_is_fed_0d(tmp_path: Path) -> None:
    """Range(start, n, step): n is a 0-d activation whose real value (5) sets the output length."""
    brick = brick_with_ops(tiny_models.scalar_range(tmp_path), ("Range",))
    feeds = brick_feeds(brick)
    assert [name for name, _ in brick.inputs] == ["input_0"]
    assert feeds["input_0"].shape == ()
    assert int(feeds["input_0"]) == 5
    model = build_brick_model(brick)
    assert all(list(initializer.dims) == [] for initializer in model.graph.initializer)
    assert [onnx.numpy_helper.to_array(t).item() for t in model.graph.initializer] == [0, 1]


def test_a_computed_shape_is_fed_its_real_value(tmp_path: Path, settings: Settings) -> None:
    brick = brick_with_ops(tiny_models.computed_reshape(tmp_path), ("Reshape",))
    assert brick_feeds(brick)["input_1"].tolist() == [2, -1]
    runner = BrickRunner(brick, settings)
    runner.check()
    runner()
    assert runner.outputs()[0].shape == (2, 12)


# -- brick models --------------------------------------------------------------------------------


@pytest.mark.parametrize("granularity", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_brick_model_is_valid_and_runs(tmp_path: Path, settings: Settings, name: str, granularity: int) -> None:
    bricks = bricks_of(BUILDERS[name](tmp_path), granularity)
    assert bricks
    for brick in bricks:
        model = build_brick_model(brick)
        onnx.checker.check_model(model, full_check=True)
        runner = BrickRunner(brick, settings)
        runner.check()
        runner()
        results = runner.outputs()
        assert [tuple(result.shape) for result in results] == [spec.shape for _, spec in brick.outputs]


def test_weights_the_model_lists_as_inputs_are_listed_so_in_its_bricks(tmp_path: Path, settings: Settings) -> None:
    """Weights a caller may override in the model are so in the brick too, with their synthetic values:
    onnxruntime neither folds nor pre-packs them there either, and no run needs to feed them."""
    (brick, *_) = bricks_of(tiny_models.weights_as_inputs(tmp_path), 2)
    assert brick.ops == ("Conv", "Relu")
    assert brick.weights_as_inputs == {"weight_0", "weight_1"}
    for model in (build_brick_model(brick), brick_model_and_weights(brick)[0]):
        assert [value.name for value in model.graph.input] == ["input_0", "weight_0", "weight_1"]
        assert [tensor.name for tensor in model.graph.initializer] == ["weight_0", "weight_1"]
    runner = BrickRunner(brick, settings)
    runner.check()
    runner()
    assert [result.shape for result in runner.outputs()] == [(1, 16, 16, 16)]


def test_a_brick_whose_weights_are_inputs_is_another_brick(tmp_path: Path) -> None:
    """They run otherwise, so they are timed apart; listed before IR 4 they are constants, the same brick."""

    def first_brick(folder: Path, **variant: Any) -> BrickSpec:
        folder.mkdir()
        return bricks_of(tiny_models.weights_as_inputs(folder, **variant), 2)[0]

    listed = first_brick(tmp_path / "listed")
    plain = first_brick(tmp_path / "plain", listed=False)
    old = first_brick(tmp_path / "old", ir_version=3)
    assert listed.ops == plain.ops == old.ops
    assert listed.signature != plain.signature == old.signature


@pytest.mark.parametrize("listed", [True, False], ids=["listed", "plain"])
def test_a_brick_runs_as_its_layers_run_in_the_model(tmp_path: Path, listed: bool) -> None:
    """What onnxruntime makes of a brick of original layers is what it makes of them inside the model: with
    weights listed as inputs, the brick gets no convolution the model does not run (NCHWc, reorders)."""
    path = tiny_models.weights_as_inputs(tmp_path, listed=listed)
    (brick, *_) = bricks_of(path, 2)
    assert set(runtime_ops(build_brick_model(brick), tmp_path)) <= set(runtime_ops(path, tmp_path))


def test_weights_are_initializers_not_inputs(tmp_path: Path) -> None:
    """Old IR models list initializers as inputs; a brick must not (onnxruntime skips pre-packing then)."""
    (conv, _) = bricks_of(tiny_models.old_ir_constant_of_shape(tmp_path), 1)
    model = build_brick_model(conv)
    assert model.ir_version == MIN_IR_VERSION
    assert [value.name for value in model.graph.input] == ["input_0"]
    assert [tensor.name for tensor in model.graph.initializer] == ["weight_0"]
    weight = onnx.numpy_helper.to_array(model.graph.initializer[0])
    assert weight.shape == (8, 3, 3, 3)
    assert weight.min() >= 0.01 and weight.max() <= 0.1


def test_large_weights_reach_onnxruntime_apart_and_compute_the_same(tmp_path: Path, settings: Settings) -> None:
    """Weights handed to onnxruntime beside the model are the initializers the whole model would hold."""
    apart = 0
    for name in sorted(BUILDERS):
        folder = tmp_path / name
        folder.mkdir()
        for brick in bricks_of(BUILDERS[name](folder), 1):
            model, weights = brick_model_and_weights(brick)
            apart += len(weights)
            assert all(weight.nbytes >= APART_BYTES for weight in weights.values())
            external = {tensor.name for tensor in model.graph.initializer if tensor.data_location == P.EXTERNAL}
            assert external == set(weights)
            feeds = brick_feeds(brick)
            try:
                whole = create_session(build_brick_model(brick), settings).run(None, feeds)
            except Exception:  # a brick onnxruntime cannot run alone is another test's concern
                continue
            split = create_session(model, settings, initializers=weights).run(None, feeds)
            for expected, got in zip(whole, split):
                np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    assert apart, "some tiny model has a weight large enough to be handed apart"


def test_brick_models_keep_the_models_ir_version_and_opsets(tmp_path: Path) -> None:
    (brick, *_) = bricks_of(tiny_models.chain(tmp_path), 2)
    model = build_brick_model(brick)
    assert model.ir_version == tiny_models.IR_VERSION
    assert {o.domain: o.version for o in model.opset_import} == {"": tiny_models.OPSET}


def test_building_is_deterministic(tmp_path: Path) -> None:
    (brick, *_) = bricks_of(tiny_models.chain(tmp_path), 2)
    assert build_brick_model(brick).SerializeToString() == build_brick_model(brick).SerializeToString()


# -- BrickRunner ---------------------------------------------------------------------------------


def test_check_refuses_an_output_shape_other_than_in_the_model(tmp_path: Path, settings: Settings) -> None:
    brick = brick_with_ops(tiny_models.chain(tmp_path), ("Conv", "Relu"))
    runner = BrickRunner(brick, settings)
    runner.check()
    (name, spec), *_ = brick.outputs
    runner.brick = dataclasses.replace(brick, outputs=((name, TensorSpec(spec.dtype, (1, 8, 3, 3))),))
    with pytest.raises(BrickError, match=r"shape \[1, 8, 6, 6\] but \[1, 8, 3, 3\] inside the model"):
        runner.check()


def test_a_brick_onnxruntime_cannot_load_is_a_brick_error(tmp_path: Path, settings: Settings) -> None:
    brick = brick_with_ops(tiny_models.diamond(tmp_path), ("Relu",))
    node = onnx.NodeProto()
    node.CopyFrom(brick.nodes[0])
    node.op_type = "NoSuchOperator"
    with pytest.raises(BrickError, match="cannot load the brick"):
        BrickRunner(dataclasses.replace(brick, nodes=(node,)), settings)


def test_a_brick_without_synthetic_inputs_is_a_brick_error(tmp_path: Path, settings: Settings) -> None:
    brick = brick_with_ops(tiny_models.diamond(tmp_path), ("Relu",))
    strings = dataclasses.replace(brick, inputs=(("input_0", TensorSpec(P.STRING, (1, 64))),))
    with pytest.raises(BrickError, match="string"):
        BrickRunner(strings, settings)


def test_runner_reports_its_provider(tmp_path: Path, settings: Settings) -> None:
    runner = BrickRunner(bricks_of(tiny_models.diamond(tmp_path), 1)[0], settings)
    assert runner.provider == "CPUExecutionProvider"


def test_rewriting_inputs_writes_them_in_place_unchanged(tmp_path: Path, settings: Settings) -> None:
    runner = BrickRunner(brick_with_ops(tiny_models.chain(tmp_path), ("Conv", "Relu")), settings)
    runner()
    (before,) = runner.outputs()
    inputs = {name: array.copy() for name, array in runner.feeds.items()}
    runner.prepare_call()
    runner.prepare_call()
    assert all(np.array_equal(runner.feeds[name], array) for name, array in inputs.items())
    runner()
    np.testing.assert_array_equal(runner.outputs()[0], before)


def test_a_reshape_of_a_brick_input_is_that_inputs_memory(tmp_path: Path, settings: Settings) -> None:
    """Inside the model onnxruntime aliases a Reshape's output to its input; the brick does the same."""
    runner = BrickRunner(brick_with_ops(tiny_models.computed_reshape(tmp_path), ("Reshape",)), settings)
    runner.check()
    runner()
    np.testing.assert_array_equal(runner.outputs()[0], runner.feeds["input_0"].reshape(2, 12))
    runner.feeds["input_0"][...] = 7.0  # not run again: only a shared buffer shows the change
    assert (runner.outputs()[0] == 7.0).all()


def test_a_view_of_a_value_computed_in_the_brick_keeps_its_own_output(tmp_path: Path, settings: Settings) -> None:
    nodes = [onnx.helper.make_node("Relu", ["x"], ["r"]), onnx.helper.make_node("Reshape", ["r", "shape"], ["y"])]
    shape = tiny_models.array("shape", np.array([2, 12], np.int64))
    model = tiny_models.finish(nodes, [tiny_models.tensor("x", [2, 3, 4])], [tiny_models.tensor("y", [2, 12])], [shape])
    brick = brick_with_ops(tiny_models.save(model, tmp_path, "relu_reshape.onnx"), ("Relu", "Reshape"))
    assert view_outputs(brick, brick_feeds(brick)) == {}
    runner = BrickRunner(brick, settings)
    runner()
    np.testing.assert_array_equal(runner.outputs()[0], np.maximum(runner.feeds["input_0"], 0).reshape(2, 12))


def test_a_dropout_in_training_mode_is_not_a_view(tmp_path: Path, settings: Settings) -> None:
    node = onnx.helper.make_node("Dropout", ["x", "ratio", "training"], ["y"])
    constants = [
        tiny_models.array("ratio", np.array(0.5, np.float32)),
        tiny_models.array("training", np.array(True)),
    ]
    model = tiny_models.finish([node], [tiny_models.tensor("x", [2, 8])], [tiny_models.tensor("y", [2, 8])], constants)
    (brick,) = bricks_of(tiny_models.save(model, tmp_path, "dropout.onnx"), 1)
    assert view_outputs(brick, brick_feeds(brick)) == {}


def test_a_whole_model_never_returns_its_input_as_its_output(tmp_path: Path, settings: Settings) -> None:
    """A model's own outputs are onnxruntime's: a model that only reshapes its input copies it."""
    path = tiny_models.single_layer(tmp_path, "Identity", [2, 8])
    (brick,) = bricks_of(path, 1)
    assert set(view_outputs(brick, brick_feeds(brick))) == {name for name, _ in brick.outputs}
    model, feeds = whole_model(path)
    whole = ModelRunner(model, feeds, settings)
    whole()
    (name,) = whole.feeds
    whole.feeds[name][...] = 7.0
    assert not (whole.outputs()[0] == 7.0).any()


def test_a_whole_model_whose_outputs_break_their_declared_shape_runs_again_and_again(
    tmp_path: Path, settings: Settings
) -> None:
    """onnxruntime checks the arrays a binding kept from the last call against the declared shapes, and
    only warns in ``run()``: a model whose file declares an output wrongly still runs call after call."""
    node = onnx.helper.make_node("Reshape", ["x", "shape"], ["y"])
    inputs = [tiny_models.tensor("x", [2, 3]), tiny_models.tensor("shape", [2], onnx.TensorProto.INT64)]
    model = tiny_models.finish([node], inputs, [tiny_models.tensor("y", [1, "n"])])
    path = tiny_models.save(model, tmp_path, "misdeclared.onnx")
    feeds: dict[str, np.ndarray] = {"x": np.ones((2, 3), np.float32), "shape": np.array([3, 2], np.int64)}
    whole = ModelRunner(path, feeds, settings)
    whole.check()
    for _ in range(3):
        whole()
    assert whole.outputs()[0].shape == (3, 2)
    declared = ModelRunner(path, {**feeds, "shape": np.array([1, 6], np.int64)}, settings)
    declared.check()
    assert not declared._rebind, "a model whose outputs keep their declared shapes binds them once"


def test_inputs_are_rewritten_through_onnxruntime(tmp_path: Path, settings: Settings) -> None:
    """The rewrite really runs: a rewriter of a float input adds to it (zero, but it does the work)."""
    array = np.full((4, 1000), 1.5, np.float32)
    rewrite = input_rewriter(array)
    array[0, 0] = np.float32(-0.0)
    rewrite()
    assert np.signbit(array[0, 0]) == np.False_, "-0 + 0 is +0: onnxruntime wrote the value again"
    assert (array[1:] == 1.5).all()
    assert _rewritable(np.ones(3, np.int64)) and _rewritable(np.ones(3, np.float16))
    assert not _rewritable(np.ones(3, bool)) and not _rewritable(np.ones(0, np.float32))
    assert not _rewritable(np.ones((4, 4), np.float32)[:, 1])


def test_session_options_follow_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_shared_threads", None)  # sessions with pools of their own
    options = session_options(Settings(granularity=1, intra_op_threads=3, optimization="disable"))
    assert options.intra_op_num_threads == 3
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert session_options().graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def test_rewriters_of_arrays_alike_rewrite_each_its_own_array() -> None:
    """Rewriters of arrays of one type and shape share a session, never an array."""
    first, second = np.full((3, 5), 2.0, np.float32), np.full((3, 5), 4.0, np.float32)
    rewrite_first, rewrite_second = input_rewriter(first), input_rewriter(second)
    first[0, 0] = second[0, 0] = np.float32(-0.0)
    rewrite_first()
    assert not np.signbit(first[0, 0]) and np.signbit(second[0, 0])
    rewrite_second()
    assert not np.signbit(second[0, 0])
    assert (first.ravel()[1:] == 2.0).all() and (second.ravel()[1:] == 4.0).all()


def test_a_brick_cut_from_the_optimized_graph_runs_as_cut(tmp_path: Path, settings: Settings) -> None:
    """onnxruntime already optimized the graph the brick was cut from: it is not optimized again."""
    (brick,) = bricks_of(tiny_models.single_layer(tmp_path, "Relu", [2, 8]), 1)
    disabled = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    as_cut = BrickRunner(brick, settings, optimized=True)
    assert as_cut.session.get_session_options().graph_optimization_level == disabled
    assert BrickRunner(brick, settings).session.get_session_options().graph_optimization_level != disabled
    as_cut.check()
    assert session_options(settings, optimized=True).graph_optimization_level == disabled


def test_only_bricks_this_run_cut_from_the_optimized_graph_run_as_cut(tmp_path: Path) -> None:
    (brick,) = bricks_of(tiny_models.single_layer(tmp_path, "Relu", [2, 8]), 1)
    run = DLBricksRun(Settings(granularity=1), time.perf_counter)
    assert run.already_optimized(brick.signature)
    run.add_exported_brick(brick)
    assert not run.already_optimized(brick.signature), "a suite's brick was cut elsewhere, maybe from the original"
    assert not DLBricksRun(Settings(granularity=1, cut="original"), time.perf_counter).already_optimized("any")


def test_reference_run_returns_intermediate_values(tmp_path: Path) -> None:
    path = tiny_models.computed_reshape(tmp_path)
    model = onnx.load(str(path))
    values = run_reference(path, model, path.parent, ["target", "flat"], {"x": np.ones((2, 3, 4), np.float32)})
    assert values["target"].tolist() == [2, -1]
    assert values["flat"].shape == (2, 12)


def test_the_call_overhead_is_a_few_microseconds_and_positive(settings: Settings) -> None:
    overhead = measure_call_overhead(settings, rounds=3, calls=20)
    assert 0 < overhead.fixed_s < 1e-3
    assert 0 <= overhead.per_input_s < 1e-4
    assert 0 <= overhead.per_output_s < 1e-4
    assert overhead.parallel_fixed_s is None, "measured apart, only for a parallel estimate"
    assert overhead.reference_s is not None and overhead.reference_s > overhead.fixed_s, "16 Adds and a call"


def test_what_timing_a_brick_adds_is_the_difference_of_the_chains_intercepts(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chains timed as brick items time bricks, against the same chains timed one call at a time."""

    def medians(timed_s: float) -> Callable[..., dict[str, list[list[float]]]]:
        def fake(families: dict[str, list[object]], rounds: int, calls: int) -> dict[str, list[list[float]]]:
            assert families["timed"] is families["chain"], "the very same sessions"
            chain = [2e-6 + n * 1e-6 for n in call_overhead._SIZES]
            few = [[float(n)] for n in call_overhead._SIZES[:4]]
            return {
                "chain": [[t] for t in chain],
                "timed": [[t + timed_s] for t in chain],
                "inputs": few,
                "outputs": few,
            }

        return fake

    monkeypatch.setattr(call_overhead, "_interleaved_times", medians(0.5e-6))
    overhead = measure_call_overhead(settings, rounds=1, calls=1)
    assert overhead.fixed_s == pytest.approx(2e-6) and overhead.timing_s == pytest.approx(0.5e-6)
    assert overhead.reference_s == pytest.approx(18e-6), "the chain of 16 Adds"
    monkeypatch.setattr(call_overhead, "_interleaved_times", medians(-0.5e-6))
    assert measure_call_overhead(settings, rounds=1, calls=1).timing_s == 0.0


def test_what_timing_a_brick_adds_is_read_from_the_median_call_as_its_rounds_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pytest-benchmark times a brick of microseconds one call a round and the run takes the rounds' median: a mean
    over the loop holds the slow calls too, and taken off every brick it made models of many small bricks read low."""

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

    clock = Clock()

    class Call:
        calls = 0

        def __call__(self) -> None:
            self.calls += 1
            clock.now += 20e-6 if self.calls % 5 == 0 else 1e-6  # one call in five is slow

        def rewrite_inputs(self) -> None:
            clock.now += 3e-6  # with the clock paused: not counted

    monkeypatch.setattr(call_overhead, "time", clock)
    stub: Any = Call()
    assert call_overhead._time_as_bricks(stub, 100) == pytest.approx(1e-6), "the median call, not the mean 4.8 us"


def test_the_reference_is_read_in_the_proportion_of_the_fixed_cost_to_it_within_each_round(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine whose speed alternates between states, the medians over rounds of the chains can fall
    in different states: the reference must be the one the fixed cost was measured beside."""
    fast = [2e-6 + n * 0.5e-6 for n in call_overhead._SIZES]  # fixed 2 us, reference 10 us
    slow = [4e-6 + n * 1e-6 for n in call_overhead._SIZES]  # fixed 4 us, reference 20 us

    def rounds(families: dict[str, list[object]], rounds: int, calls: int) -> dict[str, list[list[float]]]:
        chain = [[f, s, f] for f, s in zip(fast, slow)]
        few = [[float(n)] * 3 for n in call_overhead._SIZES[:4]]
        return {"chain": chain, "timed": chain, "inputs": few, "outputs": few}

    monkeypatch.setattr(call_overhead, "_interleaved_times", rounds)
    overhead = measure_call_overhead(settings, rounds=3, calls=1)
    assert overhead.fixed_s == pytest.approx(2e-6)
    assert overhead.reference_s == pytest.approx(10e-6)
    assert overhead.of_brick(1, 1, reference_s=20e-6) == pytest.approx(4e-6), "a brick timed in the slow state"


def test_a_stored_call_cost_without_the_reference_is_measured_again_once_before_bricks_are_timed(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bricks timed now are scaled to the reference beside the call cost: one stored before it was timed
    beside them has none. Measured again once, even if the new one has none either (no fixed cost)."""
    measured: list[CallOverhead] = []

    def measure(settings: Settings) -> CallOverhead:
        measured.append(CallOverhead(fixed_s=0.0))
        return measured[-1]

    monkeypatch.setattr("pytest_dlbricks.wiring.engine.measure_call_overhead", measure)
    current = DLBricksRun(settings, time.perf_counter)
    current.assume_overhead(CallOverhead(fixed_s=2e-6, reference_s=1e-5))
    current.measure_overhead()
    assert current.overhead == CallOverhead(fixed_s=2e-6, reference_s=1e-5) and not measured
    older = DLBricksRun(settings, time.perf_counter)
    older.assume_overhead(CallOverhead(fixed_s=2e-6))
    older.measure_overhead()
    older.measure_overhead()
    assert len(measured) == 1 and older.overhead is measured[0]


def test_a_reference_that_reads_no_time_leaves_the_call_costs_as_measured() -> None:
    overhead = CallOverhead(fixed_s=2e-6, timing_s=1e-6, reference_s=1e-5)
    assert overhead.at(0.0) is overhead and overhead.at(-1e-5) is overhead and overhead.at(None) is overhead
    assert CallOverhead(fixed_s=2e-6).at(2e-5) == CallOverhead(fixed_s=2e-6), "measured without the reference"
    assert overhead.of_brick(1, 1, 2e-5) == pytest.approx(6e-6)


def test_the_fixed_cost_is_read_from_chains_of_nothing_but_their_layers(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intercept of chains of n layers is a call of no layer only if a chain holds nothing else: a Sum
    ahead of them counted its own cost in the fixed cost taken off every brick (1.2 to 1.9 us here)."""
    seen: dict[str, list[list[str]]] = {}

    def medians(families: dict[str, list[Any]], rounds: int, calls: int) -> dict[str, list[list[float]]]:
        for name, calls_of in families.items():
            seen[name] = [[node.op_type for node in call.model.graph.node] for call in calls_of]
        return {name: [[1e-6 * (n + 1)] for n in range(len(group))] for name, group in families.items()}

    def keep_the_model(call: Any, model: onnx.ModelProto, settings: Settings, parallel: bool = False) -> None:
        call.model = model

    monkeypatch.setattr(call_overhead._Call, "__init__", keep_the_model)
    monkeypatch.setattr(call_overhead, "_interleaved_times", medians)
    measure_call_overhead(settings, rounds=1, calls=1)
    assert seen["chain"] == [["Add"] * n for n in call_overhead._SIZES]
    assert seen["outputs"] == [["Add"] * n for n in call_overhead._SIZES[:4]]
    assert seen["inputs"] == [["Sum", "Add"]] * 4, "every count of inputs summed by one node, so the slope is per input"


#: The sequential executor's call cost the parallel one's is measured beside: at most 10 x 5 + 20 = 70 us.
SEQUENTIAL = CallOverhead(fixed_s=5e-6)


def test_the_parallel_costs_are_the_intercept_and_the_slope_beyond_the_sequential_one(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain of n layers takes fixed + n * per_layer under each executor: the parallel fixed part is kept, never
    below zero, and what each layer costs it beyond the sequential executor, never below zero either."""

    def chains(fixed_s: float, layer_s: float) -> Callable[..., dict[str, list[list[float]]]]:
        return lambda families, rounds, calls: {
            "sequential": [[2e-6 + n * 0.25e-6] for n in call_overhead._SIZES],
            "parallel": [[fixed_s + n * layer_s] for n in call_overhead._SIZES],
        }

    monkeypatch.setattr(call_overhead, "_interleaved_times", chains(30e-6, 0.6e-6))
    costs = measure_parallel_costs(settings, SEQUENTIAL, rounds=1, calls=1)
    assert costs is not None
    assert (costs.fixed_s, costs.layer_s) == (pytest.approx(30e-6), pytest.approx(0.35e-6))
    monkeypatch.setattr(call_overhead, "_interleaved_times", chains(-5e-6, 0.2e-6))
    assert measure_parallel_costs(settings, SEQUENTIAL, rounds=1, calls=1) == ParallelCosts(0.0, 0.0)


@pytest.mark.parametrize("slow", range(5))
def test_one_session_of_the_parallel_executor_in_its_slow_state_leaves_the_costs_alone(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, slow: int
) -> None:
    """Each chain has its session; one landing in the executor's slow state (8 ms a call) is passed over."""

    def chains(families: object, rounds: int, calls: int) -> dict[str, list[list[float]]]:
        return {
            "sequential": [[2e-6 + n * 0.25e-6] for n in call_overhead._SIZES],
            "parallel": [[8e-3 if k == slow else 6e-6 + n * 0.7e-6] for k, n in enumerate(call_overhead._SIZES)],
        }

    monkeypatch.setattr(call_overhead, "_interleaved_times", chains)
    costs = measure_parallel_costs(settings, SEQUENTIAL, rounds=1, calls=1)
    assert costs is not None
    assert (costs.fixed_s, costs.layer_s) == (pytest.approx(6e-6), pytest.approx(0.45e-6))


class _SetsOfSessions:
    """Stands in for the timing of the parallel executor's chains: each set of sessions (its first round timed
    alone, then its full rounds) reads the next fixed cost of ``fixed_s``, its full rounds alike unless
    ``full_s`` says otherwise; keeps each set's sessions and counts the timings."""

    def __init__(self, fixed_s: list[float], full_s: dict[int, float] | None = None) -> None:
        self.fixed_s, self.full_s = fixed_s, full_s or {}
        self.sessions: list[list[object]] = []
        self.timings: list[tuple[int, int]] = []

    def __call__(self, families: dict[str, list[object]], rounds: int, calls: int) -> dict[str, list[list[float]]]:
        if rounds == 1:
            self.sessions.append(families["parallel"])
        assert families["parallel"] is self.sessions[-1], "a set's full rounds time the sessions of its first"
        index = len(self.sessions) - 1
        self.timings.append((index, rounds))
        fixed = self.full_s.get(index, self.fixed_s[index]) if rounds > 1 else self.fixed_s[index]
        return {
            "sequential": [[2e-6 + n * 0.25e-6] * rounds for n in call_overhead._SIZES],
            "parallel": [[fixed + n * 1e-6] * rounds for n in call_overhead._SIZES],
        }

    def fresh(self) -> bool:
        """Whether every set had sessions of its own."""
        return len({id(call) for calls in self.sessions for call in calls}) == sum(map(len, self.sessions))


def test_a_set_of_sessions_caught_in_a_slow_state_never_reaches_the_parallel_call_cost(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole sets of fresh sessions were caught at 8 ms a call (a 10 us model then read 14 ms in parallel): such
    a set is dropped after its first round, and the lower median of the sane sets that follow is kept."""
    sets = _SetsOfSessions([8e-3, 9e-6, 7e-6, 6e-6])
    monkeypatch.setattr(call_overhead, "_interleaved_times", sets)
    costs = measure_parallel_costs(settings, SEQUENTIAL, rounds=3, calls=1)
    assert costs is not None and (costs.fixed_s, costs.layer_s) == (pytest.approx(7e-6), pytest.approx(0.75e-6))
    assert sets.timings == [(0, 1), (1, 1), (1, 3), (2, 1), (2, 3)], "the slow set's first round only; then enough"


def test_a_set_that_turns_slow_after_its_first_round_is_dropped_too(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    sets = _SetsOfSessions([9e-6, 6e-6, 8e-6], full_s={0: 5e-3})
    monkeypatch.setattr(call_overhead, "_interleaved_times", sets)
    costs = measure_parallel_costs(settings, SEQUENTIAL, rounds=3, calls=1)
    assert costs is not None and costs.fixed_s == pytest.approx(6e-6)


def test_a_set_caught_slow_in_its_cost_per_layer_alone_is_dropped_too(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions caught slow read 0.78 ms a layer once, with an intercept fitted at nothing: such a set is dropped."""

    def chains(families: object, rounds: int, calls: int) -> dict[str, list[list[float]]]:
        return {
            "sequential": [[2e-6 + n * 0.25e-6] for n in call_overhead._SIZES],
            "parallel": [[n * 0.78e-3] for n in call_overhead._SIZES],
        }

    monkeypatch.setattr(call_overhead, "_interleaved_times", chains)
    assert measure_parallel_costs(settings, SEQUENTIAL, rounds=1, calls=1) is None


def test_the_parallel_call_cost_is_bounded_by_the_sequential_one(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cost that is sane beside a slow sequential call is not beside a fast one; where every set of sessions
    reads more than the bound, there is no figure (and no parallel estimate), never a slow one."""
    monkeypatch.setattr(call_overhead, "_interleaved_times", _SetsOfSessions([100e-6] * call_overhead.PARALLEL_SETS))
    costs = measure_parallel_costs(settings, CallOverhead(fixed_s=12e-6), rounds=2, calls=1)
    assert costs is not None and costs.fixed_s == pytest.approx(100e-6)
    sets = _SetsOfSessions([100e-6] * call_overhead.PARALLEL_SETS)
    monkeypatch.setattr(call_overhead, "_interleaved_times", sets)
    assert measure_parallel_costs(settings, SEQUENTIAL, rounds=2, calls=1) is None
    assert len(sets.sessions) == call_overhead.PARALLEL_SETS and sets.fresh(), "each set in fresh sessions"
    assert call_overhead.parallel_ceiling(SEQUENTIAL) == pytest.approx(70e-6)


def _one_at_a_time(pool: bool) -> ExecutorDetection:
    slowdown = PoolSlowdown(2.0, 1e-4, [(1e-3, 2e-3)], 3, "a chain") if pool else None
    return ExecutorDetection(False, 1, 4e-3, 4.2e-3, 1.05, 7, "two chains", pool=slowdown, nodes_at_once=0)


def test_a_stored_detection_without_the_pool_slowdown_is_completed_when_the_parallel_estimate_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that needed no parallel estimate kept the branchy graph's verdict alone: one that asks for the
    estimate measures the rest, and keeps the completed detection as made now."""
    completed = _one_at_a_time(pool=True)
    monkeypatch.setattr(engine, "with_pool_slowdown", lambda detection, settings: completed)
    monkeypatch.setattr(engine, "measure_parallel_costs", lambda settings, sequential: ParallelCosts(3e-6, 0.0))
    run = DLBricksRun(Settings(granularity=1, executor="parallel"), time.perf_counter)
    run.assume_overhead(CallOverhead(fixed_s=2e-6, reference_s=1e-5))
    run.stored_executor = (_one_at_a_time(pool=False), "2026-01-01T00:00:00+00:00")
    run.detect_executor()
    assert run.executor is completed and not run.executor_reused and run.executor_error is None
    assert run.executor_measured_at != "2026-01-01T00:00:00+00:00", "kept again as made now"
    assert run.overhead is not None and run.overhead.parallel_fixed_s == 3e-6 and run.parallel_estimated


def test_a_stored_parallel_call_cost_caught_in_a_slow_state_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "detect_executor", lambda settings, pool=True: _one_at_a_time(pool))
    monkeypatch.setattr(engine, "measure_parallel_costs", lambda settings, sequential: ParallelCosts(3e-6, 0.0))
    run = DLBricksRun(Settings(granularity=1, executor="parallel"), time.perf_counter)
    run.assume_overhead(CallOverhead(fixed_s=2e-6, parallel_fixed_s=8e-3, reference_s=1e-5))
    run.detect_executor()
    assert run.overhead is not None and run.overhead.parallel_fixed_s == 3e-6


def test_a_stored_call_cost_without_the_parallel_cost_per_layer_is_completed_for_a_parallel_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kept by a version that did not measure it: measured with the parallel call cost, the rest kept as stored."""
    monkeypatch.setattr(engine, "detect_executor", lambda settings, pool=True: _one_at_a_time(pool))
    monkeypatch.setattr(engine, "measure_parallel_costs", lambda settings, sequential: ParallelCosts(4e-6, 3e-7))
    run = DLBricksRun(Settings(granularity=1, executor="parallel"), time.perf_counter)
    stored = CallOverhead(fixed_s=2e-6, parallel_fixed_s=3e-6, reference_s=1e-5)
    run.assume_overhead(stored)
    run.detect_executor()
    assert run.overhead == CallOverhead(fixed_s=2e-6, parallel_fixed_s=4e-6, parallel_layer_s=3e-7, reference_s=1e-5)
    run = DLBricksRun(Settings(granularity=1, executor="parallel"), time.perf_counter)
    complete = CallOverhead(fixed_s=2e-6, parallel_fixed_s=3e-6, parallel_layer_s=1e-7, reference_s=1e-5)
    run.assume_overhead(complete)
    monkeypatch.setattr(engine, "measure_parallel_costs", lambda settings, sequential: pytest.fail("measured again"))
    run.detect_executor()
    assert run.overhead == complete, "a complete one is reused"


def test_a_parallel_call_cost_that_cannot_be_measured_sanely_gives_no_parallel_estimate_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "detect_executor", lambda settings, pool=True: _one_at_a_time(pool))
    monkeypatch.setattr(engine, "measure_parallel_costs", lambda settings, sequential: None)
    run = DLBricksRun(Settings(granularity=1, executor="parallel"), time.perf_counter)
    run.assume_overhead(CallOverhead(fixed_s=2e-6, reference_s=1e-5))
    run.detect_executor()
    assert run.executor_error is not None and "took more than 40.0 us a call" in run.executor_error


def test_the_parallel_costs_are_measured_on_the_parallel_executor(settings: Settings) -> None:
    costs = measure_parallel_costs(settings, SEQUENTIAL, rounds=2, calls=5)
    assert costs is None or 0 <= costs.fixed_s <= call_overhead.parallel_ceiling(SEQUENTIAL)
    assert costs is None or 0 <= costs.layer_s < 1e-4


def test_optimized_loading_cuts_what_onnxruntime_runs(tmp_path: Path, settings: Settings) -> None:
    """onnxruntime fuses each Conv with its Relu (and may change the layout): no Relu is left alone."""
    path = tiny_models.chain(tmp_path, bias=True)
    original = load_model(path)
    optimized = load_model(path, optimize=settings)
    assert [layer.op_type for layer in original.layers] == ["Conv", "Relu"] * 3
    assert "Relu" not in [layer.op_type for layer in optimized.layers]
    assert [layer.op_type for layer in optimized.layers].count("Conv") + [
        layer.op_type for layer in optimized.layers
    ].count("FusedConv") == 3
    for brick in plan_model(optimized, 1, path.name).bricks:
        assert isinstance(brick, BrickSpec)
        BrickRunner(brick, settings).check()


@pytest.mark.parametrize("granularity", [1, 2, 3])
def test_bricks_of_a_channels_last_network_run_the_kernels_its_file_runs(
    tmp_path: Path, settings: Settings, granularity: int
) -> None:
    """The Casts and layout changes around a channels-last network's convolutions are onnxruntime's to remove
    or rewrite: cut from the graph it runs, its bricks run the kernels the file runs (no Transpose or Cast
    back at a brick's edge, a layout reorder wherever the model has one), whatever onnxruntime makes of it."""
    path = tiny_models.channels_last_cnn(tmp_path)
    file, feeds = whole_model(path, {})
    assert isinstance(file, Path)
    in_file = sorted(node.op for node in placement_of(profile(onnx.load(str(file)), settings, feeds)).nodes)
    in_bricks = []
    for brick in plan_model(load_model(path, optimize=settings), granularity, path.name).bricks:
        assert isinstance(brick, BrickSpec)
        events = profile(build_brick_model(brick), settings, brick_feeds(brick), optimized=True)
        in_bricks += [node.op for node in placement_of(events).nodes]
    assert sorted(in_bricks) == in_file
    assert "Cast" not in in_file


def test_optimized_loading_of_old_ir_weights_built_at_run_time(tmp_path: Path, settings: Settings) -> None:
    graph = load_model(tiny_models.old_ir_constant_of_shape(tmp_path), optimize=settings)
    assert graph.layers and all(layer.op_type != "ConstantOfShape" for layer in graph.layers)
    assert graph.inputs == ["x"], "initializers listed as inputs are not inputs"


def test_a_model_onnxruntime_cannot_load_is_a_model_error(tmp_path: Path, settings: Settings) -> None:
    path = tiny_models.single_layer(tmp_path, "Relu", [1, 4])
    model = onnx.load(str(path))
    model.graph.node[0].domain = "com.example.unknown"
    model.opset_import.append(onnx.helper.make_opsetid("com.example.unknown", 1))
    onnx.save(model, str(path))
    with pytest.raises(ModelError, match="onnxruntime cannot load the model"):
        load_model(path, optimize=settings)


def test_a_runner_has_no_outputs_before_its_first_call(tmp_path: Path, settings: Settings) -> None:
    runner = BrickRunner(brick_with_ops(tiny_models.computed_reshape(tmp_path), ("Reshape",)), settings)
    assert runner.outputs() == []
    runner()
    assert runner.outputs()[0].shape == (2, 12)
