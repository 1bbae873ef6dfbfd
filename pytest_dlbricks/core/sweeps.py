"""Sweeps: the points a suite is run at, one per combination of swept dimension sizes and numeric types.

A dimension given one size and the default numeric type alone sweep nothing: there is then a single
point with an empty label, and item ids and report paths are those of a run without sweeps. A point's
label names only what varies (``batch=4``, ``batch=4,int8``), so ids stay short and stable across
runs that sweep the same things.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: The numeric type of a model as written.
AS_WRITTEN = "fp32"


@dataclass(frozen=True)
class SweepPoint:
    """One combination: the sizes of every given dimension and one numeric type."""

    dims: Mapping[str, int] = field(default_factory=dict)
    dtype: str = AS_WRITTEN
    #: What varies between points, such as ``batch=4,int8``; empty when nothing is swept.
    label: str = ""

    @property
    def suffix(self) -> str:
        """Appended to item names and model paths: ``[batch=4,int8]``, or nothing."""
        return f"[{self.label}]" if self.label else ""

    @property
    def keywords(self) -> tuple[str, ...]:
        """What ``-k`` can select the point's items by (pytest's ``-k`` takes no ``=``): ``batch4``, ``int8``."""
        return tuple(part.replace("=", "") for part in self.label.split(",") if part)

    def describe(self, sampled: Mapping[str, int] | None = None) -> dict[str, object]:
        """The point as the report records it: every dimension's size, those the sample inputs gave (``sampled``)
        winning, and the numeric type."""
        return {**self.dims, **(sampled or {}), "dtype": self.dtype}


def sweep_points(
    dims: Mapping[str, int], sweep: Mapping[str, Sequence[int]], dtypes: Sequence[str]
) -> list[SweepPoint]:
    """Every combination of the swept sizes (in the order given), then of the numeric types.

    ``dims`` are the dimensions given a single size; ``sweep`` those given several.
    """
    show_dtype = list(dtypes) != [AS_WRITTEN]
    points = []
    for sizes in itertools.product(*sweep.values()):
        swept = dict(zip(sweep, sizes))
        for dtype in dtypes:
            parts = [f"{name}={size}" for name, size in swept.items()] + ([dtype] if show_dtype else [])
            points.append(SweepPoint({**dims, **swept}, dtype, ",".join(parts)))
    return points
