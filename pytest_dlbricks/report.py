"""The report of a run: typed entries built once from plans, brick times and measurements, turned into
JSON (the format other tools read) only at the edge, by :meth:`RunReport.as_json`.

Times are in seconds, in the statistic the settings name. Renderers (terminal, html) and
recomposition read the JSON form, which is also what they read back from files.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .analysis import (
    BrickAnalysis,
    BrickUse,
    BrickWork,
    ModelAnalysis,
    brick_analysis,
    model_analysis,
    peak_fields,
)
from .bricks import BrickSpec
from .budget import estimate_precision
from .calibration import CalibrationRecord, fit, model_key, record_of
from .composition import Estimate, ParallelExecutor, brick_calls, compose, model_costs
from .cutting import ModelPlan
from .identity import CUT_METHOD
from .noise import HIGH_NOISE, margin_of_error, run_noise
from .overhead import NO_OVERHEAD, CallOverhead
from .probes import ExecutorDetection, RunMeasurements
from .settings import Settings
from .terminal import executor_line
from .validation import Validation, accuracy
from .verdict import judge_report

REPORT_VERSION = 1


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
    #: Whether the run's timing thread got its core through the timed rounds (see :func:`.load.load_summary`);
    #: None when too little was timed to tell.
    load: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunReport:
    """The report of one run, as :func:`build_report` makes it."""

    granularity: int
    partial: bool
    settings: dict[str, object]
    summary: Summary
    accuracy: dict[str, Any] | None
    models: list[ModelEntry | FailedModel]
    bricks: list[BrickEntry]
    machine: dict[str, object] = field(default_factory=dict)
    peak: dict[str, Any] | None = None
    #: The comparison with a saved run, when one was made (see :mod:`.comparing`).
    comparison: dict[str, Any] | None = None
    #: What two runs must share to be compared (see :meth:`.identity.Identity.conditions`), when known.
    conditions: dict[str, Any] | None = None
    #: The machine's calibration on every calibration model (see :mod:`.calibration`), when there is one.
    calibration: dict[str, Any] | None = None
    #: The calibration models this run measured, for the store to keep (not part of the JSON).
    calibration_records: tuple[CalibrationRecord, ...] = ()
    #: Which model of onnxruntime's parallel executor the parallel estimates used, and why (see
    #: :func:`executor_fields`).
    executor: dict[str, Any] | None = None
    #: What the simulation counted, in simulated cost mode (see :meth:`.simulated_costs.Simulation.report`).
    simulation: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """The report in its JSON format, keys as other tools read them."""
        report: dict[str, Any] = {
            "version": REPORT_VERSION,
            "granularity": self.granularity,
            "partial": self.partial,
            "settings": dict(self.settings),
            "summary": dataclasses.asdict(self.summary),
            "accuracy": self.accuracy,
            "models": [model.as_json() for model in self.models],
            "bricks": [brick.as_json() for brick in self.bricks],
            "machine": dict(self.machine),
            "peak": self.peak,
        }
        # Simulated counts have no noise, speed or load for a verdict to weigh.
        verdict = judge_report(report) if self.simulation is None else None
        if verdict is not None:  # how far the estimates can be trusted, from what, and what to do
            report["verdict"] = verdict.as_json()
        if self.calibration is not None:
            report["calibration"] = self.calibration
        if self.executor is not None:
            report["executor"] = explained(self.executor)
        if self.conditions is not None:
            report["conditions"] = self.conditions
        if self.comparison is not None:
            report["comparison"] = self.comparison
        if self.simulation is not None:
            report["simulation"] = self.simulation
        return report


def build_report(
    settings: Settings,
    plans: Sequence[ModelPlan],
    failed: Sequence[FailedModel],
    bricks: Mapping[str, BrickSpec],
    results: Mapping[str, BrickResult],
    *,
    overhead: CallOverhead | None = None,
    executor: ExecutorDetection | None = None,
    executor_error: str | None = None,
    executor_origin: tuple[str | None, bool] = (None, False),
    validations: Mapping[tuple[str, str], Validation] | None = None,
    wall_time_s: float | None = None,
    partial: bool = False,
    work: Mapping[str, BrickWork] | None = None,
    measured: RunMeasurements | None = None,
    unsupported: Mapping[str, str] | None = None,
    placements: Mapping[str, Mapping[str, int]] | None = None,
    store_damage: dict[str, dict[str, int]] | None = None,
    calibration: Sequence[CalibrationRecord] = (),
    speed: dict[str, Any] | None = None,
    load: dict[str, Any] | None = None,
) -> RunReport:
    """The report of a run.

    ``overhead`` is the cost of one inference call, which composition counts once per model;
    ``executor`` is what the parallel executor was detected to do (``executor_error``: why it was not);
    ``validations`` are the end-to-end measurements by model path and executor; ``partial`` marks a
    run that stopped before every item ran (Ctrl-C, SIGTERM, ``-x``); ``work`` and ``measured``
    (the bricks' layers and the machine's peak and load times) feed the analysis; ``unsupported``
    and ``placements`` say, by brick signature, why a provider cannot run a brick and where its
    nodes ran; ``store_damage`` counts the damaged records of the brick store; ``calibration`` holds
    the calibration models kept for this machine, to which a run that calibrates adds its validated ones;
    ``speed`` is the run's speed trace (see :mod:`.speed_trace`) and ``load`` whether its timing thread got
    its core (see :mod:`.load`).
    """
    times = {signature: result.stats[settings.statistic] for signature, result in results.items()}
    references = {signature: result.reference_s for signature, result in results.items() if result.reference_s}
    validations = validations or {}
    work = work or {}
    measured = measured if measured is not None else RunMeasurements()
    unsupported = unsupported or {}
    placements = placements or {}
    call = overhead or NO_OVERHEAD
    executor_entry = executor_fields(executor, executor_error, overhead, *executor_origin, setting=settings.executor)
    parallel = ParallelExecutor.from_report(executor_entry)
    reused = {signature for signature, result in results.items() if result.reused}
    users: dict[str, Counter[str]] = {signature: Counter() for signature in bricks}
    for plan in plans:
        for signature, count in plan.signatures.items():
            users[signature][plan.path] += count
    brick_entries = [
        BrickEntry(
            signature=signature,
            ops=list(brick.ops),
            time_s=times.get(signature),
            stats=dict(results[signature].stats) if signature in results else None,
            provider=results[signature].provider if signature in results else None,
            measured_at=results[signature].measured_at if signature in results else None,
            reused=signature in results and results[signature].reused,
            models=dict(users[signature]),
            analysis=brick_analysis(
                times.get(signature), work.get(signature), measured.peak, call, references.get(signature)
            ),
            unsupported=unsupported.get(signature),
            node_providers=dict(placements[signature]) if signature in placements else None,
            reference_s=references.get(signature),
        )
        for signature, brick in bricks.items()
    ]
    entries: list[ModelEntry] = []
    for plan in plans:
        estimate = compose(plan, times, call, parallel, references)
        uses = [
            BrickUse(entry.signature, entry.time_s, entry.analysis, entry.models[plan.path])
            for entry in brick_entries
            if plan.path in entry.models
        ]
        composition = plan_composition(plan)
        entries.append(
            ModelEntry(
                path=plan.path,
                layers=plan.layers,
                bricks=len(plan.bricks),
                unique_bricks=len(plan.signatures) + len(plan.broken),
                measured_bricks=estimate.measured_bricks,
                reused_bricks=sum(count for signature, count in plan.signatures.items() if signature in reused),
                sequential_s=estimate.sequential_s,
                critical_path_s=estimate.critical_path_s,
                complete=estimate.complete,
                guessed_dims=dict(plan.guessed_dims),
                unbuildable_layers=[{"layer": b.layer_index, "op": b.op_type, "cause": b.reason} for b in plan.broken],
                validation=_validation_fields(plan, estimate, validations, call, parallel, settings.statistic),
                analysis=model_analysis(plan.path, estimate.sequential_s, estimate.complete, uses, measured),
                point=plan.point,
                unsupported=unsupported_windows(composition, unsupported),
                composition=composition,
                inputs=plan.inputs,
                data_dependent_ops=list(plan.data_dependent),
                weights_as_inputs=plan.weights_as_inputs,
                parallel_s=estimate.parallel_s,
                precision=_estimate_precision(plan, results, estimate.sequential_s),
            )
        )
    fresh: tuple[CalibrationRecord, ...] = ()
    if settings.calibrate:
        fresh = tuple(_calibration_records(plans, entries, settings.granularity, call, references))
    # A model measured again replaces its record: the same bricks, or the same path cut otherwise.
    keys = {(record.key, record.granularity) for record in fresh}
    paths = {(record.path, record.granularity) for record in fresh}
    records = [r for r in calibration if (r.key, r.granularity) not in keys and (r.path, r.granularity) not in paths]
    records.extend(fresh)
    overall = fit(records, settings.granularity, layer_bound_s=call.trivial_layer_s)
    models: list[ModelEntry | FailedModel] = [
        _calibrated(plan, entry, records, settings.granularity, call, references) for plan, entry in zip(plans, entries)
    ]
    models.extend(failed)
    total_bricks = sum(len(plan.bricks) for plan in plans)
    analysed = [m for m in models if isinstance(m, ModelEntry) and m.analysis.times.op_time_s is not None]
    estimated = sum(model.sequential_s or 0.0 for model in analysed)
    unknown = sum(model.analysis.times.unknown_flops_time_s or 0.0 for model in analysed)
    json_models = [model.as_json() for model in models if isinstance(model, ModelEntry)]
    noise = run_noise(result.stats for result in results.values() if not result.reused)
    return RunReport(
        granularity=settings.granularity,
        partial=partial,
        settings={**settings.describe(), "cut_method": CUT_METHOD},
        summary=Summary(
            models=len(plans) + len(failed),
            failed_models=len(failed),
            layers=sum(plan.layers for plan in plans),
            bricks=total_bricks,
            distinct_bricks=len(bricks),
            distinct_ratio=len(bricks) / total_bricks if total_bricks else None,
            measured_bricks=len(times),
            call_overhead_s=dataclasses.asdict(overhead) if overhead else None,
            wall_time_s=wall_time_s,
            reused_bricks=len(reused),
            unknown_flops_time_s=unknown if analysed else None,
            unknown_flops_share=unknown / estimated if estimated > 0 else None,
            store_damage=store_damage,
            noise=noise,
            high_noise=noise is not None and noise > HIGH_NOISE,
            speed=speed,
            load=load,
        ),
        accuracy=_accuracy(json_models, times, users),
        models=models,
        bricks=brick_entries,
        machine=dict(measured.machine),
        peak=peak_fields(measured.peak),
        calibration=overall.as_json() if overall is not None else None,
        calibration_records=fresh,
        executor=executor_entry,
    )


def _calibration_records(
    plans: Sequence[ModelPlan],
    models: Sequence[ModelEntry],
    granularity: int,
    overhead: CallOverhead,
    references: Mapping[str, float],
) -> list[CalibrationRecord]:
    """The validated models of a run that calibrates: each one's composed and measured times."""
    return [
        record_of(
            plan.path,
            model_key(plan.signatures),
            granularity,
            model.sequential_s,
            model.analysis.bytes,
            model_costs(brick_calls(plan), overhead, references).of(*plan.io),
            measured,
            plan.layers,
        )
        for plan, model in zip(plans, models)
        if model.complete and model.sequential_s and isinstance(measured := model.validation.get("measured_s"), float)
    ]


def _calibrated(
    plan: ModelPlan,
    model: ModelEntry,
    records: Sequence[CalibrationRecord],
    granularity: int,
    overhead: CallOverhead,
    references: Mapping[str, float],
) -> ModelEntry:
    """``model`` with its calibrated estimate, from every calibration model but itself, and its ratio to the
    measured time when validated."""
    calibration = fit(
        records,
        granularity,
        layer_bound_s=overhead.trivial_layer_s,
        leave_out=model_key(plan.signatures),
        leave_out_path=plan.path,
    )
    if calibration is None or model.sequential_s is None:
        return model
    call_s = model_costs(brick_calls(plan), overhead, references).of(*plan.io)
    calibrated = calibration.apply(max(model.sequential_s - call_s, 0.0), model.analysis.bytes, plan.layers, call_s)
    validation = dict(model.validation)
    if "measured_s" in validation:
        validation["calibrated_ratio"] = _ratio(calibrated, validation["measured_s"])
    return dataclasses.replace(model, calibrated_s=calibrated, validation=validation)


#: How the parallel estimate is composed, by whether the parallel executor runs independent nodes at once.
ONE_AT_A_TIME = "one node at a time"
SCHEDULE = "list schedule"


#: Why a report has no parallel estimate when none was asked for.
NOT_ASKED = "no parallel estimate was asked for (--dlbricks-executor=sequential)"
#: Why it has none when left to what the parallel executor does, and it runs one node at a time.
ONE_AT_A_TIME_HERE = (
    "onnxruntime's parallel executor runs one node at a time here, so its estimate would be the sequential"
    " one at another call cost: none is made (--dlbricks-executor=parallel makes it all the same)"
)


def executor_fields(
    executor: ExecutorDetection | None,
    error: str | None,
    overhead: CallOverhead | None,
    measured_at: str | None = None,
    reused: bool = False,
    *,
    setting: str = "parallel",
) -> dict[str, Any] | None:
    """Which model of onnxruntime's parallel executor the parallel estimates used, and why: what was
    detected, when, whether in this run or in an earlier one (``reused`` from the brick store), with
    its figures, and the call costs composed with. Where the models have no parallel estimate, the
    entry says why: none was asked for (``setting``, see :data:`.settings.EXECUTORS`), the executor runs
    one node at a time here (with what was detected), or it could not be tried (``error``)."""
    if setting == "sequential":
        return {"model": None, "reason": NOT_ASKED}
    if executor is None:
        return None if error is None else {"model": None, "error": error}
    origin = {"detection": executor.as_json(), "measured_at": measured_at, "reused": reused}
    if setting == "auto" and not executor.concurrent:
        return {"model": None, "reason": ONE_AT_A_TIME_HERE, **origin}
    if error is not None:
        return {"model": None, "error": error, **origin}
    pool = executor.pool
    return {
        "model": SCHEDULE if executor.concurrent else ONE_AT_A_TIME,
        "threads": executor.threads,
        # Bricks whose layers take at least pool_layer_s each split their work over the intra-op
        # pool, and count pool_factor times their time (see probes.PoolSlowdown).
        "pool_factor": pool.factor if pool is not None else 1.0,
        "pool_layer_s": pool.layer_s if pool is not None else None,
        **origin,
        "call_s": overhead.fixed_s if overhead is not None else None,
        "parallel_call_s": overhead.parallel_fixed_s if overhead is not None else None,
        "critical_path": "the lower bound for an executor with unlimited parallelism",
    }


def explained(executor: Mapping[str, Any]) -> dict[str, Any]:
    """An ``executor`` entry with its ``explanation``: the line ``-v`` prints, how the parallel executor was
    detected and what the parallel estimate is (or why there is none), from the entry's figures."""
    entry = {key: value for key, value in executor.items() if key != "explanation"}
    return {**entry, "explanation": executor_line(entry, verbose=True)}


def plan_composition(plan: ModelPlan) -> dict[str, Any]:
    """What composition needs of ``plan``, JSON-ready.

    A window is ``[signature, inputs, outputs]``; one the provider cannot run in the point's numeric
    type adds the reason as a fourth element; a layer that cannot be built is null.
    """
    windows: list[list[object] | None] = []
    for index, (brick, call) in enumerate(zip(plan.bricks, brick_calls(plan))):
        if isinstance(brick, BrickSpec) and index in plan.unsupported:
            windows.append([brick.signature, len(brick.inputs), brick.output_count, plan.unsupported[index]])
        else:
            windows.append(None if call is None else list(call))
    return {"io": list(plan.io), "bricks": windows, "edges": [list(edge) for edge in plan.graph.edges]}


def unsupported_windows(composition: Mapping[str, Any], unsupported: Mapping[str, str]) -> list[dict[str, object]]:
    """The windows without a time because the provider cannot run them: known when the model was cut
    (the fourth element of a window) or when the brick was run (``unsupported``, reasons by signature)."""
    found = []
    for index, window in enumerate(composition["bricks"]):
        if window is None:
            continue
        cause = window[3] if len(window) == 4 else unsupported.get(str(window[0]))
        if cause is not None:
            found.append({"window": index, "signature": window[0], "cause": cause})
    return found


def _validation_fields(
    plan: ModelPlan,
    estimate: Estimate,
    validations: Mapping[tuple[str, str], Validation],
    overhead: CallOverhead,
    parallel_executor: ParallelExecutor | None = None,
    statistic: str = "median",
) -> dict[str, object]:
    """A model's end-to-end measurements (in the run's ``statistic``, over its rounds) against the
    estimates the user gets: ``measured_s`` and ``ratio``
    (``sequential_s / measured_s``) for the sequential executor, ``measured_parallel_s``,
    ``parallel_ratio`` (``parallel_s / measured_parallel_s``) and ``critical_path_ratio``
    (``critical_path_s / measured_parallel_s``) for the parallel one; beside them the ratios of paired
    rounds (``paired_ratio``, ``paired_parallel_ratio``, ``paired_critical_path_ratio``: each round's
    bricks timed again just before that round's model) and the details."""
    details = {
        executor: validation.summarize(plan, overhead, statistic=statistic)
        for (path, executor), validation in validations.items()
        if path == plan.path
    }
    if not details:
        return {}
    fields: dict[str, object] = {"validation": details}
    if "sequential" in details:
        sequential = details["sequential"]
        fields["measured_s"] = sequential["measured_s"]
        fields["ratio"] = _ratio(estimate.sequential_s, sequential["measured_s"])
        fields["paired_ratio"] = sequential["ratio"]
        # How far the reported estimate, timed earlier, drifted from the one timed beside the model.
        fields["estimate_drift"] = _ratio(estimate.sequential_s, sequential["estimate_s"])
    if "parallel" in details:
        parallel = details["parallel"]
        fields["measured_parallel_s"] = parallel["measured_s"]
        fields["critical_path_ratio"] = _ratio(estimate.critical_path_s, parallel["measured_s"])
        fields["paired_critical_path_ratio"] = parallel["ratio"]
        if estimate.parallel_s is not None:
            paired = validations[(plan.path, "parallel")].summarize(
                plan, overhead, parallel_executor, "parallel_s", statistic
            )
            fields["parallel_ratio"] = _ratio(estimate.parallel_s, parallel["measured_s"])
            fields["paired_parallel_ratio"] = paired["ratio"]
    return fields


def _ratio(estimate: float | None, measured: float | None) -> float | None:
    return estimate / measured if estimate and measured else None


def _accuracy(
    models: Sequence[Mapping[str, object]], times: Mapping[str, float], users: Mapping[str, Counter[str]]
) -> dict[str, object] | None:
    """How close the estimates came, over all validated models, and what the method saved.

    ``sequential`` and ``critical_path`` score the estimates the user gets (the models' ``ratio`` and
    ``critical_path_ratio``); the ``_paired`` blocks score the paired rounds' estimates.
    """
    validated = [model for model in models if "validation" in model]
    if not validated:
        return None
    details: list[Mapping[str, Mapping[str, float | None]]] = [model["validation"] for model in validated]  # type: ignore[misc]
    spreads = [s for detail in details for summary in detail.values() if (s := summary["spread"]) is not None]
    paths = {model["path"] for model in validated}
    distinct = [time_s for signature, time_s in times.items() if paths & set(users[signature])]
    measured = [float(model["measured_s"]) for model in validated if "measured_s" in model]  # type: ignore[arg-type]
    return {
        "sequential": accuracy(_ratios(validated, "ratio")),
        "critical_path": accuracy(_ratios(validated, "critical_path_ratio")),
        "parallel": accuracy(_ratios(validated, "parallel_ratio")),
        "sequential_paired": accuracy(_ratios(validated, "paired_ratio")),
        "critical_path_paired": accuracy(_ratios(validated, "paired_critical_path_ratio")),
        # The calibrated estimates (each from the calibration models other than itself), beside the raw ones.
        "calibrated": accuracy(_ratios(validated, "calibrated_ratio")),
        "parallel_paired": accuracy(_ratios(validated, "paired_parallel_ratio")),
        # The item estimates against the paired rounds' (``estimate_drift``): the same bricks timed minutes
        # apart, so what differs is the machine's speed, not the method; it tells how much of the gap
        # between ``sequential`` and ``sequential_paired`` is the machine's.
        "drift": accuracy(_ratios(validated, "estimate_drift")),
        # Typical relative spread (interquartile range) of a model's per-round ratios: the machine's noise.
        "noise": statistics.median(spreads) if spreads else None,
        # The same, of the parallel executor's rounds alone: where its threads compete with the intra-op
        # pool, the time it takes varies far more than the machine's noise.
        "parallel_noise": statistics.median(parallel) if (parallel := _spreads(details, "parallel")) else None,
        # The paper's measure of the time saved: end-to-end latencies over distinct brick latencies.
        "speedup": sum(measured) / sum(distinct) if distinct and measured else None,
    }


def _spreads(details: Sequence[Mapping[str, Mapping[str, float | None]]], executor: str) -> list[float]:
    """The spreads of the per-round ratios of ``executor``'s validations."""
    return [s for detail in details if executor in detail and (s := detail[executor]["spread"]) is not None]


def _ratios(models: Sequence[Mapping[str, object]], key: str) -> list[float]:
    """The models' ratios under ``key``, leaving out models without one."""
    return [ratio for model in models if isinstance(ratio := model.get(key), float)]


def _estimate_precision(plan: ModelPlan, results: Mapping[str, BrickResult], estimate_s: float | None) -> float | None:
    """The margin of error of a model's sequential estimate, from the precision its bricks reached."""
    terms = []
    for signature, count in plan.signatures.items():
        stats = results[signature].stats if signature in results else None
        if stats is None or "mean" not in stats:
            return None
        terms.append((count, float(stats["mean"]), margin_of_error(stats)))
    return estimate_precision(terms, estimate_s)
