"""The brick result store: every measured brick time, kept by machine and settings, for later runs to reuse.

Layout; every file is versioned JSON written atomically (a temporary file renamed over the target), so
a reader, or a run interrupted at any point, never sees half a file::

    <store>/
      <cpu>-<cores>c-ort<version>-t<threads>-<optimization>-<key>/   one folder per machine and settings
        identity.json           {"version", "machine", "timing"}
        overhead.json           {"version", "method", "overhead"}: the inference call's cost composition takes off
        executor.json           {"version", "conditions", "measured_at", "detection"}: what the parallel
                                executor does here (see :func:`.probes.detect_executor`)
        calibration/<key>.json  {"version", "path", "key", "granularity", "work_s", "bytes", "call_s", "measured_s",
                                "layers"}: a calibration model as this machine timed it (see :mod:`.calibration`;
                                records kept before ``layers`` was lack it)
        bricks/<signature>.json {"version", "signature", "label", "stats", "provider", "measured_at", "precision",
                                "timed_out_s", "probe_s", "reference_s"}
      models/<key>.json         {"version", "path", "granularity", "dims", "layers", "windows", "edges", "io"}

One file per brick makes each result durable the moment it is measured, lets concurrent runs write
without locks (the last writer of a brick wins, with a whole file), and keeps a lookup to one read.
The call overhead is measured once per shelf and kept with its brick times, so that a run reusing
them composes the same estimates as the run that measured them; so is the detection of the parallel
executor, which takes most of a second, and is made again where the conditions it records differ.
Model files map each model to its bricks, so estimates can be composed for every machine in the store.
Records of another version, or that cannot be read or hold what no measurement gives (a value of
the wrong type, a time that is negative, zero or not finite, a statistic missing), count as absent:
the brick is measured again. Each shelf counts the records it discarded and repaired, so that the
run can say so (see :attr:`Shelf.discarded`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import networkx as nx

from .calibration import CalibrationRecord
from .composition import BrickCall, is_count
from .identity import Identity, digest
from .noise import margin_of_error
from .overhead import MEASUREMENT_METHOD, CallOverhead
from .probes import ExecutorDetection, PoolSlowdown
from .settings import STATISTICS

STORE_VERSION = 1
_BRICKS = "bricks"
_MODELS = "models"
_IDENTITY = "identity.json"
_OVERHEAD = "overhead.json"
_EXECUTOR = "executor.json"
_CALIBRATION = "calibration"


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
        return cls(detection, _moment(data["measured_at"]), data["conditions"])


class Shelf:
    """The brick times of one machine and settings: a folder of the store, created on the first write.

    :attr:`discarded` counts the records found unusable, by kind (``brick times``, ``call overhead``),
    and :attr:`repaired` those written again (``identity``).
    """

    def __init__(self, path: Path, identity: Identity) -> None:
        self.path = path
        self.identity = identity
        self.discarded: Counter[str] = Counter()
        self.repaired: Counter[str] = Counter()
        self._identified = False

    def get(
        self,
        signature: str,
        *,
        max_age_s: float = math.inf,
        now: datetime | None = None,
        statistic: str | None = None,
    ) -> StoredBrick | None:
        """The stored time of a brick, unless absent, unusable (without ``statistic``, when given) or
        older than ``max_age_s``."""
        path = self.path / _BRICKS / f"{signature}.json"
        try:
            data = _read_record(path)
            if data is None:
                return None
            brick = StoredBrick.from_json(data)
            if brick.signature != signature or (statistic is not None and statistic not in brick.stats):
                raise ValueError("not the record of this brick, in this statistic")
        except (KeyError, TypeError, ValueError, AttributeError):
            self.discarded["brick times"] += 1
            return None
        if brick.age_s(now or datetime.now(UTC)) > max_age_s:
            return None
        return brick

    def put(self, brick: StoredBrick) -> None:
        """Save one brick's time at once, atomically."""
        self._identify()
        write_json(self.path / _BRICKS / f"{brick.signature}.json", brick.to_json())

    def _identify(self) -> None:
        """Write the shelf's identity unless it holds it already: once per shelf object, on its first write."""
        if self._identified:
            return
        expected = {
            "version": STORE_VERSION,
            "machine": dict(self.identity.machine),
            "timing": dict(self.identity.timing),
        }
        path = self.path / _IDENTITY
        if _read(path) != json.loads(json.dumps(expected)):
            if path.exists():
                self.repaired["identity"] += 1
            write_json(path, expected)
        self._identified = True

    def repair(self) -> None:
        """Write the identity of a shelf already in the store again if it is damaged, so that the shelf's
        brick times stay listed (``python -m pytest_dlbricks report``) even in a run that writes nothing."""
        if self.path.is_dir():
            self._identify()

    def get_overhead(self) -> CallOverhead | None:
        """The cost of an inference call measured with the shelf's bricks, so that reused brick times
        compose exactly as when they were measured."""
        try:
            data = _read_record(self.path / _OVERHEAD)
            if data is None:
                return None
            if data["version"] != STORE_VERSION:
                raise ValueError(f"store version {data['version']!r}")
            method = data.get("method", 1)  # records of method 1 did not say so
            if type(method) is not int or not 1 <= method <= MEASUREMENT_METHOD:
                raise ValueError(f"measurement method {method!r}")
            if method < MEASUREMENT_METHOD:
                return None  # measured an older way: not damaged, measured again
            recorded = data["overhead"]
            names = [field.name for field in dataclasses.fields(CallOverhead)]
            # Records written before the reference call was timed beside the costs lack it (see
            # :meth:`.engine.DLBricksRun.measure_overhead`).
            if not isinstance(recorded, dict) or sorted({**recorded, "reference_s": None}) != sorted(names):
                raise ValueError("not the fields of a call overhead")
            parallel, reference = recorded["parallel_fixed_s"], recorded.get("reference_s")
            return CallOverhead(
                fixed_s=_seconds(recorded["fixed_s"]),
                per_input_s=_seconds(recorded["per_input_s"]),
                per_output_s=_seconds(recorded["per_output_s"]),
                parallel_fixed_s=None if parallel is None else _seconds(parallel),
                timing_s=_seconds(recorded["timing_s"]),
                reference_s=None if reference is None else _seconds(reference, positive=True),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            self.discarded["call overhead"] += 1
            return None

    def put_overhead(self, overhead: CallOverhead) -> None:
        self._identify()
        record = {"version": STORE_VERSION, "method": MEASUREMENT_METHOD, "overhead": dataclasses.asdict(overhead)}
        write_json(self.path / _OVERHEAD, record)

    def get_executor(self, conditions: Mapping[str, Any]) -> StoredExecutor | None:
        """The parallel executor's detection made on this shelf's machine and settings under ``conditions``
        (see :func:`.probes.detection_conditions`); None when there is none, or none usable."""
        try:
            data = _read_record(self.path / _EXECUTOR)
            if data is None:
                return None
            stored = StoredExecutor.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            self.discarded["executor detection"] += 1
            return None
        # Made another way (an older method) or with other threads: not damaged, made again.
        return stored if stored.conditions == json.loads(json.dumps(dict(conditions))) else None

    def put_executor(self, stored: StoredExecutor) -> None:
        self._identify()
        write_json(self.path / _EXECUTOR, stored.to_json())

    def calibration(self) -> list[CalibrationRecord]:
        """The calibration models measured with this shelf's brick times; a damaged record counts as absent."""
        return list(self._calibration_files().values())

    def _calibration_files(self, *, count_damage: bool = True) -> dict[Path, CalibrationRecord]:
        """The usable calibration records by file; damaged ones counted as discarded if ``count_damage``."""
        found = {}
        for path in sorted((self.path / _CALIBRATION).glob("*.json")):
            try:
                data = _read_record(path)
                if data["version"] != STORE_VERSION:
                    raise ValueError(f"store version {data['version']!r}")
                moved, granularity, layers = data["bytes"], data["granularity"], data.get("layers")
                counts = (moved, granularity) if layers is None else (moved, granularity, layers)
                if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
                    raise ValueError("bytes, granularity or layers is not a count")
                found[path] = CalibrationRecord(
                    path=_text(data["path"]),
                    key=_text(data["key"]),
                    granularity=granularity,
                    work_s=_seconds(data["work_s"]),
                    bytes=moved,
                    call_s=_seconds(data["call_s"]),
                    measured_s=_seconds(data["measured_s"], positive=True),
                    layers=layers,
                )
            except (KeyError, TypeError, ValueError, AttributeError):
                self.discarded["calibration model"] += count_damage
        return found

    def put_calibration(self, record: CalibrationRecord) -> None:
        """Keep a calibration model's record, over those the same model left at the same granularity: the
        same bricks, or the same path cut otherwise (by an older version, or before the file changed)."""
        self._identify()
        kept = self.path / _CALIBRATION / f"{record.key}-g{record.granularity}.json"
        older = self._calibration_files(count_damage=False)
        write_json(kept, {"version": STORE_VERSION, **dataclasses.asdict(record)})
        for path, stale in older.items():
            if path != kept and (stale.path, stale.granularity) == (record.path, record.granularity):
                path.unlink(missing_ok=True)

    def bricks(self) -> dict[str, StoredBrick]:
        """Every usable brick time on this shelf, by signature."""
        found = {}
        for path in sorted((self.path / _BRICKS).glob("*.json")):
            brick = self.get(path.stem)
            if brick is not None:
                found[brick.signature] = brick
        return found


class BrickStore:
    """A store folder: shelves of brick times by machine and settings, and the models cut into bricks."""

    def __init__(self, root: Path) -> None:
        self.root = root
        #: Records found unusable, by kind: ``shelves`` (an identity that cannot be read) and ``models``
        #: when listing; ``repaired``, ``models`` written again over a damaged record.
        self.discarded: Counter[str] = Counter()
        self.repaired: Counter[str] = Counter()

    def shelf(self, identity: Identity) -> Shelf:
        machine, timing = identity.machine, identity.timing
        name = (
            f"{_slug(str(machine.get('cpu')))}-{machine.get('cores')}c-ort{timing.get('onnxruntime')}"
            f"-t{timing.get('intra_op_threads')}-{timing.get('optimization')}-{identity.key}"
        )
        return Shelf(self.root / name, identity)

    def shelves(self) -> list[Shelf]:
        """Every shelf in the store, in the order of their folder names."""
        shelves = []
        for identity_file in sorted(self.root.glob(f"*/{_IDENTITY}")):
            data = _read(identity_file)
            try:
                if data["version"] != STORE_VERSION:
                    raise ValueError(f"store version {data['version']!r}")
                shelves.append(Shelf(identity_file.parent, Identity(dict(data["machine"]), dict(data["timing"]))))
            except (KeyError, TypeError, ValueError, AttributeError):
                self.discarded["shelves"] += 1
        return shelves

    def save_model(self, manifest: ModelManifest) -> None:
        """Save a model's bricks, unless the store has them already (a read costs less than a write)."""
        path = self.root / _MODELS / f"{manifest.key}.json"
        data = manifest.to_json()
        found = _read(path)
        if found != data:
            if path.exists() and not _is_model(found):
                self.repaired["models"] += 1
            write_json(path, data)

    def models(self) -> list[ModelManifest]:
        """Every readable model, sorted by path, granularity and dimensions."""
        found = []
        for path in self.root.glob(f"{_MODELS}/*.json"):
            data = _read(path)
            if _is_model(data):
                found.append(ModelManifest.from_json(data))
            else:
                self.discarded["models"] += 1
        return sorted(found, key=lambda m: (m.path, m.granularity, sorted(m.dims.items())))


def times_of(bricks: Mapping[str, StoredBrick], statistic: str) -> dict[str, float]:
    """Brick times by signature for one statistic, skipping bricks that lack it."""
    return {signature: brick.stats[statistic] for signature, brick in bricks.items() if statistic in brick.stats}


def references_of(bricks: Mapping[str, StoredBrick]) -> dict[str, float]:
    """The reference call's time around each brick's timing, by signature, where the record has it."""
    return {signature: brick.reference_s for signature, brick in bricks.items() if brick.reference_s is not None}


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # nested deeper than the parser goes: damaged too
        return None


def _is_model(data: Any) -> bool:
    try:
        ModelManifest.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):
        return False
    return True


def _read_record(path: Path) -> Any:
    """The JSON document at ``path``; None when there is none; ``ValueError`` when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error}") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{path} is nested deeper than JSON is read") from None


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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "cpu"


def write_json(path: Path, data: object) -> None:
    """Write ``data`` as JSON so that readers never see a half-written file (temporary file, then rename)."""
    write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write ``text`` so that readers never see a half-written file (temporary file, then rename)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` so that readers never see a half-written file (temporary file, then rename);
    a link at ``path`` is replaced, never written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; a report is not
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
