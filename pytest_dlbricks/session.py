"""The run's state: models cut, distinct bricks, their times; composes and reports at session end."""

from __future__ import annotations

import dataclasses
import fnmatch
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .analysis import BrickWork, RunMeasurements, annotate, plan_work
from .bricks import BrickSpec, UnbuildableBrick, describe_brick
from .clock import PausableClock
from .collector import BrickFile, FailingItem, ModelFile
from .cutting import ModelPlan, plan_model
from .distributed import is_distributed
from .errors import ModelError
from .html import render_html
from .interruption import stopped_early
from .loading import load_model
from .overhead import CallOverhead
from .plans import CutModel, PlanCache
from .report import BrickResult, FailedModel, build_report
from .settings import Settings
from .store import write_json, write_text
from .sweeps import AS_WRITTEN, SweepPoint, sweep_points
from .terminal import render_analysis, render_table
from .validation import BrickRounds, Validation, has_parallel_branches, rounds_for

#: pytest-benchmark statistics kept per brick.
KEPT_STATS = ("min", "max", "mean", "median", "stddev", "iqr", "q1", "q3", "rounds")
#: Confidence level of ``--dlbricks-precision``'s margin of error.
PRECISION_CONFIDENCE = 0.95


class DLBricksSession:
    """Created and registered as a plugin by ``pytest_configure`` when dlbricks is enabled.

    ``pytest_collect_file`` turns matching files into :class:`ModelFile` nodes, which call
    :meth:`add_model`; brick items record their times through :meth:`brick_test`;
    ``pytest_sessionfinish`` composes the report and ``pytest_terminal_summary`` prints it.
    """

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.plans: list[ModelPlan] = []
        self.failed: list[FailedModel] = []
        #: Distinct bricks by signature, in the order they were first met.
        self.bricks: dict[str, BrickSpec] = {}
        self.results: dict[str, BrickResult] = {}
        #: Validations by model path and executor.
        self.validations: dict[tuple[str, str], Validation] = {}
        #: Cost of one inference call on this machine, measured before the first timing.
        self.overhead: CallOverhead | None = None
        self.started = time.perf_counter()
        #: FLOPs and bytes of each distinct brick's layers, by signature.
        self.work: dict[str, BrickWork] = {}
        #: Model files by report path, for measuring their load time.
        self.model_files: dict[str, Path] = {}
        self.report: dict[str, object] | None = None
        #: Models cut in earlier runs, set by the brick store when it is on.
        self.plan_cache: PlanCache | None = None
        self.write_errors: list[str] = []
        self.written: list[Path] = []
        #: The points every model is benchmarked at (one, unless dimensions or numeric types are swept).
        self.points: list[SweepPoint] = sweep_points(settings.dims, settings.sweep, settings.dtypes)
        #: Bricks the providers cannot run at their types, with the reason, found when run.
        self.unsupported: dict[str, str] = {}
        #: Nodes run by each provider, for the bricks whose run was profiled.
        self.placements: dict[str, dict[str, int]] = {}
        #: Manifests of exported suites by folder (None: the folder holds no suite; an error: unreadable).
        self.manifests: dict[Path, dict[str, dict[str, Any]] | Exception | None] = {}
        #: Timers that leave out the rewriting of a brick's inputs, by pytest-benchmark timer.
        self.clocks: dict[Callable[[], float], PausableClock] = {}
        #: Lines for the terminal summary after the table: (text, is an error).
        self.messages: list[tuple[str, bool]] = []

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in self.settings.globs):
            exported = self._exported_brick(file_path)
            if exported is not None:
                return BrickFile.from_parent(parent, path=file_path, dlbricks=self, entry=exported)
            return ModelFile.from_parent(parent, path=file_path, dlbricks=self)
        return None

    def _exported_brick(self, path: Path) -> dict[str, Any] | None:
        """The manifest entry of a brick file of an exported suite; an unreadable manifest gives an error entry."""
        from .suite import SuiteError, read_manifest

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
        return True

    def add_model(
        self, path: Path, display_path: str, point: SweepPoint | None = None
    ) -> tuple[ModelPlan, list[BrickSpec]]:
        """Cut the model at ``path`` at ``point``, or take it from the plan cache; returns its plan and the
        bricks no earlier model had."""
        point = point or self.points[0]
        name = display_path + point.suffix
        cut = self.plan_cache.get(path, display_path, point) if self.plan_cache is not None else None
        if cut is None:
            cut = self._cut(path, display_path, point)
            if self.plan_cache is not None:
                self.plan_cache.put(path, point, cut)
        plan = cut.plan
        self.plans.append(plan)
        self.model_files[name] = path
        new_bricks = []
        for brick in plan.bricks:
            if isinstance(brick, BrickSpec) and brick.signature not in self.bricks:
                self.bricks[brick.signature] = brick
                new_bricks.append(brick)
        self.work.update({brick.signature: cut.work[brick.signature] for brick in new_bricks})
        return plan, new_bricks

    def _cut(self, path: Path, display_path: str, point: SweepPoint) -> CutModel:
        from .numerics import convert, float32_work

        name = display_path + point.suffix
        optimize = self.settings if self.settings.cut == "optimized" else None
        dtype = point.dtype
        to_dtype = None if dtype == AS_WRITTEN else lambda model, data_dir: convert(model, dtype, data_dir)
        try:
            graph = load_model(path, point.dims, optimize, to_dtype)
        except ModelError as error:
            self.failed.append(FailedModel(name, error.cause))
            raise
        plan = plan_model(graph, self.settings.granularity, name)
        plan.file, plan.point = display_path, point.describe()
        if dtype == "fp16":
            reasons = {i: float32_work(b) for i, b in enumerate(plan.bricks) if isinstance(b, BrickSpec)}
            plan.unsupported = {index: reason for index, reason in reasons.items() if reason is not None}
        if self.settings.validate:
            try:
                plan.whole = describe_brick(graph, 0, len(graph.layers))
            except UnbuildableBrick:
                plan.whole = None  # its e2e item says why it cannot run
        return CutModel(plan, plan_work(graph, plan))

    def models_using(self, signature: str) -> dict[str, int]:
        return {plan.path: plan.signatures[signature] for plan in self.plans if signature in plan.signatures}

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

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Let ``-k`` select a brick by the name of any model that uses it, not only the first."""
        for item in items:
            signature = getattr(item.obj, "dlbricks_signature", None) if isinstance(item, pytest.Function) else None
            if signature is not None:
                item.extra_keyword_matches.update(Path(path).stem for path in self.models_using(signature))
        if self.settings.shard is not None:
            self._keep_shard(items)

    def _keep_shard(self, items: list[pytest.Item]) -> None:
        """Deselect the bricks of other shards; items that are no bricks (errors) stay on shard 1."""
        from .sharding import assign, brick_cost

        shard, shards = self.settings.shard or (1, 1)
        assignment = assign({signature: brick_cost(brick) for signature, brick in self.bricks.items()}, shards)
        kept: list[pytest.Item] = []
        deselected: list[pytest.Item] = []
        for item in items:
            signature = getattr(item.obj, "dlbricks_signature", None) if isinstance(item, pytest.Function) else None
            if signature is not None:
                mine = assignment[signature] == shard
            else:
                mine = shard == 1 or not isinstance(item, FailingItem)
            (kept if mine else deselected).append(item)
        if deselected:
            self.config.hook.pytest_deselected(items=deselected)
            items[:] = kept
        self.messages.append(
            (
                f"dlbricks: shard {shard}/{shards} benchmarks {sum(1 for s in assignment.values() if s == shard)}"
                f" of {len(assignment)} distinct bricks; combine the shards' --dlbricks-json reports with"
                " python -m pytest_dlbricks merge",
                False,
            )
        )

    def brick_test(self, signature: str) -> Callable[..., None]:
        """The test function of one distinct brick: builds it, checks it, times it with pytest-benchmark."""

        def test_brick(request: pytest.FixtureRequest) -> None:
            from .running import BrickError, BrickRunner, UnsupportedByProvider

            brick = self.bricks[signature]
            unsupported = self.unsupported_wherever_used(signature)
            if unsupported is not None:
                pytest.skip(f"brick {brick.label} is not supported here: {unsupported}")
            try:
                runner = BrickRunner(brick, self.settings)
                runner.check()
            except UnsupportedByProvider as error:
                self.unsupported[signature] = str(error)
                pytest.skip(f"brick {brick.label} is not supported here: {error}")
            except BrickError as error:
                users = ", ".join(self.models_using(signature))
                # from None: the message says it all, pytest would otherwise show the exception chain.
                raise pytest.fail.Exception(f"brick {brick.label} (used by {users}): {error}", pytrace=False) from None
            if runner.placement is not None:
                self.placements[signature] = runner.placement.providers
            # Requested only now, so that a brick that cannot run leaves pytest-benchmark no unused fixture to warn of.
            benchmark = request.getfixturevalue("benchmark")
            self._measure_overhead()
            benchmark.extra_info.update(
                {"signature": signature, "ops": list(brick.ops), "models": self.models_using(signature)}
            )
            clock = self._clock(benchmark)

            def call() -> None:
                clock.untimed(runner.rewrite_inputs)
                runner()

            benchmark(call)
            if benchmark.stats:
                stats = benchmark.stats.stats
                self.results[signature] = BrickResult(
                    stats={name: float(getattr(stats, name)) for name in KEPT_STATS}, provider=runner.provider
                )

        test_brick.dlbricks_signature = signature  # type: ignore[attr-defined]
        return test_brick

    def _clock(self, benchmark: Any) -> PausableClock:
        """pytest-benchmark's timer for this item, made to leave out the rewriting of inputs.

        One clock per timer for the whole run: pytest-benchmark measures a timer's precision once.
        """
        timer = benchmark._timer
        if not isinstance(timer, PausableClock):
            timer = benchmark._timer = self.clocks.setdefault(timer, PausableClock(timer))
        return timer

    def executors_to_validate(self, plan: ModelPlan) -> list[str]:
        """The sequential executor always; the parallel one where the model has branches to overlap."""
        return ["sequential", "parallel"] if has_parallel_branches(plan) else ["sequential"]

    def timing_marks(self) -> list[pytest.MarkDecorator]:
        """pytest-benchmark settings for brick items: rounds until precise, unless the user set a precision."""
        if self.settings.precision is None or self.config.getoption("benchmark_precision", None) is not None:
            return []
        return [pytest.mark.benchmark(precision=self.settings.precision, confidence=PRECISION_CONFIDENCE)]

    def e2e_test(self, plan: ModelPlan, executor: str) -> Callable[..., None]:
        """The test function timing a whole model, each round right after timing its bricks again."""

        def test_model(request: pytest.FixtureRequest) -> None:
            from .running import BrickError, BrickRunner, UnsupportedByProvider

            if plan.unsupported:
                pytest.skip(f"{plan.path}: {len(plan.unsupported)} of its bricks are not supported here; no estimate")
            if plan.whole is None:
                pytest.fail(
                    f"{plan.path}: the model's outputs are not all tensors; it cannot be timed whole", pytrace=False
                )
            try:
                model = BrickRunner(plan.whole, self.settings, parallel=executor == "parallel", whole_model=True)
                model.check()
                runners = {
                    signature: BrickRunner(self.bricks[signature], self.settings) for signature in plan.signatures
                }
            except UnsupportedByProvider as error:
                pytest.skip(f"{plan.path}: the whole model is not supported here: {error}")
            except BrickError as error:
                raise pytest.fail.Exception(
                    f"{plan.path}: cannot time the whole model: {error}", pytrace=False
                ) from None
            benchmark = request.getfixturevalue("benchmark")
            bricks = BrickRounds(runners, model)
            self._measure_overhead(parallel=executor == "parallel")
            start = time.perf_counter()
            model()
            bricks()
            rounds = rounds_for(time.perf_counter() - start)
            benchmark.extra_info.update({"model": plan.path, "executor": executor})
            benchmark.pedantic(model, setup=bricks, rounds=rounds, warmup_rounds=1)
            if benchmark.stats:
                self.validations[(plan.path, executor)] = Validation(
                    executor, list(benchmark.stats.stats.data), bricks.rounds
                )

        return test_model

    def _measure_overhead(self, *, parallel: bool = False) -> None:
        from .overhead import measure_call_overhead, measure_parallel_fixed_cost

        if self.overhead is None:
            self.overhead = measure_call_overhead(self.settings)
        if parallel and self.overhead.parallel_fixed_s is None:
            self.overhead = dataclasses.replace(
                self.overhead, parallel_fixed_s=measure_parallel_fixed_cost(self.settings)
            )

    def compose(self, session: pytest.Session, exitstatus: int) -> dict[str, object] | None:
        """The report of the bricks timed so far, built once; None when nothing was collected, or when
        xdist distributes the run (no brick is timed then)."""
        from . import recomposition

        if self.report is not None:
            return self.report
        if (not self.plans and not self.failed and not self.bricks) or is_distributed(self.config):
            return None
        measured = self._measure_run() if exitstatus != pytest.ExitCode.INTERRUPTED else None
        report = build_report(
            self.settings,
            self.plans,
            self.failed,
            self.bricks,
            self.results,
            overhead=self.overhead,
            validations=self.validations,
            wall_time_s=time.perf_counter() - self.started,
            partial=stopped_early(session, exitstatus),
        )
        self.report = annotate(report, self.work, measured)
        recomposition.annotate(
            self.report,
            self.plans,
            unsupported=self.unsupported,
            placements=self.placements,
        )
        return self.report

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        report = self.compose(session, exitstatus)
        if report is None:
            return
        if self.settings.export_dir is not None:
            self._export(report)
        if self.settings.json_path is not None:
            self._write(self.settings.json_path, write_json, report)
        if self.settings.html_path is not None:
            self._write(self.settings.html_path, write_text, render_html(report))

    def _measure_run(self) -> RunMeasurements | None:
        """The machine's peak and the load time of every model with a brick timed in this run (not taken
        from the brick store); None if none was."""
        timed = {signature for signature, result in self.results.items() if not result.reused}
        if not timed:
            return None
        from .probes import measure_run

        measured = [plan.path for plan in self.plans if timed.intersection(plan.signatures)]
        return measure_run(self.settings, {path: self.model_files[path] for path in measured})

    def _write(self, path: Path, write: Callable[[Path, Any], None], content: object) -> None:
        try:
            write(path, content)
        except OSError as error:
            self.write_errors.append(f"cannot write {path}: {error.strerror or error}")
        else:
            self.written.append(path)

    def _export(self, report: dict[str, object]) -> None:
        """Write the brick suite and, apart, the models' private maps."""
        from .maps import write_maps
        from .suite import export_suite

        suite, maps = self.settings.export_dir, self.settings.maps_dir
        assert suite is not None and maps is not None
        try:
            bricks = export_suite(suite, self.bricks.values(), self.settings.describe())
            models = write_maps(maps, report, self.plans)
        except OSError as error:
            self.messages.append((f"dlbricks: cannot export to {error.filename}: {error.strerror or error}", True))
            return
        self.messages.append(
            (
                f"dlbricks: exported {bricks} bricks to {suite} (the suite to share) and the maps of {models}"
                f" models to {maps} (private: keep them)",
                False,
            )
        )

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.report is None:
            return
        settings = self.settings
        terminalreporter.write_sep(
            "-", f"dlbricks: granularity {settings.granularity}, {settings.statistic} brick times"
        )
        if self.plans or self.failed:
            terminalreporter.write_line(render_table(self.report))
        else:
            terminalreporter.write_line(
                f"{len(self.results)} of {len(self.bricks)} exported bricks measured; estimate the models with"
                " python -m pytest_dlbricks compose --map MAPS --results <this run's --dlbricks-json report>"
            )
        if terminalreporter.verbosity >= 0:
            analysis = render_analysis(self.report, verbose=terminalreporter.verbosity > 0)
            if analysis:
                terminalreporter.write_line(analysis)
        for text, is_error in self.messages:
            terminalreporter.write_line(text, red=is_error)
        if self.report["partial"]:
            terminalreporter.write_line(
                "dlbricks: the run stopped early; the report is partial, with the bricks measured until then",
                yellow=True,
            )
        for error in self.write_errors:
            terminalreporter.write_line(f"dlbricks: {error}", red=True)
        for path in self.written:
            terminalreporter.write_line(f"dlbricks: report written to {path}")
