"""The baseline a tracked run is compared with: found among pytest-benchmark's saved runs (the latest fit to
compare with, or the one named), older runs that cover the models it lacks, and the comparison itself."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import pytest

from ..core.errors import named_error
from ..core.identity import Identity, differences, identify
from ..core.settings import Settings
from ..reporting.comparing import BLOCK_VERSION, INCONCLUSIVE_EXIT, Comparison, compare, make_block, suspects
from ..reporting.estimates import HistoryEntry
from ..simulating.simulation import valgrind_version
from ..storage.machine_info import FILE as MACHINE_INFO
from ..storage.machine_info import MachineInfoCache
from ..storage.plans import PlanCache
from ..storage.store import BrickStore, Shelf
from ..storage.store_records import StoredBrick
from ..timing.overhead import CallOverhead
from ..timing.probes import Peak
from ..timing.retiming import retime
from .session import DLBricksSession

#: Saved runs searched, beyond the latest, for one that estimated every model of this run (see
#: :meth:`Tracking._covering`): a long history is not read whole for a model that is new.
COVER_LOOKBACK = 20
#: The module of pytest-benchmark's hooks, whose machine info is kept for the machine's boot.
BENCHMARK_PLUGIN = "pytest_benchmark.plugin"


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


class Baselines:
    """A tracked run's state and its baseline: which saved run it is compared with, the runs passed over and why,
    the comparison; :class:`~.tracking.Tracking`, which extends it with its hooks, is what pytest registers."""

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
        #: Why stored bricks were timed again, not reused, by signature: the run that timed them was not trusted.
        self.timed_again_untrusted: dict[str, str] = {}
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
        #: Where the machine info is kept between runs, when it is (see :meth:`_generate_machine_info`).
        self.machine_info_cache: MachineInfoCache | None = None
        self._saved_overhead: CallOverhead | None = None
        #: The peak this run measured and saved (see :meth:`.Tracking._save_peak`).
        self._saved_peak: tuple[Peak, str] | None = None
        self.plans: PlanCache | None = None
        #: Kept plans this run removed, no run having used them for long (see :meth:`.PlanCache.prune`).
        self.pruned = 0
        #: The store's records of the collected bricks, read once when collection is over (None: none usable).
        self.stored: dict[str, StoredBrick | None] = {}

    @property
    def identity(self) -> Identity:
        if self._identity is None:
            hook = self.config.hook
            info: dict[str, Any] = {}
            if hasattr(hook, "pytest_benchmark_generate_machine_info"):
                info = self._generate_machine_info()
                self._machine_info = copy.deepcopy(info)
                hook.pytest_benchmark_update_machine_info(config=self.config, machine_info=info)
            timer = str(self.config.getoption("benchmark_timer", ""))
            self._identity = identify(info, self.settings, timer, self._valgrind())
        return self._identity

    def _valgrind(self) -> str | None:
        """The version of valgrind that counts a simulated run's bricks; None in a run that times them."""
        if self.dlbricks.run.simulation is None:
            return None
        version = valgrind_version()
        return ".".join(map(str, version)) if version else None

    def _generate_machine_info(self) -> dict[str, Any]:
        """pytest-benchmark's machine info, kept in the store for the machine's boot (see :mod:`.machine_info`)
        when pytest-benchmark's own hook is the one that makes it: a conftest's may say something else each run."""
        hook = self.config.hook.pytest_benchmark_generate_machine_info
        makers = {getattr(impl.plugin, "__name__", None) for impl in hook.get_hookimpls() if impl.plugin is not self}
        store = self.settings.store
        kept = self.machine_info_cache = (
            MachineInfoCache(store / MACHINE_INFO) if store is not None and makers == {BENCHMARK_PLUGIN} else None
        )
        info = kept.get() if kept is not None else None
        if info is None:
            info = hook(config=self.config) or {}
            if kept is not None:
                kept.put(info)
        return info

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
                model.path: self._retime([*model.changed, *model.references])
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
            elif self.comparison.cannot_tell:
                session.exitstatus = INCONCLUSIVE_EXIT

    def _retime(self, signatures: list[str]) -> dict[str, list[float]]:
        """The bricks of ``signatures`` timed again, interleaved, each as its item timed it (see :func:`.retime`)."""
        return retime(
            self.run.bricks,
            signatures,
            self.settings,
            flushes=self.run.flushes(signatures),
            colds={s: self.run.cold_inputs(s) for s in signatures if s in self.run.bricks},
            befores={s: self.run.runner_before(s) for s in signatures if s in self.run.bricks},
        )

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

    def _saving(self) -> bool:
        """Whether pytest-benchmark saves this run (where --dlbricks-compare looks for baselines)."""
        benchmarks = self.config.pluginmanager.get_plugin("pytest-benchmark")
        return bool(getattr(benchmarks, "save", None) or getattr(benchmarks, "autosave", None))
