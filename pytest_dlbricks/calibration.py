"""Per-machine calibration: what a model's context does to the time of its bricks, learned from models
measured whole on the machine that times the bricks, and applied to any model.

A brick is timed alone, again and again: its weights and inputs wait in the caches. Inside the model
they do not, and the executor spends time between kernels that grows with the tensors it hands on.
So a model's measured time is modelled as ``work_factor * work + per_byte_s * bytes + call``: ``work``
the bricks' composed work (their times less their call cost), ``bytes`` what the model's layers read
and write (weights and activations), ``call`` the model's own call cost. The two coefficients are
fitted on calibration models (models the user chose and validated, never the model being
estimated), minimising the absolute relative error, so that each model counts alike whatever its
size and one model far off does not pull the others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

#: Fewest calibration models a fit of two coefficients is made from.
MIN_MODELS = 3
#: Iterations of the reweighted least squares that minimise the absolute relative error.
_ITERATIONS = 50


@dataclass(frozen=True)
class CalibrationRecord:
    """One calibration model as the machine timed it, cut at ``granularity``: its bricks' work, the bytes
    its layers move and its call cost, and its measured latency (seconds)."""

    path: str
    #: Which model it is, whatever its path (see :func:`model_key`).
    key: str
    granularity: int
    work_s: float
    bytes: int
    call_s: float
    measured_s: float


@dataclass(frozen=True)
class Calibration:
    """The fitted correction, and the models it was fitted on."""

    work_factor: float
    per_byte_s: float
    models: tuple[str, ...]

    def apply(self, work_s: float, moved: int, call_s: float) -> float:
        """A model's calibrated latency from its bricks' work, the bytes its layers move and its call cost."""
        return self.work_factor * work_s + self.per_byte_s * moved + call_s

    def as_json(self) -> dict[str, object]:
        return {"work_factor": self.work_factor, "per_byte_s": self.per_byte_s, "models": list(self.models)}


def model_key(signatures: Iterable[str]) -> str:
    """A model's identity for calibration: the bricks it is cut into, so that a model copied or run from
    another folder is still recognised, and left out of its own calibration."""
    return hashlib.sha256("\n".join(sorted(signatures)).encode()).hexdigest()[:16]


def record_of(
    path: str, key: str, granularity: int, sequential_s: float, moved: int, call_s: float, measured_s: float
) -> CalibrationRecord:
    """A calibration model's record from what its report holds: its composed estimate (which counts its
    call once, with the bricks' work), bytes moved, call cost and measured latency."""
    return CalibrationRecord(path, key, granularity, max(sequential_s - call_s, 0.0), moved, call_s, measured_s)


def fit(
    records: Sequence[CalibrationRecord],
    granularity: int,
    *,
    leave_out: str | None = None,
    leave_out_path: str | None = None,
) -> Calibration | None:
    """The correction fitted on the ``records`` cut at ``granularity``, all but the model whose key is
    ``leave_out`` or whose path is ``leave_out_path`` (a model never calibrates its own estimate, also
    through a record it left when it was cut otherwise); None with fewer than :data:`MIN_MODELS` usable
    models.

    A coefficient the data would make negative (a context that speeds work up beyond what the bricks
    show, bytes that cost less than nothing) is left at its neutral value: 1 for the work factor, 0 for
    the cost per byte.
    """
    used = [
        r
        for r in records
        if r.granularity == granularity
        and r.key != leave_out
        and r.path != leave_out_path
        and r.measured_s > r.call_s
        and r.work_s > 0
    ]
    if len(used) < MIN_MODELS:
        return None
    measured = np.array([r.measured_s for r in used])
    work = np.array([r.work_s for r in used]) / measured
    moved = np.array([r.bytes for r in used], dtype=float) / measured
    target = 1.0 - np.array([r.call_s for r in used]) / measured
    factor, per_byte = _least_absolute(np.column_stack([work, moved]), target)
    if per_byte < 0:
        (factor,) = _least_absolute(work[:, None], target)
        per_byte = 0.0
    if factor <= 0:
        factor = 1.0
        (per_byte,) = _least_absolute(moved[:, None], target - work)
        per_byte = max(per_byte, 0.0)
    return Calibration(float(factor), float(per_byte), tuple(r.path for r in used))


def _least_absolute(features: np.ndarray, target: np.ndarray) -> list[float]:
    """Coefficients minimising the sum of absolute errors, by iteratively reweighted least squares."""
    scale = np.abs(features).max(axis=0)
    scale[scale == 0] = 1.0
    scaled = features / scale
    weights = np.ones(len(target))
    for _ in range(_ITERATIONS):
        coefficients, *_ = np.linalg.lstsq(scaled * weights[:, None], target * weights, rcond=None)
        weights = 1.0 / np.sqrt(np.maximum(np.abs(scaled @ coefficients - target), 1e-6))
    return [float(c) for c in coefficients / scale]
