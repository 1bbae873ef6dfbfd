"""Per-model estimates in pytest-benchmark's own shape, so its table, saved runs and comparisons carry them.

Each complete model becomes one benchmark named ``dlbricks::<model path>`` in the group
``dlbricks estimates``. Its statistics are the sequential composition of its bricks' statistics: each
one (min, max, mean, median, quartiles, standard deviation, interquartile range) is the sum over the
model's bricks, counted as often as they occur, and the values (not the spreads) are shifted by the
correction composition makes for the inference call's cost, so that the run's statistic equals the
model's sequential estimate. Summing the spreads supposes that the bricks' times vary together, which
bounds the model's spread from above. Rounds are the fewest rounds of any brick; ``extra_info``
records the critical path, the brick counts and how many times were reused from the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GROUP = "dlbricks estimates"
PREFIX = "dlbricks::"
_VALUES = ("min", "max", "mean", "median", "q1", "q3")
_SPREADS = ("stddev", "iqr")


def model_stats(report: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any] | None:
    """pytest-benchmark's statistics for one complete model of ``report``; None unless it has an estimate."""
    path, estimate = model["path"], model.get("sequential_s")
    shares = [
        (int(brick["models"][path]), brick["stats"]) for brick in report["bricks"] if path in brick.get("models", {})
    ]
    if estimate is None or not shares or any(stats is None for _, stats in shares):
        return None
    sums = {name: sum(count * _stat(stats, name) for count, stats in shares) for name in (*_VALUES, *_SPREADS)}
    correction = estimate - sums[report["settings"]["statistic"]]
    values = {name: max(sums[name] + correction, 0.0) for name in _VALUES}
    rounds = min(int(stats.get("rounds", 1)) for _, stats in shares)
    return {
        **values,
        **{name: sums[name] for name in _SPREADS},
        "rounds": rounds,
        "iterations": 1,
        "ld15iqr": values["min"],
        "hd15iqr": values["max"],
        "iqr_outliers": 0,
        "stddev_outliers": 0,
        "outliers": "0;0",
        "ops": 1 / values["mean"] if values["mean"] else 0,
        "total": values["mean"] * rounds,
    }


def model_estimates(report: Mapping[str, Any]) -> list[ModelEstimate]:
    """A benchmark per complete model of ``report``."""
    estimates = []
    for model in report["models"]:
        stats = model_stats(report, model) if model.get("complete") else None
        if stats is None:
            continue
        extra_info = {
            "granularity": report["granularity"],
            "layers": model["layers"],
            "bricks": model["bricks"],
            "unique_bricks": model["unique_bricks"],
            "reused_bricks": model.get("reused_bricks", 0),
            "critical_path_s": model["critical_path_s"],
            "statistic": report["settings"]["statistic"],
        }
        estimates.append(ModelEstimate(model["path"], stats, extra_info))
    return estimates


class ModelEstimate:
    """A model's composed estimate, with the part of pytest-benchmark's ``Metadata`` interface its session uses.

    pytest-benchmark keeps one ``Metadata`` per timed test; an estimate is not timed, so it only provides
    what the session reads to save, compare and display a benchmark: names, ``as_dict``, item access.
    """

    has_error = False
    group = GROUP
    param = None
    params = None
    iterations = 1

    def __init__(self, path: str, stats: Mapping[str, Any], extra_info: Mapping[str, Any]) -> None:
        self.name = self.fullname = f"{PREFIX}{path}"
        self.stats = dict(stats)
        self.extra_info = dict(extra_info)
        self.options = {"composed": "sequential sum of brick statistics"}

    def __bool__(self) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        return self.stats[key] if key in self.stats else getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except AttributeError:
            return default

    def as_dict(
        self, include_data: bool = True, flat: bool = False, stats: bool = True, cprofile: object = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = {
            "group": self.group,
            "name": self.name,
            "fullname": self.fullname,
            "params": self.params,
            "param": self.param,
            "extra_info": dict(self.extra_info),
            "options": dict(self.options),
        }
        if stats:
            values = {**self.stats, **({"data": []} if include_data else {})}
            if flat:
                result.update(values)
            else:
                result["stats"] = values
        return result


def _stat(stats: Mapping[str, float], name: str) -> float:
    """A brick statistic; quartiles missing from older records are taken half a range around the median."""
    if name in stats:
        return float(stats[name])
    half = float(stats.get("iqr", 0.0)) / 2
    return float(stats["median"]) + (half if name == "q3" else -half if name == "q1" else 0.0)
