"""Time bricks again: a suspect model's changed bricks interleaved with its reference bricks, and a run's
bricks once more at its end.

A brick's time measured minutes apart from another's may differ because the machine did: another job
started, the clock changed. Timed in the same rounds, one after the other, the changed bricks and the
unchanged reference bricks share the machine's state of that moment, so the ratio of their times
holds still when the machine's speed does not (see :mod:`.comparing`). Each round times every brick
once, for a block of calls whose median is the brick's time in that round (as pytest-benchmark's
median of rounds is the run's), in an order rotated from round to round so that no brick always
follows the same one.

A run that does not validate times each brick it timed once more at its end, as validation's rounds
time them (:func:`time_again`): its estimates from those times against its item estimates say how far
the same bricks timed at another moment move a model (see :mod:`.verdict`). On a steady machine (an
Intel Xeon of 2 vCPUs, its speed trace within +-3%) eight first runs of the sample models moved a
model up to 9.5% from its median while every verdict said +-2% to +-4%: a brick's rounds, taken back
to back, share their moment, and their margin of error cannot see another.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..core.settings import Settings
from ..cut.bricks import BrickSpec
from .caches import ColdInputs
from .running import BrickError, BrickRunner

#: Interleaved rounds per suspect model.
ROUNDS = 15
#: Seconds each brick is run for in each round (a whole number of calls, at least one).
BLOCK_S = 0.002
#: Untimed calls that start each brick's block in a round.
WARMUP_CALLS = 2
#: Timed calls of each brick per round: of validation (see :class:`.BrickRounds`), after the untimed ones of
#: :func:`warm`, and of :func:`time_again`.
CALLS_PER_ROUND = 3
#: Untimed calls of each brick, and of the model, before their timed calls in a round. Called once after
#: other sessions ran, a model of a millisecond takes far longer than called again and again, as users
#: call it and as pytest-benchmark times it (after 1 and 5 such calls, against 30: t5 1.33x and 1.02x,
#: gpt2 1.28x and 1.05x, BERT 1.17x and 1.00x; models of 10 ms and more within 3% after one): timed after
#: one, such a model read slow against its bricks, which are timed again and again too.
WARM_CALLS = 5
#: ... or fewer, once they have taken this long: a model of 10 ms is warm after one call, and five calls of
#: a large model's every brick and of the model made validating the onnx wheel's CNNs 1.6x longer.
WARM_SECONDS = 0.01
#: Rounds a brick is timed in again at the end of a run (see :func:`time_again`), as validation's fewest, or fewer
#: (not under the second figure) once they took the third's seconds: a convolution of milliseconds reads as steady
#: in three rounds as a brick of microseconds in seven.
AGAIN_ROUNDS = 7
AGAIN_MIN_ROUNDS = 3
AGAIN_BRICK_S = 0.005
#: Seconds of untimed calls before a brick is timed again (see :func:`time_again`): the first rounds after its
#: session was made read up to 1.7x its item's time on the sample models' bricks of microseconds, those after
#: 300 untimed calls within 5% for most of them.
AGAIN_WARM_S = 0.002


def retime(
    bricks: Mapping[str, BrickSpec],
    signatures: Sequence[str],
    settings: Settings,
    *,
    rounds: int = ROUNDS,
    block_s: float = BLOCK_S,
    timer: Callable[[], float] = time.perf_counter,
    flushes: Mapping[str, Callable[[], None]] | None = None,
    colds: Mapping[str, ColdInputs | None] | None = None,
    befores: Mapping[str, BrickRunner | None] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each brick of ``signatures`` in each of ``rounds`` interleaved rounds; bricks
    that cannot be built or run here are left out. ``flushes``: what pushes a brick's weights out of the
    caches before its calls, ``colds``, a brick's cold inputs (see :mod:`.caches`), and ``befores``, the brick
    called before each of its calls (see :mod:`.neighbours`), as when its item timed it."""
    runners: dict[str, BrickRunner] = {}
    for signature in dict.fromkeys(signatures):
        try:
            runner = BrickRunner(
                bricks[signature],
                settings,
                flush=(flushes or {}).get(signature),
                cold=(colds or {}).get(signature),
                before=(befores or {}).get(signature),
            )
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


class TimedBrick(Protocol):
    """A brick ready to run (see :class:`.BrickRunner`)."""

    def __call__(self) -> object: ...

    def prepare_call(self) -> None: ...


def warm(run: TimedBrick) -> None:
    """Call ``run`` untimed :data:`WARM_CALLS` times, or fewer once the calls took :data:`WARM_SECONDS`."""
    start = time.perf_counter()
    for _ in range(WARM_CALLS):
        run()
        if time.perf_counter() - start >= WARM_SECONDS:
            return


def round_time(run: TimedBrick) -> float:
    """A brick's time in a round of validation: after the untimed calls of :func:`warm`, :func:`calls_time`."""
    warm(run)
    return calls_time(run)


def calls_time(run: TimedBrick) -> float:
    """The median seconds of :data:`CALLS_PER_ROUND` calls, each timed alone after its inputs are written again."""
    return median_call(run, CALLS_PER_ROUND, time.perf_counter)


def median_call(run: TimedBrick, calls: int, timer: Callable[[], float] = time.perf_counter) -> float:
    """The median seconds of ``calls`` calls, each timed alone after its inputs are written again (untimed)."""
    times = []
    for _ in range(calls):
        run.prepare_call()
        start = timer()
        run()
        times.append(timer() - start)
    return statistics.median(times)


@dataclass(frozen=True)
class TimedAgain:
    """A brick's rounds from :func:`time_again` (each the median seconds of its calls), and the reference call's
    time just before them (see :meth:`.SpeedTrace.settled`): their call cost follows it."""

    rounds: tuple[float, ...]
    reference_s: float | None


def time_again(runner: TimedBrick, *, rounds: int = AGAIN_ROUNDS) -> tuple[float, ...]:
    """A brick timed again: after :data:`AGAIN_WARM_S` of untimed calls (one at least), ``rounds`` rounds (or
    :data:`AGAIN_MIN_ROUNDS` once they took :data:`AGAIN_BRICK_S`), each timed as validation's rounds time a brick
    (:func:`calls_time`). Not interleaved with other bricks, its rounds need no untimed calls of their own."""
    start = time.perf_counter()
    while True:
        runner.prepare_call()
        runner()
        if time.perf_counter() - start >= AGAIN_WARM_S:
            break
    start, times = time.perf_counter(), list[float]()
    while len(times) < rounds and (len(times) < AGAIN_MIN_ROUNDS or time.perf_counter() - start < AGAIN_BRICK_S):
        times.append(calls_time(runner))
    return tuple(times)


#: How far past its budget timing bricks again may run to finish a model it began (see :func:`again_by_model`).
AGAIN_OVERRUN = 2.0


def again_by_model(
    models: Sequence[Sequence[str]],
    time_one: Callable[[str], object],
    budget_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Time again (``time_one``) the bricks of ``models``, in their order, model by model within ``budget_s``.

    Only a model whose every brick is timed again has a drift (see :mod:`.verdict`): a model left half done is
    time spent for nothing (8 fine-tuned ResNet-50s took 0.39 s for 19 of their 23 bricks and gave none). So a
    model begun is finished, unless at the seconds a brick took so far it would end past :data:`AGAIN_OVERRUN`
    times the budget; a model is begun only when the bricks it still needs, at that pace, fit what is left of
    the budget (the first, whose pace none is known, whenever there is budget). A brick shared with a model
    done before is not timed again."""
    start = clock()
    done: set[str] = set()
    timed = 0

    def pace() -> float | None:
        return (clock() - start) / timed if timed else None

    for bricks in models:
        needed = [signature for signature in dict.fromkeys(bricks) if signature not in done]
        spent, per_brick = clock() - start, pace()
        if spent >= budget_s:
            return
        if per_brick is not None and spent + len(needed) * per_brick > budget_s:
            continue  # a later model may need fewer bricks, shared with those done
        for index, signature in enumerate(needed):
            time_one(signature)
            done.add(signature)
            timed += 1
            per_brick = pace()
            left = len(needed) - index - 1
            if left and per_brick is not None and clock() - start + left * per_brick > AGAIN_OVERRUN * budget_s:
                return


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
    return median_call(runner, calls, timer)
