"""Models already cut, kept in the store: an unchanged model is not loaded, optimized and cut again.

Collecting a model costs far more than skipping its bricks: onnxruntime optimizes it (with the
default ``--dlbricks-cut=optimized``), a reference run learns the shapes inference leaves unknown,
then it is cut and its work counted. A run whose bricks all come from the store would spend most of
its time there, so each model's plan (its bricks, brick graph, guessed dimensions, what it ran on)
and its bricks' work are kept beside the brick times of the machine and settings
they were cut for, one JSON file per model; a model onnxruntime refused keeps the refusal instead, so that a
model left broken in the tree does not cost every run a load. A plan is found again by a key over everything that
decides it: the model file's bytes (and the size and modification time of its external data), the
sweep point (dimensions and numeric type), the sample inputs, granularity, cut and validation, onnx's version, and
pytest-dlbricks' own source, so that any change to the code that loads and cuts models makes new
plans. The shelf already stands for the machine, onnxruntime's version, providers, threads and
optimization level.

The files hold no code: a header line with the plan's version and the SHA-256 of the JSON below it, then
protobuf messages as base64 of their bytes, arrays as their type, shape and base64 of their bytes, read with
``numpy.frombuffer`` when a brick is built (see :class:`EncodedArrays`; ``numpy.load`` parsed each ``.npy``
header with Python's compiler: a third of a second of a re-run of 42 models' 3,588 values). A file that cannot
be read, whose bytes changed since it was written, or whose bricks do not match their work and graph, is a
miss, counted in :attr:`PlanCache.discarded`: the model is loaded as usual. The digest stands for computing
every brick's signature again: reading the zoo's 43 kept plans took 0.35 s with it, 0.23 s now.

Every change to a model, and every version of pytest-dlbricks, leaves a plan behind: a model's history in CI
would grow the store without end. A run that reads a plan marks it used (its modification time); a run
removes the plans no run used for :data:`UNUSED_FOR_S` (see :meth:`PlanCache.prune`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import os
import re
import time
from collections import ChainMap
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ..core.errors import RuntimeRefusal
from ..core.graph import TensorSpec
from ..core.identity import digest
from ..core.settings import LARGEST_NUMBER, Settings
from ..core.sweeps import SweepPoint
from ..cut.bricks import BrickSpec
from ..cut.cutting import Brick, BrokenBrick, ModelPlan
from ..cut.screening import check_model_file
from ..estimating.analysis import BrickWork, LayerWork
from .atomic_files import write_bytes
from .file_digests import FileDigests
from .store_records import is_brick_graph

#: The point of a run that sweeps nothing.
ONE_POINT = SweepPoint()

PLAN_VERSION = 6
#: The sub-folder of cuts kept by graph, weights aside.
GRAPHS = "graphs"
#: A kept plan no run has read or written for this long is removed (see :meth:`PlanCache.prune`).
UNUSED_FOR_S = 30 * 24 * 3600
#: The name of a plan file: its key, a SHA-256. Nothing else in the plans' folders is ever removed.
_PLAN_NAME = re.compile(r"[0-9a-f]{64}\.json")
#: What a refusal for want of memory, disk or access says (onnxruntime writes the optimized graph to a folder of its
#: own, see :func:`~pytest_dlbricks.core.runtime.optimize_model`): it may not recur (see :meth:`PlanCache.put_refusal`).
_RESOURCES = re.compile(
    r"alloc|memory|space|disk|permission|denied|resource|read-only|open files|director|temporar", re.IGNORECASE
)
#: What reading a damaged plan may raise: from JSON (nested deeper than the parser goes too), base64,
#: protobuf, numpy's format (a header claiming more memory than there is), or a wrong type.
_DAMAGE = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    AttributeError,
    EOFError,
    OverflowError,
    DecodeError,
    RecursionError,
    MemoryError,
)


@dataclass(frozen=True)
class CutModel:
    """A model's plan and the work of all its distinct bricks, as collection makes them."""

    plan: ModelPlan
    work: Mapping[str, BrickWork]


class PlanCache:
    """Cut models in a folder of the store (a shelf's ``plans/``), by a key over what decides them, and in its
    ``graphs/`` by a key over all that but the weights' values, for variants of the same graph (see
    :mod:`.weightless`); with no folder, only the cuts of this run's models, by the latter."""

    def __init__(self, folder: Path | None, settings: Settings, digests: FileDigests | None = None) -> None:
        self.folder = folder
        self.settings = settings
        #: Plans found unusable (and cut again).
        self.discarded = 0
        #: The model files' digests, kept so that an unchanged file is not read again to find its plan.
        self.digests = digests or FileDigests(None)
        #: The cuts this run made, by :meth:`graph_key`, as plain data.
        self._cut_now: dict[str, dict[str, Any]] = {}
        #: The bricks of the plans read, by signature: a brick many models use is built once.
        self._bricks: dict[str, BrickSpec] = {}

    def get(
        self, path: Path, display_path: str, point: SweepPoint = ONE_POINT, samples: str | None = None
    ) -> CutModel | None:
        """The model at ``path`` as cut before at ``point`` with these settings, under its current name
        (``display_path`` as pytest shows the file), on the sample inputs of digest ``samples``; None if never.
        Raises :class:`~pytest_dlbricks.core.errors.RuntimeRefusal` where onnxruntime refused it then."""
        if self.folder is None:
            return None
        key = self.key(path, point, samples)
        return None if key is None else self._read(key, display_path, point)

    def put(self, path: Path, point: SweepPoint, cut: CutModel, samples: str | None = None) -> None:
        """Keep a cut model; one that cannot be written as plain data (an object array) is not kept."""
        if self.folder is None:
            return
        key = self.key(path, point, samples)
        try:
            data = cut_model_to_json(cut)
        except ValueError:
            return
        if key is not None:
            self._write(key, data)

    def put_refusal(self, path: Path, point: SweepPoint, cause: str, samples: str | None = None) -> None:
        """Keep onnxruntime's refusal to load or run the model at ``path``, which the same file, settings and
        runtime meet again: :meth:`get` raises it without loading the model. A refusal for want of memory,
        disk or access may not recur and is not kept."""
        if self.folder is None or _RESOURCES.search(cause):
            return
        key = self.key(path, point, samples)
        if key is not None:
            self._write(key, {"refused": cause})

    def get_by_graph(self, key: str, display_path: str, point: SweepPoint = ONE_POINT) -> CutModel | None:
        """The cut of a model of the same graph (:meth:`graph_key` ``key``), made in this run or kept before, under
        the name of the model that takes it; None if none."""
        if key in self._cut_now:
            return self._from_json(self._cut_now[key], display_path, point)
        return None if self.folder is None else self._read(f"{GRAPHS}/{key}", display_path, point)

    def put_by_graph(self, key: str, cut: CutModel) -> None:
        """Keep a cut for the variants of its model's graph, unless the work of some of its layers depends on
        the values they read (see ``graph.DATA_DEPENDENT_OPS``): weights may then decide its bricks' shapes."""
        if cut.plan.data_dependent:
            return
        try:
            data = cut_model_to_json(cut)
        except ValueError:
            return
        self._cut_now[key] = data
        if self.folder is not None:
            self._write(f"{GRAPHS}/{key}", data)

    def prune(self, now: float | None = None) -> int:
        """Remove the plans no run has read or written for :data:`UNUSED_FOR_S` before ``now`` (this moment where not
        given); returns how many. A plan another run removes first, or one that cannot be removed, stays a miss
        or a file."""
        if self.folder is None:
            return 0
        oldest = (time.time() if now is None else now) - UNUSED_FOR_S
        removed = 0
        for folder in (self.folder, self.folder / GRAPHS):
            with contextlib.suppress(OSError):
                for entry in os.scandir(folder):
                    if _PLAN_NAME.fullmatch(entry.name) and _unused_since(entry, oldest):
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
                            removed += 1
        return removed

    def _read(self, key: str, display_path: str, point: SweepPoint) -> CutModel | None:
        assert self.folder is not None
        path = self.folder / f"{key}.json"
        try:
            content = path.read_bytes()
        except OSError:  # absent, or no folder to hold it: a miss, no damage
            return None
        try:
            data = json.loads(_checked_payload(content))
            refused = _refusal(data)
            cut = None if refused is not None else self._from_json(data, display_path, point)
        except _DAMAGE:
            self.discarded += 1
            return None
        with contextlib.suppress(OSError):  # a plan that cannot be marked used may only be cut again later
            os.utime(path)
        if refused is not None:
            raise RuntimeRefusal(display_path, refused)
        return cut

    def _from_json(self, data: Mapping[str, Any], display_path: str, point: SweepPoint) -> CutModel:
        """:func:`cut_model_from_json`, taking the bricks earlier plans built; a plan found damaged adds none."""
        built: dict[str, BrickSpec] = {}
        cut = cut_model_from_json(data, display_path, point, ChainMap(built, self._bricks))
        self._bricks.update(built)
        return cut

    def _write(self, key: str, data: dict[str, Any]) -> None:
        assert self.folder is not None
        payload = json.dumps(data, allow_nan=False, separators=(",", ":")).encode("utf-8")
        header = json.dumps({"version": PLAN_VERSION, "sha256": hashlib.sha256(payload).hexdigest()})
        try:
            write_bytes(self.folder / f"{key}.json", header.encode("ascii") + b"\n" + payload)
        except OSError:
            return  # a cache that cannot be written only costs the next run the time to cut again

    def key(self, path: Path, point: SweepPoint = ONE_POINT, samples: str | None = None) -> str | None:
        """Digest of everything that decides how the model at ``path`` is cut at ``point``; None if it
        cannot be read."""
        try:
            check_model_file(path)  # nothing but a model file is read, here as when loading
            model = self.digests.of(path)
            external = _external_files(model.external, path.parent)
        except Exception:  # unreadable, refused, or no model at all: loading it says why
            return None
        return self._key({"model": model.sha256, "external": external}, point, samples)

    def graph_key(self, path: Path, point: SweepPoint = ONE_POINT, samples: str | None = None) -> str | None:
        """Digest of everything that decides how the model at ``path`` is cut at ``point`` but its weights'
        values (see :mod:`.weightless`); None if it cannot be read, or keeps its weights in external files."""
        try:
            check_model_file(path)
            graph = self.digests.of(path).graph
        except Exception:  # unreadable, refused, or no model at all: loading it says why
            return None
        return None if graph is None else self._key({"graph": graph}, point, samples)

    def _key(self, model: dict[str, Any], point: SweepPoint, samples: str | None) -> str:
        return digest(
            {
                "version": PLAN_VERSION,
                **model,
                "point": {**dict(sorted(point.dims.items())), "dtype": point.dtype},
                "samples": samples,
                "granularity": self.settings.granularity,
                "cut": self.settings.cut,
                "validate": self.settings.validate,
                "onnx": onnx.__version__,
                "code": source_digest(),
            }
        )


@cache
def source_digest() -> str:
    """Digest of pytest-dlbricks' own modules: a change to how models are loaded or cut makes new plans."""
    sha = hashlib.sha256()
    package = Path(__file__).parents[1]
    for module in sorted(package.rglob("*.py")):
        sha.update(module.relative_to(package).as_posix().encode())
        sha.update(module.read_bytes())
    return sha.hexdigest()


def _refusal(data: Mapping[str, Any]) -> str | None:
    """The refusal a kept plan holds instead of a cut model (see :meth:`PlanCache.put_refusal`), or None."""
    if "refused" not in data:
        return None
    cause = data["refused"]
    if not isinstance(cause, str):
        raise TypeError("a kept refusal that is not text")
    return cause


def _unused_since(entry: os.DirEntry[str], oldest: float) -> bool:
    """Whether ``entry`` is a file (not a link) last modified before ``oldest``."""
    try:
        return entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < oldest
    except OSError:
        return False


def _external_files(names: tuple[str, ...], folder: Path) -> list[list[object]]:
    """Name, size and modification time of each external data file a model reads."""
    found = []
    for name in names:
        stat = (folder / name).stat()
        found.append([name, stat.st_size, stat.st_mtime_ns])
    return found


# -- JSON ----------------------------------------------------------------------------------------


def cut_model_to_json(cut: CutModel) -> dict[str, Any]:
    plan = cut.plan
    return {
        "version": PLAN_VERSION,
        "layers": plan.layers,
        "bricks": [_brick_to_json(brick) for brick in plan.bricks],
        "edges": [[int(a), int(b)] for a, b in plan.graph.edges],
        "input_writers": [list(writers) for writers in plan.input_writers],
        "guessed_dims": dict(plan.guessed_dims),
        "sampled_dims": dict(plan.sampled_dims),
        "dim_names": list(plan.dim_names),
        "io": list(plan.io),
        "inputs": plan.inputs,
        "data_dependent": list(plan.data_dependent),
        "weights_as_inputs": plan.weights_as_inputs,
        "unsupported": {str(index): reason for index, reason in plan.unsupported.items()},
        "work": {signature: _work_to_json(work) for signature, work in cut.work.items()},
    }


def cut_model_from_json(
    data: Mapping[str, Any],
    display_path: str,
    point: SweepPoint = ONE_POINT,
    known: MutableMapping[str, BrickSpec] | None = None,
) -> CutModel:
    """A cut model from its plain data; ``known``: bricks built before, by signature, taken instead of building
    them again, and where the new ones are added."""
    known = {} if known is None else known
    bricks: list[Brick] = [_brick_from_json(entry, known) for entry in data["bricks"]]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(bricks)))
    graph.add_edges_from((_count(a), _count(b)) for a, b in data["edges"])
    inputs, outputs = data["io"]
    sampled = {str(name): _count(size) for name, size in data["sampled_dims"].items()}
    plan = ModelPlan(
        path=display_path + point.suffix,
        layers=_count(data["layers"]),
        bricks=bricks,
        graph=graph,
        guessed_dims={str(name): _count(size) for name, size in data["guessed_dims"].items()},
        sampled_dims=sampled,
        dim_names=tuple(str(name) for name in data["dim_names"]),
        io=(_count(inputs), _count(outputs)),
        file=display_path,
        point=point.describe(sampled),
        unsupported={_key_count(index): str(reason) for index, reason in data["unsupported"].items()},
        inputs=str(data["inputs"]),
        data_dependent=tuple(str(op) for op in data["data_dependent"]),
        weights_as_inputs=_count(data["weights_as_inputs"]),
        input_writers=tuple(
            tuple(None if writer is None else _count(writer) for writer in writers) for writers in data["input_writers"]
        ),
    )
    work = {str(signature): _work_from_json(entry) for signature, entry in data["work"].items()}
    if not is_brick_graph(graph, len(bricks)):
        raise ValueError("the bricks do not match their graph")
    if not set(plan.signatures) <= set(work):
        raise ValueError("the work of a brick is missing")
    if any(isinstance(brick, BrokenBrick) and brick.layer_index >= plan.layers for brick in bricks):
        raise ValueError("a broken brick's layer is not one of the model's")
    if not _writers_hold(plan):
        raise ValueError("the writers of the bricks' inputs do not match the bricks")
    return CutModel(plan, work)


def _checked_payload(content: bytes) -> bytes:
    """A plan file's JSON, under its header line, if the header's version is this one and its SHA-256 that of the
    JSON (ValueError otherwise): any byte changed since it was written makes it a miss, without computing every
    brick's signature again."""
    header, _, payload = content.partition(b"\n")
    expected = json.loads(header.decode("ascii"))
    if expected["version"] != PLAN_VERSION:
        raise ValueError(f"plan version {expected['version']!r}")
    if expected["sha256"] != hashlib.sha256(payload).hexdigest():
        raise ValueError("the plan's bytes changed since it was written")
    return payload


def _writers_hold(plan: ModelPlan) -> bool:
    """Each brick's inputs, one writer each, written by a brick before it."""
    if len(plan.input_writers) != len(plan.bricks):
        return False
    return all(
        (not isinstance(brick, BrickSpec) or len(writers) == len(brick.inputs))
        and all(writer is None or writer < index for writer in writers)
        for index, (brick, writers) in enumerate(zip(plan.bricks, plan.input_writers))
    )


def _brick_to_json(brick: Brick) -> dict[str, Any]:
    if isinstance(brick, BrokenBrick):
        return {"broken": [brick.layer_index, brick.op_type, brick.reason]}
    return _spec_to_json(brick)


def _brick_from_json(data: Mapping[str, Any], known: MutableMapping[str, BrickSpec]) -> Brick:
    if "broken" in data:
        index, op_type, reason = data["broken"]
        return BrokenBrick(_count(index), str(op_type), str(reason))
    # A run keeps one brick per signature, the first model's (see :meth:`.DLBricksRun.add_model`): later plans'
    # copies of it are never built.
    signature = str(data["signature"])
    spec = known.get(signature)
    if spec is None:
        spec = known[signature] = _spec_from_json(data)
    return spec


def _spec_to_json(spec: BrickSpec) -> dict[str, Any]:
    return {
        "nodes": [_message(node) for node in spec.nodes],
        "inputs": _tensors(spec.inputs),
        "weights": _tensors(spec.weights),
        "outputs": _tensors(spec.outputs),
        "values": {name: _array(value) for name, value in spec.values.items()},
        "opset_imports": dict(spec.opset_imports),
        "ir_version": spec.ir_version,
        "functions": [_message(function) for function in spec.functions],
        "signature": spec.signature,
        "non_tensor_outputs": [
            [name, base64.b64encode(kind).decode("ascii")] for name, kind in spec.non_tensor_outputs
        ],
        "activations": sorted(spec.activations),
        "unsized": spec.unsized,
        "weights_as_inputs": sorted(spec.weights_as_inputs),
    }


def _spec_from_json(data: Mapping[str, Any]) -> BrickSpec:
    return BrickSpec(
        nodes=tuple(onnx.NodeProto.FromString(_bytes(node)) for node in data["nodes"]),
        inputs=_specs(data["inputs"]),
        weights=_specs(data["weights"]),
        outputs=_specs(data["outputs"]),
        values=EncodedArrays(data["values"]),
        opset_imports={str(domain): _count(version) for domain, version in data["opset_imports"].items()},
        ir_version=_count(data["ir_version"]),
        functions=tuple(onnx.FunctionProto.FromString(_bytes(function)) for function in data["functions"]),
        signature=str(data["signature"]),
        non_tensor_outputs=tuple((str(name), _bytes(kind)) for name, kind in data["non_tensor_outputs"]),
        activations=frozenset(str(name) for name in data["activations"]),
        unsized=data.get("unsized", False) is True,
        weights_as_inputs=frozenset(str(name) for name in data.get("weights_as_inputs", ())),
    )


def _work_to_json(work: BrickWork) -> dict[str, Any]:
    return {
        "label": work.label,
        "layers": [[layer.op_type, layer.flops, layer.bytes] for layer in work.layers],
        "io": list(work.io),
    }


def _work_from_json(data: Mapping[str, Any]) -> BrickWork:
    inputs, outputs = data["io"]
    layers = tuple(
        LayerWork(str(op), None if flops is None else _count(flops), _count(size)) for op, flops, size in data["layers"]
    )
    return BrickWork(str(data["label"]), layers, (_count(inputs), _count(outputs)))


def _tensors(tensors: tuple[tuple[str, TensorSpec], ...]) -> list[list[object]]:
    return [[name, spec.dtype, list(spec.shape)] for name, spec in tensors]


def _specs(data: list[list[Any]]) -> tuple[tuple[str, TensorSpec], ...]:
    return tuple((str(name), TensorSpec(_count(dtype), tuple(map(_count, shape)))) for name, dtype, shape in data)


def _count(value: Any) -> int:
    """A count, index, size or version as a plan holds it: a whole number, never negative, at most what an
    ONNX size can hold (a larger one overflowed the arithmetic of the report)."""
    number = int(value)
    if number < 0 or number != value or number > LARGEST_NUMBER:
        raise ValueError(f"{value!r} is not a count")
    return number


def _key_count(key: Any) -> int:
    """A count a plan holds as a JSON object's key, which JSON writes as text (``"0"`` for brick 0)."""
    if not isinstance(key, str) or not key.isdigit():
        raise ValueError(f"{key!r} is not a count")
    return _count(int(key))


def _message(message: onnx.NodeProto | onnx.FunctionProto) -> str:
    return base64.b64encode(message.SerializeToString(deterministic=True)).decode("ascii")


def _array(value: np.ndarray) -> list[object]:
    """An array as plain data; one of Python objects has none (ValueError)."""
    if value.dtype.hasobject:
        raise ValueError("an array of Python objects has no plain form")
    return [value.dtype.str, list(value.shape), base64.b64encode(value.tobytes()).decode("ascii")]


class EncodedArrays(Mapping[str, np.ndarray]):
    """A brick's kept values as its plan holds them, each decoded when first read: a re-run whose bricks all come
    from the store decodes none (a quantized model keeps megabytes of them). Their types, shapes and sizes are
    checked at once: ValueError or TypeError where they disagree."""

    def __init__(self, encoded: Mapping[str, Any]) -> None:
        self._encoded = {str(name): _encoded_array(value) for name, value in encoded.items()}
        self._decoded: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        array = self._decoded.get(name)
        if array is None:
            dtype, shape, content = self._encoded[name]
            array = self._decoded[name] = np.frombuffer(bytearray(_bytes(content)), dtype).reshape(shape)
        return array

    def __iter__(self) -> Iterator[str]:
        return iter(self._encoded)

    def __len__(self) -> int:
        return len(self._encoded)


def _encoded_array(data: list[Any]) -> tuple[np.dtype[Any], tuple[int, ...], str]:
    """The type, shape and base64 text of an array as a plan holds it, the text as long as they say."""
    dtype_text, shape, content = data
    dtype = np.dtype(str(dtype_text))
    if dtype.hasobject:
        raise ValueError(f"{dtype_text!r} is a type of Python objects")
    sizes = tuple(_count(size) for size in shape)
    if not isinstance(content, str) or _decoded_length(content) != math.prod(sizes) * dtype.itemsize:
        raise ValueError("the bytes of a kept value do not fill its type and shape")
    return dtype, sizes, content


def _decoded_length(text: str) -> int:
    """How many bytes base64 ``text`` decodes to; -1 where its length is not that of base64."""
    if len(text) % 4:
        return -1
    return len(text) // 4 * 3 - text[-2:].count("=")


def _bytes(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)
