"""Digests of model files kept with the files' size, times, inode and device, as git's index keeps them: a file
whose status is unchanged is not read, hashed and parsed again on every run.

A model's cut is found in the plan cache by a digest of its bytes and the external data files it reads,
which parsing it tells, or, for a fine-tuned variant of a model already cut, by its graph's digest, weights
aside (:mod:`..cut.weightless`): all three come from one read and one parse of the file, which for a 200 MB
model took 2.6 s on every run, more than finding its plan. A
file last changed within :data:`SETTLED_NS` of being read could change again without its times moving
(git's "racily clean" files): its digest is not kept. A record that cannot be read, or is not one, is a
miss, counted in :attr:`FileDigests.discarded`; one of a file whose status changed is a miss, no damage.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from ..core.graph import nested_tensors
from ..cut.weightless import graph_digest
from .atomic_files import write_json

#: A record of another version is read as absent (no damage): the file is read again and its record rewritten.
#: 3: quantized weights are left out of the graph's digest as float ones are.
VERSION = 3
#: How long before it is read a file must have last changed for its digest to be kept: more than the
#: coarsest file times in use (2 s on FAT) and the kernel's coarse clock that stamps them.
SETTLED_NS = 2_000_000_000
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: What reading a damaged record may raise.
_DAMAGE = (OSError, ValueError, KeyError, TypeError, RecursionError)


@dataclass(frozen=True)
class FileDigest:
    """What a plan's key needs of a model file's content: the SHA-256 of its bytes, the names of the external
    data files it reads (If, Loop and Scan bodies included), and the digest of its graph, weights aside (None
    when its weights lie in external files)."""

    sha256: str
    external: tuple[str, ...]
    graph: str | None


class FileDigests:
    """The digests of model files, one small JSON record per file in ``folder`` (a shelf's ``files/``); with no
    folder, none is kept."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        #: Records found damaged (and the file read again).
        self.discarded = 0
        #: This run's digests by path, with the status they were taken at: a file written just before the run has
        #: no record yet, and a run asks for its digest more than once (the plan's key, on reading and on keeping).
        self._seen: dict[Path, tuple[list[int], FileDigest]] = {}

    def of(self, path: Path) -> FileDigest:
        """The digest of the model file at ``path``, read only when its record is absent or its status changed;
        raises what reading or parsing the file raises."""
        status = path.stat()
        seen = self._seen.get(path)
        if seen is not None and seen[0] == _stamp(status):
            return seen[1]
        found = self._kept_or_read(path, status)
        self._seen[path] = (_stamp(status), found)
        return found

    def _kept_or_read(self, path: Path, status: os.stat_result) -> FileDigest:
        record = None
        if self.folder is not None:
            record = self.folder / f"{hashlib.sha256(os.fsencode(path.resolve())).hexdigest()}.json"
            kept = self._read(record, path, _stamp(status))
            if kept is not None:
                return kept
        started = time.time_ns()
        settled = max(status.st_mtime_ns, status.st_ctime_ns) < started - SETTLED_NS
        found = _digest_file(path, mapped=settled)
        if record is not None and settled and _stamp(path.stat()) == _stamp(status):
            # A digest that cannot be kept only costs the next run the time to read the file again.
            with contextlib.suppress(OSError):
                write_json(record, _to_json(path, _stamp(status), found))
        return found

    def _read(self, record: Path, path: Path, stamp: list[int]) -> FileDigest | None:
        try:
            content = record.read_bytes()
        except OSError:  # absent, or no folder to hold it: a miss, no damage
            return None
        try:
            data = json.loads(content.decode("utf-8"))
            if data["path"] != str(path.resolve()):
                raise ValueError("not a record of this file")
            if data["version"] != VERSION or data["stamp"] != stamp:
                return None  # the file changed since: read it again
            return _from_json(data)
        except _DAMAGE:
            self.discarded += 1
            return None


def _digest_file(path: Path, *, mapped: bool) -> FileDigest:
    """:func:`_digest` of the file at ``path``; ``mapped``: read through a memory map where the system gives one,
    as git hashes a file, without a copy of its bytes (for a 100 MB model, 0.10 s against 0.17-0.18 s read whole,
    most of that difference the new memory a copy needs). Only a settled file is mapped: one written just
    before may still be being written, and a mapped file cut short under the reader ends the process (SIGBUS)
    where a read returns what the file holds."""
    with path.open("rb") as file:
        if mapped:
            try:
                view = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # empty, or no file the system maps: read it whole
                pass
            else:
                with view, memoryview(view) as content:
                    return _digest(content)
        return _digest(file.read())


def _digest(content: bytes | memoryview) -> FileDigest:
    """The digest of the model file ``content``, parsed once for what the SHA-256 of its bytes cannot tell.

    The SHA-256 is taken in a thread of its own while the file is parsed: hashlib lets go of the interpreter
    for data this large, so on two cores the two take the time of the longer (for a 100 MB model, 0.08 s of
    hashing beside 0.07 s of parsing and leaving the weights out)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        sha256 = pool.submit(lambda: hashlib.sha256(content).hexdigest())
        model = onnx.ModelProto()
        model.ParseFromString(content)
        external = _external_names(model)
        graph = graph_digest(model)
        return FileDigest(sha256.result(), external, graph)


def _external_names(model: onnx.ModelProto) -> tuple[str, ...]:
    """The names of the external data files ``model`` reads, sorted."""
    return tuple(
        sorted(
            {
                entry.value
                for tensor in [*model.graph.initializer, *nested_tensors(model.graph)]
                if tensor.data_location == onnx.TensorProto.EXTERNAL
                for entry in tensor.external_data
                if entry.key == "location"
            }
        )
    )


def _stamp(status: os.stat_result) -> list[int]:
    """What changes when a file is written or replaced, as git's index records it."""
    return [status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino, status.st_dev]


def _to_json(path: Path, stamp: list[int], digest: FileDigest) -> dict[str, Any]:
    return {
        "version": VERSION,
        "path": str(path.resolve()),
        "stamp": stamp,
        "sha256": digest.sha256,
        "external": list(digest.external),
        "graph": digest.graph,
    }


def _from_json(data: dict[str, Any]) -> FileDigest:
    sha256, external, graph = data["sha256"], data["external"], data["graph"]
    if not _is_sha256(sha256) or not (graph is None or _is_sha256(graph)):
        raise ValueError(f"{sha256!r} or {graph!r} is no SHA-256 digest")
    if not isinstance(external, list) or not all(isinstance(name, str) for name in external):
        raise TypeError("the external data files are not a list of names")
    return FileDigest(sha256, tuple(external), graph)


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None
