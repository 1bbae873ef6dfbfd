"""Recomposition: model estimates rebuilt from brick times measured elsewhere or in several runs.

Every model of a report carries its ``composition``: its windows (brick signature and number of
inputs and outputs, or null for a layer that cannot be built), the brick graph between them and the
model's own number of inputs and outputs. That, with brick times, the cost of a call and what the
parallel executor was detected to do on the machine that timed the bricks (a report's ``executor``
entry), is all composition needs, so a private map (``compose``) and the reports of shards
(``merge``) give the same estimates as the run that cut the models, through the same arithmetic.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import networkx as nx

from ..core.budget import stats_precision
from ..estimating.analysis import BrickAnalysis, BrickUse, model_analysis
from ..estimating.composition import BrickCall, ParallelExecutor, compose_calls, is_count, is_number
from ..timing.overhead import CallOverhead
from ..timing.probes import Peak, RunMeasurements
from .executor_entry import ONE_AT_A_TIME, SCHEDULE, explained
from .report import REPORT_VERSION, unsupported_windows

#: Fields of a model entry that hold whatever the brick times: a recomposition copies them and
#: computes the estimate again; fields of other kinds (validation, the analysis of a run's times)
#: hold only for the run that measured them and are left out.
STATIC_FIELDS = (
    *("path", "point", "layers", "bricks", "unique_bricks", "guessed_dims", "unbuildable_layers"),
    *("inputs", "data_dependent_ops", "weights_as_inputs"),
)

Report = dict[str, Any]


def calls_of(composition: Mapping[str, Any]) -> list[BrickCall]:
    return [
        (str(window[0]), int(window[1]), int(window[2])) if window is not None and len(window) == 3 else None
        for window in composition["bricks"]
    ]


def graph_of(composition: Mapping[str, Any]) -> nx.DiGraph:
    """The brick graph, nodes and edges in the order the cutting made them (so sums add up alike)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(composition["bricks"])))
    graph.add_edges_from(tuple(edge) for edge in composition["edges"])
    return graph


def signatures_of(composition: Mapping[str, Any]) -> Counter[str]:
    """How many times each brick occurs in the model, those the provider cannot run included."""
    return Counter(str(window[0]) for window in composition["bricks"] if window is not None)


def static_fields(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What a model entry says whatever the brick times, its composition included."""
    return {key: entry[key] for key in (*STATIC_FIELDS, "composition") if key in entry}


def recompose_entry(
    entry: Mapping[str, Any],
    times: Mapping[str, float],
    overhead: CallOverhead,
    unsupported: Mapping[str, str],
    parallel: ParallelExecutor | None = None,
    layers: Mapping[str, int] | None = None,
    references: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """A model entry of a report, its estimate composed again from ``times`` (the parallel one too
    when ``parallel`` says what the parallel executor does; ``layers`` and the reference call's time
    around each brick's timing, ``references``, by brick signature)."""
    composition = entry["composition"]
    io = tuple(composition["io"])
    calls, graph = calls_of(composition), graph_of(composition)
    estimate = compose_calls(calls, graph, io, times, overhead, parallel, layers, references)  # type: ignore[arg-type]
    return {
        **static_fields(entry),
        "measured_bricks": estimate.measured_bricks,
        "sequential_s": estimate.sequential_s,
        "critical_path_s": estimate.critical_path_s,
        "parallel_s": estimate.parallel_s,
        "complete": estimate.complete,
        "unsupported": unsupported_windows(composition, unsupported),
    }


def _with_precision(model: dict[str, Any], records: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A recomposed model with the margin of error its estimate reached, from its bricks' statistics as the run
    that timed them reported them (``precision``, as a run's own report gives it; None where one lacks them)."""
    uses = [
        (count, stats if isinstance(stats := (records.get(signature) or {}).get("stats"), Mapping) else None)
        for signature, count in signatures_of(model["composition"]).items()
    ]
    model["precision"] = stats_precision(uses, model.get("sequential_s"))
    return model


def executor_of(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """A report's ``executor`` entry when it says what the parallel executor does, with the figures
    its reading needs; None when the report has none, or a damaged one (counted as absent)."""
    entry = report.get("executor")
    if not isinstance(entry, Mapping) or ParallelExecutor.from_report(entry) is None:
        return None
    detection = entry.get("detection")
    if entry.get("model") not in (SCHEDULE, ONE_AT_A_TIME) or not isinstance(detection, Mapping):
        return None
    figures = ("sequential_s", "parallel_s", "ratio", "rounds", "concurrent_below")
    if not all(is_number(detection.get(key)) for key in figures):
        return None
    at_once = detection.get("nodes_at_once")  # absent from reports of versions that did not profile
    if at_once is not None and not is_count(at_once):
        return None
    pool = detection.get("pool")
    if entry.get("pool_layer_s") is not None and not (isinstance(pool, Mapping) and isinstance(pool.get("graph"), str)):
        return None
    return dict(entry)


def unestimated_executor(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """A report's ``executor`` entry when it says why the models have no parallel estimate (none was asked
    for, the executor runs one node at a time, or it could not be tried); None otherwise."""
    entry = report.get("executor")
    if not isinstance(entry, Mapping) or entry.get("model") is not None:
        return None
    return dict(entry) if isinstance(entry.get("error"), str) or isinstance(entry.get("reason"), str) else None


def damaged_executor(report: Mapping[str, Any]) -> bool:
    """Whether a report holds an ``executor`` entry that :func:`executor_of` cannot read (one that says
    why there is no parallel estimate is not damaged)."""
    entry = report.get("executor")
    return entry is not None and executor_of(report) is None and unestimated_executor(report) is None


def brick_times(records: Iterable[Mapping[str, Any]], statistic: str) -> dict[str, float]:
    """Seconds by signature from a report's ``bricks`` entries, in ``statistic``."""
    times = {}
    for record in records:
        seconds = (record.get("stats") or {}).get(statistic)
        if seconds is not None:
            times[str(record["signature"])] = float(seconds)
    return times


def brick_references(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The reference call's time around each brick's timing, by signature, from a report's ``bricks``
    entries; a brick without one (a report of an older version) or with a damaged one is composed
    with the call cost as measured."""
    return {
        str(record["signature"]): float(record["reference_s"])
        for record in records
        if is_number(record.get("reference_s")) and record["reference_s"] > 0
    }


def overhead_of(summary: Mapping[str, Any]) -> CallOverhead:
    """The call cost a report measured (none when it measured nothing); ``ValueError`` saying which
    figure is damaged when one holds what no measurement gives (figures a report of an older version
    lacks take their defaults)."""
    recorded = summary.get("call_overhead_s")
    recorded = {} if recorded is None else recorded
    if not isinstance(recorded, Mapping):
        raise ValueError(f"it is {reprlib.repr(recorded)}, not a table of costs")
    figures: dict[str, Any] = {}
    for field in dataclasses.fields(CallOverhead):
        value = recorded.get(field.name, field.default)
        optional = field.name in ("parallel_fixed_s", "parallel_layer_s", "reference_s")
        if not (value is None and optional) and not (is_number(value) and value >= 0):
            raise ValueError(f"{field.name} is {reprlib.repr(value)}, not a time in seconds")
        if field.name == "reference_s" and value == 0:
            raise ValueError("reference_s is 0, not the time of a call")
        figures[field.name] = value
    return CallOverhead(**figures)


def peak_of(entry: object) -> Peak | None:
    """The machine's peak a report's ``peak`` entry records; None when it has none, or a damaged one."""
    if not isinstance(entry, Mapping):
        return None
    flops, bandwidth = entry.get("flops_per_s"), entry.get("bytes_per_s")
    if not (is_number(flops) and flops > 0 and is_number(bandwidth) and bandwidth > 0):
        return None
    method = {key: value for key, value in entry.items() if key not in ("flops_per_s", "bytes_per_s")}
    return Peak(float(flops), float(bandwidth), method)


def _brick_analysis(
    record: Mapping[str, Any] | None,
    time_s: float | None,
    io: tuple[int, int],
    overhead: CallOverhead,
    peak: Peak | None,
) -> BrickAnalysis:
    """A brick's analysis as its record gives it, its share of the call cost and of the peak taken again at
    the recomposition's (the record's came with the call cost and peak of the run that timed it)."""
    record = record or {}
    flops = record.get("flops") if is_count(record.get("flops")) else None
    rate = flops / time_s if flops is not None and time_s else None
    op_time = record.get("op_time_s")
    work_s = None
    if time_s is not None and isinstance(op_time, Mapping):
        reference = record.get("reference_s")
        work_s = max(time_s - overhead.of_brick(*io, reference if is_number(reference) else None), 0.0)
    label = record.get("label")
    return BrickAnalysis(
        label=label if isinstance(label, str) else None,
        flops=flops,
        bytes=record.get("bytes") if is_count(record.get("bytes")) else None,
        unknown_flops_ops=[str(op) for op in record.get("unknown_flops_ops") or ()],
        flops_per_s=rate,
        peak_fraction=rate / peak.flops_per_s if rate is not None and peak is not None else None,
        op_time_s=dict(op_time) if isinstance(op_time, Mapping) and time_s is not None else None,
        work_s=work_s,
    )


def _analysed(
    model: dict[str, Any], analyses: Mapping[str, BrickAnalysis], times: Mapping[str, float], measured: RunMeasurements
) -> dict[str, Any]:
    """A recomposed model entry with its work, load time and, when complete, where its time goes: what the
    run that cut it reports, from the bricks' records."""
    uses = [
        BrickUse(signature, times.get(signature), analyses[signature], count)
        for signature, count in signatures_of(model["composition"]).items()
    ]
    analysis = model_analysis(model["path"], model["sequential_s"], model["complete"], uses, measured)
    return {**model, **analysis.as_json()}


def _io_by_signature(entries: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """Each brick's number of inputs and outputs, from the models' compositions."""
    return {
        call[0]: (call[1], call[2])
        for entry in entries
        if "composition" in entry
        for call in calls_of(entry["composition"])
        if call is not None
    }


def recomposed_report(
    *,
    granularity: object,
    settings: Mapping[str, Any],
    entries: Sequence[Mapping[str, Any]],
    records: Mapping[str, Mapping[str, Any]],
    overhead: CallOverhead | None,
    executor: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    peak: Mapping[str, Any] | None = None,
    load_s: Mapping[str, float] | None = None,
) -> Report:
    """A report in the plugin's format from model entries (with compositions) and brick records.

    ``records`` are the ``bricks`` entries of the runs that measured them, by signature; models are
    composed in ``settings["statistic"]``, and for the parallel executor when ``executor`` (the
    ``executor`` entry of the run that timed the bricks, as :func:`executor_of` reads it) says what it does.
    The machine's ``peak`` (a report's entry) and the models' ``load_s`` (by path) feed their analysis:
    FLOPs, throughput, time by operator type, as the run that cut them reports it.
    """
    statistic = str(settings.get("statistic", "median"))
    times = brick_times(records.values(), statistic)
    references = brick_references(records.values())
    unsupported = {signature: str(r["unsupported"]) for signature, r in records.items() if r.get("unsupported")}
    layers = {signature: len(r["ops"]) for signature, r in records.items() if isinstance(r.get("ops"), list)}
    call = overhead or CallOverhead()
    parallel = ParallelExecutor.from_report(executor)
    machine_peak = peak_of(peak)
    measured = RunMeasurements(peak=machine_peak, load_s=dict(load_s or {}))
    io = _io_by_signature(entries)
    analyses = {
        signature: _brick_analysis(records.get(signature), times.get(signature), shape, call, machine_peak)
        for signature, shape in io.items()
    }
    models = [
        dict(entry)
        if "error" in entry
        else _with_precision(
            _analysed(
                recompose_entry(entry, times, call, unsupported, parallel, layers, references),
                analyses,
                times,
                measured,
            ),
            records,
        )
        for entry in entries
    ]
    users: dict[str, Counter[str]] = {}
    for model in models:
        if "composition" in model:
            for signature, count in signatures_of(model["composition"]).items():
                users.setdefault(signature, Counter())[model["path"]] += count
    bricks = [
        {
            **_brick_entry(signature, records.get(signature), statistic, users[signature]),
            **({} if signature not in analyses else analyses[signature].as_json()),
        }
        for signature in users
    ]
    composed = [model for model in models if "error" not in model]
    total = sum(int(model["bricks"]) for model in composed)
    return {
        "version": REPORT_VERSION,
        "granularity": granularity,
        "settings": dict(settings),
        **(extra or {}),
        "summary": {
            "models": len(models),
            "failed_models": len(models) - len(composed),
            "layers": sum(int(model["layers"]) for model in composed),
            "bricks": total,
            "distinct_bricks": len(bricks),
            "distinct_ratio": len(bricks) / total if total else None,
            "measured_bricks": sum(1 for brick in bricks if brick["time_s"] is not None),
            "call_overhead_s": dataclasses.asdict(overhead) if overhead else None,
            "wall_time_s": None,
            **_unknown_flops(composed),
        },
        "accuracy": None,
        "peak": None if machine_peak is None else dict(peak or {}),
        "models": models,
        "bricks": bricks,
        **({"executor": _executor_entry(executor, call)} if executor is not None else {}),
    }


def _unknown_flops(models: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """The time of the analysed models' bricks whose FLOPs are unknown, and its share of their estimates."""
    analysed = [model for model in models if model.get("op_time_s") is not None]
    unknown = sum(model.get("unknown_flops_time_s") or 0.0 for model in analysed)
    estimated = sum(model.get("sequential_s") or 0.0 for model in analysed)
    return {
        "unknown_flops_time_s": unknown if analysed else None,
        "unknown_flops_share": unknown / estimated if estimated > 0 else None,
    }


def _executor_entry(executor: Mapping[str, Any], call: CallOverhead) -> dict[str, Any]:
    """The run's ``executor`` entry, with the call costs the recomposition used (one that says why there is
    no parallel estimate, as it was)."""
    if executor.get("model") is None:
        return explained(executor)
    return explained(
        {
            **executor,
            "call_s": call.fixed_s,
            "parallel_call_s": call.parallel_fixed_s,
            "parallel_layer_s": call.parallel_layer_s,
        }
    )


def _brick_entry(
    signature: str, record: Mapping[str, Any] | None, statistic: str, users: Counter[str]
) -> dict[str, object]:
    stats = (record or {}).get("stats")
    return {
        **(record or {"signature": signature, "ops": None, "stats": None, "provider": None}),
        "time_s": stats.get(statistic) if stats else None,
        "models": dict(users),
    }
