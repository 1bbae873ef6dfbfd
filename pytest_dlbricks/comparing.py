"""Compare this run's per-model estimates with a saved run's: deltas, noise bands and the gate's decision.

Both runs are ``dlbricks`` blocks as saved in pytest-benchmark's JSON (:func:`make_block`): the run's
conditions and its report, whose models carry their estimates and whose bricks carry their
statistics and the models using them.

The noise band of a model is how far its bricks' own spread lets the estimates move toward each
other. For a model that got slower, every brick time measured now may move down to its first
quartile and every brick time measured before up to its third quartile, each counted as often as the
brick is used; the model is slower beyond noise when the estimate composed from the first quartiles
now still exceeds the one composed from the third quartiles before: the two runs' interquartile boxes
do not overlap (mirrored for a model that got faster). A brick time both runs took from the store is
the same measurement and adds nothing, or only for a change in its count. Summing the spreads treats
the bricks' variations as moving together, as they do when a whole machine is busy: a noisy machine
widens the band instead of failing a clean change. Interference mostly adds slow rounds, which widen
the upper quartile only: a brick whose median stays put keeps a tight lower quartile, so a real
slowdown measured on a busy machine is still caught. When the call overhead composition takes off
was measured again (``--dlbricks-remeasure``), the shift it causes counts as noise too. A model fails
the gate only when it is slower by more than the threshold *and* by more than its noise band.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .terminal import format_seconds, format_table

BLOCK_VERSION = 1
#: Bricks named in a failure message.
MOVED_BRICKS_SHOWN = 3

UNCHANGED = "unchanged"
WITHIN_NOISE = "within noise"
FASTER = "faster"
SLOWER = "slower"
REGRESSION = "REGRESSION"
NEW = "new"
GONE = "gone"
INCOMPLETE = "incomplete"


def make_block(report: Mapping[str, Any], conditions: Mapping[str, Any]) -> dict[str, Any]:
    """The ``dlbricks`` block of a saved run: the conditions two runs must share, and the report."""
    return {"version": BLOCK_VERSION, **conditions, "report": report}


@dataclass(frozen=True)
class BrickMove:
    """How much one distinct brick adds to a model's estimate before and now (count times brick time)."""

    label: str
    count_before: int
    count_now: int
    before_s: float
    now_s: float

    @property
    def delta_s(self) -> float:
        return self.now_s - self.before_s


@dataclass(frozen=True)
class ModelDelta:
    """One model's estimates in both runs and the verdict on the change."""

    path: str
    before_s: float | None
    now_s: float | None
    band_s: float
    verdict: str
    #: Bricks whose share changed, the largest increase first.
    moves: tuple[BrickMove, ...] = ()

    @property
    def change(self) -> float | None:
        """Relative change of the estimate, such as 0.12 for 12% slower."""
        if self.before_s is None or self.now_s is None or self.before_s <= 0:
            return None
        return self.now_s / self.before_s - 1


@dataclass(frozen=True)
class Comparison:
    baseline: str
    statistic: str
    threshold: float | None
    models: tuple[ModelDelta, ...]

    @property
    def regressions(self) -> list[ModelDelta]:
        return [model for model in self.models if model.verdict == REGRESSION]

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "statistic": self.statistic,
            "threshold": self.threshold,
            "failed": bool(self.regressions),
            "models": [
                {
                    "path": m.path,
                    "before_s": m.before_s,
                    "now_s": m.now_s,
                    "change": m.change,
                    "noise_band_s": m.band_s,
                    "verdict": m.verdict,
                    "moved_bricks": [
                        {"brick": b.label, "before_s": b.before_s, "now_s": b.now_s}
                        for b in m.moves[:MOVED_BRICKS_SHOWN]
                    ],
                }
                for m in self.models
            ],
        }


@dataclass(frozen=True)
class _Share:
    label: str
    count: int
    time_s: float | None
    stats: Mapping[str, float] | None

    @property
    def median_s(self) -> float:
        return float((self.stats or {}).get("median", self.time_s or 0.0))

    @property
    def quartiles(self) -> tuple[float, float]:
        """First and third quartiles of the brick's rounds; half a range around the median in older records."""
        stats = self.stats or {}
        half = float(stats.get("iqr", 0.0)) / 2
        return float(stats.get("q1", self.median_s - half)), float(stats.get("q3", self.median_s + half))


def compare(
    now: Mapping[str, Any], before: Mapping[str, Any], *, baseline: str, statistic: str, threshold: float | None
) -> Comparison:
    """Compare the models of two ``dlbricks`` blocks; ``threshold`` is a fraction, None never fails."""
    now_models = _models(now["report"])
    before_models = _models(before["report"])
    now_shares = _shares(now["report"], statistic)
    before_shares = _shares(before["report"], statistic)
    deltas = []
    for path in [*now_models, *(p for p in before_models if p not in now_models)]:
        if path not in before_models:
            deltas.append(ModelDelta(path, None, _estimate(now_models[path], now_shares.get(path, {})), 0.0, NEW))
            continue
        if path not in now_models:
            deltas.append(
                ModelDelta(path, _estimate(before_models[path], before_shares.get(path, {})), None, 0.0, GONE)
            )
            continue
        delta = _delta(
            path,
            now_models[path],
            before_models[path],
            now_shares.get(path, {}),
            before_shares.get(path, {}),
            threshold,
            overhead_changed=_overhead(now) != _overhead(before),
        )
        deltas.append(delta)
    return Comparison(baseline, statistic, threshold, tuple(deltas))


def _delta(
    path: str,
    now_model: Mapping[str, Any],
    before_model: Mapping[str, Any],
    now: Mapping[str, _Share],
    before: Mapping[str, _Share],
    threshold: float | None,
    *,
    overhead_changed: bool,
) -> ModelDelta:
    now_s = _estimate(now_model, now)
    before_s = _estimate(before_model, before)
    if now_s is None or before_s is None:
        return ModelDelta(path, before_s, now_s, 0.0, INCOMPLETE)
    delta = now_s - before_s
    # A call overhead measured again moves every brick's share alike: that counts as noise too.
    band = abs(_correction(now_s, now) - _correction(before_s, before)) if overhead_changed else 0.0
    moves = []
    for signature in [*now, *(s for s in before if s not in now)]:
        new, old = now.get(signature), before.get(signature)
        if new is not None and old is not None and new.stats == old.stats:
            # The same measurement on both sides: only a change in the brick's count moves the estimate,
            # as if the extra uses were measured now (or the missing ones before).
            extra = new.count - old.count
            if extra == 0:
                continue
            band += _spread(new, extra, now_side=extra > 0, slower=delta >= 0)
        else:
            band += sum(
                _spread(share, share.count, now_side=share is new, slower=delta >= 0) for share in (new, old) if share
            )
        move = BrickMove(
            label=(new or old).label,  # type: ignore[union-attr]
            count_before=old.count if old else 0,
            count_now=new.count if new else 0,
            before_s=old.count * (old.time_s or 0.0) if old else 0.0,
            now_s=new.count * (new.time_s or 0.0) if new else 0.0,
        )
        if move.delta_s:
            moves.append(move)
    moves.sort(key=lambda move: move.delta_s, reverse=True)
    change = delta / before_s if before_s > 0 else 0.0
    if delta == 0:
        verdict = UNCHANGED
    elif abs(delta) <= band:
        verdict = WITHIN_NOISE
    elif delta < 0:
        verdict = FASTER
    elif threshold is not None and change > threshold:
        verdict = REGRESSION
    else:
        verdict = SLOWER
    return ModelDelta(path, before_s, now_s, band, verdict, tuple(moves))


def _spread(share: _Share, count: int, *, now_side: bool, slower: bool) -> float:
    """How far ``count`` uses of a brick may move toward the other run: for a model that got slower, down
    to the first quartile for a time measured now, up to the third quartile for a time measured before."""
    low, high = share.quartiles
    toward_other = share.median_s - low if now_side == slower else high - share.median_s
    return abs(count) * max(toward_other, 0.0)


def _models(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(model["path"]): model for model in report.get("models", [])}


def _shares(report: Mapping[str, Any], statistic: str) -> dict[str, dict[str, _Share]]:
    """Each model's distinct bricks with their counts and times, by model path and signature."""
    by_model: dict[str, dict[str, _Share]] = {}
    for brick in report.get("bricks", []):
        stats = brick.get("stats")
        time_s = stats.get(statistic) if stats else None
        label = brick.get("label") or f"{'+'.join(brick.get('ops', []))}-{str(brick['signature'])[:8]}"
        for path, count in brick.get("models", {}).items():
            by_model.setdefault(path, {})[brick["signature"]] = _Share(label, int(count), time_s, stats)
    return by_model


def _estimate(model: Mapping[str, Any], shares: Mapping[str, _Share]) -> float | None:
    """A complete model's sequential estimate, as its report composed it; None when a brick has no time."""
    estimate = model.get("sequential_s")
    if not model.get("complete") or estimate is None or any(share.time_s is None for share in shares.values()):
        return None
    return float(estimate)


def _correction(estimate: float, shares: Mapping[str, _Share]) -> float:
    """What composition added to the bricks' times for a model: the call overhead, counted once, not per brick."""
    return estimate - sum(share.count * (share.time_s or 0.0) for share in shares.values())


def _overhead(block: Mapping[str, Any]) -> object:
    return block["report"].get("summary", {}).get("call_overhead_s")


# -- text ----------------------------------------------------------------------------------------

_COLUMNS = ("Model", "Before", "Now", "Change", "Noise band", "Verdict")


def render_comparison(comparison: Comparison) -> str:
    """One row per model: both estimates, the change, the noise band and the verdict."""
    rows = [_COLUMNS]
    for model in comparison.models:
        change = model.change
        rows.append(
            (
                model.path,
                format_seconds(model.before_s),
                format_seconds(model.now_s),
                "-" if change is None else f"{change:+.1%}",
                format_seconds(model.band_s) if model.verdict not in (NEW, GONE, INCOMPLETE) else "-",
                model.verdict,
            )
        )
    return format_table(rows, left=(0, len(_COLUMNS) - 1))


def render_regressions(comparison: Comparison) -> str:
    """The failure message: each model slower beyond threshold and noise, with the bricks that moved most."""
    lines = []
    for model in comparison.regressions:
        assert model.before_s is not None and model.now_s is not None and model.change is not None
        threshold = comparison.threshold or 0.0
        moved = ", ".join(_describe(move) for move in model.moves[:MOVED_BRICKS_SHOWN] if move.delta_s > 0)
        lines.append(
            f"{model.path} is {model.change:.1%} slower than in {comparison.baseline}"
            f" ({format_seconds(model.before_s)} -> {format_seconds(model.now_s)}), more than {threshold:.0%}"
            f" and more than its noise band of {format_seconds(model.band_s)}; bricks that moved most: {moved or '-'}"
        )
    return "\n".join(lines)


def _describe(move: BrickMove) -> str:
    """A brick's share of the change, such as ``Conv+Relu-3f2a91c0 x2 +60.0 us (200.0 us -> 260.0 us)``."""
    count = f" x{move.count_now}" if move.count_now > 1 else ""
    sign = "+" if move.delta_s >= 0 else "-"
    was = "new" if move.count_before == 0 else f"{format_seconds(move.before_s)} -> {format_seconds(move.now_s)}"
    return f"{move.label}{count} {sign}{format_seconds(abs(move.delta_s))} ({was})"
