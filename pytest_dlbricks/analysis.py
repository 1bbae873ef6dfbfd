"""Where the time goes: each brick's work (FLOPs and bytes of its layers) and the report fields built on it.

Per brick the report gains its FLOPs, bytes, achieved FLOP/s and the fraction of the machine's peak
that is; per model its total FLOPs, achieved FLOP/s, load time, time per operator type, the time in
bricks whose FLOPs are unknown, and its top bricks by time.

A brick of several layers is timed as a whole. Its time is shared among its layers in proportion to
a roofline estimate of each: the larger of its FLOPs at the measured GEMM peak and its bytes at the
measured bandwidth (bytes alone when its FLOPs are unknown). With one layer per brick the time per
operator type is exact.

Model figures follow composition: a brick counts its time less the cost of one inference call
(``work_s``), and the model pays its own call once (``call_s``), so a model's time by operator type
plus ``call_s`` is its sequential estimate.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from .bricks import BrickSpec
from .cutting import BrokenBrick, ModelPlan
from .flops import node_cost
from .graph import ModelGraph
from .overhead import CallOverhead

#: Bricks listed per model, heaviest first.
TOP_BRICKS = 5


@dataclass(frozen=True)
class LayerWork:
    """One layer of a brick: its operator type, FLOPs (None when unknown) and bytes moved."""

    op_type: str
    flops: int | None
    bytes: int


@dataclass(frozen=True)
class BrickWork:
    """The work of one distinct brick, layer by layer; built by :func:`plan_work`."""

    label: str
    layers: tuple[LayerWork, ...]
    #: Number of the brick's inputs and outputs: what one call of it costs depends on them.
    io: tuple[int, int] = (1, 1)

    @property
    def flops(self) -> int | None:
        """FLOPs of the whole brick; None when any of its layers has unknown FLOPs."""
        counts = [layer.flops for layer in self.layers]
        return None if None in counts else sum(c for c in counts if c is not None)

    @property
    def bytes(self) -> int:
        return sum(layer.bytes for layer in self.layers)

    @property
    def unknown_ops(self) -> list[str]:
        """Operator types of the layers whose FLOPs are unknown, each once."""
        return sorted({layer.op_type for layer in self.layers if layer.flops is None})


@dataclass(frozen=True)
class Peak:
    """What this machine reaches through onnxruntime with the run's settings, measured in the run."""

    flops_per_s: float
    bytes_per_s: float
    #: How it was measured, as recorded in the report.
    method: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class RunMeasurements:
    """Measurements made once per run beside the brick benchmarks (see :mod:`pytest_dlbricks.probes`)."""

    peak: Peak | None = None
    #: onnxruntime session creation time by model path, in seconds.
    load_s: Mapping[str, float] = field(default_factory=dict)
    #: Why a model's session could not be created, by model path.
    load_errors: Mapping[str, str] = field(default_factory=dict)
    machine: Mapping[str, object] = field(default_factory=dict)


def plan_work(graph: ModelGraph, plan: ModelPlan, signatures: Collection[str] | None = None) -> dict[str, BrickWork]:
    """The work of the plan's distinct bricks (only those in ``signatures`` when given).

    The plan's windows cover the graph's layers in order, so a brick's layers are found by position.
    """
    work: dict[str, BrickWork] = {}
    begin = 0
    for brick in plan.bricks:
        size = 1 if isinstance(brick, BrokenBrick) else len(brick.nodes)
        wanted = signatures is None or (isinstance(brick, BrickSpec) and brick.signature in signatures)
        if isinstance(brick, BrickSpec) and brick.signature not in work and wanted:
            layers = graph.layers[begin : begin + size]
            work[brick.signature] = BrickWork(
                brick.label,
                tuple(_layer_work(layer, graph) for layer in layers),
                (len(brick.inputs), len(brick.outputs)),
            )
        begin += size
    if begin != len(graph.layers):
        raise ValueError(f"the plan covers {begin} layers of {len(graph.layers)}")
    return work


def _layer_work(layer: onnx.NodeProto, graph: ModelGraph) -> LayerWork:
    cost = node_cost(layer, graph.specs)
    return LayerWork(layer.op_type, cost.flops, cost.bytes)


def split_time(work: BrickWork, seconds: float, peak: Peak | None) -> dict[str, float]:
    """The brick's time shared among its layers' operator types (see the module's docstring)."""
    if peak is not None and peak.flops_per_s > 0 and peak.bytes_per_s > 0:
        weights = [max((layer.flops or 0) / peak.flops_per_s, layer.bytes / peak.bytes_per_s) for layer in work.layers]
    else:
        weights = [float(layer.bytes) for layer in work.layers]
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * len(work.layers), float(len(work.layers))
    shares: dict[str, float] = defaultdict(float)
    for layer, weight in zip(work.layers, weights):
        shares[layer.op_type] += seconds * weight / total
    return dict(shares)


def annotate(
    report: Mapping[str, Any], work: Mapping[str, BrickWork], measured: RunMeasurements | None = None
) -> dict[str, Any]:
    """A copy of ``report`` (from :func:`~pytest_dlbricks.reporting.build_report`) with the analysis fields."""
    measured = measured if measured is not None else RunMeasurements()
    peak = measured.peak
    overhead = CallOverhead(**(report["summary"].get("call_overhead_s") or {}))
    bricks = [_brick_fields(entry, work.get(entry["signature"]), peak, overhead) for entry in report["bricks"]]
    models = [_model_fields(entry, bricks, measured) for entry in report["models"]]
    complete = [model for model in models if model.get("op_time_s") is not None]
    estimated = sum(model["sequential_s"] for model in complete)
    unknown = sum(model["unknown_flops_time_s"] for model in complete)
    summary = {
        **report["summary"],
        "unknown_flops_time_s": unknown if complete else None,
        "unknown_flops_share": unknown / estimated if estimated > 0 else None,
    }
    return {
        **report,
        "summary": summary,
        "machine": dict(measured.machine),
        "peak": None
        if peak is None
        else {"flops_per_s": peak.flops_per_s, "bytes_per_s": peak.bytes_per_s, **peak.method},
        "models": models,
        "bricks": bricks,
    }


def _brick_fields(
    entry: Mapping[str, Any], work: BrickWork | None, peak: Peak | None, overhead: CallOverhead
) -> dict[str, Any]:
    """A brick's work, and its throughput as timed (one whole inference call, as benchmarked)."""
    seconds = entry["time_s"]
    flops = work.flops if work is not None else None
    rate = flops / seconds if flops is not None and seconds else None
    op_time = work_s = None
    if work is not None and seconds is not None:
        op_time = split_time(work, seconds, peak)
        # What the brick adds to a model's sequential estimate, as composition counts it.
        work_s = max(seconds - overhead.of(*work.io), 0.0)
    return {
        **entry,
        "label": work.label if work is not None else None,
        "flops": flops,
        "bytes": work.bytes if work is not None else None,
        "unknown_flops_ops": work.unknown_ops if work is not None else [],
        "flops_per_s": rate,
        "peak_fraction": _fraction(rate, peak),
        "op_time_s": op_time,
        "work_s": work_s,
    }


def _model_fields(entry: Mapping[str, Any], bricks: list[dict[str, Any]], measured: RunMeasurements) -> dict[str, Any]:
    if "error" in entry:
        return dict(entry)
    path = entry["path"]
    uses = [(brick, brick["models"][path]) for brick in bricks if path in brick["models"]]
    flops = sum(brick["flops"] * count for brick, count in uses if brick["flops"] is not None)
    fields = {
        **entry,
        "load_s": measured.load_s.get(path),
        "flops": flops,
        "bytes": sum((brick["bytes"] or 0) * count for brick, count in uses),
    }
    if path in measured.load_errors:
        fields["load_error"] = measured.load_errors[path]
    fields.update(_model_times(entry, uses, measured.peak, flops))
    return fields


def _model_times(
    entry: Mapping[str, Any], uses: list[tuple[dict[str, Any], int]], peak: Peak | None, flops: int
) -> dict[str, Any]:
    """Fields that need every brick's time: None for an incomplete model."""
    names = ("flops_per_s", "peak_fraction", "call_s", "unknown_flops_time_s", "unknown_flops_bricks")
    total_s = entry.get("sequential_s")
    if not entry.get("complete") or total_s is None or any(brick["work_s"] is None for brick, _ in uses):
        return dict.fromkeys((*names, "op_time_s", "top_bricks"))
    unknown = [(brick, count) for brick, count in uses if brick["flops"] is None]
    unknown_s = sum(brick["work_s"] * count for brick, count in unknown)
    # The model's own call, counted once: what its estimate holds beyond its bricks' work.
    call_s = max(total_s - sum(brick["work_s"] * count for brick, count in uses), 0.0)
    rate = flops / (total_s - unknown_s) if total_s - unknown_s > 0 else None
    op_time: Counter[str] = Counter()
    for brick, count in uses:
        scale = brick["work_s"] / brick["time_s"] if brick["time_s"] else 0.0
        for op, seconds in brick["op_time_s"].items():
            op_time[op] += seconds * scale * count
    heaviest = sorted(uses, key=lambda use: -use[0]["work_s"] * use[1])[:TOP_BRICKS]
    return {
        "flops_per_s": rate,
        "peak_fraction": _fraction(rate, peak),
        "call_s": call_s,
        "unknown_flops_time_s": unknown_s,
        "unknown_flops_bricks": sum(count for _, count in unknown),
        "op_time_s": dict(op_time.most_common()),
        "top_bricks": [
            {
                "signature": brick["signature"],
                "label": brick["label"],
                "count": count,
                "time_s": brick["work_s"] * count,
                "share": brick["work_s"] * count / total_s if total_s > 0 else None,
            }
            for brick, count in heaviest
        ],
    }


def _fraction(rate: float | None, peak: Peak | None) -> float | None:
    return rate / peak.flops_per_s if rate is not None and peak is not None and peak.flops_per_s > 0 else None
