"""How far a run's estimates can be trusted, from what, and what to do about it: one margin for the run.

Three things move an estimate away from what the same command would give another time, each measured
by the run itself and each read as a relative margin:

- the bricks' spread: the margin of error of the least precise complete model's estimate, its bricks'
  margins in quadrature (see :func:`.budget.estimate_precision`); where no brick's margin is known,
  half the bricks' typical interquartile range (the run's noise, see :func:`.noise.run_noise`);
- the machine's speed: how far apart the reference call's times lay through the run (half the distance
  from their 10th to their 90th percentile over their median, ``swing`` in :mod:`.speed_trace`; half
  their interquartile range in reports written before it): the bricks of the same command timed another
  time may have met the machine's other speed state, and be off by as much. Half the interquartile
  range fell short: three first runs of the onnx wheel's CNNs minutes apart moved a model up to 24%
  from its median where it read 8% to 10%. Where the run stayed above the fast state earlier runs on the
  machine found (``above_known``), that distance, if wider: a run slow throughout has no swing of its own;
- memory's speed, for bricks timed with their weights pushed out of the caches (see :mod:`.caches`): how
  far apart the times of reading memory lay through the run (``swing``, as the speed trace's), times the
  largest part such bricks make of a model's estimate. Those bricks wait on memory, whose speed moves with
  whatever else reads it on the machine, and the reference call, bound by dispatch, does not see it;
- the bricks timed again: each model's estimate from its items against the estimate from the same bricks
  timed again later in the run, beside the model in validation's paired rounds (``--dlbricks-validate``), else
  once more at the run's end (see :func:`.time_again`) (``estimate_drift``); the larger of the two over the
  smaller, less one, for the model where they lie furthest apart. The same command timed at those two moments
  gave estimates that far apart: a direct measurement of what the speed trace bounds and the bricks' margins
  of error miss (each brick's rounds, back to back, share one moment), and the one a short run has where the
  trace took too few samples (seven runs of a few seconds of a GPT-2 read +-1% "at the least" beside estimates
  that moved 7% to 24% from items to validation);
- load: the share of its rounds' wall time the timing thread spent off its core (see :mod:`.load`),
  as the time the estimates may hold beyond the work's; below :data:`.load.UNTRUSTED_BELOW` no margin
  is given at all, nor for a loaded run on more than one intra-op thread: a pool thread that loses its
  core holds up every parallel layer until it gets one back, far beyond the time the timing thread lost
  (one core kept busy on 2: the light CNNs read 1.3x to 3.1x their quiet estimates while the timing
  thread kept its core 62% of the time, a margin of 61%).

They are independent, so they add in quadrature. Bricks reused from the brick store were timed by earlier
runs, which found the machine as they found it: their verdicts' speed and load parts hold for those
bricks, and the larger of them and the run's own counts. A simulated run (``--dlbricks-cost=simulated``) has
none of them: its counts do not depend on the machine's speed or load. What can move them is what one
process does differently from another; the run measures it by counting one job in every worker process,
and its verdict gives that spread and nothing more, beside what its times are: an AVX2 machine's under
a cycle model, not wall-clock time. Pure functions of plain numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: A margin this small needs nothing done about it.
TIGHT = 0.05
BRICKS, SPEED, DRIFT, MEMORY, LOAD, REPEAT = "bricks", "speed", "drift", "memory", "load", "repeat"
#: How each source reads in the verdict's line.
SOURCE_NAMES = {
    BRICKS: "bricks' spread",
    SPEED: "machine speed",
    DRIFT: "bricks timed again",
    MEMORY: "memory speed",
    LOAD: "load",
    REPEAT: "counts' repeat",
}
#: How the speed part reads where it is that of the runs that timed the reused bricks: what they found of the
#: machine's speed, and how far their estimates moved when those bricks were timed again (see :func:`own_parts`),
#: not a speed this run traced.
EARLIER_SPEED = "speed and bricks timed again in the runs that timed the reused bricks"
#: What a simulated run's times are, as its verdict says.
SIMULATED_TIMES = "simulated times are an AVX2 machine's under the cycle model of the report, not wall-clock time"


@dataclass(frozen=True)
class Verdict:
    """The run's margin (relative, None when the run cannot be trusted to one or nothing was measured),
    each source's part, what could not be measured, and what to do."""

    margin: float | None
    trusted: bool
    sources: dict[str, float] = field(default_factory=dict)
    #: Sources the run could not measure, with why.
    unmeasured: dict[str, str] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)
    #: Why the run is not trusted, when it is not.
    reason: str | None = None
    #: Validated models whose measured time lies within the margin of their estimate, and how many were validated.
    validated_within: tuple[int, int] | None = None
    #: For a simulated run: how many worker processes counted the job that measured the counts' repeat.
    simulated_repeats: int | None = None
    #: The model whose estimate moved furthest when its bricks were timed again, and how far (its ratio).
    widest_drift: tuple[str, float] | None = None
    #: The model whose bricks were timed furthest above the machine's fast state, and how far, where that widened
    #: the speed part beyond the trace's own (see :func:`.speed_trace.timed_above`).
    widest_slow: tuple[str, float] | None = None
    #: Each complete model's own margin by path (see :func:`model_margins`); empty where the run has no margin.
    models: dict[str, float] = field(default_factory=dict)
    #: Where the run gives parallel estimates, which the margin does not cover (see :func:`parallel_coverage`):
    #: validated models whose parallel executor's time lies within the margin of their parallel estimate, and how
    #: many were validated, as ``validated_within`` (None: none was validated).
    parallel_within: tuple[int, int] | None = None
    #: Whether the run gives parallel estimates (which the margin does not cover).
    parallel: bool = False
    #: Validated models whose measured time lies within their own margin (see :func:`model_margins`: the table's
    #: Within column), and how many were validated; None where none was, or the run has no margin.
    own_within: tuple[int, int] | None = None
    #: The validated model furthest outside its own margin: its path, ratio and margin (None: none is outside).
    widest_miss: tuple[str, float, float] | None = None
    #: Whether the speed part is that of the runs that timed the reused bricks (see :data:`EARLIER_SPEED`), not
    #: this run's own speed trace.
    speed_earlier: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "margin": self.margin,
            "trusted": self.trusted,
            "sources": dict(self.sources),
            "unmeasured": dict(self.unmeasured),
            "advice": list(self.advice),
            "reason": self.reason,
            "validated_within": _listed(self.validated_within),
            **({"simulated_repeats": self.simulated_repeats} if self.simulated_repeats is not None else {}),
            **({"widest_drift": list(self.widest_drift)} if self.widest_drift is not None else {}),
            **({"widest_slow": list(self.widest_slow)} if self.widest_slow is not None else {}),
            **({"models": dict(self.models)} if self.models else {}),
            **(
                {"parallel": {"covered": False, "validated_within": _listed(self.parallel_within)}}
                if self.parallel
                else {}
            ),
            **({"own_within": list(self.own_within)} if self.own_within is not None else {}),
            **({"widest_miss": list(self.widest_miss)} if self.widest_miss is not None else {}),
            **({"speed_from": "earlier runs"} if self.speed_earlier else {}),
        }


def _listed(within: tuple[int, int] | None) -> list[int] | None:
    return list(within) if within else None


def bricks_margin(precisions: Iterable[float | None], noise: float | None) -> float | None:
    """The bricks' part: the largest estimate margin among the models, else half the run's noise."""
    known = [p for p in precisions if p is not None and math.isfinite(p)]
    if known:
        return max(known)
    return noise / 2 if noise is not None else None


def widest_drift(drifts: Mapping[str, float | None]) -> tuple[str, float] | None:
    """The model (by path) whose item estimate and paired rounds' estimate lay furthest apart, and their ratio (its
    ``estimate_drift``); None where no model has one (or every figure is damaged)."""
    known = {path: drift for path, drift in drifts.items() if drift is not None and math.isfinite(drift) and drift > 0}
    if not known:
        return None
    path = max(known, key=lambda path: _apart(known[path]))
    return path, known[path]


def _apart(drift: float) -> float:
    """How far apart two estimates of ratio ``drift`` lie: the larger over the smaller, less one."""
    return max(drift, 1 / drift) - 1


def load_margin(core_share: float | None) -> float | None:
    """The time estimates may hold beyond the work's when the timing thread was on its core only
    ``core_share`` of the time (0 for a share of 1; None when unknown)."""
    if core_share is None:
        return None
    return 1 / core_share - 1 if core_share > 0 else math.inf


def judge(
    *,
    precisions: Iterable[float | None],
    noise: float | None,
    speed_spread: float | None,
    load: Mapping[str, Any] | None,
    threads: int,
    ratios: Mapping[str, float] | None = None,
    drifts: Mapping[str, float | None] | None = None,
    earlier: Mapping[str, Any] | None = None,
    memory: float | None = None,
    precisions_by_path: Mapping[str, float | None] | None = None,
    parallel_ratios: Iterable[float] | None = None,
    timed: bool = False,
    timed_above_fast: Mapping[str, float | None] | None = None,
) -> Verdict:
    """The run's verdict from its models' estimate margins, its noise, its speed trace's spread, its load
    summary (see :func:`.load.load_summary`), its intra-op ``threads`` (0: onnxruntime's choice), when
    validated its models' estimate-over-measured ``ratios`` (by path), the item estimates over those of the same
    bricks timed again (``drifts`` by path, see :func:`widest_drift`), what the runs that timed its reused bricks
    found (``earlier``: their largest ``speed`` and ``load`` parts, see :attr:`.entries.Summary.reused_from`),
    and the memory part (see :func:`memory_margin`; None: no brick was timed with its weights out of cache);
    with each complete model's estimate margin by path (``precisions_by_path``), each model's own margin (see
    :func:`model_margins`); ``parallel_ratios``: where the run gives parallel estimates, the validated models'
    parallel estimate over the parallel executor's time (empty where none was validated), see
    :func:`parallel_coverage`; ``timed``: the run timed bricks, so that a run in which no model had all its bricks
    timed again (the budget at its end reached none) says it did not measure that part; ``timed_above_fast``: how far
    above the machine's fast state each model's bricks were timed (by path, see :func:`.speed_trace.timed_above`),
    whose widest the speed part holds, and each its own model's margin."""
    earlier = earlier or {}
    earlier_speed, earlier_load = _number(earlier.get("speed")), _number(earlier.get("load"))
    memories = [part for part in (memory, _number(earlier.get("memory"))) if part is not None]
    sources: dict[str, float] = {}
    unmeasured: dict[str, str] = {}
    bricks = bricks_margin(precisions, noise)
    if bricks is None:
        unmeasured[BRICKS] = "no brick was timed in enough rounds"
    else:
        sources[BRICKS] = bricks
    speeds = [part for part in (speed_spread, earlier_speed) if part is not None]
    above = {path: part for path, part in (timed_above_fast or {}).items() if part is not None and math.isfinite(part)}
    if speeds:
        sources[SPEED] = max(speeds + list(above.values()))
    else:
        unmeasured[SPEED] = "too few samples of the reference call"
    own_speeds = [part for part in (speed_spread, *above.values()) if part is not None]
    speed_earlier = earlier_speed is not None and (not own_speeds or earlier_speed > max(own_speeds))
    widest = widest_drift(drifts or {})
    if widest is not None:
        sources[DRIFT] = _apart(widest[1])
    elif timed:
        unmeasured[DRIFT] = "no model had all its bricks timed again"
    if memories:
        sources[MEMORY] = max(memories)
    loaded = load is not None and bool(load.get("loaded"))
    loads = [part for part in (earlier_load, None if load is None else _own_load(load)) if part is not None]
    if loads:
        sources[LOAD] = max(loads)
    else:
        unmeasured[LOAD] = "too little time in timed rounds"
    # A loaded run's pool of threads is named where it alone is why the run is not trusted.
    pool = _pool_threads(threads, load) if loaded and load is not None and load.get("trusted") is not False else 1
    trusted = load is None or (load.get("trusted") is not False and pool == 1)
    reason = _load_reason(load, pool if pool > 1 else None) if load is not None and loaded else None
    margin = math.sqrt(sum(part**2 for part in sources.values())) if sources and trusted else None
    cpus = load.get("cpus") if load is not None else None
    advice = _advice(sources, margin, trusted, loaded, threads, cpus if isinstance(cpus, int) else None)
    ratios = ratios or {}
    within = _within(list(ratios.values()), margin)
    traced = max(speeds, default=0.0)
    slowest = max(above, key=above.__getitem__, default=None)
    widest_slow = (slowest, above[slowest]) if slowest is not None and speeds and above[slowest] > traced else None
    models = model_margins(sources, margin, precisions_by_path or {}, noise, drifts or {}, traced, above)
    own = {path: (ratio, models[path]) for path, ratio in ratios.items() if path in models}
    return Verdict(
        margin,
        trusted,
        sources,
        unmeasured,
        advice,
        reason,
        within,
        widest_drift=widest,
        widest_slow=widest_slow,
        models=models,
        parallel_within=_within(list(parallel_ratios or ()), margin),
        parallel=parallel_ratios is not None,
        own_within=_within_own(own),
        widest_miss=_widest_miss(own),
        speed_earlier=speed_earlier,
    )


def _within_own(own: Mapping[str, tuple[float, float]]) -> tuple[int, int] | None:
    """How many models (by path: ratio, own margin) lie within their own margin of 1, of how many; None without any."""
    if not own:
        return None
    return sum(1 for ratio, margin in own.values() if abs(ratio - 1) <= margin), len(own)


def _widest_miss(own: Mapping[str, tuple[float, float]]) -> tuple[str, float, float] | None:
    """The model (by path) whose ratio lies furthest outside its own margin, with both; None where all lie within."""
    outside = {path: abs(ratio - 1) - margin for path, (ratio, margin) in own.items() if abs(ratio - 1) > margin}
    if not outside:
        return None
    path = max(outside, key=outside.__getitem__)
    return path, *own[path]


def _within(ratios: list[float], margin: float | None) -> tuple[int, int] | None:
    """How many of ``ratios`` (estimate over measured) lie within ``margin`` of 1, of how many; None without either."""
    if not ratios or margin is None:
        return None
    return sum(1 for ratio in ratios if abs(ratio - 1) <= margin), len(ratios)


def parallel_coverage(models: Iterable[Mapping[str, Any]]) -> list[float] | None:
    """The validated ``parallel_ratio`` of the complete ``models``, where any has a parallel estimate; None where
    none has. The margin does not cover parallel estimates: the slowdown the parallel executor causes layers that
    use the intra-op pool is measured once in the run, on a chain of MatMuls, and convolutions slow less (the
    sample ``tiny_resnet.onnx``: Parallel 526 us, the executor 287 us, in a run whose margin read +-33%)."""
    models = [model for model in models if model.get("complete")]
    if not any(_number(model.get("parallel_s")) for model in models):
        return None
    return [ratio for model in models if (ratio := _number(model.get("parallel_ratio"))) is not None]


def model_margins(
    sources: Mapping[str, float],
    margin: float | None,
    precisions: Mapping[str, float | None],
    noise: float | None,
    drifts: Mapping[str, float | None],
    traced: float,
    above: Mapping[str, float],
) -> dict[str, float]:
    """Each model's own margin, by path: the run's parts that hold for every model (memory, load), with the model's
    own bricks' spread (its estimate's margin, else half the run's noise), its own move when its bricks were timed
    again (else the run's widest, where a drift was measured) and its own speed part, where the run has one: the
    wider of the trace's (``traced``) and how far above the fast state its bricks were timed (``above``, by path);
    none where the run has no margin. One microsecond model whose bricks moved far widens the run's line; it need not
    widen every model's (the zoo: +-95% for the run, the moves of its 44 models within their own margins in 130 of
    132 cases)."""
    if margin is None:
        return {}
    shared = [part for name, part in sources.items() if name not in (BRICKS, DRIFT, SPEED)]
    own: dict[str, float] = {}
    for path, precision in precisions.items():
        bricks = bricks_margin([precision], noise) or 0.0
        drift = drifts.get(path)
        moved = _apart(drift) if drift is not None and math.isfinite(drift) and drift > 0 else sources.get(DRIFT, 0.0)
        speed = max(traced, above.get(path, 0.0)) if SPEED in sources else 0.0
        own[path] = math.sqrt(sum(part**2 for part in shared) + bricks**2 + moved**2 + speed**2)
    return own


def _own_load(load: Mapping[str, Any]) -> float:
    """The load part of a run's own load summary: none unless the run was loaded."""
    return (load_margin(load.get("core_share")) or 0.0) if load.get("loaded") else 0.0


def own_parts(report: Mapping[str, Any]) -> tuple[float | None, float | None, float | None]:
    """The speed, load and memory parts a report's own measurements give (not those of the runs it reused bricks
    of), for the brick store to keep beside the bricks it timed."""
    summary = report.get("summary") or {}
    load = summary.get("load")
    # The bricks timed again saw the machine's speed move too, and those timed in its slow state read slow: a run
    # reusing these bricks may be off as far.
    models = report.get("models") or ()
    widest = widest_drift(_drifts(models))
    drift = None if widest is None else _apart(widest[1])
    slow = [_number(model.get("timed_above_fast")) for model in models if model.get("complete")]
    speeds = [part for part in (speed_margin(summary.get("speed")), drift, *slow) if part is not None]
    speed, memory = max(speeds, default=None), memory_margin(summary.get("memory"))
    if not isinstance(load, Mapping) or _number(load.get("core_share")) is None:
        return speed, None, memory
    return speed, _own_load(load), memory


def _pool_threads(threads: int, load: Mapping[str, Any] | None) -> int:
    """The intra-op pool's threads: ``threads``, or for onnxruntime's choice (0) one a core (at least two where
    the cores are unknown: the stricter reading)."""
    if threads:
        return threads
    cpus = load.get("cpus") if load is not None else None
    return cpus if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus > 0 else 2


def _load_reason(load: Mapping[str, Any], pool: int | None = None) -> str:
    """Why the load counts: the timing thread's share of the wall time, and the load average beside the cores;
    with the ``pool``'s threads where that is why the run is not trusted."""
    reason = f"the timing thread was on a core {load['core_share']:.0%} of its rounds' time"
    average, cpus = load.get("load_average"), load.get("cpus")
    if isinstance(average, int | float) and cpus:
        reason += f" (load average {average:.1f} on {cpus} cores)"
    if pool is not None:
        reason += f", with {pool} intra-op threads, whose layers wait for any of them that lost its core"
    return reason


def _advice(
    sources: Mapping[str, float], margin: float | None, trusted: bool, loaded: bool, threads: int, cpus: int | None
) -> list[str]:
    """What would tighten the margin, most effective first: a run that asked for more intra-op threads than the
    machine has cores loads it itself (``--dlbricks-threads=8`` on 2 cores: its timing thread on a core 16% of the
    time), which no quieter machine mends."""
    if trusted and margin is not None and margin <= TIGHT:
        return []
    advice = []
    if cpus is not None and threads > cpus:
        advice.append(f"no more intra-op threads than the machine's {cpus} cores (--dlbricks-threads={cpus})")
    elif loaded or not trusted:
        advice.append("a quieter machine")
    if threads != 1 and (loaded or max(sources.get(SPEED, 0.0), sources.get(DRIFT, 0.0)) > TIGHT):
        advice.append("one intra-op thread (--dlbricks-threads=1)")
    if sources.get(BRICKS, 0.0) > TIGHT:
        advice.append("a tighter --dlbricks-precision")
    advice.append("run again")
    return advice


def judge_simulated(spread: float | None, repeats: int) -> Verdict:
    """A simulated run's verdict from the relative ``spread`` of one job's cost counted in ``repeats`` worker
    processes (None when fewer than two counted it): the margin is that spread, the only one measured."""
    if spread is None or repeats < 2:
        reason = "no job was counted in two worker processes"
        return Verdict(None, True, unmeasured={REPEAT: reason}, simulated_repeats=repeats)
    return Verdict(spread, True, sources={REPEAT: spread}, simulated_repeats=repeats)


def judge_report(report: Mapping[str, Any]) -> Verdict | None:
    """The verdict of a report in its JSON form (a run's, a merge's, a composition's) from its complete models'
    margins and ratios and its summary's noise, speed trace and load, or for a simulated run from its counts'
    repeat (see :func:`judge_simulated`); None for a report without estimates."""
    models = [model for model in report.get("models") or () if "error" not in model]
    if not models:
        return None
    simulation = report.get("simulation")
    if isinstance(simulation, Mapping):
        repeat = simulation.get("repeat")
        repeat = repeat if isinstance(repeat, Mapping) else {}
        counts = repeat.get("simulated_s")
        return judge_simulated(_number(repeat.get("spread")), len(counts) if isinstance(counts, list) else 0)
    complete = [model for model in models if model.get("complete")]
    summary = report.get("summary") or {}
    load = summary.get("load")
    return judge(
        precisions=[_number(model.get("precision")) for model in complete],
        noise=_number(summary.get("noise")),
        speed_spread=speed_margin(summary.get("speed")),
        load=load if isinstance(load, Mapping) and _number(load.get("core_share")) is not None else None,
        threads=int((report.get("settings") or {}).get("intra_op_threads") or 0),
        ratios={
            str(model.get("path")): ratio for model in complete if (ratio := _number(model.get("ratio"))) is not None
        },
        drifts=_drifts(complete),
        earlier=summary.get("reused_from") if isinstance(summary.get("reused_from"), Mapping) else None,
        memory=memory_margin(summary.get("memory")),
        precisions_by_path={str(model.get("path")): _number(model.get("precision")) for model in complete},
        parallel_ratios=parallel_coverage(complete),
        # The speed trace is summed up only where the run timed bricks (see :meth:`.DLBricksRun.compose`).
        timed=isinstance(summary.get("speed"), Mapping),
        timed_above_fast={str(model.get("path")): _number(model.get("timed_above_fast")) for model in complete},
    )


def _drifts(models: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """Each complete model's ``estimate_drift`` by path (None where it has none, or a damaged one)."""
    return {str(model.get("path")): _number(model.get("estimate_drift")) for model in models if model.get("complete")}


def memory_margin(reads: object) -> float | None:
    """The memory part of a run's summary (see :meth:`.caches.CacheFlusher.summary`): its reads' ``swing`` times
    the ``share`` of a model's estimate that follows it; None where the run read none, or the entry is damaged."""
    if not isinstance(reads, Mapping):
        return None
    swing, share = _number(reads.get("swing")), _number(reads.get("share"))
    if swing is None or share is None or swing < 0 or not 0 <= share <= 1:
        return None
    return swing * share


def speed_margin(trace: object) -> float | None:
    """The speed trace's ``swing`` (its ``spread`` in a report written before traces had one), or how far above the
    machine's fast state earlier runs found the run stayed (``above_known``), whichever is wider: bricks timed all
    through a slow stretch agree with each other, and another run may meet the fast state."""
    if not isinstance(trace, Mapping):
        return None
    swing = _number(trace.get("swing"))
    moved = swing if swing is not None else _number(trace.get("spread"))
    above = _number(trace.get("above_known"))
    return max(moved, above) if moved is not None and above is not None else moved


def _number(value: object) -> float | None:
    """A finite number of a report, else None (absent, or damaged)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def verdict_line(verdict: Mapping[str, Any]) -> str:
    """The run's last line: the margin, from what, what to do."""
    if "simulated_repeats" in verdict:
        return _simulated_line(verdict)
    margin, sources, advice = verdict.get("margin"), verdict.get("sources") or {}, verdict.get("advice") or []
    names = {**SOURCE_NAMES, **({SPEED: EARLIER_SPEED} if verdict.get("speed_from") == "earlier runs" else {})}
    parts = ", ".join(f"{names.get(name, name)} +-{part:.0%}" for name, part in sources.items() if part >= 0.005)
    if not verdict.get("trusted", True):
        line = f"dlbricks verdict: estimates not trusted: {verdict.get('reason') or 'the run was loaded'}"
    elif margin is None:
        line = "dlbricks verdict: no margin: nothing was measured to give one"
    else:
        # A source not measured could only widen the margin: what is given is its least.
        least = " at the least" if verdict.get("unmeasured") else ""
        line = f"dlbricks verdict: estimates hold within +-{max(margin, 0.01):.0%}{least}" + (
            f" ({parts})" if parts else ""
        )
    unmeasured = verdict.get("unmeasured") or {}
    if unmeasured and margin is not None:
        line += f"; not measured: {', '.join(SOURCE_NAMES.get(name, name) for name in unmeasured)}"
    slow = verdict.get("widest_slow")
    if isinstance(slow, list) and len(slow) == 2 and _number(slow[1]) is not None and margin is not None:
        line += f"; timed furthest above the machine's fast state: {slow[0]} (+{slow[1]:.0%})"
    widest = verdict.get("widest_drift")
    if isinstance(widest, list) and len(widest) == 2 and (sources.get(DRIFT) or 0) >= 0.005 and margin is not None:
        line += f"; widest move when timed again: {widest[0]} ({widest[1]:.2f}x)"
    within = verdict.get("validated_within")
    if within:
        line += f"; {within[0]}/{within[1]} validated within it"
        line += _own_clause(verdict.get("own_within"), verdict.get("widest_miss"))
    line += _parallel_clause(verdict.get("parallel"), margin is not None)
    return line + (f"; to tighten: {', '.join(advice)}" if advice else "")


def _own_clause(own: object, miss: object) -> str:
    """How many validated models fell within their own margin (the table's Within), and the furthest outside."""
    if not (isinstance(own, list) and len(own) == 2):
        return ""
    clause = f", {own[0]}/{own[1]} within their own"
    if isinstance(miss, list) and len(miss) == 3 and all(isinstance(part, (int, float)) for part in miss[1:]):
        clause += f" (furthest out: {miss[0]}, {miss[1]:.2f}x against +-{max(miss[2], 0.01):.0%})"
    return clause


def _parallel_clause(parallel: object, margined: bool) -> str:
    """What the verdict says of the Parallel column: not covered, and how many validated models fell within anyway."""
    if not isinstance(parallel, Mapping) or not margined:
        return ""
    within = parallel.get("validated_within")
    if isinstance(within, list) and len(within) == 2:
        return f"; Parallel not covered ({within[0]}/{within[1]} validated within it)"
    return "; Parallel not covered (--dlbricks-validate measures it)"


def _simulated_line(verdict: Mapping[str, Any]) -> str:
    """A simulated run's last line: how far one job's counts lay apart between worker processes, and what the
    times are."""
    spread, repeats = verdict.get("margin"), verdict.get("simulated_repeats")
    if spread is None:
        counts = "counts' repeat not measured (no job was counted in two worker processes)"
    else:
        apart = "repeated exactly" if spread == 0 else f"repeated within {spread:.2%}"
        counts = f"counts {apart} (one job counted in {repeats} worker processes)"
    return f"dlbricks verdict: simulated cost: {counts}; {SIMULATED_TIMES}"
