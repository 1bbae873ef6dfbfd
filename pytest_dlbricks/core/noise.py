"""Statistics of timing noise, pure and numpy-only: the precision a brick reached, the error of its median,
how noisy a run was, and bootstrap intervals.

pytest-benchmark keeps, per brick, summary statistics (mean, median, standard deviation, quartiles,
rounds) rather than its rounds, so what can be said of a stored or reported brick time is said from
those: the margin of error of the mean as pytest-benchmark's own ``precision`` computes it, and the
standard error of the median from the interquartile range (a normal's IQR is 1.349 standard
deviations; a median's standard error is 1.2533 standard deviations over the square root of the
rounds). Only re-timing (see :mod:`.retiming`) has rounds of its own, and gets a bootstrap interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

CONFIDENCE = 0.95
#: Two-sided normal quantile of :data:`CONFIDENCE`, as pytest-benchmark's precision uses.
Z = statistics.NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
#: Standard deviations in a normal distribution's interquartile range.
IQR_SIGMAS = 1.349
#: Standard error of a normal sample's median over that of its mean (sqrt(pi / 2)).
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)
#: Typical relative interquartile range of a run's bricks above which the run measured under high noise.
#: Measured on 2 shared cores: 5% with other work beside the run, 20-30% when that work took both cores.
HIGH_NOISE = 0.15
#: Rounds a brick needs for its interquartile range to say anything of the run's noise.
MIN_NOISE_ROUNDS = 5
BOOTSTRAP_RESAMPLES = 2000


def margin_of_error(stats: Mapping[str, float]) -> float | None:
    """The relative margin of error of the mean at 95% (the precision the brick reached); None when the
    statistics lack what it takes (older records, a single round)."""
    try:
        mean, stddev, rounds = float(stats["mean"]), float(stats["stddev"]), int(stats["rounds"])
    except (KeyError, TypeError, ValueError):
        return None
    if rounds < 2 or mean <= 0:
        return None
    return Z * stddev / math.sqrt(rounds) / mean


def at_confidence(margin: float, confidence: float) -> float:
    """A margin of error asked at ``confidence`` (pytest-benchmark's ``--benchmark-confidence``), as the
    margin at :data:`CONFIDENCE` that is as strict: stored margins are at 95%."""
    return margin * Z / statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


def median_error(stats: Mapping[str, float]) -> float:
    """Standard error of a brick's median in seconds, from its interquartile range and rounds (0 when unknown)."""
    rounds = int(stats.get("rounds", 0) or 0)
    if rounds < 1:
        return 0.0
    return MEDIAN_EFFICIENCY * float(stats.get("iqr", 0.0)) / IQR_SIGMAS / math.sqrt(rounds)


def relative_spread(stats: Mapping[str, float]) -> float | None:
    """A brick's interquartile range relative to its median."""
    median = float(stats.get("median", 0.0))
    return float(stats["iqr"]) / median if "iqr" in stats and median > 0 else None


def run_noise(stats: Iterable[Mapping[str, float]]) -> float | None:
    """The machine's noise in a run: the median over its bricks of their relative interquartile range (of
    bricks timed in :data:`MIN_NOISE_ROUNDS` rounds or more; None without any)."""
    spreads = [
        spread
        for brick in stats
        if int(brick.get("rounds", 0) or 0) >= MIN_NOISE_ROUNDS and (spread := relative_spread(brick)) is not None
    ]
    return statistics.median(spreads) if spreads else None


def log_spread(ratios: Sequence[float]) -> float | None:
    """How far ratios (now over before, one per brick) scatter: a robust standard deviation of their
    logarithms (interquartile range over 1.349); None for fewer than 3."""
    if len(ratios) < 3:
        return None
    q1, q3 = np.percentile(np.log(np.asarray(ratios, dtype=float)), [25, 75])
    return float(q3 - q1) / IQR_SIGMAS


def bootstrap_median(values: Sequence[float], *, seed: int = 0) -> tuple[float, float, float]:
    """The median of ``values`` and a 95% percentile-bootstrap interval for it."""
    data = np.asarray(values, dtype=float)
    point = float(np.median(data))
    if len(data) < 2:
        return point, point, point
    rng = np.random.default_rng(seed)
    medians = np.median(data[rng.integers(0, len(data), (BOOTSTRAP_RESAMPLES, len(data)))], axis=1)
    low, high = np.percentile(medians, [100 * (1 - CONFIDENCE) / 2, 100 * (1 + CONFIDENCE) / 2])
    return point, float(low), float(high)
