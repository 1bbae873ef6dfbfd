"""What the brick store keeps, as typed records read back from its JSON: a brick's times, a cut model's manifest,
the executor's detection; a damaged record reads as absent."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import networkx as nx

from ..core.identity import digest
from ..core.noise import margin_of_error
from ..core.settings import STATISTICS
from ..estimating.composition import BrickCall, is_count
from ..timing.neighbours import TIMING_METHOD
from ..timing.probes import ExecutorDetection, Peak, PoolSlowdown

STORE_VERSION = 1


@dataclass(frozen=True)
class StoredBrick:
    """One brick's statistics in seconds, as the session recorded them, and when they were measured."""

    signature: str
    label: str
    stats: Mapping[str, float]
    provider: str
    measured_at: datetime
    #: Relative margin of error of the mean (95% confidence) the brick reached; None when unknown.
    precision: float | None = None
    #: The time limit (seconds) the brick ran out of before reaching the precision it was timed to; None
    #: when it reached it (or the record is older): timed again within that limit, it would stop there again.
    timed_out_s: float | None = None
    #: The brick's time its precision was sized from when it was timed (its fastest probe call), so that
    #: reuse sizes it from the same time; None in older records, sized then from its fastest round.
    probe_s: float | None = None
    #: The reference call's time around the brick's timing, to which its call cost is scaled (see
    #: :meth:`.overhead.CallOverhead.of_brick`); None in older records, composed with the cost as measured.
    reference_s: float | None = None
    #: Bytes read before each timed call to push the brick's weights out of the caches (see :mod:`.caches`);
    #: None when none were (or the record is older).
    cache_flush_bytes: int | None = None
    #: The bytes read between the writers of the brick's cold inputs and the brick, at its furthest place,
    #: which its calls were timed with (see :meth:`.RunState.cold_inputs`); None when it had none (or the
    #: record is older).
    cold_input_bytes: int | None = None
    #: How its calls were timed (see :data:`.neighbours.TIMING_METHOD`); 1 in records written before there was more
    #: than one way.
    timing_method: int = 1

    def age_s(self, now: datetime) -> float:
        return (now - self.measured_at).total_seconds()

    def timed_out_within(self, limit_s: float) -> bool:
        """Whether the brick fell short of its precision within a time limit at least ``limit_s``."""
        return self.timed_out_s is not None and self.timed_out_s >= limit_s * (1 - 1e-9)

    def precise_enough(self, requested: float | None) -> bool:
        """Whether these times satisfy a run asking for ``requested`` precision (None asks for none).

        The precision reached is computed again from the statistics where they allow it: records of
        older versions hold the precision their run asked for, not the one it reached."""
        reached = margin_of_error(self.stats)
        reached = self.precision if reached is None else reached
        return requested is None or (reached is not None and reached <= requested * (1 + 1e-9))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STORE_VERSION,
            "signature": self.signature,
            "label": self.label,
            "stats": dict(self.stats),
            "provider": self.provider,
            "measured_at": self.measured_at.isoformat(timespec="seconds"),
            "precision": self.precision,
            "timed_out_s": self.timed_out_s,
            "probe_s": self.probe_s,
            "reference_s": self.reference_s,
            "cache_flush_bytes": self.cache_flush_bytes,
            "cold_input_bytes": self.cold_input_bytes,
            "timing_method": self.timing_method,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoredBrick:
        """The brick a record holds; ``ValueError`` (or ``KeyError``, ``TypeError``) for anything a
        measurement cannot have written."""
        if data["version"] != STORE_VERSION:
            raise ValueError(f"store version {data['version']!r}")
        measured_at = _moment(data["measured_at"])
        stats = data["stats"]
        if not isinstance(stats, dict) or not all(isinstance(name, str) for name in stats):
            raise TypeError("stats is not a table of statistics")
        precision, timed_out_s = data.get("precision"), data.get("timed_out_s")
        probe_s, reference_s = data.get("probe_s"), data.get("reference_s")
        flushed, cold = data.get("cache_flush_bytes"), data.get("cold_input_bytes")
        for what, count in (("cache flush", flushed), ("cold inputs' distance", cold)):
            if count is not None and (type(count) is not int or count <= 0):
                raise ValueError(f"{what} of {count!r} bytes")
        method = data.get("timing_method", 1)
        if type(method) is not int or not 1 <= method <= TIMING_METHOD:
            raise ValueError(f"timing method {method!r}")
        return cls(
            signature=_text(data["signature"]),
            label=_text(data["label"]),
            stats={name: _seconds(value, positive=name in STATISTICS) for name, value in stats.items()},
            provider=_text(data["provider"]),
            measured_at=measured_at,
            precision=None if precision is None else _seconds(precision),
            timed_out_s=None if timed_out_s is None else _seconds(timed_out_s, positive=False),
            probe_s=None if probe_s is None else _seconds(probe_s, positive=True),
            reference_s=None if reference_s is None else _seconds(reference_s, positive=True),
            cache_flush_bytes=flushed,
            cold_input_bytes=cold,
            timing_method=method,
        )


@dataclass(frozen=True)
class ModelManifest:
    """A model as cut into bricks: what composing its estimate needs, without the model itself."""

    path: str
    granularity: int
    dims: Mapping[str, int]
    layers: int
    #: Each window in topological order: its brick's signature and numbers of inputs and outputs; None
    #: for a window with no time (a layer that cannot be a brick, a brick the provider cannot run).
    windows: tuple[BrickCall, ...]
    #: Window indices; an edge means the second window reads a value of the first.
    edges: tuple[tuple[int, int], ...] = ()
    #: The model's own inputs and outputs (its inference call costs more with more of them).
    io: tuple[int, int] = (1, 1)

    @property
    def key(self) -> str:
        return digest({"path": self.path, "granularity": self.granularity, "dims": dict(self.dims)})[:16]

    @property
    def graph(self) -> nx.DiGraph:
        """The brick graph, as composition takes it."""
        graph = nx.DiGraph()
        graph.add_nodes_from(range(len(self.windows)))
        graph.add_edges_from(self.edges)
        return graph

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STORE_VERSION,
            "path": self.path,
            "granularity": self.granularity,
            "dims": dict(sorted(self.dims.items())),
            "layers": self.layers,
            "windows": [None if call is None else list(call) for call in self.windows],
            "edges": [list(edge) for edge in self.edges],
            "io": list(self.io),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelManifest:
        if data["version"] != STORE_VERSION:
            raise ValueError(f"store version {data['version']!r}")
        inputs, outputs = data["io"]
        manifest = cls(
            path=_text(data["path"]),
            granularity=int(data["granularity"]),
            dims={str(name): int(size) for name, size in data["dims"].items()},
            layers=int(data["layers"]),
            windows=tuple(None if w is None else (_text(w[0]), int(w[1]), int(w[2])) for w in data["windows"]),
            edges=tuple((int(a), int(b)) for a, b in data["edges"]),
            io=(int(inputs), int(outputs)),
        )
        if not is_brick_graph(manifest.graph, len(manifest.windows)):
            raise ValueError("the edges do not join the windows into a graph without cycles")
        return manifest


@dataclass(frozen=True)
class StoredExecutor:
    """A detection of the parallel executor, when it was made, and under which conditions."""

    detection: ExecutorDetection
    measured_at: datetime
    conditions: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STORE_VERSION,
            "conditions": dict(self.conditions),
            "measured_at": self.measured_at.isoformat(timespec="seconds"),
            "detection": dataclasses.asdict(self.detection),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoredExecutor:
        """The detection a record holds; ``ValueError`` (or ``KeyError``, ``TypeError``) for anything a
        detection cannot have written."""
        if data["version"] != STORE_VERSION:
            raise ValueError(f"store version {data['version']!r}")
        found, pool = data["detection"], data["detection"]["pool"]
        if pool is not None:
            layer_s = pool["layer_s"]
            pool = PoolSlowdown(
                factor=_seconds(pool["factor"], positive=True),
                layer_s=None if layer_s is None else _seconds(layer_s),
                sessions=[(_seconds(s, positive=True), _seconds(p, positive=True)) for s, p in pool["sessions"]],
                rounds=_count(pool["rounds"]),
                graph=_text(pool["graph"]),
            )
        if not isinstance(found["concurrent"], bool) or not isinstance(data["conditions"], dict):
            raise TypeError("not the fields of a detection")
        detection = ExecutorDetection(
            concurrent=found["concurrent"],
            threads=_count(found["threads"]),
            sequential_s=_seconds(found["sequential_s"], positive=True),
            parallel_s=_seconds(found["parallel_s"], positive=True),
            ratio=_seconds(found["ratio"], positive=True),
            rounds=_count(found["rounds"]),
            graph=_text(found["graph"]),
            pool=pool,
            nodes_at_once=_nodes_at_once(found.get("nodes_at_once")),
        )
        return cls(detection, _moment(data["measured_at"]), _finite(data["conditions"]))


def times_of(bricks: Mapping[str, StoredBrick], statistic: str) -> dict[str, float]:
    """Brick times by signature for one statistic, skipping bricks that lack it."""
    return {signature: brick.stats[statistic] for signature, brick in bricks.items() if statistic in brick.stats}


def references_of(bricks: Mapping[str, StoredBrick]) -> dict[str, float]:
    """The reference call's time around each brick's timing, by signature, where the record has it."""
    return {signature: brick.reference_s for signature, brick in bricks.items() if brick.reference_s is not None}


@dataclass(frozen=True)
class StoredPeak:
    """The machine's peak as a run measured it (see :func:`.probes.measure_peak`), and when."""

    peak: Peak
    measured_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STORE_VERSION,
            "measured_at": self.measured_at.isoformat(timespec="seconds"),
            "peak": dataclasses.asdict(self.peak),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoredPeak:
        """The peak a record holds; ``ValueError`` (or ``KeyError``, ``TypeError``) for anything a measurement
        cannot have written."""
        if data["version"] != STORE_VERSION:
            raise ValueError(f"store version {data['version']!r}")
        found = data["peak"]
        if not isinstance(found["method"], dict):
            raise TypeError("not the fields of a peak")
        peak = Peak(
            flops_per_s=_seconds(found["flops_per_s"], positive=True),
            bytes_per_s=_seconds(found["bytes_per_s"], positive=True),
            method=_finite(found["method"]),
        )
        return cls(peak, datetime.fromisoformat(_text(data["measured_at"])))


@dataclass(frozen=True)
class StoredRun:
    """What a run that timed bricks found of the machine while it timed them (its verdict's speed, load and memory
    parts, see :mod:`.verdict`), and from when to when it timed them: a later run reusing those bricks says it too."""

    first: datetime
    last: datetime
    speed: float | None
    load: float | None
    #: None where the run timed no brick with its weights out of the caches, or the record is older.
    memory: float | None = None
    #: The reference call's seconds in the machine's fast state as the run met it (see
    #: :meth:`.SpeedTrace.own_fast_s`); None where it took too few moments, or the record is older.
    fast_s: float | None = None
    #: Why the run's verdict did not trust its estimates (its threads lost their cores, see :mod:`.verdict`); None
    #: where it did, or the record is older. Its bricks are timed again rather than reused.
    untrusted: str | None = None

    def covers(self, when: datetime) -> bool:
        return self.first <= when <= self.last

    def to_json(self) -> dict[str, Any]:
        return {
            "first": self.first.isoformat(timespec="seconds"),
            "last": self.last.isoformat(timespec="seconds"),
            "speed": self.speed,
            "load": self.load,
            "memory": self.memory,
            "fast_s": self.fast_s,
            "untrusted": self.untrusted,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoredRun:
        """The run a record holds; ``ValueError`` (or ``KeyError``, ``TypeError``) for anything a run cannot have
        written."""
        speed, load, memory, fast = data["speed"], data["load"], data.get("memory"), data.get("fast_s")
        untrusted = data.get("untrusted")
        first, last = datetime.fromisoformat(_text(data["first"])), datetime.fromisoformat(_text(data["last"]))
        if last < first:
            raise ValueError("a run that ended before it began")
        return cls(
            first,
            last,
            None if speed is None else _seconds(speed),
            None if load is None else _seconds(load),
            None if memory is None else _seconds(memory),
            None if fast is None else _seconds(fast, positive=True),
            None if untrusted is None else _text(untrusted),
        )


def _finite(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as it is, where a report can carry it: no NaN or infinity anywhere within (a peak's method went
    into the report whole, whose JSON then could not be written)."""
    json.dumps(value, allow_nan=False)  # ValueError for a number no JSON holds
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


def _count(value: object) -> int:
    """A count of runs or threads: a whole number above zero."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{value!r} is not a count")
    return value


def _nodes_at_once(value: object) -> int | None:
    """Nodes a profile showed running at once: a whole number, zero included, or None (not profiled)."""
    if value is not None and not is_count(value):
        raise ValueError(f"{value!r} is not a number of nodes")
    return value


def _moment(text: object) -> datetime:
    """A time a record was measured at, with its time zone."""
    moment = datetime.fromisoformat(_text(text))
    if moment.tzinfo is None:
        raise ValueError("measured_at has no time zone")
    return moment


def _seconds(value: object, *, positive: bool = False) -> float:
    """A number a measurement can give: finite, not negative (or, ``positive``, above zero)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        finite = False
    if not finite or value < 0 or (positive and value == 0):
        raise ValueError(f"{value!r} is no measurement")
    return value


def is_brick_graph(graph: nx.DiGraph, windows: int) -> bool:
    """Whether ``graph`` joins windows ``0..windows-1``, and only those, without a cycle."""
    return set(graph) == set(range(windows)) and nx.is_directed_acyclic_graph(graph)
