"""What a run knows as it goes, free of pytest: the models cut, the distinct bricks and their times, and how much
each brick's time matters to its models' estimates, which decides how precisely it is timed."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..core.budget import Use, brick_precision, largest_share
from ..core.clock import PausableClock
from ..core.settings import DEFAULT_PROVIDERS, Settings
from ..core.sweeps import SweepPoint, sweep_points
from ..core.synthetic import SharedWeights
from ..cut.bricks import BrickSpec
from ..cut.cutting import ModelPlan
from ..cut.flops import INTEGER_OPS
from ..cut.samples import SampleInputs
from ..estimating.analysis import BrickWork
from ..estimating.calibration import CalibrationRecord
from ..estimating.validation import Validation
from ..reporting.entries import BrickResult, FailedModel
from ..reporting.report import RunReport
from ..simulating.simulated_costs import Simulation
from ..storage.plans import PlanCache
from ..storage.store_records import StoredRun
from ..timing.caches import (
    FLOPS_PER_BYTE,
    CacheFlusher,
    ColdInputs,
    cache_sizes,
    cold_inputs,
    flush_bytes,
    furthest_distances,
    read_bytes,
    rest_of_model,
)
from ..timing.load import LoadMeter
from ..timing.neighbours import RecentRunners, bricks_before
from ..timing.overhead import NO_OVERHEAD, REFERENCE, CallOverhead, reference_call
from ..timing.probes import ExecutorDetection, Peak
from ..timing.retiming import TimedAgain
from ..timing.sharding import assign, brick_cost
from ..timing.speed_trace import SpeedTrace

#: A brick not timed yet counts in its models at least at its FLOPs run at this many times the machine's GEMM
#: peak (or the fastest rate a brick timed so far reached, where one beat it): no float convolution or GEMM of the
#: onnx wheel's CNNs beat the peak by more than 6%, and a peak read in the machine's slow state reads 1.6 times
#: low (see :meth:`RunState.least_work_s`).
PEAK_HEADROOM = 2.0


def _float_flops(work: BrickWork) -> int:
    return sum(layer.flops or 0 for layer in work.layers if layer.op_type not in INTEGER_OPS)


@dataclasses.dataclass(frozen=True)
class _Tally:
    """What some bricks of a model add: their known times as composed (``net_s``) and as measured
    (``raw_s``), the least of those not known among them (see :meth:`RunState.least_work_s`), and the
    calls' cost of those not known (``floor_s``), each as often as the model calls it."""

    net_s: float = 0.0
    raw_s: float = 0.0
    floor_s: float = 0.0

    def plus(self, other: _Tally) -> _Tally:
        return _Tally(self.net_s + other.net_s, self.raw_s + other.raw_s, self.floor_s + other.floor_s)

    def minus(self, other: _Tally) -> _Tally:
        return _Tally(self.net_s - other.net_s, self.raw_s - other.raw_s, self.floor_s - other.floor_s)


class RunState:
    """What a run knows as it goes: its models and distinct bricks, their times and what is recorded about them;
    :class:`~.engine.DLBricksRun`, which extends it, cuts, times and composes."""

    def __init__(self, settings: Settings, timer: Callable[[], float]) -> None:
        self.settings = settings
        self.clock = PausableClock(timer)
        self.plans: list[ModelPlan] = []
        self.failed: list[FailedModel] = []
        #: Distinct bricks by signature, in the order they were first met.
        self.bricks: dict[str, BrickSpec] = {}
        #: Signatures of the bricks first met in an exported suite, whose cut this run did not make.
        self.exported: set[str] = set()
        self.results: dict[str, BrickResult] = {}
        #: Times of bricks known before they are timed or reused (from the store), by signature: they count
        #: in the part of their models known so far, which decides how precisely other bricks are timed.
        self._known_times: dict[str, float] = {}
        #: The models using each distinct brick, as indices into :attr:`plans`.
        self._plans_using: dict[str, list[int]] = {}
        #: What each model's bricks are known to add, by plan index and whether stored times count (see
        #: :meth:`_uses`), kept up to date as times become known, for the call overhead it was counted with.
        self._tallies: dict[tuple[int, bool], _Tally] = {}
        #: Each distinct brick's call cost, for the call overhead it was reckoned with: sizing the bricks of a
        #: re-run of 42 models asked for it 22,000 times.
        self._call_costs: dict[str, float] = {}
        #: The call overhead and FLOP rate the tallies and call costs were reckoned with (see
        #: :meth:`_follow_reckoning`).
        self._reckoned: tuple[CallOverhead | None, float | None] = (None, None)
        #: The fastest FLOP rate a brick's float layers reached in this run, net of its call's cost (see
        #: :meth:`least_work_s`).
        self._fastest_flops_per_s = 0.0
        #: Validations by model path and executor.
        self.validations: dict[tuple[str, str], Validation] = {}
        #: The bricks this run timed, timed again at its end where it does not validate (see :func:`.time_again`),
        #: and the seconds that took.
        self.timed_again: dict[str, TimedAgain] = {}
        self.timed_again_s = 0.0
        #: Cost of one inference call on this machine, measured before the first timing.
        self.overhead: CallOverhead | None = None
        #: Whether this run measured it: one stored without the reference call's time is measured again once.
        self.overhead_measured = False
        #: How fast the machine ran through the run, sampled before the items that time, and the reference
        #: call's time around each brick's timing (see :mod:`.speed_trace`).
        self.speed = SpeedTrace(lambda: reference_call(settings), REFERENCE)
        #: Whether the thread that times got its core through the timed rounds (see :mod:`.load`).
        self.load = LoadMeter(idle=lambda: self.speed.waited_s, idle_cpu=lambda: self.speed.waited_cpu_s)
        #: What the parallel executor does with independent nodes here, detected once before composing,
        #: or why it could not be.
        self.executor: ExecutorDetection | None = None
        self.executor_error: str | None = None
        #: When the detection was made (ISO 8601, UTC), and whether it was taken from the brick store.
        self.executor_measured_at: str | None = None
        self.executor_reused = False
        #: A detection made in an earlier run, kept in the brick store, to use instead of detecting again.
        self.stored_executor: tuple[ExecutorDetection, str] | None = None
        #: The machine's peak an earlier run measured with these settings, kept in the brick store, and when.
        self.stored_peak: tuple[Peak, str] | None = None
        #: The peak this run measured, and when, for the store to keep; None when it measured none.
        self.measured_peak: tuple[Peak, str] | None = None
        #: Whether the run tried to measure the peak before its first timing (see :meth:`.DLBricksRun.measure_peak`).
        self.peak_tried = False
        #: Whether the peak kept in the store was found damaged: measured again even by a run that times nothing.
        self.peak_lost = False
        #: What the runs that timed the stored bricks found of the machine (see :class:`.StoredRun`).
        self.stored_runs: list[StoredRun] = []
        self.started = time.perf_counter()
        #: FLOPs and bytes of each distinct brick's layers, by signature.
        self.work: dict[str, BrickWork] = {}
        #: Model files by report path, for measuring their load time.
        self.model_files: dict[str, Path] = {}
        #: What each model, by report path, was cut from: its file, sweep point and sample inputs.
        self.sources: dict[str, tuple[Path, SweepPoint, SampleInputs | None]] = {}
        #: Sample inputs by model file, found once for all sweep points.
        self.samples: dict[Path, SampleInputs | None] = {}
        #: The report, once composed (see :meth:`compose`), and its JSON form, which everything else reads.
        self.composed: RunReport | None = None
        self.report: dict[str, Any] | None = None
        #: Models cut in this run and, when the brick store is on, in earlier runs (see :meth:`use_plan_cache`).
        self.plan_cache = PlanCache(None, settings)
        #: Models that took the cut of a model of the same graph, weights aside (see :mod:`.weightless`).
        self.shared_cuts: list[str] = []
        #: The points every model is benchmarked at (one, unless dimensions or numeric types are swept).
        self.points: list[SweepPoint] = sweep_points(settings.dims, settings.sweep, settings.dtypes)
        #: Bricks the providers cannot run at their types, with the reason, found when run.
        self.unsupported: dict[str, str] = {}
        #: Nodes run by each provider, for the bricks whose run was profiled.
        self.placements: dict[str, dict[str, int]] = {}
        #: Manifests of exported suites by folder (None: the folder holds no suite; an error: unreadable).
        self.manifests: dict[Path, dict[str, dict[str, Any]] | Exception | None] = {}
        #: Lines for the terminal summary after the table: (text, is an error).
        self.messages: list[tuple[str, bool]] = []
        self.write_errors: list[str] = []
        self.written: list[Path] = []
        #: Damaged records of the brick store, discarded or repaired, when the store is on.
        self.store_damage: dict[str, dict[str, int]] | None = None
        #: The calibration models kept in the brick store for this machine (see :mod:`.calibration`).
        self.calibration: list[CalibrationRecord] = []
        #: Synthetic weights every brick of the run reads (see :class:`~.synthetic.SharedWeights`).
        self.shared_weights = SharedWeights()
        #: A core's cache and the last-level cache, in bytes, and what reads bricks' weights out of them
        #: before their calls (see :mod:`.caches`).
        self.cache_sizes = cache_sizes()
        self.flusher = CacheFlusher()
        #: Bytes each model reads in a call (its layers' weights and outputs), by plan path.
        self._model_bytes: dict[str, int] = {}
        #: How far each brick's inputs were written before it (see :meth:`input_distances`), found once the
        #: models are cut; and as exported suites' manifests give them.
        self._input_distances: dict[str, tuple[int, ...]] | None = None
        self.exported_distances: dict[str, tuple[int, ...]] = {}
        #: The bricks right before each brick in its models (see :meth:`bricks_before`), found once the models are
        #: cut; and the runners of the bricks built last, which the bricks after them call (see :mod:`.neighbours`).
        self._bricks_before: dict[str, tuple[str, ...]] | None = None
        self.recent_runners = RecentRunners()
        #: Bricks found unable to precede another: they cannot run here (a check that fails, or never ends within
        #: its limit, would be paid again for every brick after them), or are not brief.
        self.not_before: set[str] = set()
        #: The FLOPs of each brick of an exported suite, and what the rest of its largest model reads in a call,
        #: as the suite's manifest gives them: its models are not here to tell.
        self.exported_reads: dict[str, tuple[float | None, int]] = {}
        #: What the simulation counted, in simulated cost mode (see :mod:`.simulated`); None when bricks are timed.
        self.simulation = Simulation() if settings.cost == "simulated" else None

    def models_using(self, signature: str) -> dict[str, int]:
        return {plan.path: plan.signatures[signature] for plan in self.plans if signature in plan.signatures}

    def dims_left_at_default(self, signature: str) -> list[str]:
        """Symbolic dimensions left at their default in the models that use a brick (a cause when it fails)."""
        names: dict[str, None] = {}
        for plan in self.plans:
            if signature in plan.signatures:
                names.update(dict.fromkeys(plan.guessed_dims))
        return list(names)

    def unused_dims(self) -> list[str]:
        """Each dimension given on the command line that no collected model has, in a sentence (a typo, most
        likely; the ini's describe the whole project, of which a run may collect a part). Names a model that
        failed to load may have are not judged."""
        settings = self.settings
        failed = {model.path for model in self.failed}
        plans = [plan for plan in self.plans if plan.path not in failed]
        problems = []
        if not failed:
            used = {name for plan in plans for name in plan.dim_names}
            problems += [
                f"dimension {name!r} was given, but no collected model has it"
                for name in sorted(settings.command_line_dims)
                if name not in used
            ]
        for entry in settings.model_dims:
            if not entry.from_command_line or any(entry.matches(path) for path in failed):
                continue
            matched = [plan for plan in plans if entry.matches(plan.file or plan.path)]
            if not matched:
                problems.append(f"{entry.pattern!r} of --dlbricks-dim matches no collected model")
            problems += [
                f"dimension {name!r} was given to {entry.pattern!r}, but none of its models has it"
                for name in entry.dims
                if matched and all(name not in plan.dim_names for plan in matched)
            ]
        return problems

    def unsupported_wherever_used(self, signature: str) -> str | None:
        """Why no model can use a brick's time: every window it fills is one the provider cannot run."""
        if not any(plan.unsupported for plan in self.plans):
            return None
        reasons = [
            plan.unsupported.get(index)
            for plan in self.plans
            for index, brick in enumerate(plan.bricks)
            if isinstance(brick, BrickSpec) and brick.signature == signature
        ]
        return reasons[0] if reasons and all(reasons) else None

    def executors_to_validate(self, plan: ModelPlan) -> list[str]:
        """The sequential executor always; the parallel one wherever its estimate was asked for: a model without
        branches to overlap has a parallel estimate too (the executor's cost for layers that use the intra-op
        pool), which is checked like any other."""
        return ["sequential", "parallel"] if self.settings.parallel_asked else ["sequential"]

    def expected_cost(self, signature: str) -> float:
        """What a brick is expected to cost before it is timed, in FLOPs: its own, or what moving its bytes
        (see :func:`.sharding.brick_cost`) takes as long as, whichever is more."""
        work = self.work.get(signature)
        flops = work.flops if work is not None else None
        return max(float(flops or 0), FLOPS_PER_BYTE * brick_cost(self.bricks[signature]))

    def flush_bytes(self, signature: str) -> int:
        """Bytes to read before each timed call of a brick that waits on reading its weights (see
        :func:`.caches.flush_bytes`): what the rest of the largest model using it reads in a call; 0 for any
        other brick, and in simulated cost, which no cache of this machine's moves."""
        if self.simulation is not None:
            return 0
        flops, rest = self.reads(signature)
        return flush_bytes(self.bricks[signature], flops, rest, self.cache_sizes)

    def reads(self, signature: str) -> tuple[float | None, int]:
        """A brick's FLOPs (None when unknown) and the bytes the rest of the largest model using it reads in a
        call, which decide whether and how far its weights are pushed out of the caches (see :mod:`.caches`)."""
        if signature in self.exported_reads:
            return self.exported_reads[signature]
        work = self.work.get(signature)
        models_read = [self._read_by(self.plans[index]) for index in self._plans_using.get(signature, ())]
        return (work.flops if work is not None else None), rest_of_model(self.bricks[signature], models_read)

    def flushes(self, signatures: Iterable[str]) -> dict[str, Callable[[], None]]:
        """What pushes each brick's weights out of the caches before its calls, for those of ``signatures``
        that wait on reading them (see :meth:`flush_bytes`)."""
        sizes = {signature: self.flush_bytes(signature) for signature in signatures if signature in self.bricks}
        return {signature: self.flusher.reader(size) for signature, size in sizes.items() if size}

    def cold_inputs(self, signature: str) -> ColdInputs | None:
        """The inputs of a brick that its models wrote beyond a core's cache before it reads them (see
        :func:`.caches.cold_inputs`); none in simulated cost, which no cache of this machine's moves."""
        if self.simulation is not None:
            return None
        return cold_inputs(self.bricks[signature], self.input_distances(signature), self.cache_sizes)

    def bricks_before(self, signature: str) -> tuple[str, ...]:
        """The bricks right before ``signature`` at its places in its models, whose calls precede its own (see
        :mod:`.neighbours`); none in simulated cost, whose counts no neighbour moves, nor for a brick of an exported
        suite, which does not say."""
        if self.simulation is not None:
            return ()
        if self._bricks_before is None:
            self._bricks_before = bricks_before(self.plans)
        return self._bricks_before.get(signature, ())

    def fastest_s(self, signature: str) -> float | None:
        """A brick's fastest call as this run knows it: its item's probe, else its fastest round; None before it
        was timed."""
        result = self.results.get(signature)
        if result is None:
            return None
        return result.probe_s or result.stats.get("min")

    def input_distances(self, signature: str) -> tuple[int, ...]:
        """Per input of a brick, the bytes its models read between writing it and the brick reading it (see
        :func:`.caches.reuse_distances`), at the brick's furthest place; as an exported suite's manifest gives
        them; none for a brick of no model's."""
        if self._input_distances is None:
            self._input_distances = furthest_distances(self.plans)
        return self.exported_distances.get(signature) or self._input_distances.get(signature, ())

    def _read_by(self, plan: ModelPlan) -> int:
        if plan.path not in self._model_bytes:
            self._model_bytes[plan.path] = sum(
                count * read_bytes(self.bricks[signature])
                for signature, count in plan.signatures.items()
                if signature in self.bricks
            )
        return self._model_bytes[plan.path]

    def shard_assignment(self, shards: int) -> dict[str, int]:
        """The shard (from 1) of every distinct brick, balanced by their expected cost."""
        return assign({signature: brick_cost(brick) for signature, brick in self.bricks.items()}, shards)

    def brick_precision(self, signature: str, seconds: float, target: float, *, stored: bool = True) -> float:
        """The margin of error a brick taking ``seconds`` must reach for the estimate of every model using it
        to reach ``target``, the models' other bricks counted at the times known so far (see :mod:`.budget`):
        measured or reused in this run and, if ``stored``, read from the brick store."""
        net_seconds = max(seconds - self._call_cost(signature), 0.0)
        return brick_precision(target, seconds, net_seconds, self._uses(signature, stored=stored))

    def brick_share(self, signature: str, seconds: float) -> float:
        """The largest part a brick taking ``seconds`` makes of the time of a model using it, the models'
        other bricks counted at the times known so far."""
        return largest_share(seconds, self._uses(signature))

    @property
    def known_peak(self) -> Peak | None:
        """The machine's peak as far as the run knows it: measured by this run, else kept in the brick store."""
        known = self.measured_peak or self.stored_peak
        return known[0] if known is not None else None

    def least_work_s(self, signature: str) -> float:
        """The least a brick not timed yet will add to its models beside its call's cost: its float FLOPs at
        :data:`PEAK_HEADROOM` times the machine's peak, or the fastest rate a brick timed so far reached where
        one beat it, as soon as the run knows the peak (0 before, for a brick whose FLOPs are unknown, and where
        bricks run on other providers than the CPU's, which the peak measured through them may not bound).
        Counted so, a model's first bricks are not timed as precisely as if they were the whole model: first
        runs of the onnx wheel's CNNs spent 3.9 to 6.8 s on timed rounds so, 2.6 to 3.6 s since. Integer
        multiply-adds are left out: processors run them several times faster than float ones."""
        rate, work = self._floor_rate(), self.work.get(signature)
        if rate is None or work is None:
            return 0.0
        return _float_flops(work) / (PEAK_HEADROOM * rate)

    def _floor_rate(self) -> float | None:
        peak = self.known_peak
        if peak is None or peak.flops_per_s <= 0 or self.settings.providers != DEFAULT_PROVIDERS:
            return None
        return max(peak.flops_per_s, self._fastest_flops_per_s)

    def _follow_reckoning(self) -> None:
        """Forget what was reckoned with another call overhead or FLOP rate (see :meth:`least_work_s`) than the
        run's now: the tallies, the call costs."""
        reckoning = self.overhead, self._floor_rate()
        if reckoning[0] is not self._reckoned[0] or reckoning[1] != self._reckoned[1]:
            self._tallies.clear()
            self._call_costs.clear()
            self._reckoned = reckoning

    def _call_cost(self, signature: str) -> float:
        self._follow_reckoning()
        cost = self._call_costs.get(signature)
        if cost is None:
            brick = self.bricks[signature]
            cost = self._call_costs[signature] = (self.overhead or NO_OVERHEAD).of_brick(
                len(brick.inputs), brick.output_count
            )
        return cost

    def _uses(self, signature: str, *, stored: bool = True) -> list[Use]:
        """The brick's place in each model using it (see :class:`.budget.Use`): the model's tally less the
        brick's own part, so that sizing every brick of a run costs the models' bricks once, not once each."""
        uses = []
        for index in self._plans_using.get(signature, ()):
            plan = self.plans[index]
            count = plan.signatures[signature]
            tally = self._tally(index, stored).minus(self._part(signature, count, stored))
            others = (self.overhead or NO_OVERHEAD).of(*plan.io) + tally.net_s
            uses.append(Use(count, others, tally.raw_s, tally.floor_s))
        return uses

    def _tally(self, index: int, stored: bool) -> _Tally:
        """What all the bricks of plan ``index`` are known to add (see :meth:`_part`), counted once."""
        self._follow_reckoning()
        key = (index, stored)
        if key not in self._tallies:
            tally = _Tally()
            for signature, calls in self.plans[index].signatures.items():
                tally = tally.plus(self._part(signature, calls, stored))
            self._tallies[key] = tally
        return self._tallies[key]

    def _part(self, signature: str, calls: int, stored: bool) -> _Tally:
        """What a brick called ``calls`` times adds to its model: its time as composed and as measured when
        known, else the least it will add: its work (see :meth:`least_work_s`) and its calls' cost."""
        call_cost = self._call_cost(signature)
        time_s = self._known_time(signature, stored=stored)
        if time_s is None:
            least = calls * self.least_work_s(signature)
            return _Tally(net_s=least, raw_s=least, floor_s=calls * call_cost)
        return _Tally(net_s=calls * max(time_s - call_cost, 0.0), raw_s=calls * time_s)

    def _known_time(self, signature: str, *, stored: bool = True) -> float | None:
        result = self.results.get(signature)
        if result is not None:
            return float(result.stats[self.settings.statistic])
        return self._known_times.get(signature) if stored else None

    def _learn(self, signature: str, change: Callable[[], None]) -> None:
        """Make ``change`` to what is known of a brick's time, and to the tallies of the models using it."""
        self._follow_reckoning()
        counted = [
            (index, stored)
            for index in self._plans_using.get(signature, ())
            for stored in (True, False)
            if (index, stored) in self._tallies
        ]
        calls = {index: self.plans[index].signatures[signature] for index, _ in counted}
        before = [self._part(signature, calls[index], stored) for index, stored in counted]
        change()
        for key, old in zip(counted, before):
            index, stored = key
            self._tallies[key] = self._tallies[key].minus(old).plus(self._part(signature, calls[index], stored))

    def know_time(self, signature: str, seconds: float) -> None:
        """A brick's time known before it is timed or reused (from the store)."""
        self._learn(signature, lambda: self._known_times.__setitem__(signature, seconds))

    def assume_overhead(self, overhead: CallOverhead | None) -> None:
        """Compose with a call cost measured in an earlier run (the one reused brick times were measured beside)."""
        if self.overhead is None:
            self.overhead = overhead

    def record_result(self, signature: str, result: BrickResult) -> None:
        """A brick's time, measured in this run or reused from the store, and the FLOP rate it reached."""
        self._learn(signature, lambda: self.results.__setitem__(signature, result))
        work = self.work.get(signature)
        if work is None:
            return
        net_s = float(result.stats[self.settings.statistic]) - self._call_cost(signature)
        if net_s > 0:
            self._fastest_flops_per_s = max(self._fastest_flops_per_s, _float_flops(work) / net_s)

    def mark_measured_at(self, signature: str, when: str) -> BrickResult:
        """Stamp a brick's time with the moment it was measured; returns the stamped result."""
        self.results[signature] = dataclasses.replace(self.results[signature], measured_at=when)
        return self.results[signature]

    def mark_unsupported(self, signature: str, reason: str) -> None:
        self.unsupported[signature] = reason

    def record_placement(self, signature: str, providers: Mapping[str, int]) -> None:
        self.placements[signature] = dict(providers)

    def record_validation(self, path: str, executor: str, validation: Validation) -> None:
        self.validations[(path, executor)] = validation

    def has_work(self) -> bool:
        """Whether anything was collected: a model, cut or failed, or an exported brick."""
        return bool(self.plans or self.failed or self.bricks)
