"""The simulated machine's clock: what a brick's counted events cost in cycles and seconds.

callgrind counts a brick's instructions and, with its cache simulation, the misses in the first-level
and last-level caches. No hardware is timed, so the counts of a run are the same on a loaded machine
and a quiet one. A time follows from a fixed cycle model, after the cycle estimate KCachegrind derives
from the same counts::

    cycles = Ir + L1_MISS_CYCLES * (I1mr + D1mr + D1mw) + LL_MISS_CYCLES * (ILmr + DLmr + DLmw)
    seconds = cycles / CLOCK_HZ

It counts one cycle per instruction and knows nothing of superscalar issue, vector width or memory
bandwidth: simulated seconds rank and compare work, they are not a prediction of wall-clock time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Cycles a miss in a first-level cache costs, and one in the last-level cache.
L1_MISS_CYCLES = 10
LL_MISS_CYCLES = 100
#: The simulated machine's nominal clock, in Hz.
CLOCK_HZ = 3.0e9
#: The simulated caches, as valgrind takes them (size in bytes, associativity, line size): fixed, so that
#: counts do not depend on the caches of the machine that simulates.
CACHES = {"I1": (32768, 8, 64), "D1": (32768, 8, 64), "LL": (8388608, 16, 64)}
#: callgrind's event names (``--cache-sim=yes``), in the order its output lists them.
EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


@dataclass(frozen=True)
class SimulatedCost:
    """The events callgrind counted for one call of a brick or model (averaged over the calls counted)."""

    instructions: float
    data_reads: float
    data_writes: float
    l1_misses: float
    ll_misses: float

    @classmethod
    def from_events(cls, events: Mapping[str, int], calls: int = 1) -> SimulatedCost:
        """One call's share of the events counted over ``calls`` calls; an event not counted reads 0."""

        def per_call(*names: str) -> float:
            return sum(events.get(name, 0) for name in names) / calls

        return cls(
            instructions=per_call("Ir"),
            data_reads=per_call("Dr"),
            data_writes=per_call("Dw"),
            l1_misses=per_call("I1mr", "D1mr", "D1mw"),
            ll_misses=per_call("ILmr", "DLmr", "DLmw"),
        )

    @property
    def cycles(self) -> float:
        return self.instructions + L1_MISS_CYCLES * self.l1_misses + LL_MISS_CYCLES * self.ll_misses

    @property
    def seconds(self) -> float:
        """Simulated time of one call at :data:`CLOCK_HZ`."""
        return self.cycles / CLOCK_HZ

    def plus(self, other: SimulatedCost, times: float = 1) -> SimulatedCost:
        """This cost and ``times`` calls of ``other``: composition is a sum."""
        return SimulatedCost(
            self.instructions + times * other.instructions,
            self.data_reads + times * other.data_reads,
            self.data_writes + times * other.data_writes,
            self.l1_misses + times * other.l1_misses,
            self.ll_misses + times * other.ll_misses,
        )

    def minus(self, other: SimulatedCost) -> SimulatedCost:
        """This cost less ``other`` (a call's cost taken off a brick): an event of a brick that misses a cache
        less often than a bare call does may read below zero, as composition's sum needs it to."""
        return self.plus(other, -1)

    def as_json(self) -> dict[str, float]:
        return {
            "instructions": self.instructions,
            "data_reads": self.data_reads,
            "data_writes": self.data_writes,
            "l1_misses": self.l1_misses,
            "ll_misses": self.ll_misses,
            "cycles": self.cycles,
            "simulated_s": self.seconds,
        }


NO_COST = SimulatedCost(0.0, 0.0, 0.0, 0.0, 0.0)


def describe_model() -> dict[str, Any]:
    """The cycle model and simulated machine, as the JSON report records them."""
    return {
        "cycles": f"Ir + {L1_MISS_CYCLES} * L1 misses + {LL_MISS_CYCLES} * LL misses",
        "clock_hz": CLOCK_HZ,
        "caches": {name: {"bytes": size, "ways": ways, "line": line} for name, (size, ways, line) in CACHES.items()},
        "machine": "valgrind's simulated CPU: AVX2 at most (valgrind hides AVX-512)",
    }
