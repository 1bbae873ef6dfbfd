"""How two runs' bricks set against each other give a model's change: the shares of its bricks, the machine's drift
between the runs and the interval of the change."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.noise import Z, bootstrap_median, log_spread, median_error

#: Reference bricks re-timed beside a suspect's changed bricks, the largest share first.
MAX_REFERENCES = 6
#: How far (standard deviation of the log ratio) single bricks are taken to drift apart from the common
#: drift when fewer than three reference bricks show it.
DEFAULT_DRIFT_SPREAD = 0.05
#: Reference bricks within this factor of the changed bricks' typical time show how far those drift apart.
ALIKE_FACTOR = 4.0


@dataclass(frozen=True)
class BrickMove:
    """How much one distinct brick adds to a model's estimate before and now, both at the baseline's machine
    speed (count times brick time): the moves of a model's changed bricks add up to its judged change."""

    label: str
    count_before: int
    count_now: int
    before_s: float
    now_s: float

    @property
    def delta_s(self) -> float:
        return self.now_s - self.before_s


@dataclass(frozen=True)
class Judgement:
    """The change of a model's estimate at the baseline's machine speed, as a fraction of its estimate before,
    with its interval: the sum of its changed bricks' moves over that estimate."""

    change: float
    low: float
    high: float
    #: Machine speed now over before, from the reference bricks (1 without any).
    drift: float
    references: int
    #: "statistics", "re-timed" with the number of interleaved rounds, or "counted" (simulated cost: exact).
    method: str
    rounds: int = 0
    #: The changed bricks' moves, the largest increase first.
    moves: tuple[BrickMove, ...] = ()

    def describe(self) -> str:
        return f"{self.change:+.1%} [{self.low:+.1%}, {self.high:+.1%}]"


@dataclass(frozen=True)
class _Share:
    label: str
    count: int
    time_s: float | None
    stats: Mapping[str, float] | None

    @property
    def error_s(self) -> float:
        return median_error(self.stats or {})


@dataclass(frozen=True)
class _Model:
    """One model's bricks in both runs: those whose count changed (new, gone, or used more or less often) and
    those that did not, which show the machine's drift."""

    now: Mapping[str, _Share]
    before: Mapping[str, _Share]
    before_s: float
    #: Bricks of the whole run measured in both runs, for a model without any of its own.
    run_references: Mapping[str, tuple[_Share, _Share]]

    @property
    def changed(self) -> list[str]:
        """Signatures used a different number of times (new and gone bricks included)."""
        signatures = [*self.now, *(s for s in self.before if s not in self.now)]
        return [s for s in signatures if _count(self.now.get(s)) != _count(self.before.get(s))]

    def _references(self, *, measured_apart: bool) -> list[tuple[str, _Share, _Share, float]]:
        """Unchanged bricks of the model with a time in both runs (signature, now, before, weight);
        ``measured_apart`` leaves out bricks both runs took from the store (the same measurement)."""
        own = [
            (signature, share, self.before[signature], float(share.count))
            for signature, share in self.now.items()
            if signature in self.before and signature not in self.changed and self.before[signature].time_s
        ]
        pool = own or [(s, new, old, 1.0) for s, (new, old) in self.run_references.items()]
        return [ref for ref in pool if not measured_apart or ref[1].stats != ref[2].stats]

    def _changed_shares(self) -> list[_Share]:
        return [self.now.get(s) or self.before[s] for s in self.changed]

    def _typical_changed_s(self) -> float:
        """The changed bricks' mean time."""
        changed = self._changed_shares()
        return sum(share.time_s or 0.0 for share in changed) / max(len(changed), 1)

    def _drift_spread(self, ratios: Sequence[tuple[_Share, float]]) -> float:
        """How far single bricks drift apart from the common drift, from reference bricks' (baseline share,
        ratio of their times): those within :data:`ALIKE_FACTOR` of the changed bricks' time when three or
        more are, since bricks of microseconds scatter far more than the convolutions beside them (timer
        and call costs weigh on them) and would widen a convolution's interval with noise it does not have."""
        typical = self._typical_changed_s()
        alike = [
            ratio
            for share, ratio in ratios
            if typical > 0 and share.time_s and 1 / ALIKE_FACTOR <= share.time_s / typical <= ALIKE_FACTOR
        ]
        spread = log_spread(alike) if len(alike) >= 3 else log_spread([ratio for _, ratio in ratios])
        return DEFAULT_DRIFT_SPREAD if spread is None else spread

    def retime_references(self) -> tuple[str, ...]:
        """The reference bricks to re-time beside the changed ones: those most like them first (sharing their
        operators, then closest in time), since a busy machine slows a multi-threaded convolution more than a
        small elementwise brick."""
        changed = self._changed_shares()
        ops = {op for share in changed for op in share.label.split("-")[0].split("+")}
        typical = self._typical_changed_s()

        def likeness(ref: tuple[str, _Share, _Share, float]) -> tuple[int, float]:
            shared = len(ops.intersection(ref[2].label.split("-")[0].split("+")))
            return -shared, abs(math.log(max(ref[2].time_s or 1e-12, 1e-12) / max(typical, 1e-12)))

        pool = sorted(self._references(measured_apart=False), key=likeness)
        return tuple(ref[0] for ref in pool[:MAX_REFERENCES])

    def _new(self) -> list[tuple[str, _Share]]:
        """The bricks only this run has."""
        return [(s, self.now[s]) for s in self.changed if s not in self.before]

    def _settled(self) -> list[BrickMove]:
        """The changed bricks the baseline has, at its own times: a gone brick takes its share away, and a brick
        used more or less often adds or takes away its baseline time per use (it is the same computation)."""
        moves = []
        for signature in self.changed:
            old = self.before.get(signature)
            if old is None:
                continue
            count_now = _count(self.now.get(signature))
            time_s = old.time_s or 0.0
            moves.append(BrickMove(old.label, old.count, count_now, old.count * time_s, count_now * time_s))
        return moves

    def _settled_error(self) -> float:
        """Variance (in seconds squared) of :meth:`_settled` from the baseline's sampling error."""
        return sum(
            ((self.before[s].count - _count(self.now.get(s))) * self.before[s].error_s) ** 2
            for s in self.changed
            if s in self.before
        )

    def _judgement(
        self, moves: Sequence[BrickMove], variance: float, drift: float, references: int, method: str, rounds: int = 0
    ) -> Judgement:
        """The change of the model's estimate at the baseline's machine speed: the sum of its bricks' moves."""
        change = sum(move.delta_s for move in moves) / self.before_s
        half = Z * math.sqrt(variance) / self.before_s
        ordered = tuple(sorted(moves, key=lambda move: move.delta_s, reverse=True))
        return Judgement(change, change - half, change + half, drift, references, method, rounds, ordered)

    def judge_statistics(self) -> Judgement | None:
        """The change and its interval from the reports' statistics; None for a model of unchanged bricks."""
        if not self.changed:
            return None
        references = self._references(measured_apart=True)
        weight_now = sum(w * (new.time_s or 0.0) for _, new, _, w in references)
        weight_before = sum(w * (old.time_s or 0.0) for _, _, old, w in references)
        drift = weight_now / weight_before if weight_now > 0 and weight_before > 0 else 1.0
        ratios = [(old, (new.time_s or 0.0) / old.time_s) for _, new, old, _ in references if old.time_s and new.time_s]
        spread = self._drift_spread(ratios)
        new = [
            BrickMove(share.label, 0, share.count, 0.0, share.count * (share.time_s or 0.0) / drift)
            for _, share in self._new()
        ]
        moves = [*new, *self._settled()]
        variance = self._settled_error()
        variance += sum((share.count * share.error_s / drift) ** 2 for _, share in self._new())
        variance += _scatter(moves, spread)
        variance += (sum(move.now_s for move in new) * spread) ** 2 / max(len(ratios), 1)
        return self._judgement(moves, variance, drift, len(references), "statistics")

    def judge_exact(self) -> Judgement | None:
        """The change of counted costs (simulated), which no machine speed moves and no noise blurs: the new
        bricks as counted, an interval of no width; None for a model of unchanged bricks."""
        if not self.changed:
            return None
        new = [
            BrickMove(share.label, 0, share.count, 0.0, share.count * (share.time_s or 0.0)) for _, share in self._new()
        ]
        return self._judgement([*new, *self._settled()], 0.0, 1.0, 0, "counted")

    def judge_rounds(self, rounds: Mapping[str, Sequence[float]]) -> Judgement | None:
        """The change per interleaved round, the new bricks brought back to the baseline's machine speed by that
        round's drift, and a bootstrap interval of their median."""
        if not self.changed:
            return None
        new = self._new()
        count = min((len(times) for times in rounds.values()), default=0)
        if count == 0 or any(signature not in rounds for signature, _ in new):
            return self.judge_statistics()
        references = [ref for ref in self._references(measured_apart=False) if ref[0] in rounds]
        base = sum(w * (ref.time_s or 0.0) for _, _, ref, w in references)
        settled = self._settled()
        fixed = sum(move.delta_s for move in settled)
        drifts = np.array(
            [
                sum(w * rounds[s][index] for s, _, _, w in references) / base if references else 1.0
                for index in range(count)
            ]
        )
        # Seconds at the baseline's machine speed of each new brick (rows) in each round (columns).
        new_s = np.array([[share.count * t for t in rounds[s][:count]] for s, share in new]).reshape(len(new), count)
        new_s = new_s / drifts
        changes = (new_s.sum(axis=0) + fixed) / self.before_s
        change, low, high = bootstrap_median(list(changes))
        # The round (or the two rounds) whose change is the median give the new bricks' shares, so that the moves
        # shown add up to the change.
        middle = np.argsort(changes, kind="stable")[(count - 1) // 2 : count // 2 + 1]
        moves = [
            *(
                BrickMove(share.label, 0, share.count, 0.0, float(new_s[row, middle].mean()))
                for row, (_, share) in enumerate(new)
            ),
            *settled,
        ]
        # What the rounds cannot show: the baseline's own sampling error, and how far the changed bricks
        # may drift apart from the reference bricks (their scatter in the rounds).
        ratios = [(ref, _median(rounds[s][:count]) / (ref.time_s or 1.0)) for s, _, ref, _ in references]
        spread = self._drift_spread(ratios)
        widen = Z * math.sqrt(self._settled_error() + _scatter(moves, spread)) / self.before_s
        judged = self._judgement(moves, 0.0, float(drifts[middle].mean()), len(references), "re-timed", count)
        return dataclasses.replace(
            judged,
            change=change,
            low=change - math.hypot(change - low, widen),
            high=change + math.hypot(high - change, widen),
        )


def _scatter(moves: Sequence[BrickMove], spread: float) -> float:
    """Variance (in seconds squared) of the moves from single bricks drifting apart between the runs by
    ``spread`` (of their log ratio, half of it in each run)."""
    return spread**2 / 2 * sum(move.delta_s**2 for move in moves)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _count(share: _Share | None) -> int:
    return share.count if share is not None else 0
