"""The entries a run's report is made of: a brick's result, a model's estimates, a model that failed, the run's
summary; each turned into JSON by its own method."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..estimating.analysis import BrickAnalysis, ModelAnalysis


@dataclass(frozen=True)
class BrickResult:
    """One distinct brick's timing, in seconds, as pytest-benchmark measured it."""

    stats: Mapping[str, float]
    provider: str
    #: When the brick was measured (ISO 8601, UTC), when known.
    measured_at: str | None = None
    #: Taken from the brick store instead of measured in this run.
    reused: bool = False
    #: The brick's time its precision was sized from when it was timed: the fastest probe call (see
    #: :func:`.items._budget_rounds`); None when unknown (a record of an older version).
    probe_s: float | None = None
    #: The reference call's time right before and after the brick was timed (see
    #: :meth:`.speed_trace.SpeedTrace.now`): its call cost is scaled to it. None when unknown.
    reference_s: float | None = None


@dataclass(frozen=True)
class FailedModel:
    """A model that could not be loaded or cut; reported with its cause."""

    path: str
    cause: str

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "complete": False,
            "error": self.cause,
            "sequential_s": None,
            "critical_path_s": None,
        }


@dataclass(frozen=True)
class BrickEntry:
    """A distinct brick of the run: its time, who uses it, its analysis, where it ran."""

    signature: str
    ops: list[str]
    time_s: float | None
    stats: dict[str, float] | None
    provider: str | None
    measured_at: str | None
    reused: bool
    #: How many times each model uses it, by model path.
    models: dict[str, int]
    analysis: BrickAnalysis
    #: Why the providers cannot run it, when they cannot.
    unsupported: str | None
    #: Nodes run by each provider, when its run was profiled.
    node_providers: dict[str, int] | None
    #: The reference call's time around the brick's timing, to which its call cost is scaled (see
    #: :attr:`BrickResult.reference_s`); None when unknown.
    reference_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "signature": self.signature,
            "ops": list(self.ops),
            "time_s": self.time_s,
            "reference_s": self.reference_s,
            "stats": dict(self.stats) if self.stats is not None else None,
            "provider": self.provider,
            "measured_at": self.measured_at,
            "reused": self.reused,
            "models": dict(self.models),
            **self.analysis.as_json(),
            "unsupported": self.unsupported,
        }
        if self.node_providers is not None:
            fields["node_providers"] = dict(self.node_providers)
        return fields


@dataclass(frozen=True)
class ModelEntry:
    """A model cut into bricks: its counts, its composed estimate, its validation and analysis, and what
    recomposition needs (its sweep point and composition)."""

    path: str
    layers: int
    bricks: int
    unique_bricks: int
    measured_bricks: int
    reused_bricks: int
    sequential_s: float | None
    critical_path_s: float | None
    complete: bool
    guessed_dims: dict[str, int]
    unbuildable_layers: list[dict[str, Any]]
    #: End-to-end measurements (see :func:`_validation_fields`); empty when the model was not validated.
    validation: dict[str, Any]
    analysis: ModelAnalysis
    point: dict[str, object]
    #: Windows without a time because the provider cannot run them.
    unsupported: list[dict[str, object]]
    composition: dict[str, Any]
    #: What the model ran on (its sample inputs' source, or ``synthetic``), and its operators whose work
    #: depends on their data: both together mark an estimate made on synthetic data that may mislead.
    inputs: str = "synthetic"
    data_dependent_ops: list[str] = field(default_factory=list)
    #: How many of its weights the model lists as graph inputs (see :attr:`.ModelPlan.weights_as_inputs`).
    weights_as_inputs: int = 0
    #: The estimate corrected by the machine's calibration (see :mod:`.calibration`), beside the raw
    #: ``sequential_s``; None until the machine has enough calibration models other than this one.
    calibrated_s: float | None = None
    #: The parallel executor's time as the run's ``executor`` entry models it (None: not detected).
    parallel_s: float | None = None
    #: Margin of error of the sequential estimate (relative, 95%): its bricks' margins in quadrature.
    precision: float | None = None
    #: The estimate over the one its bricks give timed again at the end of the run (see :func:`.time_again`);
    #: None where they were not all timed again (a validated model has validation's own, in :attr:`validation`).
    estimate_drift: float | None = None
    #: How far above the machine's fast state its bricks timed in this run were timed (see
    #: :func:`.speed_trace.timed_above`); None where the fast state or their readings are unknown.
    timed_above_fast: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "layers": self.layers,
            "bricks": self.bricks,
            "unique_bricks": self.unique_bricks,
            "measured_bricks": self.measured_bricks,
            "reused_bricks": self.reused_bricks,
            "sequential_s": self.sequential_s,
            "critical_path_s": self.critical_path_s,
            "parallel_s": self.parallel_s,
            "complete": self.complete,
            "calibrated_s": self.calibrated_s,
            "precision": self.precision,
            "guessed_dims": dict(self.guessed_dims),
            "inputs": self.inputs,
            "data_dependent_ops": list(self.data_dependent_ops),
            "weights_as_inputs": self.weights_as_inputs,
            "unbuildable_layers": list(self.unbuildable_layers),
            **({"estimate_drift": self.estimate_drift} if self.estimate_drift is not None else {}),
            **({"timed_above_fast": self.timed_above_fast} if self.timed_above_fast is not None else {}),
            **self.validation,
            **self.analysis.as_json(),
            "point": self.point,
            "unsupported": self.unsupported,
            "composition": self.composition,
        }


@dataclass(frozen=True)
class Summary:
    models: int
    failed_models: int
    layers: int
    bricks: int
    distinct_bricks: int
    distinct_ratio: float | None
    measured_bricks: int
    call_overhead_s: dict[str, Any] | None
    wall_time_s: float | None
    reused_bricks: int
    #: Time of the complete models in bricks whose FLOPs are unknown, and its share of their estimates.
    unknown_flops_time_s: float | None
    unknown_flops_share: float | None
    #: Records of the brick store found damaged, by what was done and kind: ``{"discarded": {"brick
    #: times": 2}, "repaired": {"identity": 1}}``; None without a store.
    store_damage: dict[str, dict[str, int]] | None = None
    #: The machine's noise in the run: the typical relative interquartile range of the bricks it timed.
    noise: float | None = None
    #: Whether that noise exceeds :data:`.noise.HIGH_NOISE`: the run is no baseline for comparisons.
    high_noise: bool = False
    #: How fast the machine ran through the run (see :meth:`.speed_trace.SpeedTrace.summary`); None when
    #: the run took too few samples.
    speed: dict[str, Any] | None = None
    #: How fast memory was read before the calls of the bricks timed with their weights out of the caches, and
    #: the largest part those bricks make of a model's estimate (see :meth:`.caches.CacheFlusher.summary`); None
    #: when the run timed no such brick, or too few of their calls to tell.
    memory: dict[str, Any] | None = None
    #: Whether the run's timing thread got its core through the timed rounds (see :func:`.load.load_summary`);
    #: None when too little was timed to tell.
    load: dict[str, Any] | None = None
    #: What the runs that timed the reused bricks found of the machine: ``{"bricks": reused bricks, "known": of
    #: them timed by a run the store remembers, "speed": the largest speed part of those runs' verdicts, "load":
    #: the largest load part, "memory": the largest memory part}`` (see :class:`.store_records.StoredRun`); None
    #: when no brick was reused.
    reused_from: dict[str, Any] | None = None
    #: The bricks timed again at the end of a run that does not validate (see :func:`.time_again`): ``{"bricks":
    #: timed again, "timed": timed by the run, "models": models all of whose bricks were, "seconds": how long it
    #: took}``; None where none was.
    timed_again: dict[str, Any] | None = None
