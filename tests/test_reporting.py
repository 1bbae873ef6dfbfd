"""Unit tests of the report: its data, the atomic JSON file, the text table."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import onnxruntime
import pytest
import tiny_models

from conftest import plan_of
from pytest_dlbricks.core.noise import HIGH_NOISE
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import ModelPlan
from pytest_dlbricks.estimating.validation import Validation
from pytest_dlbricks.rendering.terminal import count_line, render_table
from pytest_dlbricks.reporting import report
from pytest_dlbricks.reporting.entries import BrickResult, FailedModel
from pytest_dlbricks.reporting.report import REPORT_VERSION, build_report

PROVIDER = "CPUExecutionProvider"


def distinct_bricks(plans: list[ModelPlan]) -> dict[str, BrickSpec]:
    """Distinct bricks in the order they are first met, as the session gathers them."""
    bricks: dict[str, BrickSpec] = {}
    for plan in plans:
        for brick in plan.bricks:
            if isinstance(brick, BrickSpec):
                bricks.setdefault(brick.signature, brick)
    return bricks


def result(median: float) -> BrickResult:
    return BrickResult(stats={"median": median, "mean": median * 1.5, "min": median / 2}, provider=PROVIDER)


@pytest.fixture
def plans(tmp_path: Path) -> list[ModelPlan]:
    """A chain cut at G=2 (one brick, three times) and a diamond cut at G=1 (five distinct bricks)."""
    return [plan_of(tiny_models.chain(tmp_path), 2), plan_of(tiny_models.diamond(tmp_path), 1)]


def test_report_of_fully_measured_models(plans: list[ModelPlan]) -> None:
    bricks = distinct_bricks(plans)
    results = {signature: result(1e-5 * (index + 1)) for index, signature in enumerate(bricks)}
    report: Any = build_report(Settings(granularity=2), plans, [], bricks, results).as_json()
    assert report["version"] == REPORT_VERSION
    assert report["granularity"] == 2
    chain, diamond = report["models"]
    assert chain["path"] == "chain.onnx"
    assert (chain["layers"], chain["bricks"], chain["unique_bricks"]) == (6, 3, 1)
    assert chain["sequential_s"] == pytest.approx(3e-5)
    assert chain["critical_path_s"] == pytest.approx(3e-5)
    assert chain["complete"] is True
    assert (diamond["layers"], diamond["bricks"], diamond["unique_bricks"]) == (5, 5, 5)
    # Diamond bricks have times 2..6 (x 1e-5) in order Relu, Sigmoid, Tanh, Neg, Add.
    assert diamond["sequential_s"] == pytest.approx(20e-5)
    assert diamond["critical_path_s"] == pytest.approx((2 + 4 + 5 + 6) * 1e-5)
    assert diamond["complete"] is True
    assert report["summary"] == {
        "models": 2,
        "failed_models": 0,
        "layers": 11,
        "bricks": 8,
        "distinct_bricks": 6,
        "distinct_ratio": pytest.approx(0.75),
        "measured_bricks": 6,
        "call_overhead_s": None,
        "wall_time_s": None,
        "reused_bricks": 0,
        "unknown_flops_time_s": None,
        "unknown_flops_share": None,
        "store_damage": None,
        "noise": None,  # no brick has the rounds to show a spread
        "high_noise": False,
        "speed": None,  # no trace was given
        "memory": None,  # no brick was timed with its weights out of the caches
        "load": None,  # nor any load
        "reused_from": None,  # nor was any brick reused
        "timed_again": None,  # nor timed again
    }
    first, *rest = report["bricks"]
    assert first["signature"] == next(iter(bricks))
    assert first["ops"] == ["Conv", "Relu"]
    assert first["time_s"] == pytest.approx(1e-5)
    assert first["models"] == {"chain.onnx": 3}
    assert first["provider"] == PROVIDER
    assert [entry["ops"] for entry in rest] == [["Relu"], ["Sigmoid"], ["Tanh"], ["Neg"], ["Add"]]
    assert all(entry["models"] == {"diamond.onnx": 1} for entry in rest)
    json.dumps(report)  # JSON-ready as it is


def test_the_report_measures_the_noise_of_the_bricks_timed_in_the_run(
    plans: list[ModelPlan], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spreads of 4%, 8% and 30%: the median, 8%; a reused brick's spread was another run's noise."""
    monkeypatch.setattr(report, "HIGH_NOISE", HIGH_NOISE)
    bricks = distinct_bricks(plans)
    spreads = [0.04, 0.08, 0.3, 0.9, 0.9, 0.9]
    results = {
        signature: BrickResult(
            stats={"median": 1e-5, "iqr": 1e-5 * spread, "rounds": 9}, provider=PROVIDER, reused=index >= 3
        )
        for index, (signature, spread) in enumerate(zip(bricks, spreads))
    }
    summary = build_report(Settings(granularity=2), plans, [], bricks, results).as_json()["summary"]
    assert (summary["noise"], summary["high_noise"]) == (pytest.approx(0.08), False)
    results = {signature: dataclasses.replace(result, reused=False) for signature, result in results.items()}
    summary = build_report(Settings(granularity=2), plans, [], bricks, results).as_json()["summary"]
    assert (summary["noise"], summary["high_noise"]) == (pytest.approx(0.6), True)


def test_the_statistic_chosen_is_the_one_composed(plans: list[ModelPlan]) -> None:
    bricks = distinct_bricks(plans)
    results = {signature: result(1.0) for signature in bricks}
    report: Any = build_report(Settings(granularity=2, statistic="min"), plans, [], bricks, results).as_json()
    assert report["models"][0]["sequential_s"] == pytest.approx(1.5)
    assert report["bricks"][0]["time_s"] == pytest.approx(0.5)
    assert report["settings"]["statistic"] == "min"
    assert report["settings"]["onnxruntime"] == onnxruntime.__version__


def test_a_brick_shared_by_two_models_lists_both(tmp_path: Path) -> None:
    plans = [
        plan_of(tiny_models.chain(tmp_path, "a.onnx", seed=1), 2),
        plan_of(tiny_models.chain(tmp_path, "b.onnx"), 2),
    ]
    bricks = distinct_bricks(plans)
    report: Any = build_report(Settings(granularity=2), plans, [], bricks, {}).as_json()
    (only,) = report["bricks"]
    assert only["models"] == {"a.onnx": 3, "b.onnx": 3}
    assert only["time_s"] is None and only["stats"] is None


def test_times_reused_from_the_store_are_marked(plans: list[ModelPlan]) -> None:
    bricks = distinct_bricks(plans)
    chain_brick, *diamond_bricks = bricks
    results = {signature: result(1e-5) for signature in diamond_bricks}
    results[chain_brick] = BrickResult(
        stats={"median": 2e-5}, provider=PROVIDER, measured_at="2025-03-01T12:00:00+00:00", reused=True
    )
    report: Any = build_report(Settings(granularity=1), plans, [], bricks, results).as_json()
    assert report["summary"]["reused_bricks"] == 1
    assert [model["reused_bricks"] for model in report["models"]] == [3, 0]
    first, second, *_ = report["bricks"]
    assert (first["reused"], first["measured_at"]) == (True, "2025-03-01T12:00:00+00:00")
    assert (second["reused"], second["measured_at"]) == (False, None)


def test_unmeasured_and_failed_models_are_incomplete(plans: list[ModelPlan]) -> None:
    bricks = distinct_bricks(plans)
    signatures = list(bricks)
    results = {signature: result(1e-3) for signature in signatures[:-1]}  # the diamond's Add is missing
    failed = [FailedModel("broken.onnx", "the file is empty, not an ONNX model")]
    report: Any = build_report(Settings(granularity=1), plans, failed, bricks, results).as_json()
    chain, diamond, broken = report["models"]
    assert chain["complete"] is True
    assert diamond["complete"] is False
    assert diamond["sequential_s"] is None and diamond["critical_path_s"] is None
    assert diamond["measured_bricks"] == 4
    assert broken == {
        "path": "broken.onnx",
        "complete": False,
        "error": "the file is empty, not an ONNX model",
        "sequential_s": None,
        "critical_path_s": None,
    }
    assert report["summary"]["models"] == 3
    assert report["summary"]["failed_models"] == 1
    assert report["bricks"][-1]["time_s"] is None


def test_unbuildable_layers_are_listed(tmp_path: Path) -> None:
    plan = plan_of(tiny_models.sequence_boundary(tmp_path), 1)
    bricks = distinct_bricks([plan])
    report: Any = build_report(Settings(granularity=1), [plan], [], bricks, {s: result(1.0) for s in bricks}).as_json()
    (model,) = report["models"]
    assert model["complete"] is False
    assert model["unique_bricks"] == 3
    cause = "value 'parts' crosses the brick boundary but is not a tensor of known shape"
    assert model["unbuildable_layers"] == [
        {"layer": 1, "op": "SplitToSequence", "cause": cause},
        {"layer": 2, "op": "SequenceAt", "cause": cause},
    ]


# -- JSON file -----------------------------------------------------------------------------------


# -- text ----------------------------------------------------------------------------------------


def test_render_table_has_a_row_per_model_and_a_summary(plans: list[ModelPlan]) -> None:
    bricks = distinct_bricks(plans)
    signatures = list(bricks)
    results = {signature: result(2e-6) for signature in signatures[:-1]}
    failed = [FailedModel("broken.onnx", "not an ONNX model")]
    text = render_table(build_report(Settings(granularity=1), plans, failed, bricks, results).as_json())
    lines = text.splitlines()
    header = [
        "Model",
        "Layers",
        "Bricks",
        "Distinct",
        "Sequential",
        "Critical",
        "path",
        "Inputs",
        "Complete",
    ]
    assert lines[0].split() == header, "no Parallel column: the parallel executor was not detected"
    assert set(lines[1]) == {"-"} and len(lines[1]) == len(lines[0])
    assert lines[2].split() == ["chain.onnx", "6", "3", "1", "6.0", "us", "6.0", "us", "synthetic", "yes"]
    assert lines[3].split() == ["diamond.onnx", "5", "5", "5", "-", "-", "synthetic", "no", "(4/5)"]
    assert lines[4].split() == ["broken.onnx", "-", "-", "-", "-", "-", "-", "error"]
    assert lines[5] == "3 models, 11 layers, 8 bricks, 6 distinct (75%), 5 measured"
    assert len(lines) == 6


def test_the_closing_line_counts_in_the_singular_and_says_what_the_store_gave(plans: list[ModelPlan]) -> None:
    chain = plans[0]
    (signature,) = chain.signatures
    reused = {signature: dataclasses.replace(result(2e-6), reused=True)}
    report = build_report(Settings(granularity=2), [chain], [], distinct_bricks([chain]), reused).as_json()
    assert (
        count_line(report["summary"])
        == "1 model, 6 layers, 3 bricks, 1 distinct (33%), 0 measured, 1 reused from the brick store"
    )
    measured = build_report(Settings(granularity=2), [chain], [], distinct_bricks([chain]), {signature: result(2e-6)})
    assert count_line(measured.as_json()["summary"]) == "1 model, 6 layers, 3 bricks, 1 distinct (33%), 1 measured"


def test_render_table_aligns_its_columns(plans: list[ModelPlan]) -> None:
    bricks = distinct_bricks(plans)
    text = render_table(build_report(Settings(granularity=1), plans, [], bricks, {}).as_json())
    header, _, first, second, _ = text.splitlines()
    # Numbers are right-aligned under their header: the Layers column ends at the same place.
    end = header.index("Layers") + len("Layers")
    assert first[end - 1] == "6" and second[end - 1] == "5"


def test_a_validated_model_whose_bricks_did_not_all_run_does_not_break_the_report(plans: list[ModelPlan]) -> None:
    chain = plans[0]
    bricks = distinct_bricks(plans)
    times = {signature: 1e-5 for signature in chain.signatures}
    validations = {
        ("chain.onnx", "sequential"): Validation("sequential", [3e-5], [times]),
        ("diamond.onnx", "sequential"): Validation("sequential", [5e-5], [{}]),
    }
    report: Any = build_report(
        Settings(granularity=2), plans, [], bricks, {s: result(1e-5) for s in times}, validations=validations
    ).as_json()
    by_path = {model["path"]: model for model in report["models"]}
    assert by_path["chain.onnx"]["ratio"] == pytest.approx(1.0)
    assert by_path["diamond.onnx"]["ratio"] is None and by_path["diamond.onnx"]["measured_s"] == 5e-5
    assert report["accuracy"]["sequential"]["models"] == 1
    assert "accuracy of sequential estimates" in render_table(report)


def test_the_ratio_is_the_users_estimate_over_the_measurement_and_the_paired_one_stands_beside_it(
    plans: list[ModelPlan],
) -> None:
    """Brick items timed at 2e-5 each; the paired rounds timed the bricks faster, as on a machine that got busier."""
    chain = plans[0]
    (signature,) = chain.signatures
    validations = {("chain.onnx", "sequential"): Validation("sequential", [4e-5] * 3, [{signature: 1e-5}] * 3)}
    report: Any = build_report(
        Settings(granularity=2),
        [chain],
        [],
        distinct_bricks([chain]),
        {signature: result(2e-5)},
        validations=validations,
    ).as_json()
    (model,) = report["models"]
    assert (model["sequential_s"], model["measured_s"]) == (pytest.approx(6e-5), 4e-5)
    assert model["ratio"] == pytest.approx(1.5), "sequential_s / measured_s"
    assert model["paired_ratio"] == pytest.approx(0.75), "each round's 3e-5 estimate / that round's 4e-5"
    assert report["accuracy"]["sequential"]["geometric_mean_ratio"] == pytest.approx(1.5)
    assert report["accuracy"]["sequential_paired"]["geometric_mean_ratio"] == pytest.approx(0.75)
    lines = render_table(report).splitlines()
    assert lines[0].split()[-2:] == ["Measured", "Ratio"]
    row = lines[2].split()
    sequential, measured, ratio = float(row[4]), float(row[-3]), float(row[-1])
    assert (sequential, measured, ratio) == (60.0, 40.0, 1.5), "the ratio follows from the times beside it"
    assert lines[4] == (
        "accuracy of sequential estimates (Sequential / Measured): 66.7% (geometric mean ratio 1.500,"
        " 0/1 model within +-5%, 0/1 within +-10%)"
    )
    assert lines[5].startswith("  in paired rounds (") and lines[5].endswith(
        ": 75.0% (geometric mean ratio 0.750, 0/1 model within +-5%, 0/1 within +-10%)"
    )
    assert model["estimate_drift"] == pytest.approx(2.0), "the items' 6e-5 estimate / the paired rounds' 3e-5"
    assert lines[6].startswith("  item estimates against the paired rounds' (") and lines[6].endswith(
        ": 50.0% (geometric mean ratio 2.000, 0/1 model within +-5%, 0/1 within +-10%)"
    ), "how much of the gap between the two lines above is the machine's speed"


def test_the_model_is_measured_in_the_statistic_its_bricks_are_composed_in(plans: list[ModelPlan]) -> None:
    """With --dlbricks-statistic=min the estimate adds up the bricks' fastest calls: it compares with the
    model's fastest round, not with its median."""
    chain = plans[0]
    (signature,) = chain.signatures
    validations = {("chain.onnx", "sequential"): Validation("sequential", [6e-5, 3e-5, 4e-5], [{signature: 1e-5}] * 3)}
    for statistic, measured in (("min", 3e-5), ("median", 4e-5), ("mean", 13e-5 / 3)):
        settings = Settings(granularity=2, statistic=statistic)
        report: Any = build_report(
            settings, [chain], [], distinct_bricks([chain]), {signature: result(2e-5)}, validations=validations
        ).as_json()
        (model,) = report["models"]
        assert model["measured_s"] == pytest.approx(measured), statistic
        assert model["ratio"] == pytest.approx(model["sequential_s"] / measured), statistic
