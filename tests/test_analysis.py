"""Unit tests of the analysis: bricks' work from their layers, time per operator type, the report fields."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import tiny_models
from test_reporting import distinct_bricks, result

from conftest import light_models
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.cutting import ModelPlan, plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.estimating.analysis import TOP_BRICKS, BrickAnalysis, BrickWork, LayerWork, plan_work, split_time
from pytest_dlbricks.reporting.entries import FailedModel
from pytest_dlbricks.reporting.report import build_report
from pytest_dlbricks.timing.overhead import CallOverhead
from pytest_dlbricks.timing.probes import Peak, RunMeasurements

# The chain's Conv+Relu block: 8 x 6 x 6 = 288 outputs of 8 channels x 3 x 3 multiply-adds, then Relu.
CONV_FLOPS = 288 * 8 * 9 * 2
CONV_BYTES = (288 + 8 * 8 * 9 + 288) * 4
RELU_BYTES = 288 * 4 * 2
PEAK = Peak(flops_per_s=1e11, bytes_per_s=1e10, method={"gemm": "test"})


def planned(path: Path, granularity: int) -> tuple[ModelPlan, dict[str, BrickWork]]:
    graph = load_model(path)
    plan = plan_model(graph, granularity, path.name)
    return plan, plan_work(graph, plan)


def test_plan_work_sums_the_layers_of_each_distinct_brick(tmp_path: Path) -> None:
    plan, work = planned(tiny_models.chain(tmp_path, blocks=3), 2)
    ((signature, brick),) = work.items()
    assert signature == plan.bricks[0].signature  # type: ignore[union-attr]
    assert brick.layers == (LayerWork("Conv", CONV_FLOPS, CONV_BYTES), LayerWork("Relu", 288, RELU_BYTES))
    assert (brick.flops, brick.bytes, brick.unknown_ops) == (CONV_FLOPS + 288, CONV_BYTES + RELU_BYTES, [])
    assert brick.label.startswith("Conv+Relu-")


def test_plan_work_only_for_the_signatures_asked(tmp_path: Path) -> None:
    graph = load_model(tiny_models.diamond(tmp_path))
    plan = plan_model(graph, 1, "diamond.onnx")
    wanted = {brick.signature for brick in plan.bricks[2:4]}  # type: ignore[union-attr]
    work = plan_work(graph, plan, wanted)
    assert set(work) == wanted
    assert [w.layers[0].op_type for w in work.values()] == ["Tanh", "Neg"]


def test_plan_work_keeps_positions_past_unbuildable_layers(tmp_path: Path) -> None:
    plan, work = planned(tiny_models.sequence_boundary(tmp_path), 1)
    assert [w.layers[0].op_type for w in work.values()] == ["Relu"]
    assert len(plan.bricks) == 3


def test_a_layer_with_unknown_flops_makes_its_brick_unknown(tmp_path: Path) -> None:
    _, work = planned(tiny_models.loop_outer_scope(tmp_path), 3)
    (brick,) = work.values()
    assert [layer.op_type for layer in brick.layers] == ["Relu", "Loop", "Sigmoid"]
    assert brick.flops is None
    assert brick.unknown_ops == ["Loop"]
    assert brick.layers[0].flops == 32


# -- time per operator type ----------------------------------------------------------------------


def test_split_time_follows_the_roofline_of_each_layer() -> None:
    # Conv: max(1e9 / 1e11, 1e6 / 1e10) = 1e-2 s; Relu: max(1e6 / 1e11, 8e6 / 1e10) = 8e-4 s.
    work = BrickWork("Conv+Relu", (LayerWork("Conv", 10**9, 10**6), LayerWork("Relu", 10**6, 8 * 10**6)))
    shares = split_time(work, 1.08, PEAK)
    assert shares == pytest.approx({"Conv": 1.0, "Relu": 0.08})


def test_split_time_uses_bytes_for_unknown_flops_and_without_a_peak() -> None:
    work = BrickWork("Loop+Relu", (LayerWork("Loop", None, 3000), LayerWork("Relu", 10, 1000)))
    assert split_time(work, 4.0, PEAK) == pytest.approx({"Loop": 3.0, "Relu": 1.0})
    assert split_time(work, 4.0, None) == pytest.approx({"Loop": 3.0, "Relu": 1.0})


def test_split_time_of_a_single_layer_or_no_work() -> None:
    assert split_time(BrickWork("Conv", (LayerWork("Conv", 5, 5),)), 2.0, PEAK) == {"Conv": 2.0}
    nothing = BrickWork("Shape+Shape", (LayerWork("Shape", 0, 0), LayerWork("Size", 0, 0)))
    assert split_time(nothing, 2.0, None) == {"Shape": 1.0, "Size": 1.0}


def test_op_types_add_up_across_layers_of_a_brick() -> None:
    work = BrickWork("Relu+Relu", (LayerWork("Relu", 1, 100), LayerWork("Relu", 1, 100)))
    assert split_time(work, 3.0, PEAK) == pytest.approx({"Relu": 3.0})


# -- the report ----------------------------------------------------------------------------------


@pytest.fixture
def analysed(tmp_path: Path) -> dict[str, Any]:
    return analysed_report(tmp_path)


def analysed_report(tmp_path: Path) -> dict[str, Any]:
    """A chain at G=1 (Conv, Relu, three times), the loop model at G=1 (Loop unknown), and a failed model."""
    plans, work = [], {}
    for path in (tiny_models.chain(tmp_path, blocks=3), tiny_models.loop_outer_scope(tmp_path)):
        plan, plan_bricks = planned(path, 1)
        plans.append(plan)
        work.update(plan_bricks)
    bricks = distinct_bricks(plans)
    times = {"Conv": 4e-6, "Relu": 1e-6, "Loop": 10e-6, "Sigmoid": 1e-6}
    results = {s: result(times[brick.ops[0]]) for s, brick in bricks.items()}
    measured = RunMeasurements(
        peak=PEAK,
        load_s={"chain.onnx": 0.002},
        load_errors={"loop_acc_None.onnx": "cannot"},
        machine={"cpu": "test cpu", "cores": 2},
    )
    failed = [FailedModel("bad.onnx", "empty")]
    return build_report(Settings(granularity=1), plans, failed, bricks, results, work=work, measured=measured).as_json()


def test_bricks_gain_flops_bytes_and_throughput(analysed: dict[str, Any]) -> None:
    conv, relu, *_ = analysed["bricks"]
    assert conv["ops"] == ["Conv"] and conv["flops"] == CONV_FLOPS and conv["bytes"] == CONV_BYTES
    assert conv["flops_per_s"] == pytest.approx(CONV_FLOPS / 4e-6)
    assert conv["peak_fraction"] == pytest.approx(CONV_FLOPS / 4e-6 / 1e11)
    assert conv["op_time_s"] == {"Conv": pytest.approx(4e-6)}
    assert conv["unknown_flops_ops"] == []
    assert conv["label"].startswith("Conv-")
    loop = next(brick for brick in analysed["bricks"] if brick["ops"] == ["Loop"])
    assert loop["flops"] is None and loop["flops_per_s"] is None and loop["peak_fraction"] is None
    assert loop["unknown_flops_ops"] == ["Loop"]
    assert relu["time_s"] == pytest.approx(1e-6), "existing fields stay"


def test_models_gain_flops_throughput_load_and_breakdown(analysed: dict[str, Any]) -> None:
    chain, loop, failed = analysed["models"]
    assert chain["sequential_s"] == pytest.approx(15e-6)
    assert chain["load_s"] == 0.002 and "load_error" not in chain
    assert chain["flops"] == 3 * (CONV_FLOPS + 288)
    assert chain["bytes"] == 3 * (CONV_BYTES + RELU_BYTES)
    assert chain["flops_per_s"] == pytest.approx(chain["flops"] / 15e-6)
    assert chain["peak_fraction"] == pytest.approx(chain["flops_per_s"] / 1e11)
    assert chain["op_time_s"] == {"Conv": pytest.approx(12e-6), "Relu": pytest.approx(3e-6)}
    assert list(chain["op_time_s"]) == ["Conv", "Relu"], "heaviest first"
    assert chain["unknown_flops_time_s"] == 0 and chain["unknown_flops_bricks"] == 0
    top_conv, top_relu = chain["top_bricks"]
    assert (top_conv["count"], top_conv["time_s"], top_conv["share"]) == (3, pytest.approx(12e-6), pytest.approx(0.8))
    assert top_conv["label"].startswith("Conv-") and len(top_conv["signature"]) == 64
    assert top_relu["share"] == pytest.approx(0.2)
    assert failed == {
        "path": "bad.onnx",
        "complete": False,
        "error": "empty",
        "sequential_s": None,
        "critical_path_s": None,
    }
    assert loop["load_s"] is None and loop["load_error"] == "cannot"


def test_time_in_bricks_of_unknown_flops_is_reported(analysed: dict[str, Any]) -> None:
    _, loop, _ = analysed["models"]
    # Relu 1 us, Loop 10 us (unknown), Sigmoid 1 us: the rate counts the known 2 us only.
    assert loop["sequential_s"] == pytest.approx(12e-6)
    assert loop["unknown_flops_time_s"] == pytest.approx(10e-6) and loop["unknown_flops_bricks"] == 1
    assert loop["flops"] == 64
    assert loop["flops_per_s"] == pytest.approx(64 / 2e-6)
    summary = analysed["summary"]
    assert summary["unknown_flops_time_s"] == pytest.approx(10e-6)
    assert summary["unknown_flops_share"] == pytest.approx(10 / 27)


def test_machine_and_peak_are_recorded(analysed: dict[str, Any]) -> None:
    assert analysed["machine"] == {"cpu": "test cpu", "cores": 2}
    assert analysed["peak"] == {"flops_per_s": 1e11, "bytes_per_s": 1e10, "gemm": "test"}
    json.dumps(analysed)


def test_top_bricks_are_the_heaviest_few(tmp_path: Path) -> None:
    plan, work = planned(tiny_models.diamond(tmp_path), 1)
    bricks = distinct_bricks([plan])
    seconds = {"Relu": 1.0, "Sigmoid": 5.0, "Tanh": 2.0, "Neg": 4.0, "Add": 3.0}
    results = {s: result(seconds[brick.ops[0]]) for s, brick in bricks.items()}
    (model,) = build_report(Settings(granularity=1), [plan], [], bricks, results, work=work).as_json()["models"]
    assert len(model["top_bricks"]) == TOP_BRICKS == 5
    assert [brick["label"].split("-")[0] for brick in model["top_bricks"]] == ["Sigmoid", "Neg", "Add", "Tanh", "Relu"]


def test_without_times_or_measurements_the_fields_are_empty(tmp_path: Path) -> None:
    plan, work = planned(tiny_models.chain(tmp_path), 2)
    report = build_report(Settings(granularity=2), [plan], [], distinct_bricks([plan]), {}, work=work).as_json()
    (model,) = report["models"]
    assert model["flops"] == 3 * (CONV_FLOPS + 288), "FLOPs need no time"
    for name in ("flops_per_s", "peak_fraction", "op_time_s", "top_bricks", "unknown_flops_time_s", "load_s"):
        assert model[name] is None
    (brick,) = report["bricks"]
    assert brick["flops_per_s"] is None and brick["op_time_s"] is None
    assert report["peak"] is None and report["machine"] == {}
    assert report["summary"]["unknown_flops_share"] is None


# -- real models ---------------------------------------------------------------------------------


def test_light_models_flops_match_their_published_multiply_adds() -> None:
    """Every layer of the onnx wheel's 9 CNNs is counted; Conv and Gemm give the published counts
    (ResNet-50 4.09 G multiply-adds, VGG-19 19.6 G) at 2 FLOPs per multiply-add."""
    published_macs = {"light_resnet50": 4.09e9, "light_vgg19": 19.63e9}
    for path in light_models():
        plan, work = planned(path, 1)
        assert all(brick.flops is not None for brick in work.values()), path.stem
        layers = [layer for signature in plan.signatures.elements() for layer in work[signature].layers]
        products = sum(layer.flops or 0 for layer in layers if layer.op_type in ("Conv", "Gemm"))
        if path.stem in published_macs:
            assert products == pytest.approx(2 * published_macs[path.stem], rel=0.01), path.stem


def test_the_call_overhead_is_taken_off_bricks_and_counted_once_per_model(tmp_path: Path) -> None:
    """As composition does: each brick's time less one call, and the model's own call once."""
    plan, work = planned(tiny_models.chain(tmp_path, blocks=3), 1)
    bricks = distinct_bricks([plan])
    times = {"Conv": 4e-6, "Relu": 1e-6}
    results = {s: result(times[brick.ops[0]]) for s, brick in bricks.items()}
    overhead = CallOverhead(fixed_s=0.5e-6)
    settings = Settings(granularity=1)
    measured = RunMeasurements(peak=PEAK)
    (model,) = build_report(
        settings, [plan], [], bricks, results, overhead=overhead, work=work, measured=measured
    ).as_json()["models"]
    assert model["sequential_s"] == pytest.approx(3 * 3.5e-6 + 3 * 0.5e-6 + 0.5e-6)
    assert model["call_s"] == pytest.approx(0.5e-6)
    assert model["op_time_s"] == {"Conv": pytest.approx(10.5e-6), "Relu": pytest.approx(1.5e-6)}
    assert sum(model["op_time_s"].values()) + model["call_s"] == pytest.approx(model["sequential_s"])
    assert model["top_bricks"][0]["time_s"] == pytest.approx(10.5e-6)
    assert model["top_bricks"][0]["share"] == pytest.approx(10.5 / 12.5)
    assert model["flops_per_s"] == pytest.approx(model["flops"] / 12.5e-6)
    unmeasured = build_report(settings, [plan], [], bricks, results, overhead=overhead, work=work).as_json()
    conv = next(brick for brick in unmeasured["bricks"] if brick["ops"] == ["Conv"])
    assert conv["work_s"] == pytest.approx(3.5e-6), "a brick's work: its time less one call"
    slower = {s: dataclasses.replace(r, reference_s=2e-5) for s, r in results.items()}
    at_speed = CallOverhead(fixed_s=0.5e-6, reference_s=1e-5)
    report = build_report(settings, [plan], [], bricks, slower, overhead=at_speed, work=work).as_json()
    conv = next(brick for brick in report["bricks"] if brick["ops"] == ["Conv"])
    assert conv["work_s"] == pytest.approx(3e-6), "timed at half the speed, the brick paid twice the call"
    (model,) = report["models"]
    assert sum(model["op_time_s"].values()) + model["call_s"] == pytest.approx(model["sequential_s"])
    assert conv["flops_per_s"] == pytest.approx(CONV_FLOPS / 4e-6), "its throughput as it was timed"


def test_a_bricks_analysis_in_json_is_a_copy_of_its_fields() -> None:
    analysis = BrickAnalysis("Conv+Relu-0a1b2c3d", 1000, 400, ["Loop"], 1e9, 0.5, {"Conv": 2e-6, "Relu": 1e-7}, 2.1e-6)
    entry = analysis.as_json()
    assert entry == dataclasses.asdict(analysis)
    entry["op_time_s"]["Conv"] = 0.0
    entry["unknown_flops_ops"].append("If")
    assert analysis.op_time_s == {"Conv": 2e-6, "Relu": 1e-7} and analysis.unknown_flops_ops == ["Loop"]
    assert BrickAnalysis(None, None, None, [], None, None, None, None).as_json()["op_time_s"] is None
