"""Unit tests of recomposition: compositions in reports, private maps and compose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tiny_models

from pytest_dlbricks.bricks import BrickSpec
from pytest_dlbricks.composition import CallOverhead
from pytest_dlbricks.cutting import ModelPlan, plan_model
from pytest_dlbricks.loading import load_model
from pytest_dlbricks.maps import (
    MapError,
    check_results,
    compose_from_maps,
    map_file_name,
    read_maps,
    write_maps,
)
from pytest_dlbricks.probes import describe_machine
from pytest_dlbricks.recomposition import annotate, plan_composition
from pytest_dlbricks.reporting import BrickResult, build_report
from pytest_dlbricks.settings import Settings

OVERHEAD = CallOverhead(fixed_s=2e-6, per_input_s=5e-7, per_output_s=2.5e-7, parallel_fixed_s=9e-6)
ESTIMATES = ("path", "measured_bricks", "sequential_s", "critical_path_s", "complete")


def plans_of(directory: Path) -> list[ModelPlan]:
    """A chain, a diamond (parallel branches) and a model with a layer that cannot be built."""
    paths = [tiny_models.chain(directory), tiny_models.diamond(directory), tiny_models.sequence_boundary(directory)]
    plans = []
    for path in paths:
        plan = plan_model(load_model(path), 1, f"models/{path.name}")
        plan.file, plan.point = plan.path, {"dtype": "fp32"}
        plans.append(plan)
    return plans


def distinct(plans: list[ModelPlan]) -> dict[str, BrickSpec]:
    bricks: dict[str, BrickSpec] = {}
    for plan in plans:
        for brick in plan.bricks:
            if isinstance(brick, BrickSpec):
                bricks.setdefault(brick.signature, brick)
    return bricks


def results_for(bricks: dict[str, BrickSpec], keep: set[str] | None = None) -> dict[str, BrickResult]:
    """Made-up times, different for every brick and statistic, for the bricks in ``keep`` (all by default)."""
    return {
        signature: BrickResult({"median": 1e-5 * (i + 1), "mean": 1.3e-5 * (i + 1), "min": 8e-6 * (i + 1)}, "CPU")
        for i, signature in enumerate(bricks)
        if keep is None or signature in keep
    }


def report_of(
    plans: list[ModelPlan], results: dict[str, BrickResult], settings: Settings | None = None
) -> dict[str, Any]:
    """A run's report, as the session writes it (JSON round trip included)."""
    settings = settings or Settings(granularity=1, cut="original")
    report = build_report(settings, plans, [], distinct(plans), results, overhead=OVERHEAD, wall_time_s=1.0)
    annotate(report, plans, unsupported={}, placements={})
    report["machine"] = describe_machine()  # as a run that timed bricks records it
    return json.loads(json.dumps(report))  # type: ignore[no-any-return]


def estimates(report: dict[str, Any]) -> list[tuple[object, ...]]:
    return [tuple(model[key] for key in ESTIMATES) for model in report["models"]]


@pytest.fixture
def plans(tmp_path: Path) -> list[ModelPlan]:
    return plans_of(tmp_path)


# -- compositions ------------------------------------------------------------------------------


def test_a_composition_lists_windows_graph_and_io(plans: list[ModelPlan]) -> None:
    chain, diamond, boundary = (plan_composition(plan) for plan in plans)
    assert chain["io"] == [1, 1]
    assert [window[1:] for window in chain["bricks"]] == [[1, 1]] * 6
    assert chain["edges"] == [[i, i + 1] for i in range(5)]
    assert sorted(diamond["edges"]) == [[0, 1], [0, 2], [1, 4], [2, 3], [3, 4]]
    assert boundary["bricks"][1:] == [None, None]


def test_a_window_the_provider_cannot_run_keeps_its_reason(plans: list[ModelPlan]) -> None:
    plans[1].unsupported = {2: "Tanh works on float32 activations in the float16 model"}
    window = plan_composition(plans[1])["bricks"][2]
    assert window[3] == "Tanh works on float32 activations in the float16 model"
    report = report_of(plans, results_for(distinct(plans)))
    assert report["models"][1]["complete"] is False
    assert report["models"][1]["unsupported"] == [{"window": 2, "signature": window[0], "cause": window[3]}]


# -- maps and compose ----------------------------------------------------------------------------


def test_composing_from_maps_equals_the_run_that_made_them(plans: list[ModelPlan], tmp_path: Path) -> None:
    report = report_of(plans, results_for(distinct(plans)))
    assert write_maps(tmp_path / "maps", report, plans) == 3
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == sorted(map_file_name(plan.path) for plan in plans)
    composed, warnings = compose_from_maps(read_maps([tmp_path / "maps"]), report)
    assert warnings == []
    assert estimates(composed) == estimates(report)
    assert composed["models"][0]["sequential_s"] is not None
    assert composed["summary"]["distinct_bricks"] == report["summary"]["distinct_bricks"]
    assert [b["models"] for b in composed["bricks"]] == [b["models"] for b in report["bricks"]]


def test_a_map_holds_no_times(plans: list[ModelPlan], tmp_path: Path) -> None:
    write_maps(tmp_path, report_of(plans, results_for(distinct(plans))), plans)
    document = json.loads((tmp_path / map_file_name("models/chain.onnx")).read_text())
    (entry,) = document["entries"]
    assert {"sequential_s", "critical_path_s", "measured_bricks", "complete"}.isdisjoint(entry)
    assert entry["layers"] == 6 and entry["composition"]["io"] == [1, 1]


def test_compose_uses_the_statistic_asked_for(plans: list[ModelPlan], tmp_path: Path) -> None:
    bricks = distinct(plans)
    write_maps(tmp_path, report_of(plans, results_for(bricks)), plans)
    by_min = report_of(plans, results_for(bricks), Settings(granularity=1, cut="original", statistic="min"))
    composed, _ = compose_from_maps(read_maps([tmp_path]), report_of(plans, results_for(bricks)), statistic="min")
    assert estimates(composed) == estimates(by_min)


def test_compose_warns_when_no_brick_was_measured_or_settings_differ(plans: list[ModelPlan], tmp_path: Path) -> None:
    write_maps(tmp_path, report_of(plans, {}), plans)
    other = report_of(plans, {}, Settings(granularity=1, cut="original", optimization="basic"))
    composed, warnings = compose_from_maps(read_maps([tmp_path]), other)
    assert warnings == [
        "the bricks were timed with optimization 'basic', but the maps were made with 'all'",
        "the results hold a time for none of the maps' bricks: are they from this suite?",
    ]
    assert all(model["complete"] is False for model in composed["models"])


def test_stale_maps_are_removed_and_bad_ones_refused(plans: list[ModelPlan], tmp_path: Path) -> None:
    (tmp_path / "old.onnx.map.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("mine")
    write_maps(tmp_path, report_of(plans, {}), plans)
    assert not (tmp_path / "old.onnx.map.json").exists() and (tmp_path / "notes.txt").exists()
    (tmp_path / "bad.map.json").write_text('{"kind": "something else"}')
    with pytest.raises(MapError, match=r"bad\.map\.json is not a pytest-dlbricks map"):
        read_maps([tmp_path])
    (tmp_path / "empty").mkdir()
    with pytest.raises(MapError, match="holds no maps"):
        read_maps([tmp_path / "empty"])


def test_only_a_dlbricks_report_gives_results() -> None:
    with pytest.raises(MapError, match="is pytest-benchmark's JSON; pass the report written by --dlbricks-json"):
        check_results({"machine_info": {}, "benchmarks": []}, "bench.json")
    with pytest.raises(MapError, match="not a pytest-dlbricks report"):
        check_results([1, 2], "list.json")
