"""The report of a run: typed entries built once from plans, brick times and measurements, turned into
JSON (the format other tools read) only at the edge, by :meth:`RunReport.as_json`.

Times are in seconds, in the statistic the settings name. Renderers (terminal, html) and
recomposition read the JSON form, which is also what they read back from files.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.budget import stats_precision
from ..core.identity import CUT_METHOD
from ..core.noise import HIGH_NOISE, run_noise
from ..core.settings import Settings
from ..core.verdict import judge_report
from ..cut.bricks import BrickSpec
from ..cut.cutting import ModelPlan
from ..estimating.analysis import BrickUse, BrickWork, brick_analysis, model_analysis, peak_fields
from ..estimating.calibration import CalibrationRecord, fit, model_key, record_of
from ..estimating.composition import ParallelExecutor, brick_calls, compose, model_costs
from ..estimating.validation import OVER_ROUNDS, Validation
from ..timing.overhead import NO_OVERHEAD, CallOverhead
from ..timing.probes import ExecutorDetection, RunMeasurements
from ..timing.retiming import TimedAgain
from ..timing.speed_trace import timed_above
from .entries import BrickEntry, BrickResult, FailedModel, ModelEntry, Summary
from .executor_entry import executor_fields, explained
from .validation_fields import _accuracy, _ratio, _validation_fields

REPORT_VERSION = 1


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
        if self.simulation is not None:  # before the verdict, which reads its counts' repeat
            report["simulation"] = self.simulation
        verdict = judge_report(report)
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
    reused_from: dict[str, Any] | None = None,
    memory: dict[str, Any] | None = None,
    timed_again: Mapping[str, TimedAgain] | None = None,
    timed_again_s: float = 0.0,
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
    its core (see :mod:`.load`); ``reused_from`` what the runs that timed the reused bricks found of the
    machine (see :attr:`.entries.Summary.reused_from`); ``memory`` how fast memory was read for the bricks
    timed with their weights out of the caches (see :attr:`.entries.Summary.memory`); ``timed_again`` the bricks
    timed again at the end of the run (see :func:`.time_again`), which took ``timed_again_s``.
    """
    times = {signature: result.stats[settings.statistic] for signature, result in results.items()}
    references = {signature: result.reference_s for signature, result in results.items() if result.reference_s}
    validations = validations or {}
    work = work or {}
    measured = measured if measured is not None else RunMeasurements()
    unsupported = unsupported or {}
    # A brick the provider cannot run is known so when it was run, or when its model was cut (float32 work in a
    # float16 model): its entry says why either way, where no other model's point timed it.
    cut_unsupported = {
        brick.signature: reason
        for plan in plans
        for index, reason in plan.unsupported.items()
        if isinstance(brick := plan.bricks[index], BrickSpec) and brick.signature not in results
    }
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
            unsupported=unsupported.get(signature, cut_unsupported.get(signature)),
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
                estimate_drift=_drift_timed_again(
                    plan, results, times, references, estimate.sequential_s, timed_again or {}, call, settings.statistic
                ),
                timed_above_fast=timed_above(
                    (
                        (count * times[signature], references.get(signature))
                        for signature, count in plan.signatures.items()
                        if signature in results and not results[signature].reused
                    ),
                    (speed or {}).get("fast_s"),
                ),
            )
        )
    fresh: tuple[CalibrationRecord, ...] = ()
    if settings.calibrate:
        fresh = tuple(_calibration_records(plans, entries, settings, call, references))
    # A model measured again replaces its record: the same bricks, or the same path cut otherwise. Records of
    # another statistic correct none of this run's estimates.
    calibration = [record for record in calibration if record.statistic == settings.statistic]
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
            memory=memory,
            load=load,
            reused_from=reused_from,
            timed_again=_timed_again_summary(timed_again or {}, timed_again_s, results, entries),
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
    settings: Settings,
    overhead: CallOverhead,
    references: Mapping[str, float],
) -> list[CalibrationRecord]:
    """The validated models of a run that calibrates: each one's composed and measured times."""
    return [
        record_of(
            plan.path,
            model_key(plan.signatures),
            settings.granularity,
            model.sequential_s,
            model.analysis.bytes,
            model_costs(brick_calls(plan), overhead, references).of(*plan.io),
            measured,
            plan.layers,
            settings.statistic,
        )
        for plan, model in zip(plans, models)
        if model.complete and model.sequential_s and isinstance(measured := model.validation.get("measured_s"), float)
    ]


def _drift_timed_again(
    plan: ModelPlan,
    results: Mapping[str, BrickResult],
    times: Mapping[str, float],
    references: Mapping[str, float],
    estimate_s: float | None,
    timed_again: Mapping[str, TimedAgain],
    overhead: CallOverhead,
    statistic: str,
) -> float | None:
    """The model's estimate over the one its bricks give timed again (``estimate_drift``, as validation's paired
    rounds give it); None unless every brick this run timed for it was timed again. They were timed as validation's
    rounds time them, each call alone: no item loop to take off, the call cost at the reference read before each."""
    timed = [signature for signature in plan.signatures if signature in results and not results[signature].reused]
    if not estimate_s or not timed or any(signature not in timed_again for signature in timed):
        return None
    # Bricks reused from the store weigh the same in both: their item loop's cost comes off them here too.
    again_times = {
        signature: times[signature] - overhead.at(references.get(signature)).timing_s
        for signature in plan.signatures
        if signature in times
    }
    again_times.update((signature, OVER_ROUNDS[statistic](timed_again[signature].rounds)) for signature in timed)
    again_references = {**references, **{s: again.reference_s for s, again in timed_again.items() if again.reference_s}}
    alone = dataclasses.replace(overhead, timing_s=0.0)
    again = compose(plan, again_times, alone, references=again_references).sequential_s
    return estimate_s / again if again else None


def _timed_again_summary(
    timed_again: Mapping[str, TimedAgain],
    seconds: float,
    results: Mapping[str, BrickResult],
    entries: Sequence[ModelEntry],
) -> dict[str, Any] | None:
    """How many of the bricks this run timed were timed again at its end, for how many models all of them, in how
    many seconds; None where none was."""
    if not timed_again:
        return None
    timed = sum(1 for result in results.values() if not result.reused)
    models = sum(1 for entry in entries if entry.estimate_drift is not None)
    return {"bricks": len(timed_again), "timed": timed, "models": models, "seconds": seconds}


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


def _estimate_precision(plan: ModelPlan, results: Mapping[str, BrickResult], estimate_s: float | None) -> float | None:
    """The margin of error of a model's sequential estimate, from the precision its bricks reached."""
    uses = [(count, results[s].stats if s in results else None) for s, count in plan.signatures.items()]
    return stats_precision(uses, estimate_s)
