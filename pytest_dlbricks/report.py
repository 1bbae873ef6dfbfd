"""The report of a run: built from plans and brick times, JSON-ready."""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .bricks import BrickSpec
from .composition import compose
from .cutting import ModelPlan
from .overhead import NO_OVERHEAD, CallOverhead
from .settings import Settings
from .validation import Validation, accuracy

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


@dataclass(frozen=True)
class FailedModel:
    """A model that could not be loaded or cut; reported with its cause."""

    path: str
    cause: str


def build_report(
    settings: Settings,
    plans: Sequence[ModelPlan],
    failed: Sequence[FailedModel],
    bricks: Mapping[str, BrickSpec],
    results: Mapping[str, BrickResult],
    *,
    overhead: CallOverhead | None = None,
    validations: Mapping[tuple[str, str], Validation] | None = None,
    wall_time_s: float | None = None,
    partial: bool = False,
) -> dict[str, object]:
    """The report as JSON-ready data; times are in seconds, the statistic is ``settings.statistic``.

    ``overhead`` is the cost of one inference call, which composition counts once per model;
    ``validations`` are the end-to-end measurements by model path and executor; ``partial`` marks a
    run that stopped before every item ran (Ctrl-C, SIGTERM, ``-x``).
    """
    times = {signature: result.stats[settings.statistic] for signature, result in results.items()}
    validations = validations or {}
    call = overhead or NO_OVERHEAD
    reused = {signature for signature, result in results.items() if result.reused}
    users: dict[str, Counter[str]] = {signature: Counter() for signature in bricks}
    for plan in plans:
        for signature, count in plan.signatures.items():
            users[signature][plan.path] += count
    models: list[dict[str, object]] = []
    for plan in plans:
        estimate = compose(plan, times, call)
        models.append(
            {
                "path": plan.path,
                "layers": plan.layers,
                "bricks": len(plan.bricks),
                "unique_bricks": len(plan.signatures) + len(plan.broken),
                "measured_bricks": estimate.measured_bricks,
                "reused_bricks": sum(count for signature, count in plan.signatures.items() if signature in reused),
                "sequential_s": estimate.sequential_s,
                "critical_path_s": estimate.critical_path_s,
                "complete": estimate.complete,
                "guessed_dims": plan.guessed_dims,
                "unbuildable_layers": [
                    {"layer": b.layer_index, "op": b.op_type, "cause": b.reason} for b in plan.broken
                ],
                **_validation_fields(plan, estimate.sequential_s, validations, call),
            }
        )
    models.extend(
        {"path": model.path, "complete": False, "error": model.cause, "sequential_s": None, "critical_path_s": None}
        for model in failed
    )
    total_bricks = sum(len(plan.bricks) for plan in plans)
    return {
        "version": REPORT_VERSION,
        "granularity": settings.granularity,
        "partial": partial,
        "settings": settings.describe(),
        "summary": {
            "models": len(plans) + len(failed),
            "failed_models": len(failed),
            "layers": sum(plan.layers for plan in plans),
            "bricks": total_bricks,
            "distinct_bricks": len(bricks),
            "distinct_ratio": len(bricks) / total_bricks if total_bricks else None,
            "measured_bricks": len(times),
            "call_overhead_s": dataclasses.asdict(overhead) if overhead else None,
            "wall_time_s": wall_time_s,
            "reused_bricks": len(reused),
        },
        "accuracy": _accuracy(models, times, users),
        "models": models,
        "bricks": [
            {
                "signature": signature,
                "ops": list(brick.ops),
                "time_s": times.get(signature),
                "stats": dict(results[signature].stats) if signature in results else None,
                "provider": results[signature].provider if signature in results else None,
                "measured_at": results[signature].measured_at if signature in results else None,
                "reused": signature in results and results[signature].reused,
                "models": dict(users[signature]),
            }
            for signature, brick in bricks.items()
        ],
    }


def _validation_fields(
    plan: ModelPlan,
    sequential_s: float | None,
    validations: Mapping[tuple[str, str], Validation],
    overhead: CallOverhead,
) -> dict[str, object]:
    """A model's end-to-end measurements: ``measured_s`` and ``ratio`` for the sequential executor,
    ``measured_parallel_s`` and ``critical_path_ratio`` for the parallel one, and the details."""
    details = {
        executor: validation.summarize(plan, overhead)
        for (path, executor), validation in validations.items()
        if path == plan.path
    }
    if not details:
        return {}
    fields: dict[str, object] = {"validation": details}
    if "sequential" in details:
        sequential = details["sequential"]
        fields["measured_s"] = sequential["measured_s"]
        fields["ratio"] = sequential["ratio"]
        # How far the reported estimate, timed earlier, drifted from the one timed beside the model.
        paired = sequential["estimate_s"]
        fields["estimate_drift"] = sequential_s / paired if sequential_s and paired else None
    if "parallel" in details:
        fields["measured_parallel_s"] = details["parallel"]["measured_s"]
        fields["critical_path_ratio"] = details["parallel"]["ratio"]
    return fields


def _accuracy(
    models: Sequence[Mapping[str, object]], times: Mapping[str, float], users: Mapping[str, Counter[str]]
) -> dict[str, object] | None:
    """How close the estimates came, over all validated models, and what the method saved."""
    validated = [model for model in models if "validation" in model]
    if not validated:
        return None
    details: list[Mapping[str, Mapping[str, float | None]]] = [model["validation"] for model in validated]  # type: ignore[misc]
    spreads = [s for detail in details for summary in detail.values() if (s := summary["spread"]) is not None]
    paths = {model["path"] for model in validated}
    distinct = [time_s for signature, time_s in times.items() if paths & set(users[signature])]
    measured = [float(model["measured_s"]) for model in validated if "measured_s" in model]  # type: ignore[arg-type]
    return {
        "sequential": accuracy(_ratios(details, "sequential")),
        "critical_path": accuracy(_ratios(details, "parallel")),
        # Typical relative spread (interquartile range) of a model's per-round ratios: the machine's noise.
        "noise": statistics.median(spreads) if spreads else None,
        # The paper's measure of the time saved: end-to-end latencies over distinct brick latencies.
        "speedup": sum(measured) / sum(distinct) if distinct and measured else None,
    }


def _ratios(details: Sequence[Mapping[str, Mapping[str, float | None]]], executor: str) -> list[float]:
    """The models' ratios under ``executor``, leaving out models without an estimate."""
    return [ratio for detail in details if executor in detail and (ratio := detail[executor]["ratio"]) is not None]
