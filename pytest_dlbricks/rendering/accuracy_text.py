"""How close the estimates came, in words: the calibration's line and the accuracy of the validated models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.wording import plural
from ..estimating.composition import is_number
from .formatting import format_seconds

#: How far the machine's speed may move through a run before the table's closing lines say what that
#: means for the estimates.
SPEED_MOVED = 0.05


def _speed_moved(spread: float, noise: float) -> bool:
    """Whether the machine's speed moved through the run by more than ``noise`` (half a spread) and
    :data:`SPEED_MOVED`: estimates then compare times taken at moments that differ by as much."""
    return spread > max(noise, SPEED_MOVED)


_PAIRED = "  in paired rounds (the bricks timed again just before each timed call of the model)"
#: The accuracy blocks of a validated report: the estimates the user gets, each followed by its paired rounds.
_ACCURACIES = (
    ("sequential", "accuracy of sequential estimates (Sequential / Measured)"),
    ("sequential_paired", _PAIRED),
    (
        "drift",
        "  item estimates against the paired rounds' (the same bricks timed apart: the machine's speed moved)",
    ),
    ("calibrated", "accuracy of calibrated estimates (Calibrated / Measured, each from the other calibration models)"),
    ("parallel", "accuracy of parallel estimates against the parallel executor (Parallel / its measured time)"),
    ("parallel_paired", _PAIRED),
    ("critical_path", "accuracy of critical paths against the parallel executor (Critical path / its measured time)"),
    ("critical_path_paired", _PAIRED),
)


def calibration_line(calibration: Mapping[str, Any] | None) -> str | None:
    """What the calibration does, and which models it was learned from."""
    if not calibration:
        return None
    models: Sequence[str] = calibration["models"]
    named = f"{plural(len(models), 'model')} ({', '.join(models)})"
    if calibration.get("declined"):
        return f"calibration on {named} not applied: {calibration['declined']}"
    if calibration.get("per_layer_missing"):
        per_layer = f" (no cost per layer: {calibration['per_layer_missing']})"
    elif "per_layer_s" in calibration:  # not in reports of versions that fitted none
        per_layer = f" + {calibration['per_layer_s'] * 1e6:.2f} us per layer"
    else:
        per_layer = ""
    return (
        f"calibrated on {named}: bricks' work x"
        f"{calibration['work_factor']:.3f} + {format_seconds(calibration['per_byte_s'] * 1e6)} per MB its layers move"
        f"{per_layer}"
    )


def accuracy_lines(accuracy: Mapping[str, object] | None, summary: Mapping[str, object]) -> list[str]:
    """The validation summary: accuracy per executor, the machine's noise, the time the method saved."""
    if not accuracy:
        return []
    lines = []
    for key, label in _ACCURACIES:
        result: Mapping[str, float] | None = accuracy.get(key)  # type: ignore[assignment]
        if result:
            models = plural(int(result["models"]), "model")
            # Reports written before the 5% band was counted have the 10% one alone.
            close = f"{result['within_5_percent']}/{models} within +-5%, " if "within_5_percent" in result else ""
            within = f"{close}{result['within_10_percent']}/{result['models'] if close else models} within +-10%"
            lines.append(
                f"{label}: {result['accuracy']:.1%} (geometric mean ratio {result['geometric_mean_ratio']:.3f},"
                f" {within})"
            )
    noise, speedup, wall = accuracy.get("noise"), accuracy.get("speedup"), summary.get("wall_time_s")
    details = []
    if isinstance(noise, float):
        details.append(f"machine noise +-{noise / 2:.1%} (half the interquartile range of per-round ratios)")
    speed = summary.get("speed")
    spread = speed.get("spread") if isinstance(speed, Mapping) else None
    if is_number(spread) and _speed_moved(spread, noise / 2 if isinstance(noise, float) else 0.0):
        # Sequential / Measured compares bricks and models timed at other moments: the rounds' noise is not its own.
        details.append(
            f"the machine's speed +-{spread:.1%} through the run (the Sequential / Measured line's bricks and"
            " models were timed at other moments, and may differ by as much)"
        )
    parallel_noise = accuracy.get("parallel_noise")
    if isinstance(parallel_noise, float):
        details.append(f"the parallel executor's rounds +-{parallel_noise / 2:.1%}")
    if isinstance(speedup, float):
        details.append(f"benchmarking speedup {speedup:.1f}x (end-to-end latencies / distinct brick latencies)")
    if isinstance(wall, float):
        details.append(f"wall time {wall:.1f} s")
    if details:
        lines.append("; ".join(details))
    return lines
