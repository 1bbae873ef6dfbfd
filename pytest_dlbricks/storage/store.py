"""The brick result store: every measured brick time, kept by machine and settings, for later runs to reuse.

Layout; every file is versioned JSON written atomically (a temporary file renamed over the target), so
a reader, or a run interrupted at any point, never sees half a file::

    <store>/
      <cpu>-<cores>c-ort<version>-t<threads>-<optimization>-<key>/   one folder per machine and settings
        identity.json           {"version", "machine", "timing"}
        overhead.json           {"version", "method", "overhead"}: the inference call's cost composition takes off
        executor.json           {"version", "conditions", "measured_at", "detection"}: what the parallel
                                executor does here (see :func:`.probes.detect_executor`)
        runs.json               {"version", "runs"}: the machine's speed, load and memory parts of the verdict of each
                                of the last :data:`MAX_RUNS` runs that timed bricks here, with when they timed them
        peak.json               {"version", "measured_at", "peak"}: the GEMM FLOP/s and bandwidth this machine
                                reaches with the shelf's settings (see :func:`.probes.measure_peak`)
        calibration/<key>.json  {"version", "path", "key", "granularity", "work_s", "bytes", "call_s", "measured_s",
                                "layers", "statistic"}: a calibration model as this machine timed it (see
                                :mod:`.calibration`; records kept before ``layers`` or ``statistic`` were lack them)
        bricks/<signature>.json {"version", "signature", "label", "stats", "provider", "measured_at", "precision",
                                "timed_out_s", "probe_s", "reference_s", "cache_flush_bytes",
                                "cold_input_bytes", "timing_method"}
      models/<key>.json         {"version", "path", "granularity", "dims", "layers", "windows", "edges", "io"}

One file per brick makes each result durable the moment it is measured, lets concurrent runs write
without locks (the last writer of a brick wins, with a whole file), and keeps a lookup to one read.
The call overhead is measured once per shelf and kept with its brick times, so that a run reusing
them composes the same estimates as the run that measured them; so is the detection of the parallel
executor, which takes most of a second, and is made again where the conditions it records differ,
and the machine's peak, which takes a quarter of a second of every run that times a brick.
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
import re
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..core.identity import Identity
from ..estimating.calibration import CalibrationRecord
from ..timing.overhead import MEASUREMENT_METHOD, CallOverhead
from .atomic_files import write_json
from .store_records import (
    STORE_VERSION,
    ModelManifest,
    StoredBrick,
    StoredExecutor,
    StoredPeak,
    StoredRun,
    _seconds,
    _text,
)

_BRICKS = "bricks"
_MODELS = "models"
_IDENTITY = "identity.json"
_OVERHEAD = "overhead.json"
_EXECUTOR = "executor.json"
_PEAK = "peak.json"
_RUNS = "runs.json"
#: Runs whose verdict a shelf keeps: the bricks of older ones have mostly been timed again since.
MAX_RUNS = 100
_CALIBRATION = "calibration"


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
            # Records written before the reference call was timed beside the costs lack it, and those written
            # before the parallel executor's cost per layer was measured lack that (see
            # :meth:`.engine.DLBricksRun.measure_overhead`).
            optional = {"reference_s": None, "parallel_layer_s": None}
            if not isinstance(recorded, dict) or sorted({**optional, **recorded}) != sorted(names):
                raise ValueError("not the fields of a call overhead")
            parallel, reference = recorded["parallel_fixed_s"], recorded.get("reference_s")
            parallel_layer = recorded.get("parallel_layer_s")
            return CallOverhead(
                fixed_s=_seconds(recorded["fixed_s"]),
                per_input_s=_seconds(recorded["per_input_s"]),
                per_output_s=_seconds(recorded["per_output_s"]),
                parallel_fixed_s=None if parallel is None else _seconds(parallel),
                parallel_layer_s=None if parallel_layer is None else _seconds(parallel_layer),
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

    def get_peak(self) -> StoredPeak | None:
        """The machine's peak an earlier run measured with this shelf's machine and settings; None when there is
        none, or none usable."""
        try:
            data = _read_record(self.path / _PEAK)
            return None if data is None else StoredPeak.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            self.discarded["machine peak"] += 1
            return None

    def put_peak(self, stored: StoredPeak) -> None:
        self._identify()
        write_json(self.path / _PEAK, stored.to_json())

    def get_runs(self) -> list[StoredRun]:
        """What the runs that timed this shelf's bricks found of the machine, oldest first; none when the record
        is absent or damaged."""
        try:
            data = _read_record(self.path / _RUNS)
            if data is None:
                return []
            if data["version"] != STORE_VERSION:
                raise ValueError(f"store version {data['version']!r}")
            return [StoredRun.from_json(run) for run in data["runs"]]
        except (KeyError, TypeError, ValueError, AttributeError):
            self.discarded["run verdicts"] += 1
            return []

    def put_run(self, run: StoredRun) -> None:
        """Keep ``run`` after the runs kept (a damaged record starts again), the last :data:`MAX_RUNS`."""
        self._identify()
        runs = [*self.get_runs(), run][-MAX_RUNS:]
        write_json(self.path / _RUNS, {"version": STORE_VERSION, "runs": [kept.to_json() for kept in runs]})

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
                    statistic=_text(data.get("statistic", "median")),
                )
            except (KeyError, TypeError, ValueError, AttributeError):
                self.discarded["calibration model"] += count_damage
        return found

    def put_calibration(self, record: CalibrationRecord) -> None:
        """Keep a calibration model's record, over those the same model left at the same granularity: the
        same bricks, or the same path cut otherwise (by an older version, or before the file changed)."""
        self._identify()
        # The default statistic's records keep the name they had before records kept their statistic.
        statistic = "" if record.statistic == "median" else f"-{record.statistic}"
        kept = self.path / _CALIBRATION / f"{record.key}-g{record.granularity}{statistic}.json"
        older = self._calibration_files(count_damage=False)
        write_json(kept, {"version": STORE_VERSION, **dataclasses.asdict(record)})
        same = (record.path, record.granularity, record.statistic)
        for path, stale in older.items():
            if path != kept and (stale.path, stale.granularity, stale.statistic) == same:
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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "cpu"
