"""Unit tests of per-model estimates shaped as pytest-benchmark benchmarks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_benchmark.utils import parse_compare_fail

from pytest_dlbricks.estimates import GROUP, model_estimates, model_stats

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


def test_each_statistic_is_the_count_weighted_sum_over_bricks() -> None:
    data = report()
    stats = model_stats(data, data["models"][0])
    assert stats is not None
    for name in STATS_A:
        assert stats[name] == pytest.approx(2 * STATS_A[name] + STATS_B[name]), name
    assert stats["rounds"] == 4
    assert stats["ops"] == pytest.approx(1 / 24.0)
    assert stats["total"] == pytest.approx(24.0 * 4)
    assert (stats["ld15iqr"], stats["hd15iqr"]) == (stats["min"], stats["max"])
    assert model_stats(data, data["models"][1]) is None


def test_values_follow_the_call_overhead_correction_and_spreads_do_not() -> None:
    """Composition took 2 us of call overhead off the 18 us sum of medians: every value moves by as much."""
    data = report()
    data["models"][0]["sequential_s"] = 16.0
    stats = model_stats(data, data["models"][0])
    assert stats is not None
    assert stats["median"] == pytest.approx(16.0)
    assert (stats["min"], stats["q1"], stats["max"]) == (pytest.approx(10.0), pytest.approx(13.6), pytest.approx(46.0))
    assert (stats["stddev"], stats["iqr"]) == (pytest.approx(6.0), pytest.approx(4.8))


def test_quartiles_missing_from_older_records_come_from_the_range() -> None:
    data = report()
    for brick in data["bricks"][:2]:
        del brick["stats"]["q1"], brick["stats"]["q3"]
    stats = model_stats(data, data["models"][0])
    assert stats is not None
    assert stats["q1"] == pytest.approx(2 * (1.5 - 0.2) + (15.0 - 2.0))
    assert stats["q3"] == pytest.approx(2 * (1.5 + 0.2) + (15.0 + 2.0))


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
    assert estimate.as_dict()["stats"]["data"] == []
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
