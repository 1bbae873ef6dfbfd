"""Runs tracked over time: brick times reused from the store, estimates in pytest-benchmark's histories, the gate.

The work is done by pure modules (:mod:`.store`, :mod:`.identity`, :mod:`.estimates`, :mod:`.comparing`);
this plugin only wires them to pytest and pytest-benchmark.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from ..core.noise import CONFIDENCE, HIGH_NOISE, at_confidence, margin_of_error
from ..core.settings import Settings
from ..core.verdict import own_parts
from ..core.wording import counted, plural
from ..cut.cutting import ModelPlan
from ..estimating.composition import brick_calls
from ..rendering.formatting import table_width
from ..reporting.comparing import (
    INCONCLUSIVE_EXIT,
    make_block,
    render_comparison,
    render_inconclusive,
    render_not_timed,
    render_regressions,
)
from ..reporting.entries import BrickResult
from ..reporting.estimates import PREFIX, SPREAD, EstimateCheck, model_estimates, reused_brick
from ..storage.file_digests import FileDigests
from ..storage.plans import UNUSED_FOR_S, PlanCache
from ..storage.store import BrickStore, Shelf
from ..storage.store_records import ModelManifest, StoredBrick, StoredExecutor, StoredPeak, StoredRun
from ..timing.neighbours import TIMING_METHOD, follows
from ..timing.probes import detection_conditions
from ..timing.speed_trace import known_fast_s
from .baselines import JUDGED, PASSED_OVER_SHOWN, Baselines, _untrusted
from .items import TIME_LIMIT, signature_of


class Tracking(Baselines):
    """Created and registered as a plugin by ``pytest_configure`` next to :class:`DLBricksSession`.

    ``pytest_sessionstart`` identifies the machine and settings (pytest-benchmark's machine_info), opens
    the store's shelf for them and loads the saved run to compare with, refusing an incompatible one;
    ``pytest_collection_modifyitems`` reads the shelf's records of the collected bricks once, hands the
    session the times fit to reuse and deselects their items; ``pytest_runtest_makereport`` saves each
    brick time the moment it is measured;
    ``pytest_sessionfinish`` adds per-model estimates and reused bricks to pytest-benchmark's benchmarks,
    compares the estimates, re-times suspects and decides the gate (exit status 1 on a regression,
    :data:`~pytest_dlbricks.reporting.comparing.INCONCLUSIVE_EXIT` when the noise is too high to tell);
    ``pytest_benchmark_update_json`` adds the ``dlbricks`` block to saved runs; ``pytest_terminal_summary``
    prints what the store did, the comparison and the gate's decision.
    """

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_benchmark_generate_machine_info(self) -> dict[str, Any] | None:
        """The machine info generated for the identity, so py-cpuinfo runs once when pytest-benchmark saves too."""
        return copy.deepcopy(self._machine_info)

    def pytest_sessionstart(self) -> None:
        benchmarks = self.config.pluginmanager.get_plugin("pytest-benchmark")
        if benchmarks is None:
            return
        if benchmarks.compare_fail:
            benchmarks.compare_fail = [EstimateCheck(check) for check in benchmarks.compare_fail]
            self.spread_checks = sorted({check.field for check in benchmarks.compare_fail if check.field in SPREAD})
        if self.settings.store is not None and not (benchmarks.disabled or benchmarks.skip):
            self.store = BrickStore(self.settings.store)
            self.shelf = self.store.shelf(self.identity)
            digests = FileDigests(self.shelf.path / "files")
            self.plans = PlanCache(self.shelf.path / "plans", self.settings, digests)
            self.run.use_plan_cache(self.plans)
            try:
                self.shelf.repair()
            except OSError as error:
                self.store_error = f"cannot repair {self._store_name()}: {error.strerror or error}"
            self.run.calibration = self.shelf.calibration()
            self.run.stored_runs = self.shelf.get_runs()
            self.run.speed.known_fast_s = known_fast_s(run.fast_s for run in self.run.stored_runs)
            if not self.settings.remeasure and self.run.overhead is None:
                # Reused brick times compose with the call overhead measured beside them.
                saved = self.shelf.get_overhead()
                self._saved_overhead = saved
                self.run.assume_overhead(self._saved_overhead)
            if not self.settings.remeasure:
                # The parallel executor's detection takes most of a second: made once per machine and settings.
                stored = self.shelf.get_executor(self._executor_conditions())
                if stored is not None:
                    self.run.stored_executor = stored.detection, stored.measured_at.isoformat(timespec="seconds")
                # So is the machine's peak, a quarter of a second of every run that times a brick.
                peak = self.shelf.get_peak()
                if peak is not None:
                    self.run.stored_peak = peak.peak, peak.measured_at.isoformat(timespec="seconds")
                self.run.peak_lost = "machine peak" in self.shelf.discarded
        if self.settings.compare is not None and not self.config.option.collectonly:
            self.baseline = self._load_baseline(benchmarks.storage)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Read the store's times of the collected bricks, once, and deselect the bricks it has a time fit to
        reuse, as ``-k`` deselects (after it and the other selections): their times go into the report, and
        pytest runs nothing for them. What the store knows of every model also decides how precisely the
        bricks timed anew must be (see :mod:`.budget`). ``--collect-only`` lists every brick collected."""
        self.dlbricks.return_benchmark_name()
        if self.shelf is None or self.settings.remeasure or self.config.option.collectonly:
            return
        statistic = self.settings.statistic
        for signature in self.run.bricks:
            stored = self.shelf.get(signature, max_age_s=self.settings.max_age_s, statistic=statistic)
            self.stored[signature] = stored
            if stored is not None:
                self.run.know_time(signature, float(stored.stats[statistic]))
        kept: list[pytest.Item] = []
        reused: list[pytest.Item] = []
        for item in items:
            brick = signature_of(item)
            (reused if brick is not None and self._reuse(item, brick) else kept).append(item)
        if reused:
            self.config.hook.pytest_deselected(items=reused)
            items[:] = kept

    def _reuse(self, item: pytest.Item, signature: str) -> bool:
        """Take a brick's stored time into the run if it is fresh and precise enough (or ran out of a time
        limit at least this run's); the bricks reused before it count in its models' known part, as they
        would had their items run."""
        stored = self.stored.get(signature)
        limit = self._time_limit()
        # A simulated cost is a count: exact, whatever precision times are asked for.
        exact = self.run.simulation is not None
        if stored is None or not (
            stored.precise_enough(None if exact else self._precision(signature, stored.stats, stored.probe_s))
            or (limit is not None and stored.timed_out_within(limit))
        ):
            return False
        if stored.cache_flush_bytes is None and self.run.flush_bytes(signature):
            return False  # timed with its weights in the caches, before they were pushed out (see :mod:`.caches`)
        if stored.cold_input_bytes is None and self.run.cold_inputs(signature) is not None:
            return False  # timed with every input in the caches, before its cold inputs were copied
        if stored.timing_method < TIMING_METHOD and self.run.bricks_before(signature) and follows(stored.probe_s):
            return False  # timed alone, before its calls followed the brick before it (see :mod:`.neighbours`)
        untrusted = self.run.untrusted_run_at(stored.measured_at)
        if untrusted is not None:  # timed under a load its run's verdict did not trust
            self.timed_again_untrusted[signature] = untrusted
            return False
        self.run.record_result(
            signature,
            BrickResult(
                stats=stored.stats,
                provider=stored.provider,
                measured_at=stored.measured_at.isoformat(timespec="seconds"),
                reused=True,
                probe_s=stored.probe_s,
                reference_s=stored.reference_s,
            ),
        )
        self.reused_at.append(stored.measured_at)
        extra_info = {
            "signature": signature,
            "ops": list(self.run.bricks[signature].ops),
            "models": self.run.models_using(signature),
            "measured_at": stored.measured_at.isoformat(timespec="seconds"),
        }
        self.reused_entries.append(reused_brick(item.name, item.nodeid, stored.stats, extra_info))
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> None:
        """Save a brick's time as soon as it is measured, so an interrupted run keeps it."""
        signature = signature_of(item)
        if call.when != "call" or signature is None or self.shelf is None or self.store_error is not None:
            return
        result = self.run.results.get(signature)
        if result is None or result.reused:
            return
        now = datetime.now(UTC).replace(microsecond=0)
        self.run.mark_measured_at(signature, now.isoformat())
        label = self.run.bricks[signature].label
        try:
            reached = margin_of_error(result.stats)
            brick = StoredBrick(
                signature,
                label,
                result.stats,
                result.provider,
                now,
                reached,
                _timed_out(item, reached),
                result.probe_s,
                result.reference_s,
                self.run.flush_bytes(signature) or None,
                cold.distance if (cold := self.run.cold_inputs(signature)) is not None else None,
                timing_method=TIMING_METHOD,
            )
            self.shelf.put(brick)
            self._save_overhead(self.shelf)
            self._save_peak(self.shelf)
        except OSError as error:
            self.store_error = f"cannot save brick times in {self._store_name()}: {error.strerror or error}"
            return
        self.saved += 1

    def _save_peak(self, shelf: Shelf) -> None:
        """Keep the peak the session measured, once, with the first brick timed against it. The bricks' rounds
        were sized by it (see :meth:`.RunState.least_work_s`): kept only at the session's end, a run killed
        before then would leave the next run none to size them by, and it would time them again."""
        measured = self.run.measured_peak
        if measured is not None and measured is not self._saved_peak:
            peak, measured_at = measured
            shelf.put_peak(StoredPeak(peak, datetime.fromisoformat(measured_at)))
            self._saved_peak = measured

    def _save_overhead(self, shelf: Shelf) -> None:
        """Keep the call overhead the session measured, as estimates compose with it."""
        overhead = self.run.overhead
        if overhead is not None and overhead != self._saved_overhead:
            shelf.put_overhead(overhead)
            self._saved_overhead = overhead

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        """Before pytest-benchmark saves and displays its runs: add the estimates, compare, decide the outcome.

        A run whose bricks all came from the store ran no item, which pytest calls "no tests collected" (exit
        status 5): it composed every estimate, a success."""
        if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and self.reused_at:
            session.exitstatus = pytest.ExitCode.OK
        if self.shelf is not None and self.run.report is None:
            self._measure_lost_overhead(session)
            self.run.store_damage = self._damage()
        report = self.dlbricks.compose(session)
        if report is not None:
            benchmarks = self.config.pluginmanager.get_plugin("pytest-benchmark")
            if benchmarks is not None:
                self.run.attach(conditions=self.identity.conditions(self.settings))
                report = self.run.report
                assert report is not None
                # No public way adds a benchmark pytest-benchmark did not time: its session's list is what
                # it saves, compares and displays (see estimates.HistoryEntry).
                benchmarks.benchmarks.extend([*model_estimates(report), *self.reused_entries])
            if self.baseline is not None:
                self._compare(report, session)
            # A model is kept once it was run: after --collect-only the store's report would list it
            # as if its estimate were coming (the plans kept while collecting only spare a later cut).
            if self.store is not None and self.shelf is not None and not self.config.option.collectonly:
                self._save_models(self.store, self.shelf)
        if self.plans is not None and not self.config.option.collectonly:
            self.pruned = self.plans.prune()
        return (yield)

    def _measure_lost_overhead(self, session: pytest.Session) -> None:
        """Brick times reused without the call overhead measured beside them (its record damaged or
        removed) would compose without taking it off: measure it now, and keep it for the next run."""
        # A simulated run's call cost is counted, never timed: one lost is counted again with the next new brick.
        simulated = self.run.simulation is not None
        if (
            self.reused_at
            and self.run.overhead is None
            and not simulated
            and session.exitstatus != pytest.ExitCode.INTERRUPTED
        ):
            self.run.measure_overhead()
            assert self.shelf is not None
            self.shelf.repaired["call overhead"] += 1

    def _damage(self) -> dict[str, dict[str, int]]:
        """The store's damaged records this run met: discarded (and measured or cut again), or repaired."""
        assert self.shelf is not None and self.store is not None
        discarded = dict(self.shelf.discarded)
        if self.plans is not None and self.plans.discarded:
            discarded["plans"] = self.plans.discarded
        if self.plans is not None and self.plans.digests.discarded:
            discarded["model file digests"] = self.plans.digests.discarded
        if self.machine_info_cache is not None and self.machine_info_cache.discarded:
            discarded["machine descriptions"] = self.machine_info_cache.discarded
        return {"discarded": discarded, "repaired": dict(self.shelf.repaired + self.store.repaired)}

    def _save_models(self, store: BrickStore, shelf: Shelf) -> None:
        """Keep each model's bricks in the store, so that its estimate can be composed for any machine later,
        and the calibration models this run measured."""
        if self.store_error is not None:
            return
        try:
            self._save_overhead(shelf)
            self._save_executor(shelf)
            self._save_run(shelf)
            self._save_peak(shelf)
            for plan in self.run.plans:
                store.save_model(manifest_of(plan, self.settings))
            for record in self.run.composed.calibration_records if self.run.composed is not None else ():
                shelf.put_calibration(record)
        except OSError as error:
            self.store_error = f"cannot save models in {self._store_name()}: {error.strerror or error}"

    def _save_run(self, shelf: Shelf) -> None:
        """Keep what this run found of the machine while it timed bricks, for the runs that reuse them to say."""
        stamps = [
            datetime.fromisoformat(r.measured_at) for r in self.run.results.values() if r.measured_at and not r.reused
        ]
        if stamps and self.run.report is not None:
            speed, load, memory = own_parts(self.run.report)
            verdict = self.run.report.get("verdict") or {}
            untrusted = (
                str(verdict.get("reason") or "its threads lost their cores")
                if not verdict.get("trusted", True)
                else None
            )
            fast = self.run.speed.own_fast_s()
            shelf.put_run(StoredRun(min(stamps), max(stamps), speed, load, memory, fast, untrusted))

    def _save_executor(self, shelf: Shelf) -> None:
        """Keep the parallel executor's detection this run made, for the next runs to use."""
        run = self.run
        if run.executor is not None and not run.executor_reused and run.executor_measured_at is not None:
            measured_at = datetime.fromisoformat(run.executor_measured_at)
            shelf.put_executor(StoredExecutor(run.executor, measured_at, self._executor_conditions()))

    def _executor_conditions(self) -> dict[str, Any]:
        """What a stored detection must have been made under, besides the shelf's machine and settings."""
        return {"identity": self.identity.key, **detection_conditions()}

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_json(self, output_json: dict[str, Any]) -> None:
        """Put the ``dlbricks`` block (conditions and report) into every run pytest-benchmark saves."""
        if self.run.report is not None:
            output_json["dlbricks"] = make_block(self.run.report, self.identity.conditions(self.settings))

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Generator[None, None, None]:
        """After the other summaries, the session's table included: what the store did, the comparison."""
        try:
            return (yield)
        finally:
            self.dlbricks.summarize(terminalreporter)
            self._summarize(terminalreporter)
            self.dlbricks.write_verdict(terminalreporter)

    def _summarize(self, terminalreporter: pytest.TerminalReporter) -> None:
        write = self.dlbricks.line_writer(terminalreporter)
        if self.reused_at or self.saved:
            write(f"dlbricks: {self._store_use()}")
        if self.timed_again_untrusted:
            count = len(self.timed_again_untrusted)
            why = "; ".join(sorted(set(self.timed_again_untrusted.values())))
            write(
                f"dlbricks: {plural(count, 'stored brick time')} not reused: the run that measured"
                f" {'it' if count == 1 else 'them'} could not be trusted ({why}); timed again",
                yellow=True,
            )
        if self.pruned:
            days = UNUSED_FOR_S // (24 * 3600)
            removed = plural(self.pruned, "cut model")
            write(f"dlbricks: {removed} no run used for {days} days removed from store {self._store_name()}")
        damage = self.run.store_damage or {}
        if any(damage.values()):
            write(f"dlbricks: store {self._store_name()}: {describe_damage(damage)}", yellow=True)
        if self.store_error is not None:
            write(f"dlbricks: {self.store_error}", yellow=True)
        for note in self.notes:
            write(f"dlbricks: {note}", yellow=True)
        if self.passed_over:
            shown = "; ".join(f"{name} ({why})" for name, why in self.passed_over[:PASSED_OVER_SHOWN])
            more = len(self.passed_over) - PASSED_OVER_SHOWN
            write(f"dlbricks: passed over as baselines: {shown}{f'; and {more} more' if more > 0 else ''}")
            if any(why in JUDGED for _, why in self.passed_over):
                write(
                    "dlbricks: a run that failed the gate or could not tell is no baseline; to accept its changes,"
                    " compare once with it by number (--dlbricks-compare=NUM), in a run of every model"
                )
        self._summarize_noise(write)
        if self.spread_checks and any(model.get("complete") for model in (self.run.report or {}).get("models", [])):
            write(
                f"dlbricks: --benchmark-compare-fail on {' and '.join(self.spread_checks)} passes over the"
                f" {PREFIX} estimates: one composed value has no spread; --dlbricks-compare-fail gates them"
            )
        if self.comparison is None:
            return
        table = render_comparison(self.comparison)
        terminalreporter.write_sep(
            "-",
            f"dlbricks: {self.comparison.statistic} estimates compared with {self.comparison.baseline}",
            fullwidth=table_width(table),
        )
        write(table)
        if self.mismatches:
            write(f"dlbricks: compared although {'; '.join(self.mismatches)}", yellow=True)
        if self.comparison.regressions:
            write("dlbricks: performance regression:", red=True, bold=True)
            for line in render_regressions(self.comparison).splitlines():
                write(f"  {line}", red=True)
        elif self.comparison.inconclusive:
            write(
                f"dlbricks: inconclusive (exit status {INCONCLUSIVE_EXIT}): the machine is too noisy for a"
                f" {self.comparison.threshold or 0.0:.0%} threshold; run again on a quieter machine or raise it:",
                yellow=True,
                bold=True,
            )
            for line in render_inconclusive(self.comparison).splitlines():
                write(f"  {line}", yellow=True)
            if self.comparison.too_noisy and self.settings.intra_op_threads != 1:
                write(
                    "dlbricks: on a machine shared with other work, --dlbricks-threads=1 keeps a busy core out of"
                    " the bricks' timing: onnxruntime then never waits for a second core that the other work holds",
                    yellow=True,
                )
        elif self.comparison.threshold is not None and not self.comparison.not_timed:
            write(f"dlbricks: gate passed: no model's changed bricks make it {self.comparison.threshold:.0%} slower")
        if self.comparison.not_timed:
            status = "" if self.comparison.regressions else f" (exit status {INCONCLUSIVE_EXIT})"
            write(f"dlbricks: cannot tell{status} whether these models are slower:", yellow=True, bold=True)
            for line in render_not_timed(self.comparison).splitlines():
                write(f"  {line}", yellow=True)

    def _summarize_noise(self, write: Any) -> None:
        """Say when this run measured under high noise, and that it will not serve as a baseline."""
        summary = (self.run.report or {}).get("summary", {})
        if summary.get("high_noise"):
            write(
                f"dlbricks: this run measured under high noise (bricks' typical spread {summary['noise']:.0%},"
                f" above {HIGH_NOISE:.0%}): it is marked so and --dlbricks-compare will not take it as a baseline",
                yellow=True,
            )
        elif _untrusted(self.run.report or {}) and self._saving():
            write("dlbricks: --dlbricks-compare will not take this run as a baseline: see its verdict", yellow=True)

    def _store_use(self) -> str:
        """What the store did, in words that tie it to pytest's count of deselected items."""
        store = self._store_name()
        measured = f"{plural(self.saved, 'brick')} measured in this run and saved"
        if not self.reused_at:
            return f"{measured} to store {store}"
        oldest, newest = (when.strftime("%Y-%m-%d %H:%M UTC") for when in (min(self.reused_at), max(self.reused_at)))
        reused = len(self.reused_at)
        return (
            f"{plural(reused, 'brick time')} reused from store {store}, measured"
            f" {oldest if oldest == newest else f'from {oldest} to {newest}'}"
            f" ({'its item' if reused == 1 else 'their items'} deselected; --dlbricks-remeasure times them again);"
            f" {measured}"
        )

    def _precision(self, signature: str, stats: Mapping[str, float], probe_s: float | None) -> float | None:
        """The precision a stored brick must have reached to be reused: pytest-benchmark's own when given (at
        its confidence), for every brick; else dlbricks', loosened by the brick's part in its models (see
        :mod:`.budget`) as when it was timed: sized from the same time (``probe_s``, see
        :func:`.items._budget_rounds`; else its fastest round), its models' other bricks known as far as this
        run has come, or all of them, whichever asks less. Asked otherwise, a brick that had just met its
        precision fell short of it and re-runs timed it again: sized from its mean, which outliers raise, every
        re-run; from its fastest round, which averages a round's calls, and with every brick known, which for
        a model's first brick dilutes the part of the model's own call (a cost without error), one re-run in
        three or four."""
        own = self.config.getoption("benchmark_precision", None)
        if own is not None:
            return at_confidence(float(own), float(self.config.getoption("benchmark_confidence", None) or CONFIDENCE))
        target, fastest = self.settings.precision, probe_s or stats.get("min", stats.get("mean"))
        if target is None or fastest is None:
            return target
        seconds = float(fastest)
        return max(
            self.run.brick_precision(signature, seconds, target),
            self.run.brick_precision(signature, seconds, target, stored=False),
        )

    def _time_limit(self) -> float | None:
        """The time limit a brick item gets in this run when dlbricks' precision decides its rounds
        (``--benchmark-max-time``); None when pytest-benchmark's own settings do."""
        if self.config.getoption("benchmark_precision", None) is not None or self.settings.precision is None:
            return None
        return float(self.config.getoption("benchmark_max_time", None) or 1.0)

    def _store_name(self) -> str:
        """The store folder as the user gave it: relative to where pytest started when it is below it."""
        store = self.settings.store
        assert store is not None
        try:
            return str(store.relative_to(self.config.invocation_params.dir))
        except ValueError:
            return str(store)


def _timed_out(item: pytest.Item, reached: float | None) -> float | None:
    """The time limit a brick item ran out of before reaching the precision its mark asked for, if it did: the user's,
    not the shorter one pytest-benchmark was handed (see :data:`.items.TIME_LIMIT`)."""
    marker = item.get_closest_marker("benchmark")
    asked = marker.kwargs.get("precision") if marker is not None else None
    limit = item.stash.get(TIME_LIMIT, None)
    if limit is None and marker is not None:
        limit = marker.kwargs.get("max_time", item.config.getoption("benchmark_max_time", None))
    if asked is None or limit is None or reached is None or reached <= float(asked) * (1 + 1e-9):
        return None
    return float(limit)


def describe_damage(damage: Mapping[str, Mapping[str, int]]) -> str:
    """``discarded 2 damaged records (2 brick times, measured again); repaired identity``."""
    parts = []
    discarded = damage.get("discarded") or {}
    if discarded:
        kinds = ", ".join(counted(count, kind) for kind, count in sorted(discarded.items()))
        parts.append(f"discarded {plural(sum(discarded.values()), 'damaged record')} ({kinds}), measured or cut again")
    repaired = damage.get("repaired") or {}
    if repaired:
        parts.append(
            "repaired "
            + ", ".join(f"{kind}" + (f" ({count})" if count > 1 else "") for kind, count in sorted(repaired.items()))
        )
    return "; ".join(parts)


def manifest_of(plan: ModelPlan, settings: Settings) -> ModelManifest:
    """What the store keeps of a model cut into bricks."""
    return ModelManifest(
        path=plan.path,
        granularity=settings.granularity,
        # The sweep point's sizes (every dimension, swept or not); a plan without a point, the settings'.
        dims={name: size for name, size in plan.point.items() if isinstance(size, int)} or dict(settings.dims),
        layers=plan.layers,
        windows=tuple(brick_calls(plan)),
        edges=tuple((int(a), int(b)) for a, b in plan.graph.edges),
        io=plan.io,
    )
