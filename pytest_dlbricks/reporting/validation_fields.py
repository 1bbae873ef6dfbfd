"""What validation adds to the report: each validated model's measured times and ratios against its estimates, and
how close the estimates came over all validated models."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence

from ..cut.cutting import ModelPlan
from ..estimating.composition import Estimate, ParallelExecutor
from ..estimating.validation import Validation, accuracy
from ..timing.overhead import CallOverhead


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
    spreads = _spreads(details, "sequential")
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
        # Typical relative spread (interquartile range) of a model's per-round ratios under the sequential
        # executor: the machine's noise (the parallel executor's rounds are apart, below).
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
