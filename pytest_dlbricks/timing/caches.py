"""A brick's weights out of the caches before each timed call, as far as the rest of its model pushes them out.

Inside a model, a layer's weights were last read one inference ago: every other layer's weights and
activations went through the caches since. A brick called again and again finds its weights where its
last call left them. For a layer bound by reading its weights (a matrix times a vector: a classifier, a
decoder's projections at batch 1) that is the gap between memory and cache. A chain of 16 MatMuls of
1024x1024 at batch 1 (64 MiB of weights) read 0.41 of its measured time from bricks timed so, and 1.02
with as many bytes read before each call as the rest of the chain reads; a chain of 512x512 (16 MiB,
within this machine's 32 MiB last-level cache) 0.62, and 0.93 (``bench/breakdown.py``, one thread).
Reading more than the rest of the model reads over-shoots: the 512x512 chain read 1.37 after 64 MiB.

Only such bricks are treated so: where the arithmetic outlasts the reading (a convolution reads its
weights once for thousands of outputs), the caches move the time little, and reading tens of MiB before
every call of every brick made the onnx wheel's CNNs' first run 1.4x longer.

Inputs the model wrote long before a brick reads them (a Concat joining branches, an Add closing a residual
block) are out of the caches too, as far as the layers in between pushed them: such a brick takes copies of
them in turn (see :func:`input_copies`), which costs memory rather than reading before every call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.buffers import reserved
from ..cut.bricks import BrickSpec
from ..cut.cutting import ModelPlan
from .speed_trace import MIN_SAMPLES

#: Where Linux describes the first CPU's caches (``level``, ``size`` in each ``index*`` folder).
CACHE_FOLDER = Path("/sys/devices/system/cpu/cpu0/cache")
#: A core's own cache and the last-level cache where the system does not say (a common x86 server core).
DEFAULT_CORE_CACHE = 1 << 20
DEFAULT_LAST_LEVEL_CACHE = 32 << 20
#: Bytes read before a call at most: twice the last-level cache pushes out all it held, and no more is
#: allocated than this on a machine whose last-level cache is very large.
MAX_FLUSH_BYTES = 256 << 20
#: Copies of a brick's cold inputs at most, and the bytes they hold at most (see :func:`input_copies`): a
#: validation holds every brick of a model at once, and a detector at 800x608 had 19 bricks with cold inputs
#: whose distances summed to 805 MiB.
MAX_INPUT_COPIES = 256
MAX_COPY_BYTES = 64 << 20
#: FLOPs a core computes in the time it reads a byte from memory, roughly (peak FLOP/s over memory
#: bandwidth): a brick doing fewer per byte of its weights waits on reading them.
FLOPS_PER_BYTE = 8
#: Operators that read only the part of their data their indices or bounds select: an embedding table read
#: by a Gather is a few rows a call, not a weight streamed whole.
SELECTING_OPS = frozenset({"Gather", "GatherElements", "GatherND", "Slice", "Compress"})


def cache_sizes(folder: Path = CACHE_FOLDER) -> tuple[int, int]:
    """The bytes of a core's second-level cache and of the last-level cache, as the system describes them;
    the defaults above for what it does not say."""
    sizes: dict[int, int] = {}
    try:
        for index in folder.glob("index*"):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level, size = int((index / "level").read_text()), _size((index / "size").read_text())
            if size:
                sizes[level] = max(size, sizes.get(level, 0))
    except (OSError, ValueError):
        sizes = {}
    last = max(sizes) if sizes else None
    core = sizes.get(2, DEFAULT_CORE_CACHE)
    return core, sizes[last] if last is not None and last > 2 else DEFAULT_LAST_LEVEL_CACHE


def _size(text: str) -> int:
    """``32768K``, ``1M`` or a plain count of bytes, as sysfs writes a cache's size."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def flush_bytes(brick: BrickSpec, flops: float | None, rest: int, sizes: tuple[int, int]) -> int:
    """Bytes to read before each call of ``brick`` (its layers' ``flops``, None when unknown), whose largest
    model's other layers read ``rest`` bytes in a call (see :func:`read_bytes`), on a machine of cache ``sizes``
    (see :func:`cache_sizes`): ``rest``, at most twice the last-level cache (and :data:`MAX_FLUSH_BYTES`), for
    a brick that waits on reading its weights: more of them than a core's
    cache holds, and fewer FLOPs than :data:`FLOPS_PER_BYTE` for each of their bytes (weights only selected
    from, by :data:`SELECTING_OPS`, left out); 0 for any other."""
    core_cache, last_level_cache = sizes
    weights = streamed_weight_bytes(brick)
    if flops is None or weights <= core_cache or flops >= FLOPS_PER_BYTE * weights:
        return 0
    return max(0, min(rest, 2 * last_level_cache, MAX_FLUSH_BYTES))


def rest_of_model(brick: BrickSpec, models_read: Iterable[int]) -> int:
    """What the other layers of the largest of the models using ``brick`` read in a call, from what each model
    reads (see :func:`read_bytes`)."""
    return max(0, max((read - read_bytes(brick) for read in models_read), default=0))


def weight_bytes(brick: BrickSpec) -> int:
    return sum(spec.nbytes for _, spec in brick.weights)


def streamed_weight_bytes(brick: BrickSpec) -> int:
    """The bytes of the weights the brick reads whole: those some operator other than a selecting one reads."""
    read_whole = {name for node in brick.nodes if node.op_type not in SELECTING_OPS for name in node.input}
    return sum(spec.nbytes for name, spec in brick.weights if name in read_whole)


def read_bytes(brick: BrickSpec) -> int:
    """What a call of the brick brings into the caches: its weights and what it writes (its inputs were
    written by the layers before); summed over a model's bricks, what a call of the model reads."""
    return weight_bytes(brick) + sum(spec.nbytes for _, spec in brick.outputs)


@dataclass(frozen=True)
class ColdInputs:
    """A brick's inputs its models wrote long before it reads them: their positions, the bytes read in between
    at its furthest place, and how many copies of them its calls take in turn (see :func:`input_copies`)."""

    positions: tuple[int, ...]
    distance: int
    copies: int


def input_copies(cold_bytes: int, distance: int, core_cache: int) -> int:
    """How many copies of a brick's cold inputs (``cold_bytes`` together) its calls take in turn, so that
    each call finds its copy pushed ``distance`` bytes out of the caches by the calls before it, as the
    layers between the inputs' writers and the brick push them out inside the model: no more of them than
    :data:`MAX_COPY_BYTES` hold, nor than :data:`MAX_INPUT_COPIES` (each is bound in a call's time); 1, no
    copy, where so many would not push them out of a core's cache of ``core_cache`` bytes (a few values,
    whose misses cost little, and which would take a copy per cache line)."""
    if cold_bytes <= 0:
        return 1
    copies = 1 + min(-(-distance // cold_bytes), MAX_COPY_BYTES // cold_bytes - 1, MAX_INPUT_COPIES - 1)
    return copies if (copies - 1) * cold_bytes > core_cache else 1


def cold_inputs(brick: BrickSpec, distances: Sequence[int], sizes: tuple[int, int]) -> ColdInputs | None:
    """The inputs of ``brick`` written further before it than a core's cache (``distances`` per input, see
    :func:`reuse_distances`; ``sizes`` of :func:`cache_sizes`), pushed out at most twice the last-level cache
    and :data:`MAX_COPY_BYTES`; None where there are none, or their copies would stay in that cache."""
    core_cache, last_level_cache = sizes
    positions = tuple(position for position, distance in enumerate(distances) if distance > core_cache)
    if not positions:
        return None
    distance = min(max(distances), 2 * last_level_cache, MAX_COPY_BYTES)
    copies = input_copies(sum(brick.inputs[position][1].nbytes for position in positions), distance, core_cache)
    return ColdInputs(positions, distance, copies) if copies > 1 else None


def reuse_distances(bricks: Sequence[object], input_writers: Sequence[tuple[int | None, ...]]) -> list[list[int]]:
    """Per brick of a model (a window of its layers, in the order they run), per input, what the bricks
    between the one that wrote it and this one bring into the caches (see :func:`read_bytes`): 0 for an
    input of the model's own and for one written by the brick right before."""
    reads = [read_bytes(brick) if isinstance(brick, BrickSpec) else 0 for brick in bricks]
    before = np.concatenate([[0], np.cumsum(reads, dtype=np.int64)])
    return [
        [0 if writer is None else int(before[index] - before[writer + 1]) for writer in writers]
        for index, writers in enumerate(input_writers)
    ]


def furthest_distances(plans: Iterable[ModelPlan]) -> dict[str, tuple[int, ...]]:
    """Per distinct brick of ``plans``, per input, its distance at the brick's furthest place (see
    :func:`reuse_distances`); none from a plan made without its bricks' writers."""
    found: dict[str, list[int]] = {}
    for plan in plans:
        for brick, distances in zip(plan.bricks, reuse_distances(plan.bricks, plan.input_writers)):
            if isinstance(brick, BrickSpec):
                known = found.setdefault(brick.signature, [0] * len(distances))
                known[:] = map(max, known, distances)
    return {signature: tuple(distances) for signature, distances in found.items()}


class CacheFlusher:
    """Reads the first bytes of one buffer, written as far as the largest request needs, so that what was in
    the caches before is pushed out as far as that many bytes push it.

    The buffer is set aside once at :data:`MAX_FLUSH_BYTES` (no request asks more; where the system will not set
    aside that much, at the request's size) and its pages written only as requests reach them: allocated anew at
    each larger request, the onnx wheel's CNNs wrote 28, 220 and 256 MiB of fresh memory, 1.3 s of a 35 s run on
    a machine slow to give a process new pages (that pattern alone: 0.18-1.18 s, against 0.10-0.12 s written as
    reached).

    Each read is timed: how fast memory was read through the run. Bricks that wait on reading their weights
    follow it, and it moves with whatever else reads memory on the machine, which the speed trace's
    reference call, bound by dispatch, does not see (see :meth:`summary`)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._buffer = np.zeros(0, np.uint64)
        #: Elements of the buffer written so far: pages never written would all read one shared page of zeros.
        self._written = 0
        self.clock = clock
        #: Seconds of each read, by the bytes it read: reads of fewer bytes than the caches hold run from them.
        self.samples: dict[int, list[float]] = {}

    def reader(self, nbytes: int) -> Callable[[], None]:
        """A call that reads ``nbytes`` of the buffer (rounded down to its 8-byte elements)."""
        elements = nbytes // self._buffer.itemsize
        if elements > self._buffer.size:
            self._buffer = reserved(elements, self._buffer.dtype, MAX_FLUSH_BYTES)
            self._written = 0
        if elements > self._written:
            self._buffer[self._written : elements] = 1
            self._written = elements
        view = self._buffer[:elements]

        times = self.samples.setdefault(view.nbytes, [])

        def read() -> None:
            start = self.clock()
            view.max()
            seconds = self.clock() - start
            if seconds > 0:
                times.append(seconds)

        return read

    def summary(self, share: float) -> dict[str, Any] | None:
        """How fast memory was read through the run, for the report and the verdict: the speed of the reads of
        the most bytes (median, 10th and 90th percentiles in bytes per second), and ``swing``, half the distance
        from the 10th to the 90th percentile over the median, as the speed trace gives it, of every read's time
        over the median of the reads of its size (a read that fits the caches runs from them, several times
        faster: their mixture is no move of the machine's); ``share``, the largest part the bricks read so make
        of a model's estimate, which that swing moves. None with fewer than :data:`MIN_SAMPLES` reads of a size."""
        sizes = {nbytes: times for nbytes, times in self.samples.items() if len(times) >= MIN_SAMPLES}
        if not sizes:
            return None
        relative = np.concatenate([np.asarray(times) / np.median(times) for times in sizes.values()])
        p10, median, p90 = (float(value) for value in np.percentile(relative, [10, 50, 90]))
        largest = max(sizes)
        speeds = largest / np.asarray(sizes[largest])
        return {
            "samples": int(relative.size),
            "bytes": largest,
            "median_bytes_per_s": float(np.median(speeds)),
            "p10_bytes_per_s": float(np.percentile(speeds, 10)),
            "p90_bytes_per_s": float(np.percentile(speeds, 90)),
            "swing": (p90 - p10) / (2 * median),
            "share": share,
        }
