"""Runs tracked over time: brick times reused from the store, estimates in pytest-benchmark's histories, the gate.

The work is done by pure modules (:mod:`.store`, :mod:`.identity`, :mod:`.estimates`, :mod:`.comparing`);
this plugin only wires them to pytest and pytest-benchmark.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from .comparing import (
    BLOCK_VERSION,
    INCONCLUSIVE_EXIT,
    Comparison,
    compare,
    make_block,
    render_comparison,
    render_inconclusive,
    render_regressions,
    suspects,
)
from .composition import brick_calls
from .cutting import ModelPlan
from .errors import named_error
from .estimates import PREFIX, SPREAD, EstimateCheck, HistoryEntry, model_estimates, reused_brick
from .file_digests import FileDigests
from .identity import Identity, differences, identify
from .items import signature_of
from .noise import CONFIDENCE, HIGH_NOISE, at_confidence, margin_of_error
from .overhead import CallOverhead
from .plans import PlanCache
from .probes import detection_conditions
from .report import BrickResult
from .retiming import retime
from .session import DLBricksSession
from .settings import Settings
from .simulation import valgrind_version
from .store import BrickStore, ModelManifest, Shelf, StoredBrick, StoredExecutor
from .terminal import table_width
from .wording import counted, plural

#: Saved runs searched, beyond the latest, for one that estimated every model of this run (see
#: :meth:`Tracking._covering`): a long history is not read whole for a model that is new.
COVER_LOOKBACK = 20


class Tracking:
    """Created and registered as a plugin by ``pytest_configure`` next to :class:`DLBricksSession`.

    ``pytest_sessionstart`` identifies the machine and settings (pytest-benchmark's machine_info), opens
    the store's shelf for them and loads the saved run to compare with, refusing an incompatible one;
    ``pytest_collection_modifyitems`` reads the shelf's records of the collected bricks once, hands the
    session the times fit to reuse and deselects their items; ``pytest_runtest_makereport`` saves each
    brick time the moment it is measured;
    ``pytest_sessionfinish`` adds per-model estimates and reused bricks to pytest-benchmark's benchmarks,
    compares the estimates, re-times suspects and decides the gate (exit status 1 on a regression,
    :data:`~pytest_dlbricks.comparing.INCONCLUSIVE_EXIT` when the noise is too high to tell);
    ``pytest_benchmark_update_json`` adds the ``dlbricks`` block to saved runs; ``pytest_terminal_summary``
    prints what the store did, the comparison and the gate's decision.
    """

    def __init__(self, config: pytest.Config, settings: Settings, dlbricks: DLBricksSession) -> None:
        self.config = config
        self.settings = settings
        self.dlbricks = dlbricks
        self.run = dlbricks.run
        #: The store and its shelf for this machine and settings, when brick times are saved and reused.
        self.store: BrickStore | None = None
        self.shelf: Shelf | None = None
        #: Name and ``dlbricks`` block of the saved run to compare with.
        self.baseline: tuple[str, Mapping[str, Any]] | None = None
        self.comparison: Comparison | None = None
        #: Conditions that differ from the baseline's, when the user asked to compare anyway.
        self.mismatches: list[str] = []
        self.notes: list[str] = []
        self.reused_at: list[datetime] = []
        #: pytest-benchmark's entries for the bricks reused from the store, so their histories have no holes.
        self.reused_entries: list[HistoryEntry] = []
        #: Saved runs passed over as the latest baseline, with why (see :func:`_no_baseline_because`).
        self.passed_over: list[tuple[str, str]] = []
        #: The gate found nothing to compare with: this run, saved, becomes the baseline.
        self.first_baseline = False
        #: Spread statistics that pytest-benchmark's --benchmark-compare-fail checks, which estimates do not have.
        self.spread_checks: list[str] = []
        self.saved = 0
        self.store_error: str | None = None
        self._identity: Identity | None = None
        self._machine_info: dict[str, Any] | None = None
        self._saved_overhead: CallOverhead | None = None
        self.plans: PlanCache | None = None
        #: The store's records of the collected bricks, read once when collection is over (None: none usable).
        self.stored: dict[str, StoredBrick | None] = {}

    @property
    def identity(self) -> Identity:
        if self._identity is None:
            hook = self.config.hook
            info: dict[str, Any] = {}
            if hasattr(hook, "pytest_benchmark_generate_machine_info"):
                info = hook.pytest_benchmark_generate_machine_info(config=self.config) or {}
                self._machine_info = copy.deepcopy(info)
                hook.pytest_benchmark_update_machine_info(config=self.config, machine_info=info)
            timer = str(self.config.getoption("benchmark_timer", ""))
            self._identity = identify(info, self.settings, timer, self._valgrind())
        return self._identity

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def _valgrind(self) -> str | None:
        """The version of valgrind that counts a simulated run's bricks; None in a run that times them."""
        if self.dlbricks.run.simulation is None:
            return None
        version = valgrind_version()
        return ".".join(map(str, version)) if version else None

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
        if self.settings.compare is not None and not self.config.option.collectonly:
            self.baseline = self._load_baseline(benchmarks.storage)

    def _load_baseline(self, storage: Any) -> tuple[str, Mapping[str, Any]] | None:
        """The saved run to compare with, through pytest-benchmark's storage; refuses one of other conditions."""
        which = str(self.settings.compare)
        path = self.config.invocation_params.dir / which
        if which == "latest":
            runs = _newest_first(storage)
        elif which.isdigit():
            runs = storage.load(f"{int(which):04d}")
        elif path.suffix == ".json" and path.is_file():
            runs = storage.load(str(path))
        else:
            raise pytest.UsageError(
                f"--dlbricks-compare: {which!r} is neither the number of a saved run nor its .json file."
                " A value right after --dlbricks-compare is taken as the run:"
                " write --dlbricks-compare=NUM, or put it after the paths."
            )
        usable = ((str(name), data["dlbricks"]) for name, data in runs if isinstance(data.get("dlbricks"), Mapping))
        baseline = None
        for name, block in usable:
            reason = _no_baseline_because(block, self.settings.statistic) if which == "latest" else None
            if reason is not None:
                self.passed_over.append((name, reason))
                continue
            damage = _damage_of(block, self.settings.statistic) if which != "latest" else None  # checked above
            if damage is not None:
                raise pytest.UsageError(f"--dlbricks-compare: {name} is damaged ({damage}); name another run")
            baseline = name, block
            break
        if baseline is None:
            runs_named = "no saved run" if which == "latest" else f"no saved run {which}"
            usable_runs = " fit to be a baseline" if self.passed_over else ""
            message = f"{runs_named}{usable_runs} with dlbricks estimates in {storage}"
            if self.settings.compare_fail is not None and which != "latest":
                raise pytest.UsageError(f"--dlbricks-compare-fail cannot gate anything: {message}.")
            if self.settings.compare_fail is not None and not self._saving():
                raise pytest.UsageError(
                    f"--dlbricks-compare-fail cannot gate anything: {message}, and this run is not saved"
                    " to become one. Add --benchmark-autosave (or --benchmark-save=NAME)."
                )
            if self.settings.compare_fail is not None:
                self.first_baseline = True
                self.notes.append(f"no baseline yet ({message}): this run is saved as the baseline; the gate passes")
            else:
                self.notes.append(f"nothing to compare with: {message}")
            return None
        name, block = baseline
        if _high_noise(block) or _untrusted(block.get("report") or {}):
            why = "measured under high noise" if _high_noise(block) else UNTRUSTED
            self.notes.append(f"{name} {why}; it is compared with only because it was named")
        if block.get("version") != BLOCK_VERSION:
            raise pytest.UsageError(f"--dlbricks-compare: {name} was saved by another version of pytest-dlbricks")
        mismatches = differences(self.identity.conditions(self.settings), block)
        if mismatches and not self.settings.compare_incompatible:
            raise pytest.UsageError(
                f"dlbricks will not compare with {name}: it ran under other conditions ({'; '.join(mismatches)})."
                " Compare runs of the same machine and settings, or pass --dlbricks-compare-incompatible."
            )
        self.mismatches = mismatches
        return name, block

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Read the store's times of the collected bricks, once, and deselect the bricks it has a time fit to
        reuse, as ``-k`` deselects (after it and the other selections): their times go into the report, and
        pytest runs nothing for them. What the store knows of every model also decides how precisely the
        bricks timed anew must be (see :mod:`.budget`). ``--collect-only`` lists every brick collected."""
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
            )
            self.shelf.put(brick)
            self._save_overhead(self.shelf)
        except OSError as error:
            self.store_error = f"cannot save brick times in {self._store_name()}: {error.strerror or error}"
            return
        self.saved += 1

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
        return {"discarded": discarded, "repaired": dict(self.shelf.repaired + self.store.repaired)}

    def _compare(self, report: dict[str, Any], session: pytest.Session) -> None:
        assert self.baseline is not None
        if self.settings.compare == "latest":
            self.baseline = self._covering(self.baseline, report)
        name, block = self.baseline
        now = make_block(report, self.identity.conditions(self.settings))
        statistic, threshold = self.settings.statistic, self.settings.compare_fail
        try:
            first = compare(now, block, baseline=name, statistic=statistic, threshold=threshold)
            # A model whose bricks changed is judged on them timed again, interleaved with its references; simulated
            # costs have no noise to wait out, and are judged as they are.
            retimed = {
                model.path: retime(self.run.bricks, [*model.changed, *model.references], self.settings)
                for model in (suspects(first) if self.run.simulation is None else [])
            }
            self.comparison = (
                compare(now, block, baseline=name, statistic=statistic, threshold=threshold, retimed=retimed)
                if retimed
                else first
            )
        except _BLOCK_DAMAGE as error:  # damage only judging a changed brick reads (its rounds, its spread)
            self.notes.append(f"cannot compare with {name}: it is damaged ({named_error(error)})")
            if threshold is not None and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = INCONCLUSIVE_EXIT
            return
        self.run.attach(comparison=self.comparison.as_dict())
        if session.exitstatus == pytest.ExitCode.OK:
            if self.comparison.regressions:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            elif self.comparison.inconclusive:
                session.exitstatus = INCONCLUSIVE_EXIT

    def _covering(
        self, baseline: tuple[str, Mapping[str, Any]], report: Mapping[str, Any]
    ) -> tuple[str, Mapping[str, Any]]:
        """The latest baseline that has an estimate of every model this run estimated: a run of some of the
        models (``-k``, a sub-folder), saved, would leave the others new or incomplete in the comparison, and
        ungated. Where the latest lacks some, older runs fit to be baselines are read, up to
        :data:`COVER_LOOKBACK`, and the newest that has every model any of them has is taken (a model none
        of them has is new)."""
        estimated = _complete(report)
        if estimated <= _complete(baseline[1].get("report") or {}):
            return baseline
        candidates = [(baseline, _complete(baseline[1].get("report") or {}))]
        for older in self._older_baselines(baseline[0]):
            candidates.append((older, _complete(older[1].get("report") or {})))
        known = estimated & set().union(*(has for _, has in candidates))
        for candidate, has in candidates:
            if known <= has:
                if candidate is not baseline:
                    missing = sorted(known - candidates[0][1])
                    self.passed_over.append((baseline[0], f"no estimate of {', '.join(missing)}"))
                    self.mismatches = []  # an older run is taken only under the same conditions
                return candidate
        return baseline

    def _older_baselines(self, latest: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Saved runs older than ``latest`` that are fit to be baselines, newest first, at most
        :data:`COVER_LOOKBACK`."""
        benchmarks = self.config.pluginmanager.get_plugin("pytest-benchmark")
        assert benchmarks is not None  # a baseline was loaded through it
        conditions, older, found = self.identity.conditions(self.settings), False, 0
        for name, data in _newest_first(benchmarks.storage):
            block = data.get("dlbricks")
            if not older:
                older = str(name) == latest
                continue
            if not isinstance(block, Mapping) or _no_baseline_because(block, self.settings.statistic):
                continue
            if block.get("version") != BLOCK_VERSION or differences(conditions, block):
                continue
            yield str(name), block
            found += 1
            if found >= COVER_LOOKBACK:
                return

    def _save_models(self, store: BrickStore, shelf: Shelf) -> None:
        """Keep each model's bricks in the store, so that its estimate can be composed for any machine later,
        and the calibration models this run measured."""
        if self.store_error is not None:
            return
        try:
            self._save_overhead(shelf)
            self._save_executor(shelf)
            for plan in self.run.plans:
                store.save_model(manifest_of(plan, self.settings))
            for record in self.run.composed.calibration_records if self.run.composed is not None else ():
                shelf.put_calibration(record)
        except OSError as error:
            self.store_error = f"cannot save models in {self._store_name()}: {error.strerror or error}"

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
        elif self.comparison.threshold is not None:
            write(f"dlbricks: gate passed: no model's changed bricks make it {self.comparison.threshold:.0%} slower")

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

    def _saving(self) -> bool:
        """Whether pytest-benchmark saves this run (where --dlbricks-compare looks for baselines)."""
        benchmarks = self.config.pluginmanager.get_plugin("pytest-benchmark")
        return bool(getattr(benchmarks, "save", None) or getattr(benchmarks, "autosave", None))

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
    """The time limit a brick item ran out of before reaching the precision its mark asked for, if it did."""
    marker = item.get_closest_marker("benchmark")
    asked = marker.kwargs.get("precision") if marker is not None else None
    limit = marker.kwargs.get("max_time", item.config.getoption("benchmark_max_time", None)) if marker else None
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


#: What comparing with a damaged ``dlbricks`` block (edited, or written by a broken tool) raises.
_BLOCK_DAMAGE = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, ZeroDivisionError)


def _damage_of(block: Mapping[str, Any], statistic: str) -> str | None:
    """What makes a saved run's ``dlbricks`` block unreadable to the comparison, or None: it is compared with
    itself, which reads every model and brick the way a comparison does."""
    if block.get("version") != BLOCK_VERSION:
        return None  # refused as another version's, which says more
    try:
        if not isinstance(block.get("report"), Mapping):
            raise TypeError("no report")
        compare(block, block, baseline="", statistic=statistic, threshold=None)
    except _BLOCK_DAMAGE as error:
        return named_error(error)
    return None


def _complete(report: Mapping[str, Any]) -> set[str]:
    """The models of a report with a complete estimate."""
    return {str(model["path"]) for model in report.get("models", []) if model.get("complete")}


def _high_noise(block: Mapping[str, Any]) -> bool:
    """Whether a saved run was marked as measured under high noise."""
    return bool((block.get("report") or {}).get("summary", {}).get("high_noise"))


def _untrusted(report: Mapping[str, Any]) -> bool:
    """Whether a run's own verdict does not trust its estimates (its threads lost their cores)."""
    verdict = report.get("verdict")
    return isinstance(verdict, Mapping) and verdict.get("trusted") is False


#: Why a run whose verdict does not trust its estimates is no baseline.
UNTRUSTED = "ran under a load its verdict does not trust"


#: Why runs the gate judged are passed over (see :func:`_no_baseline_because`).
JUDGED = ("failed the gate", "the gate was inconclusive")
#: Runs passed over that the terminal names; the others are counted.
PASSED_OVER_SHOWN = 5


def _no_baseline_because(block: Mapping[str, Any], statistic: str) -> str | None:
    """Why a saved run is no latest baseline, or None: the gate compares with the last run that passed it. A run
    that failed the gate or could not tell, saved as CI saves every run, would otherwise let the next run pass
    the same regression; a run stopped early holds only what it measured until then; a damaged one cannot be
    read."""
    damage = _damage_of(block, statistic)
    if damage is not None:
        return f"damaged: {damage}"
    report = block.get("report") or {}
    comparison = report.get("comparison") or {}
    if comparison.get("failed"):
        return JUDGED[0]
    if comparison.get("inconclusive"):
        return JUDGED[1]
    if report.get("partial"):
        return "stopped early"
    if _high_noise(block):
        return "measured under high noise"
    if _untrusted(report):
        return UNTRUSTED
    return None


def _newest_first(storage: Any) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Saved runs from the newest, read one at a time: a long history is not parsed whole to find its end."""
    query = getattr(storage, "query", None)
    if query is None:  # a storage that only loads everything, such as Elasticsearch
        yield from reversed(list(storage.load()))
        return
    for path in reversed(query("[0-9][0-9][0-9][0-9]_")):
        yield from storage.load(str(path))
