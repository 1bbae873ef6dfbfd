"""Compare this run's per-model estimates with a saved run's and decide the gate: verdicts, intervals, messages.

Both runs are ``dlbricks`` blocks as saved in pytest-benchmark's JSON (:func:`make_block`): the run's
conditions and its report, whose models carry their estimates and whose bricks carry their
statistics and the models using them.

A model's estimate moves for two reasons: its bricks changed (a widened convolution is another brick,
with another signature) or the machine ran at another speed. Two bricks of one signature are the
same computation under the same conditions (checked before comparing), so a model made of the same
bricks as before is **unchanged**, whatever its times did between the runs: fresh timings on a busy
runner cannot raise a false alarm. A model whose bricks changed is judged on the bricks that changed::

    change = sum over changed bricks of (count_now * t_now / drift - count_before * t_before) / estimate_before

where ``drift``, the machine's speed now over then, comes from *reference* bricks: bricks of the
model (or, lacking any, of the run) that both runs have. New bricks are so brought back to the
baseline's machine speed before they are set against the bricks they replaced.

The change gets a 95% interval. From the reports' statistics (the first look, and all that
``compose`` and ``merge`` have): each brick median's standard error, how far single bricks drift
apart from the common drift (the scatter of the reference bricks' ratios, or
:data:`DEFAULT_DRIFT_SPREAD` when fewer than three show it) and the drift's own error. A model whose
interval reaches above the threshold is a suspect: the session times its changed bricks again,
interleaved round by round with its reference bricks (:mod:`.retiming`). Each round then gives a
change with that round's own drift, and the interval is a bootstrap interval of their median, widened
by the baseline's sampling error and by the bricks' scatter. The verdict is *REGRESSION* when the
interval lies above the threshold, *INCONCLUSIVE* when it straddles it (the noise is too high for the
threshold asked), else *slower*, *faster* or *within noise* as it lies above, below or around zero.

asv compares two commits' samples (Mann-Whitney U, then a factor threshold) and pytest-benchmark a
statistic's percentage; neither can tell a slower machine from slower code, which is what the
signatures and the interleaved reference bricks do here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .noise import Z, bootstrap_median, log_spread, median_error
from .terminal import format_seconds, format_table

BLOCK_VERSION = 1
#: Bricks named in a failure message.
MOVED_BRICKS_SHOWN = 3
#: Reference bricks re-timed beside a suspect's changed bricks, the largest share first.
MAX_REFERENCES = 6
#: How far (standard deviation of the log ratio) single bricks are taken to drift apart from the common
#: drift when fewer than three reference bricks show it.
DEFAULT_DRIFT_SPREAD = 0.05

UNCHANGED = "unchanged"
WITHIN_NOISE = "within noise"
FASTER = "faster"
SLOWER = "slower"
REGRESSION = "REGRESSION"
INCONCLUSIVE = "INCONCLUSIVE"
#: Exit status of a gate that cannot decide because the noise is too high for its threshold (pytest's own
#: statuses stop at 5; a regression exits with 1, as failed tests do).
INCONCLUSIVE_EXIT = 6
NEW = "new"
GONE = "gone"
INCOMPLETE = "incomplete"

#: Per model path, per brick signature, the seconds of each interleaved round (see :mod:`.retiming`).
Retimed = Mapping[str, Mapping[str, Sequence[float]]]


def make_block(report: Mapping[str, Any], conditions: Mapping[str, Any]) -> dict[str, Any]:
    """The ``dlbricks`` block of a saved run: the conditions two runs must share, and the report."""
    return {"version": BLOCK_VERSION, **conditions, "report": report}


def conditions_of(report: Mapping[str, Any]) -> dict[str, Any]:
    """The conditions of a report written by ``compose`` or ``merge``: the machine and timing of the run that
    measured its bricks (as that run recorded them), and what changes its estimates, from its own settings."""
    measured = report.get("conditions") or {}
    settings = report.get("settings") or {}
    return {
        "machine": dict(measured.get("machine") or {}),
        "timing": dict(measured.get("timing") or {}),
        "model": {
            "granularity": report.get("granularity"),
            "dims": dict(sorted((settings.get("dims") or {}).items())),
            "cut": settings.get("cut"),
            "statistic": settings.get("statistic"),
        },
    }


def exit_status(comparison: Comparison) -> int:
    """The gate's exit status: 1 on a regression, :data:`INCONCLUSIVE_EXIT` when it cannot tell, else 0."""
    if comparison.regressions:
        return 1
    return INCONCLUSIVE_EXIT if comparison.inconclusive else 0


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
class Judgement:
    """The change of a model due to its changed bricks, as a fraction of its estimate before, with its interval."""

    change: float
    low: float
    high: float
    #: Machine speed now over before, from the reference bricks (1 without any).
    drift: float
    references: int
    #: "statistics", or "re-timed" with the number of interleaved rounds.
    method: str
    rounds: int = 0

    def describe(self) -> str:
        return f"{self.change:+.1%} [{self.low:+.1%}, {self.high:+.1%}]"


@dataclass(frozen=True)
class ModelDelta:
    """One model's estimates in both runs and the verdict on the change."""

    path: str
    before_s: float | None
    now_s: float | None
    verdict: str
    #: Bricks whose share changed, the largest increase first.
    moves: tuple[BrickMove, ...] = ()
    judged: Judgement | None = None
    #: Signatures of the bricks that changed and are in this run, and of the bricks to re-time beside them.
    changed: tuple[str, ...] = ()
    references: tuple[str, ...] = ()

    @property
    def change(self) -> float | None:
        """Relative change of the estimate as measured, such as 0.12 for 12% slower."""
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

    @property
    def inconclusive(self) -> list[ModelDelta]:
        return [model for model in self.models if model.verdict == INCONCLUSIVE]

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "statistic": self.statistic,
            "threshold": self.threshold,
            "failed": bool(self.regressions),
            "inconclusive": bool(self.inconclusive) and not self.regressions,
            "models": [
                {
                    "path": m.path,
                    "before_s": m.before_s,
                    "now_s": m.now_s,
                    "change": m.change,
                    "verdict": m.verdict,
                    "judged": None
                    if m.judged is None
                    else {
                        "change": m.judged.change,
                        "low": m.judged.low,
                        "high": m.judged.high,
                        "drift": m.judged.drift,
                        "references": m.judged.references,
                        "method": m.judged.method,
                        "rounds": m.judged.rounds,
                    },
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
    def error_s(self) -> float:
        return median_error(self.stats or {})


def compare(
    now: Mapping[str, Any],
    before: Mapping[str, Any],
    *,
    baseline: str,
    statistic: str,
    threshold: float | None,
    retimed: Retimed | None = None,
) -> Comparison:
    """Compare the models of two ``dlbricks`` blocks; ``threshold`` is a fraction, None never fails;
    ``retimed`` holds the interleaved rounds of suspects' bricks, by model path."""
    now_models = _models(now["report"])
    before_models = _models(before["report"])
    now_shares = _shares(now["report"], statistic)
    before_shares = _shares(before["report"], statistic)
    run_references = _run_references(now["report"], before["report"], statistic)
    deltas = []
    for path in [*now_models, *(p for p in before_models if p not in now_models)]:
        now_s = _estimate(now_models[path], now_shares.get(path, {})) if path in now_models else None
        before_s = _estimate(before_models[path], before_shares.get(path, {})) if path in before_models else None
        if path not in before_models:
            deltas.append(ModelDelta(path, None, now_s, NEW))
        elif path not in now_models:
            deltas.append(ModelDelta(path, before_s, None, GONE))
        elif now_s is None or before_s is None:
            deltas.append(ModelDelta(path, before_s, now_s, INCOMPLETE))
        else:
            model = _Model(now_shares.get(path, {}), before_shares.get(path, {}), before_s, run_references)
            rounds = (retimed or {}).get(path)
            judged = model.judge_rounds(rounds) if rounds else model.judge_statistics()
            deltas.append(
                ModelDelta(
                    path,
                    before_s,
                    now_s,
                    _verdict(judged, threshold),
                    model.moves(),
                    judged,
                    changed=tuple(sig for sig in model.changed if model.now.get(sig)),
                    references=model.retime_references(),
                )
            )
    return Comparison(baseline, statistic, threshold, tuple(deltas))


def suspects(comparison: Comparison) -> list[ModelDelta]:
    """Models the gate cannot pass on the reports' statistics alone: to be re-timed before judging."""
    return [
        model
        for model in comparison.models
        if model.verdict in (REGRESSION, INCONCLUSIVE) and (model.judged is None or model.judged.rounds == 0)
    ]


def _verdict(judged: Judgement | None, threshold: float | None) -> str:
    if judged is None:
        return UNCHANGED
    if threshold is not None and judged.low > threshold:
        return REGRESSION
    if threshold is not None and judged.high > threshold:
        return INCONCLUSIVE
    if judged.low > 0:
        return SLOWER
    if judged.high < 0:
        return FASTER
    return WITHIN_NOISE


@dataclass(frozen=True)
class _Model:
    """One model's bricks in both runs, split into those that changed and those that did not."""

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

    def moves(self) -> tuple[BrickMove, ...]:
        """The changed bricks' shares before and now, the largest increase first."""
        moves = []
        for signature in self.changed:
            new, old = self.now.get(signature), self.before.get(signature)
            moves.append(
                BrickMove(
                    label=(new or old).label,  # type: ignore[union-attr]
                    count_before=_count(old),
                    count_now=_count(new),
                    before_s=_count(old) * ((old.time_s or 0.0) if old else 0.0),
                    now_s=_count(new) * ((new.time_s or 0.0) if new else 0.0),
                )
            )
        moves.sort(key=lambda move: move.delta_s, reverse=True)
        return tuple(moves)

    def _references(self, *, measured_apart: bool) -> list[tuple[str, _Share, _Share, float]]:
        """Unchanged bricks of the model with a time in both runs (signature, now, before, weight);
        ``measured_apart`` leaves out bricks both runs took from the store (the same measurement)."""
        own = [
            (signature, share, self.before[signature], float(share.count))
            for signature, share in self.now.items()
            if signature in self.before and signature not in self.changed
        ]
        pool = own or [(s, new, old, 1.0) for s, (new, old) in self.run_references.items()]
        return [ref for ref in pool if not measured_apart or ref[1].stats != ref[2].stats]

    def retime_references(self) -> tuple[str, ...]:
        """The reference bricks to re-time beside the changed ones: those most like them first (sharing
        their operators, then closest in time), since a busy machine slows a multi-threaded convolution
        more than a small elementwise brick."""
        changed = [self.now.get(s) or self.before[s] for s in self.changed]
        ops = {op for share in changed for op in share.label.split("-")[0].split("+")}
        typical = sum(share.time_s or 0.0 for share in changed) / max(len(changed), 1)

        def likeness(ref: tuple[str, _Share, _Share, float]) -> tuple[int, float]:
            shared = len(ops.intersection(ref[2].label.split("-")[0].split("+")))
            return -shared, abs(math.log(max(ref[2].time_s or 1e-12, 1e-12) / max(typical, 1e-12)))

        pool = sorted(self._references(measured_apart=False), key=likeness)
        return tuple(ref[0] for ref in pool[:MAX_REFERENCES])

    def _parts(self) -> tuple[list[tuple[str, int, _Share]], list[tuple[int, _Share]]]:
        """The changed bricks' uses now, as (signature, count, share), and before, as (count, share)."""
        now = [(s, self.now[s].count, self.now[s]) for s in self.changed if s in self.now]
        before = [(self.before[s].count, self.before[s]) for s in self.changed if s in self.before]
        return now, before

    def judge_statistics(self) -> Judgement | None:
        """The change and its interval from the reports' statistics; None for a model of unchanged bricks."""
        if not self.changed:
            return None
        references = self._references(measured_apart=True)
        weight_now = sum(w * (new.time_s or 0.0) for _, new, _, w in references)
        weight_before = sum(w * (old.time_s or 0.0) for _, _, old, w in references)
        drift = weight_now / weight_before if weight_now > 0 and weight_before > 0 else 1.0
        ratios = [(new.time_s or 0.0) / old.time_s for _, new, old, _ in references if old.time_s and new.time_s]
        spread = log_spread(ratios)
        spread = DEFAULT_DRIFT_SPREAD if spread is None else spread
        now_part, before_part = self._parts()
        new_s = [count * (share.time_s or 0.0) / drift for _, count, share in now_part]
        old_s = [count * (share.time_s or 0.0) for count, share in before_part]
        change = (sum(new_s) - sum(old_s)) / self.before_s
        variance = sum((count * share.error_s / drift) ** 2 for _, count, share in now_part)
        variance += sum((count * share.error_s) ** 2 for count, share in before_part)
        variance += spread**2 / 2 * (sum(s**2 for s in new_s) + sum(s**2 for s in old_s))
        variance += (sum(new_s) * spread) ** 2 / max(len(ratios), 1)
        half = Z * math.sqrt(variance) / self.before_s
        return Judgement(change, change - half, change + half, drift, len(references), "statistics")

    def judge_rounds(self, rounds: Mapping[str, Sequence[float]]) -> Judgement | None:
        """The change per interleaved round, each with its own drift, and a bootstrap interval of their median."""
        if not self.changed:
            return None
        references = [ref for ref in self._references(measured_apart=False) if ref[0] in rounds and ref[2].time_s]
        count = min(len(times) for times in rounds.values())
        if count == 0:
            return self.judge_statistics()
        now_part, before_part = self._parts()
        old = sum(c * (share.time_s or 0.0) for c, share in before_part)
        base = sum(w * (ref.time_s or 0.0) for _, _, ref, w in references)
        changes, drifts = [], []
        for index in range(count):
            drift = sum(w * rounds[s][index] for s, _, _, w in references) / base if references else 1.0
            new = sum(c * rounds[s][index] for s, c, _ in now_part) / drift
            changes.append((new - old) / self.before_s)
            drifts.append(drift)
        change, low, high = bootstrap_median(changes)
        drift = float(sorted(drifts)[len(drifts) // 2])
        # What the rounds cannot show: the baseline's own sampling error, and how far the changed bricks
        # may drift apart from the reference bricks (their scatter in the rounds).
        ratios = [_median(rounds[s][:count]) / (ref.time_s or 1.0) for s, _, ref, _ in references]
        spread = log_spread(ratios)
        spread = DEFAULT_DRIFT_SPREAD if spread is None else spread
        new_s = [c * _median(rounds[s][:count]) / drift for s, c, _ in now_part]
        old_s = [c * (share.time_s or 0.0) for c, share in before_part]
        extra = sum((c * share.error_s) ** 2 for c, share in before_part)
        extra += spread**2 / 2 * (sum(s**2 for s in new_s) + sum(s**2 for s in old_s))
        widen = Z * math.sqrt(extra) / self.before_s
        return Judgement(
            change,
            change - math.hypot(change - low, widen),
            change + math.hypot(high - change, widen),
            drift,
            len(references),
            "re-timed",
            count,
        )


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _count(share: _Share | None) -> int:
    return share.count if share is not None else 0


def _models(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(model["path"]): model for model in report.get("models", [])}


def _shares(report: Mapping[str, Any], statistic: str) -> dict[str, dict[str, _Share]]:
    """Each model's distinct bricks with their counts and times, by model path and signature."""
    by_model: dict[str, dict[str, _Share]] = {}
    for brick in report.get("bricks", []):
        stats = brick.get("stats")
        time_s = stats.get(statistic) if stats else None
        label = brick.get("label") or f"{'+'.join(brick.get('ops') or [])}-{str(brick['signature'])[:8]}"
        for path, count in brick.get("models", {}).items():
            by_model.setdefault(path, {})[brick["signature"]] = _Share(label, int(count), time_s, stats)
    return by_model


def _run_references(
    now: Mapping[str, Any], before: Mapping[str, Any], statistic: str
) -> dict[str, tuple[_Share, _Share]]:
    """Every brick with a time in both runs, as (now, before), whichever models use it."""

    def times(report: Mapping[str, Any]) -> dict[str, _Share]:
        found = {}
        for brick in report.get("bricks", []):
            stats = brick.get("stats")
            if stats and stats.get(statistic):
                found[str(brick["signature"])] = _Share(str(brick["signature"])[:8], 1, stats[statistic], stats)
        return found

    then = times(before)
    return {signature: (share, then[signature]) for signature, share in times(now).items() if signature in then}


def _estimate(model: Mapping[str, Any], shares: Mapping[str, _Share]) -> float | None:
    """A complete model's sequential estimate, as its report composed it; None when a brick has no time."""
    estimate = model.get("sequential_s")
    if not model.get("complete") or estimate is None or any(share.time_s is None for share in shares.values()):
        return None
    return float(estimate)


# -- text ----------------------------------------------------------------------------------------

_COLUMNS = ("Model", "Before", "Now", "Measured", "Changed bricks [95%]", "Verdict")


def render_comparison(comparison: Comparison) -> str:
    """One row per model: both estimates, the change as measured, the change due to changed bricks with
    its interval, and the verdict."""
    rows = [_COLUMNS]
    for model in comparison.models:
        change = model.change
        judged = model.judged
        rows.append(
            (
                model.path,
                format_seconds(model.before_s),
                format_seconds(model.now_s),
                "-" if change is None else f"{change:+.1%}",
                ("same bricks" if model.verdict == UNCHANGED else "-") if judged is None else judged.describe(),
                model.verdict,
            )
        )
    return format_table(rows, left=(0, len(_COLUMNS) - 1))


def render_regressions(comparison: Comparison) -> str:
    """The failure message: each model whose changed bricks made it slower beyond the threshold, with them."""
    return "\n".join(
        f"{model.path} is {_judged(model)} slower than in {comparison.baseline}"
        f" ({format_seconds(model.before_s)} -> {format_seconds(model.now_s)}), more than"
        f" {comparison.threshold or 0.0:.0%}; {_bricks(model)}"
        for model in comparison.regressions
    )


def render_inconclusive(comparison: Comparison) -> str:
    """Why the gate cannot decide: each model whose interval straddles the threshold."""
    return "\n".join(
        f"{model.path}: its changed bricks make it {_judged(model)} slower: the noise is too high to tell"
        f" whether that exceeds {comparison.threshold or 0.0:.0%}; {_bricks(model)}"
        for model in comparison.inconclusive
    )


def _judged(model: ModelDelta) -> str:
    judged = model.judged
    assert judged is not None
    how = f"re-timed in {judged.rounds} rounds" if judged.rounds else "from the brick statistics"
    return (
        f"{judged.change:.1%} (95% interval {judged.low:+.1%} to {judged.high:+.1%}, {how}, drift x{judged.drift:.2f})"
    )


def _bricks(model: ModelDelta) -> str:
    shown = [_describe(move) for move in model.moves[:MOVED_BRICKS_SHOWN]]
    return f"bricks that changed: {', '.join(shown) or '-'}"


def _describe(move: BrickMove) -> str:
    """A brick's share of the change, such as ``Conv+Relu-3f2a91c0 x2 +60.0 us (200.0 us -> 260.0 us)``."""
    count = f" x{move.count_now}" if move.count_now > 1 else ""
    sign = "+" if move.delta_s >= 0 else "-"
    was = (
        "new"
        if move.count_before == 0
        else "gone"
        if move.count_now == 0
        else f"{format_seconds(move.before_s)} -> {format_seconds(move.now_s)}"
    )
    return f"{move.label}{count} {sign}{format_seconds(abs(move.delta_s))} ({was})"
