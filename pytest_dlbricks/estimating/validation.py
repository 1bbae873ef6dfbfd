"""Validation: a whole model timed round by round right after its bricks, and the accuracy that shows.

On a shared machine the same model's time moves by tens of percent within minutes. Comparing an
estimate with a measurement taken at another moment would mostly measure that drift. So each
validation round times every distinct brick of the model and then the whole model, and each
round's estimate is compared with the same round's measurement; medians over rounds follow.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..cut.cutting import ModelPlan
from ..timing.overhead import CallOverhead
from ..timing.retiming import TimedBrick, round_time, warm
from .composition import ParallelExecutor, compose

#: Executors a model is validated against, and the estimate each one is compared with.
ESTIMATE_OF_EXECUTOR = {"sequential": "sequential_s", "parallel": "critical_path_s"}
#: Bands a model's estimate is counted "within" of its measurement, as nn-Meter and LitePred count theirs.
WITHIN = {"within_5_percent": 0.05, "within_10_percent": 0.10}
#: Time a validation aims to spend on one model, within the bounds on rounds below.
VALIDATION_SECONDS = 2.0
MIN_ROUNDS = 7
MAX_ROUNDS = 200


@dataclass
class BrickRounds:
    """Times each distinct brick of a model once per round; used as pytest-benchmark's round setup.

    Each call is timed as brick items are, its inputs written again just before, after the untimed
    calls of :func:`warm`. Each round ends with as many untimed calls of the whole ``model``
    and the writing of its inputs, so that the model's timed call, which follows, finds things as each
    brick's did: caches filled, threads awake, inputs just written, the model called again and again.
    Each round starts with the time of the run's reference call (``reference``, see
    :meth:`.speed_trace.SpeedTrace.now`): the round's call costs are in proportion to it.
    """

    runners: Mapping[str, TimedBrick]
    model: TimedBrick
    reference: Callable[[], float | None] = lambda: None
    #: One entry per round: seconds by brick signature (median of the round's calls).
    rounds: list[dict[str, float]] = field(default_factory=list)
    #: One entry per round: the reference call's time at its start, None when unknown.
    references: list[float | None] = field(default_factory=list)

    def __call__(self) -> None:
        self.references.append(self.reference())
        self.rounds.append({signature: round_time(run) for signature, run in self.runners.items()})
        warm(self.model)
        self.model.prepare_call()


def rounds_for(round_seconds: float) -> int:
    """How many validation rounds fit the time budget, within sensible bounds."""
    if round_seconds <= 0:
        return MAX_ROUNDS
    return max(MIN_ROUNDS, min(MAX_ROUNDS, math.ceil(VALIDATION_SECONDS / round_seconds)))


#: Each brick time statistic (see :data:`.settings.STATISTICS`) taken over a model's rounds.
OVER_ROUNDS: dict[str, Callable[[Sequence[float]], float]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "min": min,
}


@dataclass(frozen=True)
class Validation:
    """One model measured under one executor, paired round by round with its bricks' times."""

    executor: str
    model_s: Sequence[float]
    brick_rounds: Sequence[Mapping[str, float]]
    #: The reference call's time at the start of each brick round (see :class:`BrickRounds`); empty
    #: where unknown.
    references: Sequence[float | None] = ()

    def summarize(
        self,
        plan: ModelPlan,
        overhead: CallOverhead,
        parallel: ParallelExecutor | None = None,
        estimate_field: str | None = None,
        statistic: str = "median",
    ) -> dict[str, float | None]:
        """Measured time and estimate over the rounds in ``statistic`` (the one the run composes bricks
        in, so that the two compare), the median of the rounds' ratios, and how much rounds disagree.

        The estimate is the executor's own (see :data:`ESTIMATE_OF_EXECUTOR`) unless ``estimate_field``
        names another. Without an estimate (a brick of the model cannot run), only the measurement is given.
        """
        over_rounds = OVER_ROUNDS[statistic]
        estimate_field = estimate_field or ESTIMATE_OF_EXECUTOR[self.executor]
        # pytest-benchmark's warm-up rounds run the setup too: pair the last rounds with the measurements.
        paired = list(zip(self.brick_rounds[-len(self.model_s) :], self.model_s))
        references = list(self.references)[-len(paired) :] if len(self.references) == len(self.brick_rounds) else []
        # Paired rounds time each brick call alone, as the model's: no item loop to take off. A round's
        # bricks and model pay the call costs of its moment.
        alone = dataclasses.replace(overhead, timing_s=0.0)
        at = [alone.at(reference) for reference in references] or [alone] * len(paired)
        estimates = [
            getattr(compose(plan, times, costs, parallel), estimate_field) for (times, _), costs in zip(paired, at)
        ]
        ratios = [estimate / measured for estimate, (_, measured) in zip(estimates, paired) if estimate is not None]
        return {
            "measured_s": over_rounds(self.model_s),
            "estimate_s": over_rounds([e for e in estimates if e is not None]) if ratios else None,
            "ratio": statistics.median(ratios) if ratios else None,
            "spread": _relative_iqr(ratios) if ratios else None,
            "rounds": len(paired),
        }


def accuracy(ratios: Sequence[float]) -> dict[str, float | int] | None:
    """Accuracy of estimates whose ratios to the measurements are ``ratios``; None without any."""
    if not ratios:
        return None
    logs = [math.log(ratio) for ratio in ratios]
    return {
        "models": len(ratios),
        "geometric_mean_ratio": math.exp(statistics.fmean(logs)),
        "accuracy": math.exp(-statistics.fmean(abs(value) for value in logs)),
        **{key: sum(abs(ratio - 1) <= band for ratio in ratios) for key, band in WITHIN.items()},
    }


def _relative_iqr(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    low, _, high = statistics.quantiles(values, n=4)
    return (high - low) / statistics.median(values)
