"""The engine of a run, free of pytest: models cut, distinct bricks, their times; composes, writes and exports.

The pytest layer drives it with plain arguments: :mod:`.session` (hooks) cuts models as pytest
collects them and composes at the end, :mod:`.items` records what the timed items measure, and
:mod:`.tracking` hands it brick times and cut models kept in the store.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .analysis import BrickWork, plan_work
from .bricks import BrickSpec
from .budget import Use, brick_precision, largest_share
from .calibration import CalibrationRecord
from .clock import PausableClock
from .cutting import ModelPlan, plan_model
from .errors import ModelError, describe_error, named_error
from .html import render_html
from .load import LoadMeter, load_summary
from .loading import load_model, whole_model
from .maps import write_maps
from .numerics import convert, float32_work
from .overhead import (
    NO_OVERHEAD,
    REFERENCE,
    CallOverhead,
    measure_call_overhead,
    measure_parallel_fixed_cost,
    parallel_ceiling,
    reference_call,
)
from .plans import CutModel, PlanCache
from .probes import (
    ExecutorDetection,
    RunMeasurements,
    describe_machine,
    detect_executor,
    measure_run,
    with_pool_slowdown,
)
from .report import BrickResult, FailedModel, RunReport, build_report
from .running import BrickRunner, ModelRunner
from .samples import SampleInputs, find_samples, from_hook
from .settings import Settings
from .sharding import assign, brick_cost
from .simulated_costs import Simulation
from .speed_trace import SpeedTrace
from .store import write_json, write_text
from .suite import SuiteError, export_suite, read_manifest
from .sweeps import AS_WRITTEN, SweepPoint, sweep_points
from .synthetic import SharedWeights
from .terminal import format_seconds
from .validation import Validation, has_parallel_branches
from .wording import plural

#: FLOPs a CPU core computes in the time it moves a byte from memory, roughly (peak FLOP/s over memory bandwidth).
FLOPS_PER_BYTE = 8


def readable(name: str) -> str:
    """A file name as text every report can hold: the bytes of a name that is not UTF-8, which Python
    keeps as lone surrogates that no UTF-8 file can hold, are written ``\\xff``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def unforeseen(error: Exception) -> str:
    """Why a model failed with an error no check foresaw, in the words of its ``::load`` item and report."""
    return f"cannot be read ({named_error(error)})"


class DLBricksRun:
    """Created by :class:`~pytest_dlbricks.session.DLBricksSession` for one pytest session.

    ``timer`` is the timer pytest-benchmark times bricks with; :attr:`clock` wraps it so that the
    rewriting of a brick's inputs is left out of the brick's time.
    """

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
        self._tallied_overhead: CallOverhead | None = None
        #: Validations by model path and executor.
        self.validations: dict[tuple[str, str], Validation] = {}
        #: Cost of one inference call on this machine, measured before the first timing.
        self.overhead: CallOverhead | None = None
        #: Whether this run measured it: one stored without the reference call's time is measured again once.
        self.overhead_measured = False
        #: How fast the machine ran through the run, sampled before the items that time, and the reference
        #: call's time around each brick's timing (see :mod:`.speed_trace`).
        self.speed = SpeedTrace(lambda: reference_call(settings), REFERENCE)
        #: Whether the thread that times got its core through the timed rounds (see :mod:`.load`).
        self.load = LoadMeter()
        #: What the parallel executor does with independent nodes here, detected once before composing,
        #: or why it could not be.
        self.executor: ExecutorDetection | None = None
        self.executor_error: str | None = None
        #: When the detection was made (ISO 8601, UTC), and whether it was taken from the brick store.
        self.executor_measured_at: str | None = None
        self.executor_reused = False
        #: A detection made in an earlier run, kept in the brick store, to use instead of detecting again.
        self.stored_executor: tuple[ExecutorDetection, str] | None = None
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
        #: What the simulation counted, in simulated cost mode (see :mod:`.simulated`); None when bricks are timed.
        self.simulation = Simulation() if settings.cost == "simulated" else None

    # Cutting

    def exported_brick(self, path: Path) -> dict[str, Any] | None:
        """The manifest entry of a brick file of an exported suite; an unreadable manifest gives an error entry."""
        folder = path.parent
        if folder not in self.manifests:
            try:
                self.manifests[folder] = read_manifest(folder)
            except SuiteError as error:
                self.manifests[folder] = error
        manifest = self.manifests[folder]
        if isinstance(manifest, Exception):
            return {"error": str(manifest)}
        return None if manifest is None else manifest.get(path.name)

    def add_exported_brick(self, brick: BrickSpec) -> bool:
        """Register a brick read from a suite file; False when the same brick was met before."""
        if brick.signature in self.bricks:
            return False
        self.bricks[brick.signature] = brick
        self.exported.add(brick.signature)
        return True

    def use_plan_cache(self, cache: PlanCache) -> None:
        """Take models cut in earlier runs from ``cache``, and keep the models cut now in it."""
        self.plan_cache = cache

    def add_model(
        self, path: Path, display_path: str, point: SweepPoint | None = None, hooked: object = None
    ) -> tuple[ModelPlan, list[BrickSpec]]:
        """Cut the model at ``path`` at ``point``, or take it from the plan cache; returns its plan and the
        bricks no earlier model had. The point's sizes are the model's own (see :meth:`Settings.dims_for`).
        ``hooked`` is what the ``pytest_dlbricks_model_inputs`` hook returned for it (None: the sample
        inputs the conventions find, if any)."""
        display_path = readable(display_path)
        point = point or self.points[0]
        point = dataclasses.replace(point, dims=self.settings.dims_for(display_path, point.dims))
        name = display_path + point.suffix
        try:
            return self._add_model(path, display_path, point, hooked, name)
        except ModelError:
            raise
        except Exception as error:  # an input no check foresaw: the report lists the model with it, as any
            self.failed.append(FailedModel(name, unforeseen(error)))
            raise

    def _add_model(
        self, path: Path, display_path: str, point: SweepPoint, hooked: object, name: str
    ) -> tuple[ModelPlan, list[BrickSpec]]:
        try:
            sample = self._sample_inputs(path, hooked)
        except ModelError as error:
            self.failed.append(FailedModel(name, error.cause))
            raise
        digest = sample.digest() if sample is not None else None
        cut = self.plan_cache.get(path, display_path, point, digest)
        if cut is None:
            cut = self._cut_or_share(path, display_path, point, sample, digest)
            self.plan_cache.put(path, point, cut, digest)
        plan = cut.plan
        for signature in plan.signatures:
            self._plans_using.setdefault(signature, []).append(len(self.plans))
        self.plans.append(plan)
        self.model_files[name] = path
        self.sources[name] = (path, point, sample)
        new_bricks = []
        for brick in plan.bricks:
            if isinstance(brick, BrickSpec) and brick.signature not in self.bricks:
                self.bricks[brick.signature] = brick
                new_bricks.append(brick)
        self.work.update({brick.signature: cut.work[brick.signature] for brick in new_bricks})
        return plan, new_bricks

    def _cut_or_share(
        self, path: Path, display_path: str, point: SweepPoint, sample: SampleInputs | None, digest: str | None
    ) -> CutModel:
        """The cut of a model of the same graph, weights aside, if this run or the store has one; else the
        model's own."""
        graph = self.plan_cache.graph_key(path, point, digest)
        shared = self.plan_cache.get_by_graph(graph, display_path, point) if graph is not None else None
        if shared is not None:
            if sample is not None:
                shared.plan.inputs = sample.source
            self.shared_cuts.append(display_path + point.suffix)
            return shared
        cut = self._cut(path, display_path, point, sample)
        if graph is not None:
            self.plan_cache.put_by_graph(graph, cut)
        return cut

    def _sample_inputs(self, path: Path, hooked: object) -> SampleInputs | None:
        if hooked is not None:
            return from_hook(path, hooked)
        if path not in self.samples:
            self.samples[path] = find_samples(path)
        return self.samples[path]

    def _cut(self, path: Path, display_path: str, point: SweepPoint, sample: SampleInputs | None) -> CutModel:
        name = display_path + point.suffix
        optimize = self.settings if self.settings.cut == "optimized" else None
        dtype = point.dtype
        try:
            graph = load_model(path, point.dims, optimize, _converter(dtype), sample, self.settings.granularity)
        except ModelError as error:
            self.failed.append(FailedModel(name, error.cause))
            raise
        plan = plan_model(graph, self.settings.granularity, name)
        plan.file, plan.point = display_path, point.describe()
        if sample is not None:
            plan.inputs = sample.source
        if dtype == "fp16":
            reasons = {i: float32_work(b) for i, b in enumerate(plan.bricks) if isinstance(b, BrickSpec)}
            plan.unsupported = {index: reason for index, reason in reasons.items() if reason is not None}
        return CutModel(plan, plan_work(graph, plan))

    def already_optimized(self, signature: str) -> bool:
        """Whether a brick was cut by this run from the graph onnxruntime optimized for its settings."""
        return self.settings.cut == "optimized" and signature not in self.exported

    def brick_runner(self, signature: str) -> BrickRunner:
        """A distinct brick ready to time, its synthetic weights shared with the run's other bricks;
        raises :class:`~.running.BrickError`."""
        return BrickRunner(
            self.bricks[signature],
            self.settings,
            optimized=self.already_optimized(signature),
            shared=self.shared_weights,
        )

    def whole_model_runner(self, plan: ModelPlan, *, parallel: bool) -> ModelRunner:
        """The whole model of ``plan`` as the user runs it (their file, real weights) on the inputs its
        bricks were cut for; raises :class:`ModelError` or :class:`~.running.BrickError`."""
        model, feeds, data_dir = self.whole_model_inputs(plan)
        return ModelRunner(model, feeds, self.settings, data_dir=data_dir, parallel=parallel)

    def whole_model_inputs(self, plan: ModelPlan) -> tuple[onnx.ModelProto | Path, dict[str, np.ndarray], Path | None]:
        """The whole model of ``plan`` (its file, or the model converted to its point's type), its inputs, and
        where the weights of a converted model lie; raises :class:`ModelError`."""
        path, point, sample = self.sources[plan.path]
        model, feeds = whole_model(path, point.dims, _converter(point.dtype), sample)
        return model, feeds, None if isinstance(model, Path) else path.parent  # onnxruntime finds a file's own data

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
        """The sequential executor always; the parallel one where its estimate was asked for and the model
        has branches to overlap."""
        parallel = self.settings.parallel_asked and has_parallel_branches(plan)
        return ["sequential", "parallel"] if parallel else ["sequential"]

    def expected_cost(self, signature: str) -> float:
        """What a brick is expected to cost before it is timed, in FLOPs: its own, or what moving its bytes
        (see :func:`.sharding.brick_cost`) takes as long as, whichever is more."""
        work = self.work.get(signature)
        flops = work.flops if work is not None else None
        return max(float(flops or 0), FLOPS_PER_BYTE * brick_cost(self.bricks[signature]))

    def shard_assignment(self, shards: int) -> dict[str, int]:
        """The shard (from 1) of every distinct brick, balanced by their expected cost."""
        return assign({signature: brick_cost(brick) for signature, brick in self.bricks.items()}, shards)

    # Measuring

    def measure_overhead(self, *, parallel: bool = False) -> None:
        """Measure the cost of a call once, before the first timing: also where a call cost stored by an
        older run lacks the reference call's time, which the bricks timed now are scaled by (bricks it
        was measured with compose with it unscaled either way); and (``parallel``) the parallel executor's,
        when the call cost in use lacks it or holds one beyond :func:`.overhead.parallel_ceiling` (stored by a
        version that did not bound it)."""
        if self.overhead is None or (self.overhead.reference_s is None and not self.overhead_measured):
            self.overhead = measure_call_overhead(self.settings)
            self.overhead_measured = True
        stored = self.overhead.parallel_fixed_s
        if parallel and (stored is None or stored > parallel_ceiling(self.overhead)):
            self.overhead = dataclasses.replace(
                self.overhead, parallel_fixed_s=measure_parallel_fixed_cost(self.settings, self.overhead)
            )

    @property
    def parallel_estimated(self) -> bool:
        """Whether the models get a parallel estimate: asked for, or (``auto``) the parallel executor was
        detected running independent nodes at once."""
        return self.executor is not None and (self.settings.parallel_asked or self.executor.concurrent)

    def detect_executor(self) -> None:
        """Detect once what the parallel executor does with independent nodes, where a parallel estimate may
        be shown (see :data:`.settings.EXECUTORS`), and, where one is, measure what it costs the layers that
        use the intra-op pool and its call cost where the call cost in use (one stored by an older run)
        lacks it: the parallel estimates need both. Made only where some brick has a time, so that a run
        with nothing to compose pays nothing; a run of an exported suite too, for the estimates that
        ``compose`` makes from its report. A detection kept in the store (:attr:`stored_executor`) is used
        instead of detecting again."""
        if self.executor_error is not None or not self.settings.parallel_possible:
            return
        try:
            if self.executor is None and self.stored_executor is not None:
                (self.executor, self.executor_measured_at), self.executor_reused = self.stored_executor, True
            elif self.executor is None:
                self.executor = detect_executor(self.settings, pool=False)
                self.executor_measured_at = _now()
            if not self.parallel_estimated:
                return
            assert self.executor is not None
            if self.executor.pool is None:  # a detection made without it, by a run that needed no estimate
                self.executor = with_pool_slowdown(self.executor, self.settings)
                self.executor_measured_at, self.executor_reused = _now(), False
            if self.overhead is not None:
                self.measure_overhead(parallel=True)
                if self.overhead.parallel_fixed_s is None:
                    self.executor_error = (
                        "its call cost could not be measured: every set of its sessions took more than"
                        f" {format_seconds(parallel_ceiling(self.overhead))} a call, the machine's cores taken"
                        " or the sessions caught in a slow state; run again on a quieter machine"
                    )
        except Exception as error:  # onnxruntime's exception types are not part of its API
            self.executor_error = describe_error(error)

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

    def _call_cost(self, signature: str) -> float:
        brick = self.bricks[signature]
        return (self.overhead or NO_OVERHEAD).of_brick(len(brick.inputs), brick.output_count)

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
        if self._tallied_overhead is not self.overhead:
            self._tallies.clear()
            self._tallied_overhead = self.overhead
        key = (index, stored)
        if key not in self._tallies:
            tally = _Tally()
            for signature, calls in self.plans[index].signatures.items():
                tally = tally.plus(self._part(signature, calls, stored))
            self._tallies[key] = tally
        return self._tallies[key]

    def _part(self, signature: str, calls: int, stored: bool) -> _Tally:
        """What a brick called ``calls`` times adds to its model: its time as composed and as measured when
        known, else its calls' cost as the least it will add."""
        call_cost = self._call_cost(signature)
        time_s = self._known_time(signature, stored=stored)
        if time_s is None:
            return _Tally(floor_s=calls * call_cost)
        return _Tally(net_s=calls * max(time_s - call_cost, 0.0), raw_s=calls * time_s)

    def _known_time(self, signature: str, *, stored: bool = True) -> float | None:
        result = self.results.get(signature)
        if result is not None:
            return float(result.stats[self.settings.statistic])
        return self._known_times.get(signature) if stored else None

    def _learn(self, signature: str, change: Callable[[], None]) -> None:
        """Make ``change`` to what is known of a brick's time, and to the tallies of the models using it."""
        if self._tallied_overhead is not self.overhead:
            self._tallies.clear()
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
        """A brick's time, measured in this run or reused from the store."""
        self._learn(signature, lambda: self.results.__setitem__(signature, result))

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

    # Composing and writing

    def has_work(self) -> bool:
        """Whether anything was collected: a model, cut or failed, or an exported brick."""
        return bool(self.plans or self.failed or self.bricks)

    def compose(self, *, partial: bool, measure: bool, load_times: bool = True) -> dict[str, Any]:
        """The report of the bricks timed so far, built once; ``partial`` marks a run stopped early,
        ``measure`` asks for the machine's peak (not after an interrupt), and with ``load_times`` the
        models' load times: one session per model, as much as benchmarking the model whole costs to start."""
        if self.report is not None:
            return self.report
        # Simulated costs need no peak, load times nor executor: nothing of this machine's is timed.
        measure = measure and self.simulation is None
        # The machine's peak first: the parallel executor's threads, once tried, spin on for a while.
        measured = self._measure_run(load_times) if measure else RunMeasurements(machine=describe_machine())
        if measure and self.results:
            self.detect_executor()
        self.composed = build_report(
            self.settings,
            self.plans,
            self.failed,
            self.bricks,
            self.results,
            overhead=self.overhead,
            executor=self.executor,
            executor_error=self.executor_error,
            executor_origin=(self.executor_measured_at, self.executor_reused),
            validations=self.validations,
            wall_time_s=time.perf_counter() - self.started,
            partial=partial,
            work=self.work,
            measured=measured,
            unsupported=self.unsupported,
            placements=self.placements,
            store_damage=self.store_damage,
            calibration=self.calibration,
            # The machine's speed while bricks were timed: none were when every time was reused or disabled.
            speed=self.speed.summary() if any(not result.reused for result in self.results.values()) else None,
            load=load_summary(self.load.readings()),
        )
        if self.simulation is not None:
            self.composed = dataclasses.replace(self.composed, simulation=self.simulation.report(self.plans))
            self.messages.append((self.simulation.summary(), False))
        self.report = self.composed.as_json()
        return self.report

    def attach(self, **fields: Any) -> None:
        """Add to the composed report what the pytest layer learns of it: its conditions, the comparison."""
        assert self.composed is not None
        self.composed = dataclasses.replace(self.composed, **fields)
        self.report = self.composed.as_json()

    def _measure_run(self, load_times: bool) -> RunMeasurements:
        """The machine's peak and (``load_times``) the load time of every model with a brick timed in this run
        (not taken from the brick store); only the machine if none was."""
        timed = {signature for signature, result in self.results.items() if not result.reused}
        if not timed:
            return RunMeasurements(machine=describe_machine())
        measured = [plan.path for plan in self.plans if load_times and timed.intersection(plan.signatures)]
        return measure_run(self.settings, {path: self.model_files[path] for path in measured})

    def write_outputs(self, report: Mapping[str, Any]) -> None:
        """The suite and maps when exporting, the JSON and HTML reports when asked for; failures become messages."""
        if self.settings.export_dir is not None:
            self._export(report)
        if self.settings.json_path is not None:
            self._write(self.settings.json_path, write_json, report)
        if self.settings.html_path is not None:
            self._write(self.settings.html_path, write_text, render_html(report))

    def _write(self, path: Path, write: Callable[[Path, Any], None], content: object) -> None:
        try:
            write(path, content)
        except OSError as error:
            self.write_errors.append(f"cannot write {path}: {error.strerror or error}")
        except ValueError as error:  # a number JSON cannot hold (NaN, infinity): never written as such
            self.write_errors.append(f"cannot write {path}: {error}")
        else:
            self.written.append(path)

    def _export(self, report: Mapping[str, Any]) -> None:
        """Write the brick suite and, apart, the models' private maps."""
        suite, maps = self.settings.export_dir, self.settings.maps_dir
        assert suite is not None and maps is not None
        try:
            bricks = export_suite(
                suite, self.bricks.values(), self.settings.describe(), activations=self.settings.export_activations
            )
            models = write_maps(maps, report, self.plans)
        except OSError as error:
            self.messages.append((f"dlbricks: cannot export to {error.filename}: {error.strerror or error}", True))
            return
        except SuiteError as error:
            self.messages.append((f"dlbricks: cannot export: {error}", True))
            return
        self.messages.append(
            (
                f"dlbricks: exported {plural(bricks, 'brick')} to {suite} (the suite to share) and the maps of"
                f" {plural(models, 'model')} to {maps} (private: keep them)",
                False,
            )
        )


def _now() -> str:
    """This moment, as detections are stamped (ISO 8601, UTC)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclasses.dataclass(frozen=True)
class _Tally:
    """What some bricks of a model add: their known times as composed (``net_s``) and as measured
    (``raw_s``), and the calls' cost of those not known (``floor_s``), each as often as the model calls it."""

    net_s: float = 0.0
    raw_s: float = 0.0
    floor_s: float = 0.0

    def plus(self, other: _Tally) -> _Tally:
        return _Tally(self.net_s + other.net_s, self.raw_s + other.raw_s, self.floor_s + other.floor_s)

    def minus(self, other: _Tally) -> _Tally:
        return _Tally(self.net_s - other.net_s, self.raw_s - other.raw_s, self.floor_s - other.floor_s)


def _converter(dtype: str) -> Callable[[Any, Path], Any] | None:
    """The conversion of a model to the numeric type ``dtype``; None for the model as written."""
    return None if dtype == AS_WRITTEN else lambda model, data_dir: convert(model, dtype, data_dir)
