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

from ..core.clock import time_calls
from ..core.errors import ModelError, RuntimeRefusal, describe_error, named_error
from ..core.sweeps import AS_WRITTEN, SweepPoint
from ..core.wording import plural
from ..cut.bricks import BrickSpec
from ..cut.cutting import ModelPlan, plan_model
from ..cut.loading import load_model, whole_model
from ..cut.numerics import convert, float32_work
from ..cut.samples import SampleInputs, find_samples, from_hook
from ..estimating.analysis import BrickWork, plan_work
from ..rendering.formatting import format_seconds
from ..rendering.html import render_html
from ..reporting.entries import FailedModel
from ..reporting.maps import write_maps
from ..reporting.report import build_report
from ..reporting.suite import SuiteError, export_suite, read_manifest
from ..storage.atomic_files import write_json, write_text
from ..storage.plans import CutModel, PlanCache
from ..storage.store_records import StoredRun
from ..timing.load import load_summary
from ..timing.neighbours import follows
from ..timing.overhead import measure_call_overhead, measure_parallel_costs, parallel_ceiling
from ..timing.probes import (
    RunMeasurements,
    describe_machine,
    detect_executor,
    measure_peak,
    measure_run,
    with_pool_slowdown,
)
from ..timing.retiming import TimedAgain, again_by_model, time_again
from ..timing.running import BrickError, BrickRunner, ModelRunner
from .run_state import RunState

#: Share of a run's time so far that timing its bricks again at its end is budgeted: a model begun there is finished up
#: to :data:`.retiming.AGAIN_OVERRUN` times it (see :meth:`DLBricksRun._time_again`).
AGAIN_SHARE = 0.1


def readable(name: str) -> str:
    """A file name as text every report can hold: the bytes of a name that is not UTF-8, which Python
    keeps as lone surrogates that no UTF-8 file can hold, are written ``\\xff``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _call_s(runner: BrickRunner, calls: int = 2) -> float:
    """The fastest of a few calls of a brick not timed yet: the first of a runner pays its allocations."""
    return min(time_calls(runner, calls))


def unforeseen(error: Exception) -> str:
    """Why a model failed with an error no check foresaw, in the words of its ``::load`` item and report."""
    return f"cannot be read ({named_error(error)})"


class DLBricksRun(RunState):
    """Created by :class:`~pytest_dlbricks.wiring.session.DLBricksSession` for one pytest session.

    ``timer`` is the timer pytest-benchmark times bricks with; :attr:`clock` wraps it so that the
    rewriting of a brick's inputs is left out of the brick's time.
    """

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

    def add_exported_brick(
        self,
        brick: BrickSpec,
        reads: tuple[float | None, int] = (None, 0),
        input_distances: tuple[int, ...] = (),
        work: BrickWork | None = None,
    ) -> bool:
        """Register a brick read from a suite file, with its FLOPs, what the rest of its model reads, how far
        its inputs were written before it (see :func:`.suite.exported_reads`) and its layers' work where the suite
        gives it; False when the same brick was met before."""
        if brick.signature in self.bricks:
            return False
        self.bricks[brick.signature] = brick
        if work is not None:
            self.work[brick.signature] = work
        self.exported.add(brick.signature)
        self.exported_reads[brick.signature] = reads
        self.exported_distances[brick.signature] = input_distances
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
        except ModelError as error:
            self.failed.append(FailedModel(name, error.cause))
            raise
        except Exception as error:  # an input no check foresaw: the report lists the model with it, as any
            self.failed.append(FailedModel(name, unforeseen(error)))
            raise

    def _add_model(
        self, path: Path, display_path: str, point: SweepPoint, hooked: object, name: str
    ) -> tuple[ModelPlan, list[BrickSpec]]:
        sample = self._sample_inputs(path, hooked)
        digest = sample.digest() if sample is not None else None
        cut = self.plan_cache.get(path, display_path, point, digest)
        if cut is None:
            try:
                cut = self._cut_or_share(path, display_path, point, sample, digest)
            except RuntimeRefusal as error:
                self.plan_cache.put_refusal(path, point, error.cause, digest)
                raise
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
        graph = load_model(path, point.dims, optimize, _converter(dtype), sample, self.settings.granularity)
        plan = plan_model(graph, self.settings.granularity, name)
        plan.file, plan.point = display_path, point.describe(plan.sampled_dims)
        if sample is not None:
            plan.inputs = sample.source
        if dtype == "fp16":
            reasons = {i: float32_work(b) for i, b in enumerate(plan.bricks) if isinstance(b, BrickSpec)}
            plan.unsupported = {index: reason for index, reason in reasons.items() if reason is not None}
        return CutModel(plan, plan_work(graph, plan))

    def already_optimized(self, signature: str) -> bool:
        """Whether a brick was cut by this run from the graph onnxruntime optimized for its settings."""
        return self.settings.cut == "optimized" and signature not in self.exported

    def brick_runner(self, signature: str, at_hand: Mapping[str, BrickRunner] | None = None) -> BrickRunner:
        """A distinct brick ready to time, its synthetic weights shared with the run's other bricks, each call after
        one of the brick before it (see :meth:`runner_before`; ``at_hand``: runners to take it from first); raises
        :class:`~.running.BrickError`."""
        runner = BrickRunner(
            self.bricks[signature],
            self.settings,
            optimized=self.already_optimized(signature),
            shared=self.shared_weights,
            flush=self.flushes([signature]).get(signature),
            cold=self.cold_inputs(signature),
            before=self.runner_before(signature, at_hand or {}),
        )
        if follows(self.fastest_s(signature)):  # kept for the brick after it; one not brief only holds memory
            self.recent_runners.add(signature, runner)
        return runner

    def runner_before(self, signature: str, at_hand: Mapping[str, BrickRunner] | None = None) -> BrickRunner | None:
        """A runner of the brick before ``signature`` in its models (see :mod:`.neighbours`): one ``at_hand`` or
        built last where there is one, else a new one; None where it has none, where it or ``signature`` is not
        brief (see :func:`.neighbours.follows`), or where none of them can run here."""
        if not follows(self.fastest_s(signature)):
            return None
        before = [
            candidate
            for candidate in self.bricks_before(signature)
            if candidate not in self.not_before and follows(self.fastest_s(candidate))
        ]
        for candidate in before:
            found = (at_hand or {}).get(candidate) or self.recent_runners.get(candidate)
            if found is not None and self._brief(candidate, found):
                return found
        for candidate in before:
            if candidate in self.not_before:  # found above, and not brief
                continue
            try:
                runner = BrickRunner(
                    self.bricks[candidate],
                    self.settings,
                    optimized=self.already_optimized(candidate),
                    shared=self.shared_weights,
                )
                runner.check()
            except BrickError:  # its own item says why; the brick after it is timed without it
                self.not_before.add(candidate)
                continue
            if self._brief(candidate, runner):
                self.recent_runners.add(candidate, runner)
                return runner
        return None

    def _brief(self, signature: str, runner: BrickRunner) -> bool:
        """Whether a brick not known to be long is brief enough to precede another (see :func:`.neighbours.follows`):
        by its fastest call this run knows, else by a few calls of ``runner``; one that is not is remembered in
        :attr:`not_before`."""
        brief = follows(self.fastest_s(signature) or _call_s(runner))
        if not brief:
            self.not_before.add(signature)
        return brief

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

    # Measuring

    def measure_overhead(self, *, parallel: bool = False) -> None:
        """Measure the cost of a call once, before the first timing: also where a call cost stored by an
        older run lacks the reference call's time, which the bricks timed now are scaled by (bricks it
        was measured with compose with it unscaled either way); and (``parallel``) the parallel executor's,
        when the call cost in use lacks it or its cost per layer, or holds one beyond
        :func:`.overhead.parallel_ceiling` (stored by a version that did not bound it)."""
        if self.overhead is None or (self.overhead.reference_s is None and not self.overhead_measured):
            self.overhead = measure_call_overhead(self.settings)
            self.overhead_measured = True
        stored = self.overhead.parallel_fixed_s
        if parallel and (
            stored is None or self.overhead.parallel_layer_s is None or stored > parallel_ceiling(self.overhead)
        ):
            costs = measure_parallel_costs(self.settings, self.overhead)
            self.overhead = dataclasses.replace(
                self.overhead,
                parallel_fixed_s=None if costs is None else costs.fixed_s,
                parallel_layer_s=None if costs is None else costs.layer_s,
            )

    def measure_peak(self) -> None:
        """Measure the machine's peak once, before the first timing, where the brick store keeps none: the bricks
        not timed yet count in their models at their FLOPs at it (see :meth:`.RunState.least_work_s`), and the
        report takes it instead of measuring it at the end. A peak that cannot be measured leaves them
        uncounted; the report's own measurement says why."""
        if self.known_peak is not None or self.peak_tried or self.simulation is not None:
            return
        self.peak_tried = True
        try:
            self.measured_peak = measure_peak(self.settings), _now()
        except Exception:  # onnxruntime's exception types are not part of its API; the report measures again
            return

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

    # Composing and writing

    def compose(self, *, partial: bool, measure: bool, load_times: bool = True) -> dict[str, Any]:
        """The report of the bricks timed so far, built once; ``partial`` marks a run stopped early,
        ``measure`` asks for the machine's peak (not after an interrupt), and with ``load_times`` the
        models' load times: one session per model, as much as benchmarking the model whole costs to start."""
        if self.report is not None:
            return self.report
        # Simulated costs need no peak, load times nor executor: nothing of this machine's is timed.
        measure = measure and self.simulation is None
        if measure and not partial and not self.settings.validate:
            self._time_again()
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
            reused_from=self._reused_from(),
            memory=self._memory_reads(),
            timed_again=self.timed_again,
            timed_again_s=self.timed_again_s,
        )
        if self.simulation is not None:
            self.composed = dataclasses.replace(self.composed, simulation=self.simulation.report(self.plans))
            self.messages.append((self.simulation.summary(), False))
        self.report = self.composed.as_json()
        return self.report

    def _time_again(self) -> None:
        """Time each brick this run timed once more (see :func:`.time_again`), in the machine's fast state as its item
        was, model by model from the smallest estimate, within about :data:`AGAIN_SHARE` of the run's time so far
        (see :func:`.again_by_model`): models of microseconds, which move furthest from run to run, cost least to
        time again. A brick that cannot run again is left out. Validation times the bricks again beside each model
        instead."""
        statistic = self.settings.statistic
        timed = {signature for signature, result in self.results.items() if not result.reused}

        def size(plan: ModelPlan) -> float:
            return sum(count * self.results[s].stats[statistic] for s, count in plan.signatures.items() if s in timed)

        def time_one(signature: str) -> None:
            try:
                runner = self.brick_runner(signature)
                runner.check()
                reference = self.speed.settled()
                self.timed_again[signature] = TimedAgain(time_again(runner), reference)
            except Exception:  # it ran in its item: whatever fails now leaves its time as it was
                return

        models = [[s for s in plan.signatures if s in timed] for plan in sorted(self.plans, key=size)]
        start = time.perf_counter()
        again_by_model(models, time_one, AGAIN_SHARE * (start - self.started))
        self.timed_again_s = time.perf_counter() - start

    def _memory_reads(self) -> dict[str, Any] | None:
        """How fast memory was read before the calls of the bricks this run timed with their weights out of the
        caches, with the largest part such bricks make of a model's estimate (see :meth:`.CacheFlusher.summary`)."""
        statistic = self.settings.statistic
        flushed = {
            signature for signature, result in self.results.items() if not result.reused and self.flush_bytes(signature)
        }
        if not flushed:
            return None
        share = 0.0
        for plan in self.plans:
            times = {
                signature: count * self.results[signature].stats[statistic]
                for signature, count in plan.signatures.items()
                if signature in self.results
            }
            total = sum(times.values())
            if total > 0:
                share = max(share, sum(seconds for signature, seconds in times.items() if signature in flushed) / total)
        return self.flusher.summary(share)

    def untrusted_run_at(self, when: datetime) -> str | None:
        """Why the stored run that timed a brick at ``when`` was not trusted; None where it was, or is unknown."""
        run = self._stored_run_at(when.replace(microsecond=0))
        return None if run is None else run.untrusted

    def _stored_run_at(self, when: datetime | None) -> StoredRun | None:
        """The stored run that timed a brick at ``when`` (to the second): the newest covering it, since a run begun
        in the second the one before it ended shares that second, and the store holds each brick's last timing."""
        return next((run for run in reversed(self.stored_runs) if when and run.covers(when)), None)

    def _reused_from(self) -> dict[str, Any] | None:
        """What the runs that timed the reused bricks found of the machine (see :attr:`.Summary.reused_from`)."""
        reused = [result.measured_at for result in self.results.values() if result.reused]
        if not reused:
            return None
        runs = [self._stored_run_at(datetime.fromisoformat(when) if when else None) for when in reused]
        known = [run for run in runs if run is not None]
        speeds = [run.speed for run in known if run.speed is not None]
        loads = [run.load for run in known if run.load is not None]
        memories = [run.memory for run in known if run.memory is not None]
        return {
            "bricks": len(reused),
            "known": len(known),
            "speed": max(speeds, default=None),
            "load": max(loads, default=None),
            "memory": max(memories, default=None),
        }

    def attach(self, **fields: Any) -> None:
        """Add to the composed report what the pytest layer learns of it: its conditions, the comparison."""
        assert self.composed is not None
        self.composed = dataclasses.replace(self.composed, **fields)
        self.report = self.composed.as_json()

    def _measure_run(self, load_times: bool) -> RunMeasurements:
        """The machine's peak (kept in the brick store, else measured before the first timing or now) and
        (``load_times``) the load time of every model with a brick timed in this run (not taken from the brick
        store); only the machine if none was, unless the stored peak was found damaged: it is measured again,
        so that it is repaired."""
        timed = {signature for signature, result in self.results.items() if not result.reused}
        if not timed and not self.peak_lost:
            return RunMeasurements(machine=describe_machine())
        measured = [plan.path for plan in self.plans if load_times and timed.intersection(plan.signatures)]
        files = {path: self.model_files[path] for path in measured}
        if self.stored_peak is not None:  # the report says when it was measured
            peak, measured_at = self.stored_peak
            return measure_run(
                self.settings, files, dataclasses.replace(peak, method={**peak.method, "measured_at": measured_at})
            )
        if self.measured_peak is not None:  # before the first timing (see :meth:`measure_peak`)
            return measure_run(self.settings, files, self.measured_peak[0])
        result = measure_run(self.settings, files)
        if result.peak is not None:
            self.measured_peak = result.peak, _now()
        return result

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
                suite,
                self.bricks.values(),
                self.settings.describe(),
                activations=self.settings.export_activations,
                reads={signature: self.reads(signature) for signature in self.bricks},
                input_distances={signature: self.input_distances(signature) for signature in self.bricks},
                work=self.work,
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


def _converter(dtype: str) -> Callable[[Any, Path], Any] | None:
    """The conversion of a model to the numeric type ``dtype``; None for the model as written."""
    return None if dtype == AS_WRITTEN else lambda model, data_dir: convert(model, dtype, data_dir)
