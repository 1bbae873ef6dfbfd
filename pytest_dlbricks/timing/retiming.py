"""Time a suspect model's changed bricks again, interleaved round by round with its reference bricks.

A brick's time measured minutes apart from another's may differ because the machine did: another job
started, the clock changed. Timed in the same rounds, one after the other, the changed bricks and the
unchanged reference bricks share the machine's state of that moment, so the ratio of their times
holds still when the machine's speed does not (see :mod:`.comparing`). Each round times every brick
once, for a block of calls whose median is the brick's time in that round (as pytest-benchmark's
median of rounds is the run's), in an order rotated from round to round so that no brick always
follows the same one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence

from ..core.settings import Settings
from ..cut.bricks import BrickSpec
from .running import BrickError, BrickRunner

#: Interleaved rounds per suspect model.
ROUNDS = 15
#: Seconds each brick is run for in each round (a whole number of calls, at least one).
BLOCK_S = 0.002
#: Untimed calls that start each brick's block in a round.
WARMUP_CALLS = 2


def retime(
    bricks: Mapping[str, BrickSpec],
    signatures: Sequence[str],
    settings: Settings,
    *,
    rounds: int = ROUNDS,
    block_s: float = BLOCK_S,
    timer: Callable[[], float] = time.perf_counter,
    flushes: Mapping[str, Callable[[], None]] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each brick of ``signatures`` in each of ``rounds`` interleaved rounds; bricks
    that cannot be built or run here are left out. ``flushes``: what pushes a brick's weights out of the
    caches before its calls, as when its item timed it (see :mod:`.caches`)."""
    runners: dict[str, BrickRunner] = {}
    for signature in dict.fromkeys(signatures):
        try:
            runner = BrickRunner(bricks[signature], settings, flush=(flushes or {}).get(signature))
            runner.check()
        except (BrickError, KeyError):
            continue
        runners[signature] = runner
    calls = {signature: _calls_for(runner, block_s, timer) for signature, runner in runners.items()}
    order = list(runners)
    times: dict[str, list[float]] = {signature: [] for signature in order}
    for index in range(rounds):
        shift = index % len(order) if order else 0
        for signature in order[shift:] + order[:shift]:
            times[signature].append(_block(runners[signature], calls[signature], timer))
    return times


def _calls_for(runner: BrickRunner, block_s: float, timer: Callable[[], float]) -> int:
    """Calls per block: enough to last ``block_s``, from a warm call's time."""
    once = _block(runner, 1, timer)
    return max(1, int(block_s / once)) if once > 0 else 1


def _block(runner: BrickRunner, calls: int, timer: Callable[[], float]) -> float:
    """The median seconds of ``calls`` calls, each after its inputs are written again (untimed), as bricks are
    timed in their items, and after :data:`WARMUP_CALLS` untimed calls: the first call after another brick
    ran waits for onnxruntime's threads to wake up, sometimes for milliseconds on a busy machine."""
    for _ in range(WARMUP_CALLS):
        runner.prepare_call()
        runner()
    times = []
    for _ in range(calls):
        runner.prepare_call()
        start = timer()
        runner()
        times.append(timer() - start)
    return statistics.median(times)
