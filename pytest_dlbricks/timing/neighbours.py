"""The brick before: each call of a brick follows a call of the brick its model runs right before it.

Inside a model a brick runs right after another, and meets what that one left: its code and branches in the
processor's caches and predictors, its data in the data caches, the thread pool as it left it. Called again
and again alone, a brick meets what its own last call left instead, and a brick of microseconds runs faster
than in its model: the sample ``transformer_block.onnx`` read 0.81 to 0.83 of its measured time, and 0.97 to 1.01
with each call of its bricks after one of the brick before (three validated runs each way, granularity 2; the
samples together 0.798, then 0.896, see docs/method.rst). So every timing of a brief brick (its item, validation's
paired rounds, timing it again, the comparison's retiming) calls the brick before it, untimed, before each of its
calls. Its time is then that of the brick in the model, without the work of the one before, timed in its own item.

The brick before a brick is at one of its places in its models: the window right before it, or for a
model's first the model's last (the call before ended with it); a broken window is passed over. A brick whose
only neighbour is itself (a model of one brick, or the same brick over and over) has none: its own calls
already precede it. A run times its bricks mostly in their models' order, so the one before is usually the
one it timed last: the runners of the last bricks built are kept (see :class:`RecentRunners`), and one is built
only where none is at hand. An exported suite says nothing of its bricks' order, which would tell the
model's: its bricks are timed without one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from ..cut.bricks import BrickSpec
from ..cut.cutting import ModelPlan
from .running import BrickRunner

#: Runners kept for the bricks after them: the brick timed last and the one built to precede it.
KEPT_RUNNERS = 2
#: A brick follows the brick before it only where both take less than this a call (their fastest): what the one
#: before leaves is worth a few microseconds a call (about 0.6 us a brick of ``transformer_block.onnx``, 4.5 us of
#: ``tiny_resnet.onnx``, whose first convolutions found the pool's other thread awake), within the precision a brick
#: of more is timed to, and calling it would double the time of its rounds: validated runs of the onnx wheel's CNNs
#: took 104 s and 107 s with every brick following, 85 s and 89 s before, their paired rounds reading 0.884 and 0.886.
FOLLOWS_UNDER_S = 200e-6
#: How the brick store's records were timed: 2, each call of a brief brick after a call of the brick before it; 1,
#: alone. A brief brick stored the old way is timed again.
TIMING_METHOD = 2


def bricks_before(plans: Iterable[ModelPlan]) -> dict[str, tuple[str, ...]]:
    """Per distinct brick of ``plans``, the distinct bricks right before its places, first met first (see the
    module's description); bricks that have none are left out."""
    found: dict[str, dict[str, None]] = {}
    for plan in plans:
        runnable = [brick.signature for brick in plan.bricks if isinstance(brick, BrickSpec)]
        for index, signature in enumerate(runnable):
            before = runnable[index - 1]
            if before != signature:
                found.setdefault(signature, {})[before] = None
    return {signature: tuple(before) for signature, before in found.items()}


def follows(seconds: float | None) -> bool:
    """Whether a brick whose fastest call took ``seconds`` (None: not known yet) is brief enough to follow the brick
    before it, or to be followed (see :data:`FOLLOWS_UNDER_S`)."""
    return seconds is None or seconds < FOLLOWS_UNDER_S


class RecentRunners:
    """The runners of the last :data:`KEPT_RUNNERS` bricks built, by signature: the brick after one of them
    calls it instead of building a session of its own (about 5 ms a brick, and a check)."""

    def __init__(self, kept: int = KEPT_RUNNERS) -> None:
        self.kept = kept
        self._runners: OrderedDict[str, BrickRunner] = OrderedDict()

    def add(self, signature: str, runner: BrickRunner) -> None:
        self._runners[signature] = runner
        self._runners.move_to_end(signature)
        while len(self._runners) > self.kept:
            self._runners.popitem(last=False)

    def get(self, signature: str) -> BrickRunner | None:
        return self._runners.get(signature)

    def discard(self, signature: str) -> None:
        """Let go of a brick's runner: one that is not brief holds memory for no brick after it."""
        self._runners.pop(signature, None)
