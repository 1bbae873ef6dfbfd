"""Compare this run's per-model estimates with a saved run's and decide the gate: verdicts, intervals, messages.

Both runs are ``dlbricks`` blocks as saved in pytest-benchmark's JSON (:func:`make_block`): the run's
conditions and its report, whose models carry their estimates and whose bricks carry their
statistics and the models using them.

A model's estimate moves for two reasons: its bricks changed (a widened convolution is another brick,
with another signature) or the machine ran at another speed. Two bricks of one signature are the
same computation under the same conditions (checked before comparing), so a model made of the same
bricks as before is **unchanged**, whatever its times did between the runs: fresh timings on a busy
runner cannot raise a false alarm. A model whose bricks changed is judged on its estimate at the
baseline's machine speed: the estimate before plus the *moves* of the bricks that changed::

    new brick:                      + count_now * t_now / drift
    gone brick:                     - count_before * t_before
    brick used more or less often:  + (count_now - count_before) * t_before
    change = sum of the moves / estimate_before

where ``drift``, the machine's speed now over then, comes from *reference* bricks: unchanged bricks of
the model (or, lacking any, of the run) that both runs have. New bricks are so brought back to the
baseline's machine speed before they are set against the bricks they replaced; a brick both runs have
is the same computation, so only its change of count moves the estimate, at the baseline's own time,
whatever its time did between the runs (on a busy machine a convolution's time jumps by up to 1.8x
when its second thread loses its core). The bricks' moves, shown in the messages, add up to the change.

The change gets a 95% interval. From the reports' statistics (the first look, and all that
``compose`` and ``merge`` have): each brick median's standard error, how far single bricks drift
apart from the common drift (the scatter of the ratios of the reference bricks close in time to the
changed ones, else of all, or :data:`.drift.DEFAULT_DRIFT_SPREAD` when fewer than three show it) and the
drift's own error. The gate trusts no statistics of bricks timed minutes apart: every changed model
is a suspect, whose changed bricks the session times again, interleaved round by round with its
reference bricks (:mod:`.retiming`). Each round then gives a change with that round's own drift, and
the interval is a bootstrap interval of their median, widened by the baseline's sampling error and
by the bricks' scatter; the new bricks' moves are those of the median round. The verdict is
*REGRESSION* when the interval lies above the threshold, *INCONCLUSIVE* when it straddles it (the
noise is too high for the threshold asked), else *slower*, *faster* or *within noise* as it lies
above, below or around zero. A model whose bricks changed, the new ones without a time in this run
(deselected with ``-k``, or failed), is *NOT TIMED*: the gate cannot tell either, and says which bricks it
lacks.

Simulated costs (``--dlbricks-cost=simulated`` in both runs) are counted, not timed: no machine speed moves
them and no noise blurs them. The change is then the sum of the moves as counted, with an interval of no
width, and is a regression as soon as it exceeds the threshold.

asv compares two commits' samples (Mann-Whitney U, then a factor threshold) and pytest-benchmark a
statistic's percentage; neither can tell a slower machine from slower code, which is what the
signatures and the interleaved reference bricks do here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..rendering.formatting import format_seconds, format_table
from .drift import BrickMove, Judgement, _Model, _Share

BLOCK_VERSION = 1
#: Bricks named in a failure message.
MOVED_BRICKS_SHOWN = 3

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
NOT_TIMED = "NOT TIMED"

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
            "cut_method": settings.get("cut_method"),
            "statistic": settings.get("statistic"),
        },
    }


def exit_status(comparison: Comparison) -> int:
    """The gate's exit status: 1 on a regression, :data:`INCONCLUSIVE_EXIT` when it cannot tell, else 0."""
    if comparison.regressions:
        return 1
    return INCONCLUSIVE_EXIT if comparison.cannot_tell else 0


@dataclass(frozen=True)
class ModelDelta:
    """One model's estimates in both runs and the verdict on the change."""

    path: str
    before_s: float | None
    now_s: float | None
    verdict: str
    judged: Judgement | None = None
    #: Signatures of the bricks that changed and are in this run, and of the bricks to re-time beside them.
    changed: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    #: Labels of the changed bricks without a time in this run (a model :data:`NOT_TIMED`).
    untimed: tuple[str, ...] = ()

    @property
    def change(self) -> float | None:
        """Relative change of the estimate as measured, such as 0.12 for 12% slower."""
        if self.before_s is None or self.now_s is None or self.before_s <= 0:
            return None
        return self.now_s / self.before_s - 1

    @property
    def moves(self) -> tuple[BrickMove, ...]:
        """The changed bricks' moves, the largest increase first."""
        return () if self.judged is None else self.judged.moves

    @property
    def judged_s(self) -> float | None:
        """The estimate now at the baseline's machine speed, as judged: the estimate before plus the moves."""
        if self.judged is None or self.before_s is None:
            return None
        return self.before_s * (1 + self.judged.change)


@dataclass(frozen=True)
class Comparison:
    baseline: str
    statistic: str
    threshold: float | None
    models: tuple[ModelDelta, ...]
    #: The larger of the two runs' noise (their bricks' median relative spread), when both report it.
    noise: float | None = None
    #: Why a run's own verdict does not trust its estimates (its threads lost their cores), when one does not.
    untrusted: str | None = None

    @property
    def too_noisy(self) -> bool:
        """Whether the runs' bricks scatter more than the change the gate looks for, or a run's verdict does not
        trust them (see :func:`_verdict`)."""
        if self.threshold is None:
            return False
        return self.untrusted is not None or (self.noise is not None and self.noise > self.threshold)

    @property
    def regressions(self) -> list[ModelDelta]:
        return [model for model in self.models if model.verdict == REGRESSION]

    @property
    def inconclusive(self) -> list[ModelDelta]:
        return [model for model in self.models if model.verdict == INCONCLUSIVE]

    @property
    def not_timed(self) -> list[ModelDelta]:
        return [model for model in self.models if model.verdict == NOT_TIMED]

    @property
    def cannot_tell(self) -> bool:
        """Whether the gate cannot decide for some model: its change too close to the threshold for the noise, or
        not timed."""
        return bool(self.inconclusive or self.not_timed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "statistic": self.statistic,
            "threshold": self.threshold,
            "noise": self.noise,
            "untrusted": self.untrusted,
            "failed": bool(self.regressions),
            "inconclusive": self.cannot_tell and not self.regressions,
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
                        "now_s": m.judged_s,
                        "low": m.judged.low,
                        "high": m.judged.high,
                        "drift": m.judged.drift,
                        "references": m.judged.references,
                        "method": m.judged.method,
                        "rounds": m.judged.rounds,
                    },
                    "moved_bricks": [
                        {
                            "brick": b.label,
                            "count_before": b.count_before,
                            "count_now": b.count_now,
                            "before_s": b.before_s,
                            "now_s": b.now_s,
                        }
                        for b in m.moves[:MOVED_BRICKS_SHOWN]
                    ],
                }
                for m in self.models
            ],
        }


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
    noise = _runs_noise(now["report"], before["report"])
    untrusted = _untrusted(now["report"], before["report"])
    counted = all(report.get("simulation") for report in (now["report"], before["report"]))
    unsupported = {str(brick["signature"]) for brick in now["report"].get("bricks", []) if brick.get("unsupported")}
    deltas = []
    for path in [*now_models, *(p for p in before_models if p not in now_models)]:
        now_s = _estimate(now_models[path], now_shares.get(path, {})) if path in now_models else None
        before_s = _estimate(before_models[path], before_shares.get(path, {})) if path in before_models else None
        if path not in before_models:
            deltas.append(ModelDelta(path, None, now_s, NEW))
        elif path not in now_models:
            deltas.append(ModelDelta(path, before_s, None, GONE))
        elif now_s is None or before_s is None:
            untimed = _untimed_changes(now_shares.get(path, {}), before_shares.get(path, {}), unsupported)
            verdict = NOT_TIMED if threshold is not None and untimed else INCOMPLETE
            deltas.append(ModelDelta(path, before_s, now_s, verdict, untimed=untimed))
        else:
            model = _Model(now_shares.get(path, {}), before_shares.get(path, {}), before_s, run_references)
            rounds = (retimed or {}).get(path)
            judged = (
                model.judge_exact() if counted else model.judge_rounds(rounds) if rounds else model.judge_statistics()
            )
            deltas.append(
                ModelDelta(
                    path,
                    before_s,
                    now_s,
                    _verdict(judged, threshold, noise, untrusted is not None),
                    judged,
                    changed=tuple(sig for sig in model.changed if model.now.get(sig)),
                    references=model.retime_references(),
                )
            )
    return Comparison(baseline, statistic, threshold, tuple(deltas), noise, untrusted)


def _untimed_changes(now: Mapping[str, _Share], before: Mapping[str, _Share], unsupported: set[str]) -> tuple[str, ...]:
    """The labels of a model's bricks this run has and the baseline's model had not, that have no time, but for
    those the providers cannot run (``unsupported``): no run times them."""
    return tuple(
        share.label
        for signature, share in now.items()
        if signature not in before and share.time_s is None and signature not in unsupported
    )


def _untrusted(now: Mapping[str, Any], before: Mapping[str, Any]) -> str | None:
    """Why this run's or the baseline's own verdict does not trust its estimates (see :mod:`.verdict`); None
    when both trust theirs, or were saved before runs gave a verdict."""
    for which, report in (("this run", now), ("the baseline", before)):
        verdict = report.get("verdict")
        if isinstance(verdict, Mapping) and verdict.get("trusted") is False:
            return f"{which} cannot be trusted ({verdict.get('reason') or 'its threads lost their cores'})"
    return None


def _runs_noise(*reports: Mapping[str, Any]) -> float | None:
    """The larger of the reports' noise figures; None when one does not give it."""
    figures = [(report.get("summary") or {}).get("noise") for report in reports]
    numbers = [float(figure) for figure in figures if isinstance(figure, (int, float))]
    return max(numbers) if numbers and len(numbers) == len(figures) else None


def suspects(comparison: Comparison) -> list[ModelDelta]:
    """Models to re-time before the gate judges them: every model whose bricks changed. Bricks timed minutes
    apart may have run at other speeds than the reference bricks they are set against (on a busy machine a
    convolution's time jumps by up to 1.8x when its second thread loses its core), which the reports'
    statistics cannot show: their intervals may miss a regression as well as make one up."""
    if comparison.threshold is None:
        return []
    return [model for model in comparison.models if model.judged is not None and model.judged.rounds == 0]


def _verdict(
    judged: Judgement | None, threshold: float | None, noise: float | None = None, untrusted: bool = False
) -> str:
    """A changed model's verdict from its judged interval. When the runs' noise exceeds the threshold, or a
    run's own verdict does not trust its estimates (``untrusted``: its threads lost their cores), an
    interval that does not lie above it is inconclusive wherever it lies: bricks that scatter so are
    not timed as the model runs them (beside a busy core, a second intra-op thread that loses its core
    slows a brick more than the model), so their change may be off by more than its interval says: a
    +14% regression read +6.4% [+4.7%, +8.3%] at 12.8% noise."""
    if judged is None:
        return UNCHANGED
    if threshold is not None and judged.low > threshold:
        return REGRESSION
    if threshold is not None and (judged.high > threshold or untrusted or (noise is not None and noise > threshold)):
        return INCONCLUSIVE
    if judged.low > 0:
        return SLOWER
    if judged.high < 0:
        return FASTER
    return WITHIN_NOISE


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

_COLUMNS = ("Model", "Before", "Now", "Measured", "At baseline speed [95%]", "Verdict")


def render_comparison(comparison: Comparison) -> str:
    """One row per model: both estimates, the change as measured, and the estimate now at the baseline's
    machine speed with its change and interval, which the verdict judges."""
    rows = [_COLUMNS]
    for model in comparison.models:
        change = model.change
        rows.append(
            (
                model.path,
                format_seconds(model.before_s),
                format_seconds(model.now_s),
                "-" if change is None else f"{change:+.1%}",
                ("same bricks" if model.verdict == UNCHANGED else "-") if model.judged is None else _row(model),
                model.verdict,
            )
        )
    return format_table(rows, left=(0, len(_COLUMNS) - 1))


def _row(model: ModelDelta) -> str:
    assert model.judged is not None
    return f"{format_seconds(model.judged_s)} {model.judged.describe()}"


def render_regressions(comparison: Comparison) -> str:
    """The failure message: each model made slower beyond the threshold by its changed bricks, with them."""
    return "\n".join(
        f"{model.path} is {_judged(model, comparison.baseline)}, more than {comparison.threshold or 0.0:.0%};"
        f" {_bricks(model)}"
        for model in comparison.regressions
    )


def render_inconclusive(comparison: Comparison) -> str:
    """Why the gate cannot decide: each model whose interval straddles the threshold, or every changed model
    of runs whose noise exceeds it."""
    threshold = f"{comparison.threshold or 0.0:.0%}"
    if comparison.untrusted is not None:
        why = f"{comparison.untrusted}: bricks timed so cannot tell whether it exceeds {threshold}"
    elif comparison.too_noisy:
        why = (
            f"the runs' noise ({comparison.noise or 0.0:.1%}, their bricks' median spread) is above {threshold}:"
            f" bricks timed so cannot tell whether it exceeds {threshold}"
        )
    else:
        why = f"the noise is too high to tell whether that exceeds {threshold}"
    return "\n".join(
        f"{model.path}: its changed bricks make it {_judged(model, comparison.baseline)}: {why}; {_bricks(model)}"
        for model in comparison.inconclusive
    )


def render_not_timed(comparison: Comparison) -> str:
    """Why the gate cannot decide for models whose changed bricks this run did not time."""
    lines = []
    for model in comparison.not_timed:
        shown = ", ".join(model.untimed[:MOVED_BRICKS_SHOWN])
        more = len(model.untimed) - MOVED_BRICKS_SHOWN
        lines.append(
            f"{model.path}: changed bricks without a time in this run (deselected, skipped or failed):"
            f" {shown}{f' and {more} more' if more > 0 else ''}; time them to judge the change"
        )
    return "\n".join(lines)


def _judged(model: ModelDelta, baseline: str) -> str:
    """The judged change with the estimates it follows from, such as ``12.0% slower than in BASE: 250.0 us
    -> 280.0 us at that run's machine speed (...; 310.0 us as measured)``."""
    judged = model.judged
    assert judged is not None
    if judged.method == "counted":
        return (
            f"{judged.change:.1%} slower than in {baseline}: {format_seconds(model.before_s)} ->"
            f" {format_seconds(model.judged_s)} (simulated cost, counted: no interval;"
            f" {format_seconds(model.now_s)} as composed)"
        )
    how = f"re-timed in {judged.rounds} rounds" if judged.rounds else "from the brick statistics"
    return (
        f"{judged.change:.1%} slower than in {baseline}: {format_seconds(model.before_s)} ->"
        f" {format_seconds(model.judged_s)} at that run's machine speed (95% interval {judged.low:+.1%} to"
        f" {judged.high:+.1%}, {how}, drift x{judged.drift:.2f}; {format_seconds(model.now_s)} as measured)"
    )


def _bricks(model: ModelDelta) -> str:
    shown = [_describe(move) for move in model.moves[:MOVED_BRICKS_SHOWN]]
    more = len(model.moves) - len(shown)
    return f"bricks that changed: {', '.join(shown) or '-'}" + (f" and {more} more" if more > 0 else "")


def _describe(move: BrickMove) -> str:
    """A brick's move at the baseline's machine speed, such as ``Conv+Relu-3f2a91c0 x2 +60.0 us (new)``."""
    count = f" x{move.count_now}" if move.count_now > 1 and move.count_before == 0 else ""
    sign = "+" if move.delta_s >= 0 else "-"
    was = (
        "new"
        if move.count_before == 0
        else "gone"
        if move.count_now == 0
        else f"x{move.count_before} -> x{move.count_now}"
    )
    return f"{move.label}{count} {sign}{format_seconds(abs(move.delta_s))} ({was})"
