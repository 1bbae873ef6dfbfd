"""How precisely each brick must be timed for the models' estimates to reach the run's precision.

A model's sequential estimate is a sum of brick times, and the errors of bricks timed apart are
independent: they add in quadrature, not in full. So a brick that is a small part of every model
using it can be timed far less precisely than the estimates must be. A brick of time ``t`` used
``c`` times in a model may err by its share ``c * t / R`` of the model's squared error
``(p * L)^2``, where ``L`` is what the model's estimate is known to be at least and ``R`` the same
bricks' times before composition takes the call overhead off (``t`` is such a time: the one that
has the error). Its relative margin is then ``p * L / sqrt(R * c * t)``, against the run's
precision ``p``. Counted from the bricks whose times are known so far (this one included), and the
others at the least they will take (see :meth:`.RunState.least_work_s`), ``L`` and ``R`` only grow as
more become known, so the shares of a model's bricks add up to about 1 whatever order its bricks are
timed in (a least that overshot a brick's time would break that: it is a lower bound). Not exactly:
the model's own call, counted in ``L`` from the start without an error, lets the first bricks timed
take a little more (three equal bricks beside a call as long as the three: shares adding up to 1.12,
the estimate's margin 6% above ``p``).

Pure functions of plain numbers, so that the brick items, the store's reuse and the report agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .noise import margin_of_error

#: Loosest margin of error a brick is timed to, however small its part: its statistics still mean
#: something to the gate and to the noise figure of the run (5% to 30% is typical brick noise).
LOOSEST = 0.25


@dataclass(frozen=True)
class Use:
    """A brick's place in one model: how many times the model calls it, and what the model's other
    bricks are known to add, each as often as it is called: their times as composed (call overhead
    off, plus the call the model pays once) and as measured, those not timed yet at the least their
    work takes; and the least the bricks not timed yet will add beyond that (their calls' cost)."""

    count: int
    others_s: float
    others_raw_s: float
    untimed_floor_s: float = 0.0


def brick_precision(target: float, seconds: float, net_seconds: float, uses: Iterable[Use]) -> float:
    """The margin of error (relative, at the run's confidence) a brick of time ``seconds`` (``net_seconds``
    once composition takes the call overhead off) must reach for every model in ``uses`` to reach
    ``target``; ``target`` itself for a brick no model uses."""
    if seconds <= 0 or target >= LOOSEST:
        return target
    margins = [
        target
        * (use.others_s + use.count * net_seconds)
        / math.sqrt(use.count * seconds * (use.others_raw_s + use.count * seconds))
        for use in uses
        if use.count > 0
    ]
    return min(max(target, min(margins)), LOOSEST) if margins else target


def largest_share(seconds: float, uses: Iterable[Use]) -> float:
    """The largest part of a model's time that a brick of ``seconds`` may make, its other bricks counted
    at their times known so far and the rest at the least they take, their calls' cost included (0 for a
    brick no model uses)."""
    if seconds <= 0:
        return 0.0
    shares = (
        use.count * seconds / (use.others_raw_s + use.untimed_floor_s + use.count * seconds)
        for use in uses
        if use.count
    )
    return max(shares, default=0.0)


def stats_precision(uses: Iterable[tuple[int, Mapping[str, Any] | None]], estimate_s: float | None) -> float | None:
    """:func:`estimate_precision` from each brick's (count, statistics as pytest-benchmark keeps them); None where a
    brick has none, or no mean."""
    terms = []
    for count, stats in uses:
        mean = stats.get("mean") if stats is not None else None
        if stats is None or not isinstance(mean, int | float) or isinstance(mean, bool):
            return None
        terms.append((count, float(mean), margin_of_error(stats)))
    return estimate_precision(terms, estimate_s)


def estimate_precision(terms: Iterable[tuple[int, float, float | None]], estimate_s: float | None) -> float | None:
    """The margin of error of a sequential estimate, relative, from its bricks' (count, mean time,
    relative margin) in quadrature; None when a brick's margin is unknown or there is no estimate."""
    if not estimate_s or estimate_s <= 0:
        return None
    total = 0.0
    for count, mean_s, margin in terms:
        if margin is None:
            return None
        total += (count * mean_s * margin) ** 2
    return math.sqrt(total) / estimate_s
