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
scored 0.04 to 0.86 against 0.72 to 0.83 without it). So it is fitted only from five models or more
(each left out, four still outnumber the coefficients), when at least :data:`SHOWING_LAYERS` of them
could spend :data:`NOTICEABLE` of their time on it at its largest, and kept between nothing and that
largest, taken as what running a trivial layer costs on the machine (see
:attr:`.overhead.CallOverhead.trivial_layer_s`): what a layer adds in the model beyond its brick's
work is the executor's doing, as running the layer at all is.

**Only a calibration that beats the raw estimates on its own models.** Fitted on a few models, the
coefficients follow their noise: calibrated on 4 random models of the zoo, the others' estimates lost
0.044 of accuracy on average, and on the onnx wheel's 9 CNNs 0.009 (worse in 8 of 12 runs). So each
calibration model is left out in turn and estimated from a fit on the others; where those estimates
are no closer to the measured times than the raw ones, the calibration leaves every estimate raw, and
says why (see :attr:`Calibration.declined`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

#: Fewest calibration models a calibration is made from: each left out, the others still fit (see :func:`fit`).
MIN_MODELS = 4
#: Fewest models that must show a cost per layer for it to be fitted.
SHOWING_LAYERS = 3
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
    #: The brick statistic its estimate added (``--dlbricks-statistic``): a fit on the fastest times corrects no
    #: estimate of median times. Records kept before it was kept read as the default's.
    statistic: str = "median"


@dataclass(frozen=True)
class Calibration:
    """The fitted correction, and the models it was fitted on."""

    work_factor: float
    per_byte_s: float
    models: tuple[str, ...]
    #: Nothing where the models could not show it, or showed none.
    per_layer_s: float = 0.0
    #: Why no cost per layer was fitted (see :func:`fit`); None where one was.
    per_layer_missing: str | None = None
    #: The most a layer can cost: what running a trivial one costs on the machine; None where not measured.
    per_layer_bound_s: float | None = None
    #: Why estimates are left raw, where the fit did not beat them on its own models; None where it did.
    declined: str | None = None

    def apply(self, work_s: float, moved: int, layers: int, call_s: float) -> float:
        """A model's calibrated latency from its bricks' work, the bytes its layers move, how many layers it
        has and its call cost."""
        return self.work_factor * work_s + self.per_byte_s * moved + self.per_layer_s * layers + call_s

    def as_json(self) -> dict[str, object]:
        return {
            "work_factor": self.work_factor,
            "per_byte_s": self.per_byte_s,
            "per_layer_s": self.per_layer_s,
            "per_layer_missing": self.per_layer_missing,
            "per_layer_bound_s": self.per_layer_bound_s,
            "declined": self.declined,
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
    statistic: str,
) -> CalibrationRecord:
    """A calibration model's record from what its report holds: its composed estimate (which counts its
    call once, with the bricks' work, in ``statistic``), bytes moved, call cost, measured latency and layers."""
    return CalibrationRecord(
        path, key, granularity, max(sequential_s - call_s, 0.0), moved, call_s, measured_s, layers, statistic
    )


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
    show, bytes or layers that cost less than nothing) is held at its neutral value, 1 for the work
    factor and 0 for the others, and a cost per layer above its bound at the bound. Where the fit does
    not beat the raw estimates of the models it is made from, each left out in turn, it leaves every
    estimate raw (see :attr:`Calibration.declined`).
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
    return _unless_raw_is_closer(tuple(used), layer_bound_s)


@functools.lru_cache(maxsize=256)
def _unless_raw_is_closer(used: tuple[CalibrationRecord, ...], layer_bound_s: float | None) -> Calibration:
    """The fit on ``used``, or estimates left raw where it does not beat them on these models. Kept for the
    next call: every model that is not a calibration model of a run is calibrated on the same models, and
    the check fits them as many times as there are."""
    missing = _why_no_cost_per_layer(used, layer_bound_s)
    per_layer_bound_s = layer_bound_s if missing is None else None
    fitted = replace(_fitted(used, per_layer_bound_s), per_layer_missing=missing, per_layer_bound_s=layer_bound_s)
    calibrated, raw = _left_out_accuracy(used, per_layer_bound_s)
    if calibrated > raw:
        return fitted
    declined = f"each estimated from the others, they scored {calibrated:.1%}, no better than {raw:.1%} raw"
    return replace(fitted, work_factor=1.0, per_byte_s=0.0, per_layer_s=0.0, declined=declined)


def _fitted(used: Sequence[CalibrationRecord], per_layer_bound_s: float | None) -> Calibration:
    """The coefficients that fit the ``used`` models' times best, each within its bounds; a cost per layer
    only with ``per_layer_bound_s``, where all of ``used`` can show it (the left-out fits of a check take
    the decision made for all)."""
    measured = np.array([r.measured_s for r in used])
    columns = {
        "bytes": np.array([r.bytes for r in used], dtype=float) / measured,
        "work": np.array([r.work_s for r in used]) / measured,
    }
    allowed: dict[str, Callable[[float], float]] = {
        "bytes": lambda per_byte: max(per_byte, 0.0),
        "work": lambda factor: factor if factor > 0 else 1.0,
    }
    if per_layer_bound_s is not None:
        columns["layers"] = np.array([r.layers for r in used], dtype=float) / measured
        allowed["layers"] = lambda per_layer: min(max(per_layer, 0.0), per_layer_bound_s)
    target = 1.0 - np.array([r.call_s for r in used]) / measured
    fitted = _fit_within(columns, allowed, target)
    return Calibration(fitted["work"], fitted["bytes"], tuple(r.path for r in used), fitted.get("layers", 0.0))


def _left_out_accuracy(used: Sequence[CalibrationRecord], per_layer_bound_s: float | None) -> tuple[float, float]:
    """The accuracy (exp of minus the mean absolute log ratio) of the ``used`` models' estimates, each
    calibrated on the others with the same terms, and of their raw estimates."""
    calibrated, raw = [], []
    for record in used:
        others = _fitted([r for r in used if r is not record], per_layer_bound_s)
        estimate = others.apply(record.work_s, record.bytes, record.layers or 0, record.call_s)
        calibrated.append(abs(np.log(estimate / record.measured_s)))
        raw.append(abs(np.log((record.work_s + record.call_s) / record.measured_s)))
    return float(np.exp(-np.mean(calibrated))), float(np.exp(-np.mean(raw)))


def _why_no_cost_per_layer(used: Sequence[CalibrationRecord], bound_s: float | None) -> str | None:
    """Why the models cannot show a cost per layer (see the module's description); None where they can."""
    if not bound_s or bound_s <= 0:
        return "what running a layer costs on this machine is not known"
    unrecorded = [r.path for r in used if r.layers is None]
    if unrecorded:
        return f"{unrecorded[0]} was calibrated by an older version, without its layer count: calibrate it again"
    if len(used) <= MIN_MODELS:  # each left out, three would fit the three coefficients exactly
        return f"{len(used)} models: each left out, the others would fit three coefficients exactly, noise and all"
    noticeable = sum(1 for r in used if (r.layers or 0) * bound_s >= NOTICEABLE * r.measured_s)
    if noticeable < SHOWING_LAYERS:
        return (
            f"fewer than {SHOWING_LAYERS} of its models could spend {NOTICEABLE:.0%} of their time on their layers"
            f" at {bound_s * 1e6:.2f} us each"
        )
    return None


def _fit_within(
    columns: Mapping[str, np.ndarray], allowed: Mapping[str, Callable[[float], float]], target: np.ndarray
) -> dict[str, float]:
    """Least-absolute coefficients of ``columns``, each where ``allowed`` keeps it: the first the data would
    put elsewhere is held where it is allowed, and the others are fitted again without it (so that a
    coefficient held at its limit does not leave its share to be taken up by another)."""
    held: dict[str, float] = {}
    while True:
        free = [name for name in columns if name not in held]
        rest = target - sum((value * columns[name] for name, value in held.items()), np.zeros_like(target))
        fitted = dict(zip(free, _least_absolute(np.column_stack([columns[name] for name in free]), rest)))
        wrong = next((name for name in free if allowed[name](fitted[name]) != fitted[name]), None)
        if wrong is None:
            return {**held, **fitted}
        held[wrong] = allowed[wrong](fitted[wrong])
        if len(held) == len(columns):
            return held


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
