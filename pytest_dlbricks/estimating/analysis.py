"""Where the time goes: each brick's work (FLOPs and bytes of its layers) and the report fields built on it.

Per brick the report gains its FLOPs, bytes, achieved FLOP/s and the fraction of the machine's peak
that is; per model its total FLOPs, achieved FLOP/s, load time, time per operator type, the time in
bricks whose FLOPs are unknown, and its top bricks by time.

A brick of several layers is timed as a whole. Its time is shared among its layers in proportion to
a roofline estimate of each: the larger of its FLOPs at the measured GEMM peak and its bytes at the
measured bandwidth (bytes alone when its FLOPs are unknown). With one layer per brick the time per
operator type is exact.

Model figures follow composition: a brick counts its time less the cost of one inference call at the
machine's speed around its timing (``work_s``), and the model pays its own call once (``call_s``), so
a model's time by operator type plus ``call_s`` is its sequential estimate.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import onnx

from ..core.graph import ModelGraph
from ..cut.bricks import BrickSpec
from ..cut.cutting import BrokenBrick, ModelPlan
from ..cut.flops import node_cost
from ..timing.overhead import CallOverhead
from ..timing.probes import Peak, RunMeasurements

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
                (len(brick.inputs), brick.output_count),
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


@dataclass(frozen=True)
class BrickAnalysis:
    """A brick's work, and its throughput as timed (one whole inference call, as benchmarked)."""

    label: str | None
    flops: int | None
    bytes: int | None
    unknown_flops_ops: list[str]
    flops_per_s: float | None
    peak_fraction: float | None
    #: The brick's time by operator type of its layers.
    op_time_s: dict[str, float] | None
    #: What the brick adds to a model's sequential estimate, as composition counts it.
    work_s: float | None

    def as_json(self) -> dict[str, Any]:
        # Its fields copied one level deep, as deep as they go: dataclasses.asdict's recursive copy took 0.15 s of a
        # re-run of 44 models (4,786 entries), this 0.01 s.
        op_time_s = None if self.op_time_s is None else dict(self.op_time_s)
        return {**vars(self), "unknown_flops_ops": list(self.unknown_flops_ops), "op_time_s": op_time_s}


@dataclass(frozen=True)
class BrickUse:
    """One distinct brick as a model uses it: ``count`` times, at ``time_s`` each."""

    signature: str
    time_s: float | None
    analysis: BrickAnalysis
    count: int


@dataclass(frozen=True)
class TopBrick:
    signature: str
    label: str | None
    count: int
    time_s: float
    share: float | None


@dataclass(frozen=True)
class ModelTimes:
    """Figures of a model that need every brick's time: all None for an incomplete model."""

    flops_per_s: float | None = None
    peak_fraction: float | None = None
    #: The model's own call, counted once: what its estimate holds beyond its bricks' work.
    call_s: float | None = None
    unknown_flops_time_s: float | None = None
    unknown_flops_bricks: int | None = None
    op_time_s: dict[str, float] | None = None
    top_bricks: list[TopBrick] | None = None


@dataclass(frozen=True)
class ModelAnalysis:
    """A model's work, load time and, when complete, where its time goes."""

    load_s: float | None
    flops: int
    bytes: int
    #: Why onnxruntime could not create a session for the model, when it could not.
    load_error: str | None
    times: ModelTimes

    def as_json(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"load_s": self.load_s, "flops": self.flops, "bytes": self.bytes}
        if self.load_error is not None:
            fields["load_error"] = self.load_error
        fields.update(dataclasses.asdict(self.times))
        return fields


def brick_analysis(
    time_s: float | None,
    work: BrickWork | None,
    peak: Peak | None,
    overhead: CallOverhead,
    reference_s: float | None = None,
) -> BrickAnalysis:
    """``reference_s``: the reference call's time around the brick's timing (see
    :meth:`.overhead.CallOverhead.of_brick`)."""
    flops = work.flops if work is not None else None
    rate = flops / time_s if flops is not None and time_s else None
    op_time = work_s = None
    if work is not None and time_s is not None:
        op_time = split_time(work, time_s, peak)
        work_s = max(time_s - overhead.of_brick(*work.io, reference_s), 0.0)
    return BrickAnalysis(
        label=work.label if work is not None else None,
        flops=flops,
        bytes=work.bytes if work is not None else None,
        unknown_flops_ops=work.unknown_ops if work is not None else [],
        flops_per_s=rate,
        peak_fraction=_fraction(rate, peak),
        op_time_s=op_time,
        work_s=work_s,
    )


def model_analysis(
    path: str, sequential_s: float | None, complete: bool, uses: list[BrickUse], measured: RunMeasurements
) -> ModelAnalysis:
    flops = sum(use.analysis.flops * use.count for use in uses if use.analysis.flops is not None)
    return ModelAnalysis(
        load_s=measured.load_s.get(path),
        flops=flops,
        bytes=sum((use.analysis.bytes or 0) * use.count for use in uses),
        load_error=measured.load_errors.get(path),
        times=_model_times(sequential_s, complete, uses, measured.peak, flops),
    )


def _model_times(
    total_s: float | None, complete: bool, uses: list[BrickUse], peak: Peak | None, flops: int
) -> ModelTimes:
    if not complete or total_s is None or any(use.analysis.work_s is None for use in uses):
        return ModelTimes()
    work = {use.signature: use.analysis.work_s or 0.0 for use in uses}
    unknown = [use for use in uses if use.analysis.flops is None]
    unknown_s = sum(work[use.signature] * use.count for use in unknown)
    call_s = max(total_s - sum(work[use.signature] * use.count for use in uses), 0.0)
    rate = flops / (total_s - unknown_s) if total_s - unknown_s > 0 else None
    op_time: dict[str, float] = defaultdict(float)
    for use in uses:
        scale = work[use.signature] / use.time_s if use.time_s else 0.0
        for op, seconds in (use.analysis.op_time_s or {}).items():
            op_time[op] += seconds * scale * use.count
    heaviest = sorted(uses, key=lambda use: -work[use.signature] * use.count)[:TOP_BRICKS]
    return ModelTimes(
        flops_per_s=rate,
        peak_fraction=_fraction(rate, peak),
        call_s=call_s,
        unknown_flops_time_s=unknown_s,
        unknown_flops_bricks=sum(use.count for use in unknown),
        op_time_s=dict(sorted(op_time.items(), key=lambda item: item[1], reverse=True)),
        top_bricks=[
            TopBrick(
                signature=use.signature,
                label=use.analysis.label,
                count=use.count,
                time_s=work[use.signature] * use.count,
                share=work[use.signature] * use.count / total_s if total_s > 0 else None,
            )
            for use in heaviest
        ],
    )


def peak_fields(peak: Peak | None) -> dict[str, Any] | None:
    """The peak as the report records it."""
    return None if peak is None else {"flops_per_s": peak.flops_per_s, "bytes_per_s": peak.bytes_per_s, **peak.method}


def _fraction(rate: float | None, peak: Peak | None) -> float | None:
    return rate / peak.flops_per_s if rate is not None and peak is not None and peak.flops_per_s > 0 else None
