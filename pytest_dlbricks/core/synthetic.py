"""Synthetic tensor values: deterministic, and chosen so that no operator meets NaN, infinity or denormals.

Float weights are small positive numbers, float activations lie in [0.5, 1.5), integers are zero.
Loading feeds them to a model's reference run, synthesis to a brick, numerics to a converted model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import helper

from .buffers import CACHE_LINE, reserved
from .graph import TensorSpec

#: Seed of every synthetic value: the same values in every run.
SEED = 20200420
#: numpy dtype kinds of the tensors synthetic values exist for: floats, integers, booleans.
_SYNTHESISABLE_KINDS = "fiub"
#: Float values drawn for a tensor: a larger one repeats them. Drawing costs more than the session of
#: a weight-heavy brick (0.15 s for 38 M float32 values, against 0.03 s to repeat a block), and the
#: draws are float64, so drawing the whole tensor would also need a temporary twice a float32 one.
_BLOCK = 1 << 16
#: Bytes each type's buffer of :class:`SharedWeights` is set aside at, at least (see :mod:`.buffers`).
_RESERVE_BYTES = 1 << 30


class SynthesisError(Exception):
    """A tensor cannot be given synthetic values (for example a string or complex tensor)."""


def can_synthesise(dtype: int) -> bool:
    """Whether tensors of this ONNX element type can be given synthetic values: numbers and booleans."""
    try:
        return helper.tensor_dtype_to_np_dtype(dtype).kind in _SYNTHESISABLE_KINDS
    except KeyError:
        return False


def synthetic_array(spec: TensorSpec, rng: np.random.Generator, *, weight: bool) -> np.ndarray:
    """Deterministic values of ``spec``'s type and shape that keep operators on their normal fast path."""
    if not can_synthesise(spec.dtype):
        raise SynthesisError(f"tensors of type {spec.describe()} cannot be given synthetic values")
    dtype = helper.tensor_dtype_to_np_dtype(spec.dtype)
    if dtype.kind != "f":
        return np.zeros(spec.shape, dtype=dtype)
    values = np.empty(spec.shape, dtype=dtype)
    _fill(values.reshape(-1), rng, weight=weight)  # a view: the array is contiguous
    return values


def _fill(flat: np.ndarray, rng: np.random.Generator, *, weight: bool) -> None:
    """Fill a flat float array with one block of draws, repeated."""
    if flat.size:
        _fill_range(flat, 0, flat.size, _draws(rng, min(_BLOCK, flat.size), flat.dtype, weight=weight))


def _draws(rng: np.random.Generator, size: int, dtype: np.dtype, *, weight: bool) -> np.ndarray:
    """``size`` draws of ``dtype``, in the range of weights or of inputs."""
    low, high = (0.01, 0.1) if weight else (0.5, 1.5)
    return rng.uniform(low, high, size=size).astype(dtype)


class SharedWeights:
    """Synthetic weights for every brick of a run, read-only views of one buffer per type.

    Filling a weight-heavy brick's weights afresh costs a large part of its session (first touch of
    hundreds of megabytes); onnxruntime only reads weights, so every brick reads the same memory. Within
    one brick, though, each weight has memory of its own, as in the model: weights that all read the
    same memory fill a fraction of the caches they fill in the model (a whole transformer graph so ran
    18% faster than with its real weights, and the same with synthetic weights of its own 1% slower).
    Created by the run (:class:`~pytest_dlbricks.wiring.engine.DLBricksRun`) and handed to brick runners.

    A buffer is set aside at :data:`_RESERVE_BYTES` at least and written only as far as the largest weights of
    its type one brick holds, its values those of a smaller one extended, so a brick's values do not depend on
    the order bricks are built in. Allocated anew at each larger brick, the onnx wheel's CNNs wrote 208 and then
    392 MiB of fresh memory, 1.67 s of a 29 s run.
    """

    def __init__(self) -> None:
        self._buffers: dict[np.dtype, np.ndarray] = {}
        #: Elements of each buffer written so far.
        self._written: dict[np.dtype, int] = {}

    def arrays(self, specs: Sequence[TensorSpec]) -> list[np.ndarray]:
        """Values of each spec's type and shape, as :func:`synthetic_array` gives weights (read-only), laid out
        one after another in their type's buffer, each at a cache line of its own."""
        dtypes = []
        for spec in specs:
            if not can_synthesise(spec.dtype):
                raise SynthesisError(f"tensors of type {spec.describe()} cannot be given synthetic values")
            dtypes.append(helper.tensor_dtype_to_np_dtype(spec.dtype))
        starts: list[int] = []
        ends: dict[np.dtype, int] = {}
        for spec, dtype in zip(specs, dtypes):
            start = _aligned(ends.get(dtype, 0), dtype)
            starts.append(start)
            ends[dtype] = start + spec.numel
        for dtype, size in ends.items():
            self._write_to(dtype, size)
        return [
            self._buffers[dtype][start : start + spec.numel].reshape(spec.shape)
            for spec, dtype, start in zip(specs, dtypes, starts)
        ]

    def _write_to(self, dtype: np.dtype, size: int) -> None:
        """Make the buffer of ``dtype`` hold ``size`` elements written, setting a larger one aside if it must."""
        buffer = self._buffers.get(dtype)
        if buffer is None or buffer.size < size:
            buffer = reserved(size, dtype, _RESERVE_BYTES)
            self._buffers[dtype], self._written[dtype] = buffer, 0
        written = self._written[dtype]
        if size <= written:
            return
        buffer.flags.writeable = True  # its own memory: the views handed out stay read-only
        if dtype.kind == "f":
            _fill_range(buffer, written, size, _draws(np.random.default_rng(SEED), _BLOCK, dtype, weight=True))
        else:
            buffer[written:size] = 0
        buffer.flags.writeable = False
        self._written[dtype] = size


def _fill_range(flat: np.ndarray, start: int, end: int, block: np.ndarray) -> None:
    """Write elements ``start`` to ``end`` of ``flat`` with ``block`` repeated from the first element on, as
    :func:`_fill` writes a whole array (a shorter array takes its first draws, which a longer draw begins with)."""
    size = block.size
    first = min(end, -(-start // size) * size)  # the next repeat's start
    offset = start % size
    flat[start:first] = block[offset : offset + first - start]
    whole = first + (end - first) // size * size
    flat[first:whole].reshape(-1, size)[:] = block
    flat[whole:end] = block[: end - whole]


def _aligned(elements: int, dtype: np.dtype) -> int:
    """``elements`` rounded up to a whole number of 64-byte cache lines (in elements of ``dtype``)."""
    per_line = max(CACHE_LINE // dtype.itemsize, 1)
    return -(-elements // per_line) * per_line


def model_feeds(inputs: list[tuple[str, TensorSpec]]) -> dict[str, np.ndarray]:
    """Synthetic inputs for a whole model."""
    rng = np.random.default_rng(SEED + 2)
    return {name: synthetic_array(spec, rng, weight=False) for name, spec in inputs}
