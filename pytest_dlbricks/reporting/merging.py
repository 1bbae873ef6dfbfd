"""Merging: the reports of shards (or of runs over different models) combined into one report.

Reports merge only when their times are comparable: the same report version, the same settings
(shard aside, onnxruntime's version included) and the same kind of machine (processor, number of
cores, operating system). A brick measured by two reports, or a model cut differently in two, is refused too:
shards split work, they do not repeat it. Every brick's time comes from the one shard that timed it;
what every shard measured of the machine (the call cost taken off every brick, the peak, each model's
load time) is combined robustly (see :func:`combined_overhead`, :func:`best_peak`), and every model is
composed again from all the bricks' times, for the parallel executor as the first report that detected
it found it (the reports come from comparable machines with the same settings), and analysed again
(FLOPs, throughput, time by operator type). The merged run measured under high noise when any of its
reports did, and its speed trace is that of the report whose machine's speed moved most.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..core.verdict import memory_margin, speed_margin
from ..estimating.composition import is_number
from ..timing.overhead import CallOverhead, parallel_ceiling
from .recomposition import (
    Report,
    executor_of,
    overhead_of,
    peak_of,
    recomposed_report,
    static_fields,
    unestimated_executor,
)
from .report import REPORT_VERSION

#: Settings that may differ between reports that merge.
PER_RUN_SETTINGS = frozenset({"shard"})


class IncompatibleReports(Exception):
    """Reports that cannot be merged; the message names what differs."""


def merge_reports(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> Report:
    """One report from ``reports`` (name, report) measured on comparable machines with the same settings."""
    if not reports:
        raise IncompatibleReports("nothing to merge")
    (first_name, first), *others = reports
    for name, report in others:
        _check_compatible(first_name, first, name, report)
    _check_shards(reports)
    entries = _merged_models(reports)
    records = _merged_bricks(reports)
    overheads = [overhead_of(report["summary"]) for _, report in reports if report["summary"].get("call_overhead_s")]
    settings = {**first["settings"], "shard": None}
    merged = recomposed_report(
        granularity=first["granularity"],
        settings=settings,
        entries=entries,
        records=records,
        overhead=combined_overhead(overheads),
        peak=best_peak(report.get("peak") for _, report in reports),
        load_s=_load_times(reports),
        executor=next((entry for _, report in reports if (entry := executor_of(report)) is not None), None)
        or next((entry for _, report in reports if (entry := unestimated_executor(report)) is not None), None),
        extra={
            "machine": next((report["machine"] for _, report in reports if report.get("machine")), None),
            "conditions": next((report["conditions"] for _, report in reports if report.get("conditions")), None),
            "merged": [
                {
                    "report": name,
                    "shard": report["settings"].get("shard"),
                    "measured_bricks": report["summary"]["measured_bricks"],
                    "wall_time_s": report["summary"].get("wall_time_s"),
                    "call_overhead_s": report["summary"].get("call_overhead_s"),
                }
                for name, report in reports
            ],
        },
    )
    walls = [report["summary"].get("wall_time_s") for _, report in reports]
    merged["summary"]["wall_time_s"] = max((w for w in walls if w is not None), default=None)
    noises = [report["summary"].get("noise") for _, report in reports]
    merged["summary"]["noise"] = max((n for n in noises if n is not None), default=None)
    merged["summary"]["high_noise"] = any(report["summary"].get("high_noise") for _, report in reports)
    # The shard whose machine's speed, and whose memory's, moved its estimates most, as the verdict reads them.
    merged["summary"]["speed"] = _widest(reports, "speed", speed_margin)
    merged["summary"]["memory"] = _widest(reports, "memory", memory_margin)
    # The shard whose timing thread kept its core least.
    loads = [
        load for _, report in reports if (load := report["summary"].get("load")) and is_number(load.get("core_share"))
    ]
    merged["summary"]["load"] = min(loads, key=lambda load: load["core_share"], default=None)
    return merged


def _check_compatible(first_name: str, first: Mapping[str, Any], name: str, report: Mapping[str, Any]) -> None:
    differences = []
    if report.get("version") != first.get("version") or first.get("version") != REPORT_VERSION:
        differences.append(f"report version {first.get('version')} vs {report.get('version')}")
    for key in sorted(set(first["settings"]) | set(report["settings"])):
        if key not in PER_RUN_SETTINGS and first["settings"].get(key) != report["settings"].get(key):
            differences.append(f"setting {key} {first['settings'].get(key)!r} vs {report['settings'].get(key)!r}")
    first_machine, machine = _comparable(first.get("machine")), _comparable(report.get("machine"))
    for key in sorted(set(first_machine) | set(machine)):
        # A report of an older version that timed nothing does not know its machine: nothing to compare.
        if None not in (first_machine.get(key), machine.get(key)) and first_machine.get(key) != machine.get(key):
            differences.append(f"machine {key} {first_machine.get(key)!r} vs {machine.get(key)!r}")
    if differences:
        raise IncompatibleReports(
            f"{first_name} and {name} cannot be merged, their times are not comparable: {'; '.join(differences)}"
        )


def _comparable(machine: Mapping[str, Any] | None) -> dict[str, object]:
    """What of a report's machine decides its times: processor, cores and operating system.

    The platform string also names the kernel and C library releases, which runners of one image
    may not share; its first part is the operating system.
    """
    machine = machine or {}
    system = str(machine.get("platform", "")).split("-", 1)[0]
    return {"cpu": machine.get("cpu"), "cores": machine.get("cores"), "system": system or None}


def _check_shards(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """Shards of the same split, each given once."""
    seen: dict[str, str] = {}
    counts = set()
    for name, report in reports:
        shard = report["settings"].get("shard")
        if shard is None:
            continue
        counts.add(shard.split("/")[1])
        if shard in seen:
            raise IncompatibleReports(f"{seen[shard]} and {name} are both shard {shard}; give each shard once")
        seen[shard] = name
    if len(counts) > 1:
        raise IncompatibleReports(f"the reports come from different splits (into {', '.join(sorted(counts))} shards)")


def _merged_models(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Every model once, in the order first met; a model must be cut alike wherever it appears."""
    models: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, report in reports:
        for entry in report["models"]:
            if "error" not in entry and "composition" not in entry:
                raise IncompatibleReports(
                    f"{name} does not record how {entry['path']} is composed; was it written by an older version?"
                )
            seen = models.get(entry["path"])
            if seen is None:
                models[entry["path"]] = (name, dict(entry) if "error" in entry else static_fields(entry))
            elif seen[1].get("composition") != entry.get("composition"):
                raise IncompatibleReports(f"{entry['path']} was cut differently in {seen[0]} and {name}")
    return [entry for _, entry in models.values()]


def _merged_bricks(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Mapping[str, Any]]:
    """Each brick's record from the report that measured it (or the first that lists it)."""
    records: dict[str, Mapping[str, Any]] = {}
    measured_by: dict[str, str] = {}
    for name, report in reports:
        for record in report["bricks"]:
            signature = str(record["signature"])
            if record.get("stats"):
                if signature in measured_by:
                    raise IncompatibleReports(
                        f"brick {signature[:8]} ({'+'.join(record.get('ops') or [])}) was measured by both"
                        f" {measured_by[signature]} and {name}; merge combines shards that split the bricks"
                    )
                measured_by[signature] = name
                records[signature] = record
            elif signature not in records or record.get("unsupported"):
                records[signature] = record
    return records


def combined_overhead(overheads: Sequence[CallOverhead]) -> CallOverhead | None:
    """The shards' call costs as one, figure by figure: the lower median of the shards' figures, each
    shard's costs first brought to one speed (the lower median of their reference calls' times), so that
    the figures combined belong together.

    A shard's figure is one measurement of the machine, made once in its run: a shard caught in a slow
    state (the machine's speed moved, or the parallel executor's sessions took milliseconds) reads high,
    never low, while the noise of a sane measurement is a few percent either way. The median of two
    figures is their mean, and one slow shard then moves it halfway (4.35 us and 8.0 ms read 4 ms); the
    lower median keeps the lower of two, and of more the middle one, passing over the low noise of the
    fastest. The parallel executor's cost is bounded as each run bounds it (see
    :func:`.overhead.parallel_ceiling`): a shard's beyond it is left out, with its cost per layer.
    """
    if not overheads:
        return None
    references = [o.reference_s for o in overheads if o.reference_s is not None]
    reference = statistics.median_low(references) if references else None
    overheads = [overhead.at(reference) for overhead in overheads]
    combined = CallOverhead(
        fixed_s=statistics.median_low(o.fixed_s for o in overheads),
        per_input_s=statistics.median_low(o.per_input_s for o in overheads),
        per_output_s=statistics.median_low(o.per_output_s for o in overheads),
        timing_s=statistics.median_low(o.timing_s for o in overheads),
        reference_s=reference,
    )
    ceiling = parallel_ceiling(combined)
    sane = [o for o in overheads if o.parallel_fixed_s is not None and o.parallel_fixed_s <= ceiling]
    parallel = [o.parallel_fixed_s for o in sane if o.parallel_fixed_s is not None]
    layer = [o.parallel_layer_s for o in sane if o.parallel_layer_s is not None]
    return dataclasses.replace(
        combined,
        parallel_fixed_s=statistics.median_low(parallel) if parallel else None,
        parallel_layer_s=statistics.median_low(layer) if layer else None,
    )


def best_peak(peaks: Iterable[object]) -> dict[str, Any] | None:
    """The shards' peak as one: the entry of the highest GEMM rate, its bandwidth with it. Each shard's peak
    is already the best of its runs, and a shard caught in a slow state reads low: the highest is the peak
    of the machine the shards share."""
    usable = [dict(peak) for peak in peaks if isinstance(peak, Mapping) and peak_of(peak) is not None]
    return max(usable, key=lambda peak: peak["flops_per_s"], default=None)


def _load_times(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, float]:
    """Each model's load time, the lower median of the shards' that measured it (those that timed one of
    its bricks), for the reason :func:`combined_overhead` gives."""
    found: dict[str, list[float]] = {}
    for _, report in reports:
        for entry in report["models"]:
            if is_number(entry.get("load_s")):
                found.setdefault(entry["path"], []).append(float(entry["load_s"]))
    return {path: statistics.median_low(times) for path, times in found.items()}


def _widest(
    reports: Sequence[tuple[str, Mapping[str, Any]]], name: str, margin: Callable[[object], float | None]
) -> Any:
    """The summary entry ``name`` of the report whose ``margin`` of it is largest; None where no report has one."""
    entries = [report["summary"].get(name) for _, report in reports]
    known = [(part, entry) for entry in entries if (part := margin(entry)) is not None]
    return max(known, key=lambda pair: pair[0], default=(None, None))[1]
