"""Unit tests of the noise statistics on synthetic samples."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from pytest_benchmark.stats import Stats

from pytest_dlbricks.core.noise import (
    HIGH_NOISE,
    bootstrap_median,
    log_spread,
    margin_of_error,
    median_error,
    run_noise,
)

KEPT = ("min", "max", "mean", "median", "stddev", "iqr", "q1", "q3", "rounds")


def brick_stats(samples: np.ndarray) -> dict[str, float]:
    """What a brick's record keeps of pytest-benchmark's statistics of ``samples``."""
    stats = Stats()
    for value in samples:
        stats.update(float(value))
    return {name: float(getattr(stats, name)) for name in KEPT}


def test_the_margin_of_error_is_pytest_benchmarks_precision() -> None:
    """pytest-benchmark stops timing once z * stddev / sqrt(n) / mean is under the precision asked."""
    samples = np.random.default_rng(0).normal(100e-6, 5e-6, 40)
    expected = 1.959964 * statistics.stdev(samples) / math.sqrt(40) / statistics.mean(samples)
    assert margin_of_error(brick_stats(samples)) == pytest.approx(expected, rel=1e-5)
    assert margin_of_error({"mean": 1.0, "stddev": 0.1, "rounds": 1}) is None
    assert margin_of_error({"median": 1.0}) is None


def test_the_median_error_covers_the_medians_of_repeated_runs() -> None:
    """The standard error from one run's IQR matches the scatter of medians over 400 runs within 15%."""
    rng = np.random.default_rng(1)
    runs = [rng.normal(50e-6, 4e-6, 60) for _ in range(400)]
    scatter = statistics.stdev(float(np.median(run)) for run in runs)
    estimated = statistics.median(median_error(brick_stats(run)) for run in runs)
    assert estimated == pytest.approx(scatter, rel=0.15)
    assert median_error({"median": 1.0}) == 0.0


def test_run_noise_is_the_typical_relative_spread_of_the_bricks() -> None:
    quiet = [{"median": 10.0, "iqr": 0.3}, {"median": 20.0, "iqr": 1.0}, {"median": 5.0, "iqr": 0.2}]
    quiet = [{**brick, "rounds": 9} for brick in quiet]
    assert run_noise(quiet) == pytest.approx(0.04)
    noisy = [{"median": 1.0, "iqr": 0.3, "rounds": 9}] * 3
    assert run_noise(quiet) < HIGH_NOISE < run_noise(noisy)  # type: ignore[operator]
    assert run_noise([{**brick, "rounds": 2} for brick in noisy]) is None, "two rounds have no spread to speak of"
    assert run_noise([]) is None and run_noise([{"median": 0.0, "iqr": 1.0, "rounds": 9}]) is None


def test_log_spread_is_a_robust_scatter_of_ratios() -> None:
    ratios = np.exp(np.random.default_rng(2).normal(0.2, 0.1, 2000))
    assert log_spread(list(ratios)) == pytest.approx(0.1, rel=0.1)
    assert log_spread([1.0, 2.0]) is None
    assert log_spread([1.3] * 5) == 0.0, "bricks that all drifted alike do not drift apart"


def test_the_bootstrap_interval_covers_the_median_about_95_times_in_100() -> None:
    rng = np.random.default_rng(3)
    covered = 0
    for seed in range(200):
        sample = rng.lognormal(0.0, 0.3, 15)
        _, low, high = bootstrap_median(list(sample), seed=seed)
        covered += low <= 1.0 <= high
    assert 0.88 <= covered / 200 <= 0.995
    assert bootstrap_median([2.0]) == (2.0, 2.0, 2.0)
