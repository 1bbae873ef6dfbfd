"""Unit tests of the entries dlbricks adds to pytest-benchmark: model estimates and reused bricks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_benchmark.utils import parse_compare_fail

from pytest_dlbricks.reporting.estimates import GROUP, EstimateCheck, model_estimates, model_stats, reused_brick

STATS_A = {"min": 1.0, "max": 4.0, "mean": 2.0, "median": 1.5, "stddev": 0.5, "iqr": 0.4, "q1": 1.3, "q3": 1.7}
STATS_B = {"min": 10.0, "max": 40.0, "mean": 20.0, "median": 15.0, "stddev": 5.0, "iqr": 4.0, "q1": 13.0, "q3": 17.0}


def report() -> dict[str, Any]:
    return {
        "granularity": 2,
        "settings": {"statistic": "median"},
        "models": [
            {
                "path": "m.onnx",
                "complete": True,
                "layers": 6,
                "bricks": 3,
                "unique_bricks": 2,
                "reused_bricks": 2,
                "sequential_s": 18.0,
                "critical_path_s": 18.0,
            },
            {
                "path": "half.onnx",
                "complete": False,
                "layers": 2,
                "bricks": 2,
                "unique_bricks": 2,
                "sequential_s": None,
            },
            {"path": "broken.onnx", "complete": False, "error": "not a model"},
        ],
        "bricks": [
            {"signature": "a", "stats": {**STATS_A, "rounds": 9}, "models": {"m.onnx": 2, "half.onnx": 1}},
            {"signature": "b", "stats": {**STATS_B, "rounds": 4}, "models": {"m.onnx": 1}},
            {"signature": "c", "stats": None, "models": {"half.onnx": 1}},
        ],
    }


def test_an_estimate_is_one_value_without_spread_or_extremes_it_does_not_have() -> None:
    """Composition took 2 us of call overhead off the 18 us sum of medians: the estimate, 16 us, is every value."""
    data = report()
    data["models"][0]["sequential_s"] = 16.0
    stats = model_stats(data, data["models"][0])
    assert stats is not None
    for name in ("min", "max", "mean", "median", "q1", "q3", "ld15iqr", "hd15iqr", "total"):
        assert stats[name] == pytest.approx(16.0), name
    assert (stats["stddev"], stats["iqr"], stats["rounds"], stats["outliers"]) == (0.0, 0.0, 1, "0;0")
    assert stats["ops"] == pytest.approx(1 / 16.0)
    assert model_stats(data, data["models"][1]) is None


def test_pytest_benchmark_compare_fail_sees_the_estimate_not_sums_of_brick_maxima() -> None:
    """A brick's one slow round moved the old entries' max by its whole outlier; an estimate has no max of its own."""
    quiet, noisy = report(), report()
    noisy["bricks"][0]["stats"] = {**STATS_A, "max": 400.0, "mean": 50.0, "rounds": 9}
    (before,), (now,) = model_estimates(quiet), model_estimates(noisy)
    for field in ("min", "max", "mean"):
        assert parse_compare_fail(f"{field}:5%").fails(now, before.as_dict(flat=True)) is None, field


def test_a_reused_brick_makes_the_entry_its_timed_item_would_have_made() -> None:
    stats = {**STATS_A, "rounds": 9}
    entry = reused_brick("test_brick[Conv-1]", "m.onnx::Conv-1", stats, {"signature": "a"})
    saved = entry.as_dict(include_data=True)
    json.dumps(saved)
    assert (saved["name"], saved["fullname"], saved["group"]) == ("test_brick[Conv-1]", "m.onnx::Conv-1", None)
    assert saved["extra_info"] == {"signature": "a", "reused": True}
    assert saved["stats"]["median"] == 1.5 and saved["stats"]["rounds"] == 9 and saved["stats"]["data"] == []
    assert (saved["stats"]["ld15iqr"], saved["stats"]["hd15iqr"], saved["stats"]["outliers"]) == (1.0, 4.0, "0;0")
    assert saved["stats"]["ops"] == pytest.approx(0.5) and saved["stats"]["total"] == pytest.approx(18.0)
    older = reused_brick("b", "m.onnx::b", {"median": 2.0, "rounds": 3}, {}).as_dict(include_data=False)["stats"]
    assert (older["mean"], older["max"], older["stddev"], older["outliers"]) == (2.0, 2.0, 0.0, "0;0")


def test_only_complete_models_become_benchmarks() -> None:
    (estimate,) = model_estimates(report())
    assert estimate.fullname == estimate.name == "dlbricks::m.onnx"
    assert estimate.group == GROUP
    assert estimate.extra_info == {
        "granularity": 2,
        "layers": 6,
        "bricks": 3,
        "unique_bricks": 2,
        "reused_bricks": 2,
        "critical_path_s": 18.0,
        "statistic": "median",
    }


def test_an_estimate_answers_like_pytest_benchmark_metadata() -> None:
    (estimate,) = model_estimates(report())
    saved = estimate.as_dict(include_data=False)
    json.dumps(saved)
    assert set(saved) == {"group", "name", "fullname", "params", "param", "extra_info", "options", "stats"}
    assert saved["stats"]["median"] == pytest.approx(18.0) and "data" not in saved["stats"]
    assert estimate.as_dict()["stats"]["data"] == [pytest.approx(18.0)]
    flat = estimate.as_dict(include_data=False, flat=True, cprofile=("tottime", 25))
    assert flat["median"] == pytest.approx(18.0) and "stats" not in flat
    assert "stats" not in estimate.as_dict(include_data=False, stats=False)
    assert estimate["median"] == pytest.approx(18.0) and estimate["fullname"] == "dlbricks::m.onnx"
    assert estimate.get("nothing", 3) == 3 and bool(estimate) and not estimate.has_error


def test_pytest_benchmark_regression_checks_apply_to_estimates() -> None:
    (estimate,) = model_estimates(report())
    check = parse_compare_fail("median:5%")
    assert check.fails(estimate, {**estimate.as_dict(flat=True), "median": 17.5}) is None
    assert check.fails(estimate, {**estimate.as_dict(flat=True), "median": 16.0})


@pytest.mark.parametrize("spread", ["stddev:10%", "iqr:10%", "stddev:0.001"])
def test_spread_checks_pass_over_estimates_and_still_check_bricks(spread: str) -> None:
    """pytest-benchmark takes a percentage of a saved 0 as infinitely worse: unwrapped, stddev:10% fails every
    estimate of every run, the same estimate included."""
    (estimate,) = model_estimates(report())
    saved = estimate.as_dict(flat=True)
    if spread.endswith("%"):
        assert parse_compare_fail(spread).fails(estimate, saved), "pytest-benchmark's own check"
    assert EstimateCheck(parse_compare_fail(spread)).fails(estimate, saved) is None
    brick = reused_brick("b", "m.onnx::b", {**STATS_A, "rounds": 9}, {})
    wider = {**brick.as_dict(flat=True), "stddev": 0.1, "iqr": 0.1}
    assert EstimateCheck(parse_compare_fail(spread)).fails(brick, wider), "a brick's spread is its own"


def test_other_checks_of_estimates_are_pytest_benchmarks_own() -> None:
    (estimate,) = model_estimates(report())
    check = EstimateCheck(parse_compare_fail("median:5%"))
    assert check.fails(estimate, {**estimate.as_dict(flat=True), "median": 17.5}) is None
    assert check.fails(estimate, {**estimate.as_dict(flat=True), "median": 16.0}) == parse_compare_fail(
        "median:5%"
    ).fails(estimate, {**estimate.as_dict(flat=True), "median": 16.0})
