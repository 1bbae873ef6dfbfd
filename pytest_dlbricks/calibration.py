"""Per-machine calibration: what a model's context does to the time of its bricks, learned from models
measured whole on the machine that times the bricks, and applied to any model.

A brick is timed alone, again and again: its weights and inputs wait in the caches. Inside the model
they do not, and the executor spends time between kernels that grows with the tensors it hands on,
and with the layers it hands them to. So a model's measured time is modelled as ``work_factor * work + per_byte_s *
bytes + per_layer_s * layers + call``: ``work`` the bricks' composed work (their times less their call
cost), ``bytes`` what the model's layers read and write (weights and activations), ``layers`` how many
it has, ``call`` the model's own call cost. The coefficients are fitted on calibration models (models
the user chose and validated, never the model being estimated), minimising the absolute relative
error, so that each model counts alike whatever its size and one model far off does not pull the
others.

**The cost per layer only where the calibration models can show it.** It is about a microsecond: in
CNNs of milliseconds it is lost in the noise, and fitted there it takes any value, which ruins the
estimates of models of microseconds (calibrated on the onnx wheel's CNNs, the zoo's other models
scored 0.04 to 0.86 against 0.72 to 0.83 without it). So it is fitted only when at least
:data:`MIN_MODELS` calibration models would spend :data:`NOTICEABLE` of their time on it at its
largest, and kept between nothing and that largest, taken as what running a trivial layer costs on the
machine (see :attr:`.overhead.CallOverhead.per_layer_s`): what a layer adds in the model beyond its
brick's work is the executor's doing, as running the layer at all is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

#: Fewest calibration models a fit is made from, and that must show a cost per layer for it to be fitted.
MIN_MODELS = 3
#: The share of a model's time a term must reach to be told from the machine's noise.
NOTICEABLE = 0.05
#: Iterations of the reweighted least squares that minimise the absolute relative error.
_ITERATIONS = 50


@dataclass(frozen=True)
class CalibrationRecord:
    """One calibration model as the machine timed it, cut at ``granularity``: its bricks' work, the bytes
    its layers move, its call cost, its measured latency (seconds) and its layers."""

    path: str
    #: Which model it is, whatever its path (see :func:`model_key`).
    key: str
    granularity: int
    work_s: float
    bytes: int
    call_s: float
    measured_s: float
    #: None in records kept before layers were: with one of them among its models, no cost per layer is fitted.
    layers: int | None


@dataclass(frozen=True)
class Calibration:
    """The fitted correction, and the models it was fitted on."""

    work_factor: float
    per_byte_s: float
    models: tuple[str, ...]
    #: Nothing where the models could not show it (``per_layer_fitted``) or showed none.
    per_layer_s: float = 0.0
    per_layer_fitted: bool = False
    #: The most a layer can cost: the machine's cost of running one; None where it was not measured.
    per_layer_bound_s: float | None = None

    def apply(self, work_s: float, moved: int, layers: int, call_s: float) -> float:
        """A model's calibrated latency from its bricks' work, the bytes its layers move, how many layers it
        has and its call cost."""
        return self.work_factor * work_s + self.per_byte_s * moved + self.per_layer_s * layers + call_s

    def as_json(self) -> dict[str, object]:
        return {
            "work_factor": self.work_factor,
            "per_byte_s": self.per_byte_s,
            "per_layer_s": self.per_layer_s,
            "per_layer_fitted": self.per_layer_fitted,
            "per_layer_bound_s": self.per_layer_bound_s,
            "models": list(self.models),
        }


def model_key(signatures: Iterable[str]) -> str:
    """A model's identity for calibration: the bricks it is cut into, so that a model copied or run from
    another folder is still recognised, and left out of its own calibration."""
    return hashlib.sha256("\n".join(sorted(signatures)).encode()).hexdigest()[:16]


def record_of(
    path: str,
    key: str,
    granularity: int,
    sequential_s: float,
    moved: int,
    call_s: float,
    measured_s: float,
    layers: int,
) -> CalibrationRecord:
    """A calibration model's record from what its report holds: its composed estimate (which counts its
    call once, with the bricks' work), bytes moved, call cost, measured latency and layers."""
    return CalibrationRecord(path, key, granularity, max(sequential_s - call_s, 0.0), moved, call_s, measured_s, layers)


def fit(
    records: Sequence[CalibrationRecord],
    granularity: int,
    *,
    layer_bound_s: float | None = None,
    leave_out: str | None = None,
    leave_out_path: str | None = None,
) -> Calibration | None:
    """The correction fitted on the ``records`` cut at ``granularity``, all but the model whose key is
    ``leave_out`` or whose path is ``leave_out_path`` (a model never calibrates its own estimate, also
    through a record it left when it was cut otherwise); None with fewer than :data:`MIN_MODELS` usable
    models. ``layer_bound_s``: what running a trivial layer costs on the machine, the most a layer can
    cost in the model beyond its work; without it no cost per layer is fitted.

    A coefficient the data would make negative (a context that speeds work up beyond what the bricks
    show, bytes or layers that cost less than nothing) is left at its neutral value: 1 for the work
    factor, 0 for the others.
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
    layers = _layers_if_noticeable(used, layer_bound_s)
    per_layer = 0.0
    if layers is not None and layer_bound_s is not None:
        (*_, fitted) = _least_absolute(np.column_stack([work, moved, layers / measured]), target)
        per_layer = min(max(fitted, 0.0), layer_bound_s)
        target = target - per_layer * layers / measured
    factor, per_byte = _least_absolute(np.column_stack([work, moved]), target)
    if per_byte < 0:
        (factor,) = _least_absolute(work[:, None], target)
        per_byte = 0.0
    if factor <= 0:
        factor = 1.0
        (per_byte,) = _least_absolute(moved[:, None], target - work)
        per_byte = max(per_byte, 0.0)
    return Calibration(
        float(factor), float(per_byte), tuple(r.path for r in used), float(per_layer), layers is not None, layer_bound_s
    )


def _layers_if_noticeable(used: Sequence[CalibrationRecord], bound_s: float | None) -> np.ndarray | None:
    """The models' layer counts where enough of them would spend a noticeable share of their time on their
    layers at the most a layer can cost (see the module's description); else None."""
    counts = [r.layers for r in used]
    if not bound_s or bound_s <= 0 or any(count is None for count in counts):
        return None
    layers = np.array(counts, dtype=float)
    noticeable = layers * bound_s >= NOTICEABLE * np.array([r.measured_s for r in used])
    return layers if np.count_nonzero(noticeable) >= MIN_MODELS else None


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
