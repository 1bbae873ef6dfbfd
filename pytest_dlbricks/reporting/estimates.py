"""Entries in pytest-benchmark's own shape, so its table, saved runs and histories carry what dlbricks knows.

* Each complete model becomes one entry named ``dlbricks::<model path>`` in the group ``dlbricks
  estimates``: its sequential estimate, as one value. An estimate is composed, not timed: it has no
  rounds of its own, and its bricks' rounds were never run together, so it offers no spread, no
  minimum and no maximum it does not have. Every statistic is the estimate, over one round (so, as
  for any one-round benchmark, its standard deviation and interquartile range are 0); the gate that
  knows how estimates vary is ``--dlbricks-compare-fail`` (see :mod:`.comparing`). pytest-benchmark's
  ``--benchmark-compare-fail`` on a spread (``stddev:10%``) passes over them (:class:`EstimateCheck`).
  ``extra_info`` records the critical path, the brick counts and how many times were reused.
* Each brick reused from the store becomes the entry its timed item would have made, with the stored
  statistics and ``extra_info["reused"]``, so that a brick's history has an entry in every run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GROUP = "dlbricks estimates"
PREFIX = "dlbricks::"
#: pytest-benchmark's statistics of an entry, as one value.
_VALUES = ("min", "max", "mean", "median", "q1", "q3", "ld15iqr", "hd15iqr")
#: pytest-benchmark's statistics of a spread, which an estimate does not have.
SPREAD = ("stddev", "iqr")


def model_stats(report: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any] | None:
    """pytest-benchmark's statistics for one complete model of ``report``: its estimate, once; None unless
    every brick of the model has a time."""
    path, estimate = model["path"], model.get("sequential_s")
    shares = [brick["stats"] for brick in report["bricks"] if path in brick.get("models", {})]
    if estimate is None or not shares or any(stats is None for stats in shares):
        return None
    return {
        **{name: float(estimate) for name in _VALUES},
        "stddev": 0.0,
        "iqr": 0.0,
        "rounds": 1,
        "iterations": 1,
        "iqr_outliers": 0,
        "stddev_outliers": 0,
        "outliers": "0;0",
        "ops": 1 / estimate if estimate else 0,
        "total": float(estimate),
    }


def model_estimates(report: Mapping[str, Any]) -> list[HistoryEntry]:
    """An entry per complete model of ``report``."""
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
        options = {"composed": "one sequential estimate of brick times; no rounds, spread, minimum or maximum"}
        estimates.append(
            HistoryEntry(f"{PREFIX}{model['path']}", f"{PREFIX}{model['path']}", GROUP, stats, extra_info, options)
        )
    return estimates


def reused_brick(name: str, fullname: str, stats: Mapping[str, float], extra_info: Mapping[str, Any]) -> HistoryEntry:
    """The entry of a brick whose time was taken from the store: its stored statistics, marked reused.

    A record keeps at least the statistic its run composed with; pytest-benchmark's other fields
    missing from it (older records) take that value, or no spread."""
    value = next((float(stats[name]) for name in ("mean", "median", "min") if name in stats), 0.0)
    rounds = int(stats.get("rounds", 1))
    complete: dict[str, Any] = {
        **{field: value for field in ("min", "max", "mean", "median", "q1", "q3")},
        "stddev": 0.0,
        "iqr": 0.0,
        "ld15iqr": stats.get("min", value),
        "hd15iqr": stats.get("max", value),
        "iqr_outliers": 0,
        "stddev_outliers": 0,
        "ops": 1 / value if value else 0,
        "total": value * rounds,
        **stats,
        "rounds": rounds,
        "iterations": 1,
    }
    complete["outliers"] = f"{int(complete['stddev_outliers'])};{int(complete['iqr_outliers'])}"
    options = {"reused": "statistics measured in an earlier run, taken from the brick store"}
    return HistoryEntry(fullname, name, None, complete, {**extra_info, "reused": True}, options)


class HistoryEntry:
    """An entry pytest-benchmark did not time, with the part of its ``Metadata`` interface its session uses.

    pytest-benchmark keeps one ``Metadata`` per timed test; an estimate or a reused brick is not timed
    in the run, so it only provides what the session reads to save, compare and display a benchmark:
    names, ``as_dict``, item access.
    """

    has_error = False
    param = None
    params = None
    iterations = 1

    def __init__(
        self,
        fullname: str,
        name: str,
        group: str | None,
        stats: Mapping[str, Any],
        extra_info: Mapping[str, Any],
        options: Mapping[str, str],
    ) -> None:
        self.fullname = fullname
        self.name = name
        self.group = group
        self.stats = dict(stats)
        self.extra_info = dict(extra_info)
        self.options = dict(options)

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
            # The one value of an estimate is its data; a reused brick's rounds were not kept.
            data = [self.stats["mean"]] if self.stats["rounds"] == 1 else []
            values = {**self.stats, **({"data": data} if include_data else {})}
            if flat:
                result.update(values)
            else:
                result["stats"] = values
        return result


class EstimateCheck:
    """One ``--benchmark-compare-fail`` check, as pytest-benchmark parsed it, that passes over the spread of
    estimates.

    pytest-benchmark takes a percentage of a saved 0 as infinitely worse, so ``stddev:10%`` would fail every
    estimate of every run: an estimate's 0 only says it is one value, with no spread to compare. Every
    other check, and spread checks of the bricks, are pytest-benchmark's own.
    """

    def __init__(self, check: Any) -> None:
        self.check = check
        self.field: str = check.field
        self.threshold = check.threshold

    def fails(self, current: Any, compared: Mapping[str, Any]) -> str | None:
        if self.field in SPREAD and str(compared.get("fullname", "")).startswith(PREFIX):
            return None
        failure: str | None = self.check.fails(current, compared)
        return failure
