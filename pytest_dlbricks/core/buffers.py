"""Buffers set aside once, large, and written only as far as they are used.

A process that allocates a larger buffer at each larger request writes every page afresh each time, and a
machine may be slow to give a process new pages (a first ``np.ones`` of 123 MiB took 0.03 s to 0.34 s from one
process to the next on a 2-vCPU VM). Address space set aside and never written costs no memory.
"""

from __future__ import annotations

import numpy as np

#: Bytes of a cache line: a buffer starts on one, as onnxruntime aligns its own.
CACHE_LINE = 64


def reserved(size: int, dtype: np.dtype, at_least_bytes: int) -> np.ndarray:
    """An unwritten buffer of ``dtype`` starting on a cache line, of ``at_least_bytes`` or ``size`` elements,
    whichever is more; of ``size`` where the system will not set aside more (a strict limit on memory)."""
    line = CACHE_LINE // dtype.itemsize
    try:
        spare = np.empty(max(size, at_least_bytes // dtype.itemsize) + line, dtype=dtype)
    except MemoryError:
        spare = np.empty(size + line, dtype=dtype)
    skip = (-spare.ctypes.data % CACHE_LINE) // dtype.itemsize
    return spare[skip : skip + spare.size - line]
