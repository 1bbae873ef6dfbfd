"""Unit tests of recomposition: private maps and compose, sharding, and the merge of shard reports."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import tiny_models
from test_reporting import distinct_bricks

from pytest_dlbricks.core.identity import CUT_METHOD
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import ModelPlan, plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.estimating.analysis import BrickWork, plan_work
from pytest_dlbricks.rendering.html import render_html
from pytest_dlbricks.reporting.entries import BrickResult
from pytest_dlbricks.reporting.maps import (
    MapError,
    check_results,
    compose_from_maps,
    map_file_name,
    read_maps,
    write_maps,
)
from pytest_dlbricks.reporting.merging import IncompatibleReports, merge_reports
from pytest_dlbricks.reporting.recomposition import brick_references, overhead_of
from pytest_dlbricks.reporting.report import build_report, plan_composition
from pytest_dlbricks.timing.overhead import CallOverhead
from pytest_dlbricks.timing.probes import ExecutorDetection, Peak, PoolSlowdown, RunMeasurements, describe_machine
from pytest_dlbricks.timing.sharding import assign, brick_cost, parse_shard

SETTINGS = Settings(granularity=1, cut="original", executor="parallel")
OVERHEAD = CallOverhead(fixed_s=2e-6, per_input_s=5e-7, per_output_s=2.5e-7, parallel_fixed_s=9e-6, reference_s=2e-5)
ESTIMATES = ("path", "measured_bricks", "sequential_s", "critical_path_s", "parallel_s", "complete")
#: One node at a time; bricks of 30 us or more of work use the pool and take 2.5 times as long.
EXECUTOR = ExecutorDetection(
    concurrent=False,
    threads=1,
    sequential_s=4e-3,
    parallel_s=4.1e-3,
    ratio=1.02,
    rounds=7,
    graph="2 independent chains of 6 MatMuls 128x128 float32",
    pool=PoolSlowdown(2.5, 3e-5, [(1e-3, 2.5e-3)], 3, "a chain of MatMuls"),
)


#: The bricks' layers (FLOPs, bytes) by signature, of every plan :func:`plans_of` made.
WORK: dict[str, BrickWork] = {}
#: The machine's peak the runs of :func:`report_of` measured.
PEAK = Peak(2e10, 1e10, {"gemm": "a made-up GEMM", "bandwidth": "a made-up Add"})


def plans_of(directory: Path) -> list[ModelPlan]:
    """A chain, a diamond (parallel branches) and a model with a layer that cannot be built."""
    paths = [tiny_models.chain(directory), tiny_models.diamond(directory), tiny_models.sequence_boundary(directory)]
    plans = []
    for path in paths:
        graph = load_model(path)
        plan = plan_model(graph, 1, f"models/{path.name}")
        plan.file, plan.point = plan.path, {"dtype": "fp32"}
        WORK.update(plan_work(graph, plan))
        plans.append(plan)
    return plans


def results_for(bricks: dict[str, BrickSpec], keep: set[str] | None = None) -> dict[str, BrickResult]:
    """Made-up times, different for every brick and statistic, for the bricks in ``keep`` (all by default),
    each timed at another speed of the machine (its reference call's time)."""
    return {
        signature: BrickResult(
            {"median": 1e-5 * (i + 1), "mean": 1.3e-5 * (i + 1), "min": 8e-6 * (i + 1)},
            "CPU",
            reference_s=2e-5 * (1 + 0.25 * (i % 3)) if i % 4 else None,
        )
        for i, signature in enumerate(bricks)
        if keep is None or signature in keep
    }


def report_of(
    plans: list[ModelPlan],
    results: dict[str, BrickResult],
    settings: Settings | None = None,
    executor: ExecutorDetection | None = EXECUTOR,
    overhead: CallOverhead = OVERHEAD,
    peak: Peak = PEAK,
) -> dict[str, Any]:
    """A run's report, as the session writes it (JSON round trip included), its bricks' work and the
    machine's peak analysed, each model loaded in a millisecond per brick."""
    settings = settings or Settings(granularity=1, cut="original", executor="parallel")
    bricks = distinct_bricks(plans)
    measured = RunMeasurements(peak=peak, load_s={plan.path: 1e-3 * len(plan.bricks) for plan in plans})
    report = build_report(
        settings,
        plans,
        [],
        bricks,
        results,
        overhead=overhead,
        executor=executor,
        wall_time_s=1.0,
        work=WORK,
        measured=measured,
    ).as_json()
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
    report = report_of(plans, results_for(distinct_bricks(plans)))
    assert report["models"][1]["complete"] is False
    assert report["models"][1]["unsupported"] == [{"window": 2, "signature": window[0], "cause": window[3]}]


# -- maps and compose ----------------------------------------------------------------------------


def test_composing_from_maps_equals_the_run_that_made_them(plans: list[ModelPlan], tmp_path: Path) -> None:
    report = report_of(plans, results_for(distinct_bricks(plans)))
    assert write_maps(tmp_path / "maps", report, plans) == 3
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == sorted(map_file_name(plan.path) for plan in plans)
    composed, warnings = compose_from_maps(read_maps([tmp_path / "maps"]), report)
    assert warnings == []
    assert estimates(composed) == estimates(report)
    assert composed["models"][0]["sequential_s"] is not None
    assert composed["summary"]["distinct_bricks"] == report["summary"]["distinct_bricks"]
    assert [b["models"] for b in composed["bricks"]] == [b["models"] for b in report["bricks"]]


def test_compose_and_merge_give_the_parallel_estimates_of_the_run_that_timed_the_bricks(
    plans: list[ModelPlan], tmp_path: Path
) -> None:
    report = report_of(plans, results_for(distinct_bricks(plans)))
    parallel = [model["parallel_s"] for model in report["models"]]
    sequential = [model["sequential_s"] for model in report["models"]]
    # Some bricks take 30 us or more and count 2.5 times: Parallel is more than Sequential at its call cost.
    assert parallel[1] > sequential[1] - OVERHEAD.fixed_s + OVERHEAD.parallel_fixed_s  # type: ignore[operator]
    write_maps(tmp_path, report, plans)
    composed, warnings = compose_from_maps(read_maps([tmp_path]), report)
    merged = merge_reports(shard_reports(plans, 2))
    for recomposed in (composed, merged):
        assert [model["parallel_s"] for model in recomposed["models"]] == parallel
        assert recomposed["executor"] == report["executor"]
    assert warnings == []


def test_a_composed_report_carries_the_cut_method_of_the_version_that_made_its_maps(
    plans: list[ModelPlan], tmp_path: Path
) -> None:
    """The maps were cut by the version that exported them: a baseline is compared with on their terms."""
    report = report_of(plans, results_for(distinct_bricks(plans)))
    assert report["settings"]["cut_method"] == CUT_METHOD
    older = {**report, "settings": {k: v for k, v in report["settings"].items() if k != "cut_method"}}
    write_maps(tmp_path / "older", older, plans)
    composed, _ = compose_from_maps(read_maps([tmp_path / "older"]), report)
    assert composed["settings"]["cut_method"] == 1
    write_maps(tmp_path / "newer", report, plans[:1])
    composed, _ = compose_from_maps(read_maps([tmp_path / "older", tmp_path / "newer"]), report)
    assert composed["settings"]["cut_method"] == [1, CUT_METHOD]


def test_a_suite_run_without_the_executors_behaviour_gives_no_parallel_estimate(
    plans: list[ModelPlan], tmp_path: Path
) -> None:
    report = report_of(plans, results_for(distinct_bricks(plans)), executor=None)
    assert "executor" not in report
    write_maps(tmp_path, report, plans)
    composed, warnings = compose_from_maps(read_maps([tmp_path]), report)
    assert warnings == [] and "executor" not in composed
    assert [model["parallel_s"] for model in composed["models"]] == [None, None, None]


@pytest.mark.parametrize(
    "damage",
    [
        lambda entry: "not an entry",
        lambda entry: {**entry, "threads": "two"},
        lambda entry: {**entry, "pool_factor": None},
        lambda entry: {**entry, "detection": None},
        lambda entry: {**entry, "detection": {**entry["detection"], "ratio": "1.02"}},
        lambda entry: {**entry, "detection": {k: v for k, v in entry["detection"].items() if k != "rounds"}},
        lambda entry: {**entry, "detection": {**entry["detection"], "pool": None}},
        lambda entry: {**entry, "model": "every node at once"},
        lambda entry: {**entry, "detection": {**entry["detection"], "nodes_at_once": -1}},
        lambda entry: {**entry, "detection": {**entry["detection"], "nodes_at_once": True}},
    ],
)
def test_a_damaged_executor_entry_counts_as_absent_and_is_reported(
    plans: list[ModelPlan], tmp_path: Path, damage: Any
) -> None:
    report = report_of(plans, results_for(distinct_bricks(plans)))
    report["executor"] = damage(report["executor"])
    write_maps(tmp_path, report, plans)
    composed, warnings = compose_from_maps(read_maps([tmp_path]), report)
    assert "executor" not in composed
    assert [model["parallel_s"] for model in composed["models"]] == [None, None, None]
    assert [model["sequential_s"] for model in composed["models"]] == [m["sequential_s"] for m in report["models"]]
    assert warnings == ["the results' executor entry is damaged: the models have no parallel estimate"]


def test_a_map_holds_no_times(plans: list[ModelPlan], tmp_path: Path) -> None:
    write_maps(tmp_path, report_of(plans, results_for(distinct_bricks(plans))), plans)
    document = json.loads((tmp_path / map_file_name("models/chain.onnx")).read_text())
    (entry,) = document["entries"]
    assert {"sequential_s", "critical_path_s", "measured_bricks", "complete"}.isdisjoint(entry)
    assert entry["layers"] == 6 and entry["composition"]["io"] == [1, 1]


def test_compose_uses_the_statistic_asked_for(plans: list[ModelPlan], tmp_path: Path) -> None:
    bricks = distinct_bricks(plans)
    write_maps(tmp_path, report_of(plans, results_for(bricks)), plans)
    by_min = report_of(
        plans, results_for(bricks), Settings(granularity=1, cut="original", executor="parallel", statistic="min")
    )
    composed, _ = compose_from_maps(read_maps([tmp_path]), report_of(plans, results_for(bricks)), statistic="min")
    assert estimates(composed) == estimates(by_min)


def test_compose_warns_when_no_brick_was_measured_or_settings_differ(plans: list[ModelPlan], tmp_path: Path) -> None:
    write_maps(tmp_path, report_of(plans, {}), plans)
    other = report_of(plans, {}, Settings(granularity=1, cut="original", executor="parallel", optimization="basic"))
    composed, warnings = compose_from_maps(read_maps([tmp_path]), other)
    assert warnings == [
        "the bricks were timed with optimization 'basic', but the maps were made with 'all'",
        "the results hold a time for none of the maps' bricks: are they from this suite?",
    ]
    assert all(model["complete"] is False for model in composed["models"])


def test_compose_warns_when_some_bricks_have_no_time(plans: list[ModelPlan], tmp_path: Path) -> None:
    """Results of part of the suite (a shard, another export's run) leave models incomplete: said, not silent."""
    bricks = distinct_bricks(plans)
    write_maps(tmp_path, report_of(plans, results_for(bricks)), plans)
    partial = report_of(plans, results_for(bricks, keep={next(iter(bricks))}))
    composed, warnings = compose_from_maps(read_maps([tmp_path]), partial)
    incomplete = [model["path"] for model in composed["models"] if not model["complete"]]
    assert incomplete and len(bricks) > 1
    (warning,) = warnings
    assert warning.startswith(f"the results hold no time for {len(bricks) - 1} of the maps' {len(bricks)} bricks, so")
    assert all(path in warning for path in incomplete[:3])


def test_a_composed_report_says_how_the_maps_cut_the_models(plans: list[ModelPlan], tmp_path: Path) -> None:
    """The settings that decided the cut are the export's; the run that timed the suite's bricks cut nothing."""
    bricks = distinct_bricks(plans)
    exported = Settings(granularity=3, cut="original", executor="parallel", dims={"batch": 2})
    write_maps(tmp_path, report_of(plans, {}, exported), plans)
    suite_run = report_of(plans, results_for(bricks), Settings(granularity=1, cut="optimized", executor="parallel"))
    composed, _ = compose_from_maps(read_maps([tmp_path]), suite_run)
    settings = composed["settings"]
    assert (composed["granularity"], settings["granularity"], settings["cut"]) == (3, 3, "original")
    assert settings["dims"] == {"batch": 2}


def test_stale_maps_are_removed_and_bad_ones_refused(plans: list[ModelPlan], tmp_path: Path) -> None:
    write_maps(tmp_path, report_of(plans, {}), plans)
    (tmp_path / "bundle.map.json").write_text("{}")  # another tool's file of the same suffix
    (tmp_path / "notes.txt").write_text("mine")
    write_maps(tmp_path, report_of(plans[:1], {}), plans[:1])
    maps = sorted(path.name for path in tmp_path.glob("*.map.json"))
    assert maps == sorted([map_file_name(plans[0].path), "bundle.map.json"]) and (tmp_path / "notes.txt").exists()
    (tmp_path / "bundle.map.json").unlink()
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
    with pytest.raises(MapError, match=r"not a pytest-dlbricks report .*: it has no summary"):
        check_results({"bricks": [], "summary": "fast"}, "odd.json")


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        ({"fixed_s": "fast"}, "fixed_s is 'fast', not a time in seconds"),
        ({"timing_s": -1e-6}, "timing_s is -1e-06, not a time in seconds"),
        ({"per_input_s": None}, "per_input_s is None, not a time in seconds"),
        ({"reference_s": [2e-5]}, r"reference_s is \[2e-05\], not a time in seconds"),
        ({"reference_s": 0}, "reference_s is 0, not the time of a call"),
        ({"fixed_s": 10**400}, r"fixed_s is 1000.*000, not a time in seconds"),  # beyond any float
    ],
)
def test_a_report_with_a_damaged_call_overhead_is_refused_naming_the_figure(
    plans: list[ModelPlan], change: dict[str, object], cause: str
) -> None:
    """Composed with it, every estimate would be wrong or the command would stop with a traceback."""
    report = report_of(plans, results_for(distinct_bricks(plans)))
    check_results(report, "fine.json")
    report["summary"]["call_overhead_s"].update(change)
    damaged = r"^bad.json: its call overhead \(summary.call_overhead_s\) is damaged: "
    with pytest.raises(MapError, match=damaged + cause + "$"):
        check_results(report, "bad.json")


@pytest.mark.parametrize("costs", [0, False, [], "none"])
def test_a_call_overhead_that_is_not_a_table_is_damage_even_if_it_reads_as_false(
    plans: list[ModelPlan], costs: object
) -> None:
    report = report_of(plans, results_for(distinct_bricks(plans)))
    report["summary"]["call_overhead_s"] = costs
    with pytest.raises(MapError, match=r"is damaged: it is .*, not a table of costs$"):
        check_results(report, "bad.json")


def test_a_brick_s_damaged_reference_leaves_its_call_cost_as_measured() -> None:
    records: list[dict[str, Any]] = [
        {"signature": "a", "reference_s": 2e-5},
        {"signature": "b", "reference_s": 10**400},
        {"signature": "c", "reference_s": -1.0},
        {"signature": "d", "reference_s": "fast"},
        {"signature": "e"},
    ]
    assert brick_references(records) == {"a": 2e-5}


def test_merged_call_costs_are_lower_medians_at_one_speed(plans: list[ModelPlan]) -> None:
    """Shard 1 timed its chains while the reference took 20 us, shard 2 at 10 us, an older shard 3 without
    it: shard 1's and 2's costs brought to the lower median speed (10 us) agree, and the lower median of the
    three is theirs, not shard 3's, nor a mean of two."""
    reports = shard_reports(plans, 3)
    costs: list[dict[str, float | None]] = [
        {"fixed_s": 4e-6, "timing_s": 2e-7, "reference_s": 2e-5},
        {"fixed_s": 2e-6, "timing_s": 1e-7, "reference_s": 1e-5},
        {"fixed_s": 7e-6, "timing_s": 5e-7, "reference_s": None},
    ]
    for (_, report), cost in zip(reports, costs):
        report["summary"]["call_overhead_s"] |= cost | {"per_input_s": 0.0, "per_output_s": 0.0}
    merged = merge_reports(reports)["summary"]["call_overhead_s"]
    assert merged["reference_s"] == pytest.approx(1e-5)
    assert (merged["fixed_s"], merged["timing_s"]) == (pytest.approx(2e-6), pytest.approx(1e-7))


def test_a_shard_whose_parallel_call_cost_was_caught_slow_leaves_the_merged_estimates_alone(
    plans: list[ModelPlan],
) -> None:
    """One of two shards read the parallel executor's call at 8 ms, the other at 4.35 us: the median of the
    two, their mean, made every merged model read milliseconds. The merge gives a direct run's estimates."""
    sane = dataclasses.replace(OVERHEAD, parallel_fixed_s=4.35e-6)
    direct = report_of(plans, results_for(distinct_bricks(plans)), overhead=sane)
    reports = shard_reports(plans, 2, overheads=[dataclasses.replace(OVERHEAD, parallel_fixed_s=8e-3), sane])
    merged = merge_reports(reports)
    assert merged["summary"]["call_overhead_s"]["parallel_fixed_s"] == 4.35e-6
    assert estimates(merged) == estimates(direct)
    assert all(model["parallel_s"] < 1e-3 for model in merged["models"] if model["parallel_s"] is not None)
    slow = shard_reports(plans, 2, overheads=[dataclasses.replace(OVERHEAD, parallel_fixed_s=8e-3)] * 2)
    assert merge_reports(slow)["summary"]["call_overhead_s"]["parallel_fixed_s"] is None, "no sane figure: none"


def test_shards_combine_the_parallel_executors_cost_per_layer_of_those_whose_call_cost_is_sane(
    plans: list[ModelPlan],
) -> None:
    """A shard caught slow is left out with its cost per layer; of the others, the lower median."""
    costs = [(8e-3, 5e-4), (4.35e-6, 4e-7), (4.5e-6, 3e-7)]
    overheads = [dataclasses.replace(OVERHEAD, parallel_fixed_s=f, parallel_layer_s=layer) for f, layer in costs]
    merged = merge_reports(shard_reports(plans, 3, overheads=overheads))["summary"]["call_overhead_s"]
    assert (merged["parallel_fixed_s"], merged["parallel_layer_s"]) == (pytest.approx(4.35e-6), pytest.approx(3e-7))


def test_merged_shards_keep_the_peak_flops_and_time_by_operator_type(plans: list[ModelPlan]) -> None:
    """A shard's analysis holds for the bricks it timed: the merge analyses every model again from all the
    bricks' records, at the best peak of the shards (each is the best of its runs; a slow shard reads low)."""
    direct = report_of(plans, results_for(distinct_bricks(plans)))
    slower = Peak(PEAK.flops_per_s / 2, PEAK.bytes_per_s / 2, PEAK.method)
    merged = merge_reports(shard_reports(plans, 3, peaks=[slower, PEAK, slower]))
    assert merged["peak"] == direct["peak"] and merged["peak"]["flops_per_s"] == PEAK.flops_per_s
    fields = ("flops", "bytes", "load_s", "flops_per_s", "peak_fraction", "call_s", "unknown_flops_time_s")
    for model, expected in zip(merged["models"], direct["models"], strict=True):
        for field in fields:
            assert model[field] == pytest.approx(expected[field]), (model["path"], field)
        assert model["op_time_s"] == (None if expected["op_time_s"] is None else pytest.approx(expected["op_time_s"]))
        assert model["top_bricks"] == expected["top_bricks"] or model["top_bricks"] == pytest.approx(
            expected["top_bricks"]
        )
    assert any(model["op_time_s"] for model in merged["models"]), "complete models have their time by operator"
    for field in ("unknown_flops_time_s", "unknown_flops_share"):
        assert merged["summary"][field] == pytest.approx(direct["summary"][field])
    bricks = {brick["signature"]: brick for brick in direct["bricks"]}
    for brick in merged["bricks"]:
        assert brick["peak_fraction"] == pytest.approx(bricks[brick["signature"]]["peak_fraction"])
    page = render_html(merged)
    complete = sum(1 for model in merged["models"] if model["op_time_s"])
    assert page.count("incomplete: not every brick was measured") == len(merged["models"]) - complete
    assert "GFLOP/s GEMM peak" in page and "20.0" in page


def test_composed_estimates_keep_the_suite_run_s_peak_and_the_models_analysis(
    plans: list[ModelPlan], tmp_path: Path
) -> None:
    report = report_of(plans, results_for(distinct_bricks(plans)))
    write_maps(tmp_path, report, plans)
    composed, _ = compose_from_maps(read_maps([tmp_path]), report)
    assert composed["peak"] == report["peak"]
    for model, expected in zip(composed["models"], report["models"], strict=True):
        assert model["flops"] == expected["flops"] and model["flops_per_s"] == pytest.approx(expected["flops_per_s"])
        assert model["op_time_s"] == (None if expected["op_time_s"] is None else pytest.approx(expected["op_time_s"]))


def test_a_report_of_an_older_version_composes_with_the_call_costs_it_measured(plans: list[ModelPlan]) -> None:
    """Reports written before the timing cost and the reference were measured lack them."""
    report = report_of(plans, results_for(distinct_bricks(plans)))
    for name in ("timing_s", "reference_s", "parallel_fixed_s", "parallel_layer_s"):
        del report["summary"]["call_overhead_s"][name]
    check_results(report, "old.json")
    assert overhead_of(report["summary"]) == CallOverhead(fixed_s=2e-6, per_input_s=5e-7, per_output_s=2.5e-7)


# -- sharding ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [("1/1", (1, 1)), ("2/3", (2, 3)), (" 3/3 ", (3, 3))])
def test_parse_shard(text: str, value: tuple[int, int]) -> None:
    assert parse_shard(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2", "shard must look like 2/3 (shard 2 of 3), not '2'"),
        ("a/b", "shard must look like 2/3 (shard 2 of 3), not 'a/b'"),
        ("1/0", "shard must look like 2/3 (shard 2 of 3), not '1/0'"),
        ("0/3", "shard number must lie between 1 and 3, not 0"),
        ("4/3", "shard number must lie between 1 and 3, not 4"),
    ],
)
def test_parse_shard_rejects(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_shard(text)
    assert str(caught.value) == message


def test_assignment_is_deterministic_complete_and_balanced() -> None:
    costs = {f"{i:064x}": float((i * 37) % 101 + 1) for i in range(50)}
    assignment = assign(costs, 3)
    assert assignment == assign(dict(reversed(list(costs.items()))), 3), "independent of the order given"
    assert set(assignment) == set(costs) and set(assignment.values()) == {1, 2, 3}
    counts = [list(assignment.values()).count(shard) for shard in (1, 2, 3)]
    assert max(counts) <= 17
    loads = [sum(costs[s] for s, shard in assignment.items() if shard == k) for k in (1, 2, 3)]
    assert max(loads) - min(loads) <= max(costs.values())


def test_an_expensive_brick_gets_a_shard_of_its_own_share() -> None:
    assignment = assign({"big": 100.0, "a": 1.0, "b": 1.0, "c": 1.0}, 2)
    assert assignment == {"big": 1, "a": 2, "b": 2, "c": 1}, "two bricks at most per shard"
    assert assign({}, 4) == {}
    assert set(assign({"a": 0.0, "b": 0.0, "c": 0.0}, 3).values()) == {1, 2, 3}


def test_a_brick_costs_the_bytes_it_reads_and_writes(tmp_path: Path) -> None:
    conv = next(brick for brick in distinct_bricks(plans_of(tmp_path)[:1]).values() if brick.ops == ("Conv",))
    assert brick_cost(conv) == 4 * (8 * 6 * 6 + 8 * 8 * 3 * 3 + 8 * 6 * 6), "float32 input, weight, output"


# -- merge ---------------------------------------------------------------------------------------


def shard_reports(
    plans: list[ModelPlan],
    shards: int,
    *,
    overheads: list[CallOverhead] | None = None,
    peaks: list[Peak] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The full run split into ``shards`` runs: each measured only its bricks, with the same times, and
    the call costs and peak of ``overheads`` and ``peaks`` (shard by shard) where given."""
    bricks = distinct_bricks(plans)
    assignment = assign({signature: brick_cost(brick) for signature, brick in bricks.items()}, shards)
    reports = []
    for shard in range(1, shards + 1):
        mine = {signature for signature, k in assignment.items() if k == shard}
        settings = dataclasses.replace(SETTINGS, shard=(shard, shards))
        overhead = overheads[shard - 1] if overheads else OVERHEAD
        peak = peaks[shard - 1] if peaks else PEAK
        report = report_of(plans, results_for(bricks, mine), settings, overhead=overhead, peak=peak)
        reports.append((f"shard{shard}.json", report))
    return reports


def test_merged_shards_equal_the_single_run(plans: list[ModelPlan]) -> None:
    single = report_of(plans, results_for(distinct_bricks(plans)))
    reports = shard_reports(plans, 3)
    assert all(not model["complete"] for _, report in reports for model in report["models"][:2])
    merged = merge_reports(reports)
    assert estimates(merged) == estimates(single)
    assert merged["summary"]["measured_bricks"] == single["summary"]["measured_bricks"]
    assert merged["settings"] == {**single["settings"], "shard": None}
    assert [entry["shard"] for entry in merged["merged"]] == ["1/3", "2/3", "3/3"]
    assert merged["summary"]["call_overhead_s"] == single["summary"]["call_overhead_s"]


def test_the_merged_speed_trace_is_the_shard_whose_machine_moved_most(plans: list[ModelPlan]) -> None:
    reports = shard_reports(plans, 3)
    assert merge_reports(reports)["summary"]["speed"] is None, "no shard took enough samples"
    for (_, report), spread in zip(reports, (0.04, 0.31, None)):
        report["summary"]["speed"] = {"reference": "a chain", "samples": 9, "spread": spread}
    assert merge_reports(reports)["summary"]["speed"]["spread"] == 0.31
    for (_, report), spread in zip(reports, (0.0, None, None)):
        report["summary"]["speed"] = {"reference": "a chain", "samples": 9, "spread": spread}
    assert merge_reports(reports)["summary"]["speed"]["spread"] == 0.0, "a steady machine is a trace too"


def test_merge_refuses_reports_from_other_settings_or_machines(plans: list[ModelPlan]) -> None:
    (first, a), (second, b) = shard_reports(plans, 2)
    other = copy.deepcopy(b)
    other["settings"]["optimization"] = "basic"
    other["machine"]["cpu"] = "Another CPU"
    other["machine"]["platform"] = other["machine"]["platform"].replace("Linux-", "Linux-0.0.1-")
    with pytest.raises(IncompatibleReports) as caught:
        merge_reports([(first, a), (second, other)])
    assert str(caught.value) == (
        "shard1.json and shard2.json cannot be merged, their times are not comparable: setting optimization"
        " 'all' vs 'basic'; machine cpu " + repr(a["machine"]["cpu"]) + " vs 'Another CPU'"
    )


def test_merge_refuses_a_shard_twice_or_other_splits(plans: list[ModelPlan]) -> None:
    reports = shard_reports(plans, 2)
    with pytest.raises(IncompatibleReports, match=r"shard1\.json and shard1\.json are both shard 1/2"):
        merge_reports([reports[0], reports[0]])
    third = shard_reports(plans, 3)[2]
    with pytest.raises(IncompatibleReports, match=r"different splits \(into 2, 3 shards\)"):
        merge_reports([*reports, third])


def test_merge_refuses_a_brick_measured_twice_or_a_model_cut_differently(plans: list[ModelPlan]) -> None:
    full = ("a.json", report_of(plans, results_for(distinct_bricks(plans))))
    with pytest.raises(IncompatibleReports, match=r"was measured by both a\.json and b\.json"):
        merge_reports([full, ("b.json", full[1])])
    (first, a), (second, b) = shard_reports(plans, 2)
    b["models"][0]["composition"]["edges"] = []
    with pytest.raises(
        IncompatibleReports, match=r"models/chain\.onnx was cut differently in shard1\.json and shard2\.json"
    ):
        merge_reports([(first, a), (second, b)])
