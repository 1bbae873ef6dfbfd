"""The hooks of a run: collect model and suite files, select bricks, compose at the end, print the summary.

The work is done by the engine (:class:`~pytest_dlbricks.wiring.engine.DLBricksRun`); this plugin only
wires it to pytest.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..core.settings import Settings
from ..core.verdict import verdict_line
from ..core.wording import plural
from ..rendering.formatting import fit_lines, table_width
from ..rendering.terminal import progress_line, render_analysis, render_table
from .collector import BrickFile, FailingItem, ModelFile, shown_path
from .distributed import NO_ESTIMATES, is_controller_without_estimates, is_distributed
from .engine import DLBricksRun
from .interruption import stopped_early
from .items import signature_of
from .warning_types import DLBricksWarning


class DLBricksSession:
    """Created and registered as a plugin by ``pytest_configure`` when dlbricks is enabled.

    ``pytest_collect_file`` turns matching files into :class:`ModelFile` nodes, which cut models
    through the engine; ``pytest_collection_modifyitems`` lets ``-k`` find bricks by model and keeps
    the bricks of this shard; ``pytest_sessionfinish`` composes the report and writes it;
    ``pytest_terminal_summary`` prints it.
    """

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.run = DLBricksRun(settings, benchmark_timer(config))
        #: Whether the terminal summary was written (see :meth:`summarize`), and the verdict after it.
        self.summarized = False
        self.verdict_written = False
        #: Items lent pytest-benchmark's fixture name while it sorts benchmarks out (see :meth:`lend_benchmark_name`).
        self._lent: list[pytest.Function] = []
        #: Model files found so far, and how many of them collection has begun to cut.
        self.models_found = 0
        self.models_started = 0

    def compose(self, session: pytest.Session) -> dict[str, Any] | None:
        """The run's report, built once; None when nothing was collected, or when xdist distributes the
        run (no brick is timed then)."""
        if self.run.report is None and (not self.run.has_work() or is_distributed(self.config)):
            return None
        exitstatus = session.exitstatus
        return self.run.compose(
            partial=stopped_early(session, exitstatus),
            measure=exitstatus != pytest.ExitCode.INTERRUPTED,
            load_times=self.shows_load_times(),
        )

    def shows_load_times(self) -> bool:
        """Whether the run shows the models' load times (``-v``, the HTML report), which are measured only then."""
        return self.config.get_verbosity() > 0 or self.settings.html_path is not None

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in self.settings.globs):
            exported = self.run.exported_brick(file_path)
            if exported is not None:
                return BrickFile.from_parent(parent, path=file_path, run=self.run, entry=exported)
            self.models_found += 1
            return ModelFile.from_parent(parent, path=file_path, run=self.run)
        return None

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        """On a terminal, rewrite pytest's collecting line with the model being loaded and cut, and how many
        are left (files found so far): large models take seconds each."""
        if not isinstance(collector, ModelFile):
            return
        self.models_started += 1
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or not shows_progress(reporter, self.config.get_verbosity()):
            return
        line = progress_line(shown_path(collector), self.models_started, self.models_found, self.width())
        reporter.rewrite(line, erase=True, bold=True)
        reporter.flush()

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Let ``-k`` select a brick by the name of any model that uses it, not only the first."""
        self.lend_benchmark_name(items)
        for item in items:
            signature = signature_of(item)
            if signature is not None:
                item.extra_keyword_matches.update(Path(path).stem for path in self.run.models_using(signature))
        self._heaviest_first(items)
        if self.settings.shard is not None:
            self._keep_shard(items, *self.settings.shard)

    def lend_benchmark_name(self, items: list[pytest.Item]) -> None:
        """Under ``--benchmark-only``, brick and validation items name pytest-benchmark's fixture while it picks the
        benchmarks: it skips every item that does not name it when collected, and these ask for it when they run
        (so that one that cannot run leaves no unused fixture to warn of). :meth:`return_benchmark_name` takes the
        name back before any fixture is set up."""
        if not self.config.getoption("benchmark_only", False):
            return
        for item in items:
            if not isinstance(item, pytest.Function) or not isinstance(item.parent, ModelFile | BrickFile):
                continue
            if "benchmark" not in item.fixturenames:
                item.fixturenames.append("benchmark")
                self._lent.append(item)

    def return_benchmark_name(self) -> None:
        """Take back what :meth:`lend_benchmark_name` lent (see :meth:`.Tracking.pytest_collection_modifyitems`)."""
        for item in self._lent:
            item.fixturenames.remove("benchmark")
        self._lent.clear()

    def _heaviest_first(self, items: list[pytest.Item]) -> None:
        """Each file's bricks in the order of their expected cost, heaviest first, in the places they held.

        The first brick timed of a model must reach the run's whole precision, nothing else of the
        model being known yet, and the next ones only what their part leaves (see :mod:`.budget`): a
        heavy brick reaches it in a few rounds, where a brick of microseconds may not within
        ``--benchmark-max-time``. Files keep their order, and their items stay together.
        """
        places: dict[pytest.Collector | None, list[int]] = {}
        for index, item in enumerate(items):
            if signature_of(item) is not None:
                places.setdefault(item.parent, []).append(index)
        for indices in places.values():
            bricks = sorted((items[index] for index in indices), key=self._expected_cost, reverse=True)
            for index, item in zip(indices, bricks):
                items[index] = item

    def _expected_cost(self, item: pytest.Item) -> float:
        signature = signature_of(item)
        return self.run.expected_cost(signature) if signature is not None else 0.0

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Warn of dimensions given that no collected model has: a misspelt name would silently be left at 1."""
        for problem in self.run.unused_dims():
            try:
                session.warn(DLBricksWarning(f"dlbricks: {problem}"))
            except DLBricksWarning as error:  # warnings made errors (-W error): say it as pytest says usage errors
                raise pytest.UsageError(str(error)) from None

    def _keep_shard(self, items: list[pytest.Item], shard: int, shards: int) -> None:
        """Deselect the bricks of other shards; items that are no bricks (errors) stay on shard 1."""
        assignment = self.run.shard_assignment(shards)
        kept: list[pytest.Item] = []
        deselected: list[pytest.Item] = []
        for item in items:
            signature = signature_of(item)
            if signature is not None:
                mine = assignment[signature] == shard
            else:
                mine = shard == 1 or not isinstance(item, FailingItem)
            (kept if mine else deselected).append(item)
        if deselected:
            self.config.hook.pytest_deselected(items=deselected)
            items[:] = kept
        self.run.messages.append(
            (
                f"dlbricks: shard {shard}/{shards} benchmarks {sum(1 for s in assignment.values() if s == shard)}"
                f" of {plural(len(assignment), 'distinct brick')}; combine the shards' --dlbricks-json reports with"
                " python -m pytest_dlbricks merge",
                False,
            )
        )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        report = self.compose(session)
        if report is not None:
            self.run.write_outputs(report)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        self.summarize(terminalreporter)

    def summarize(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The table and what follows it, once: after the other summaries, or, when one of them raised
        (pytest-benchmark's ``--benchmark-compare-fail`` on a regression, where the table matters most) and
        so skipped this hook, from :class:`.tracking.Tracking`'s summary, which runs whatever happened."""
        if self.summarized:
            return
        self.summarized = True
        run, report = self.run, self.run.report
        if report is None:
            if is_controller_without_estimates(self.config):
                terminalreporter.write_line(f"dlbricks: {NO_ESTIMATES}", yellow=True)
            return
        title = f"dlbricks: granularity {self.settings.granularity}, {self.settings.statistic} brick times"
        write = self.line_writer(terminalreporter)
        verbose = terminalreporter.verbosity > 0
        if run.plans or run.failed:
            table = render_table(report, width=None if verbose else self.width(), verbose=verbose)
            terminalreporter.write_sep("-", title, fullwidth=table_width(table))
            write(table)
        else:
            terminalreporter.write_sep("-", title)
            write(
                f"{len(run.results)} of {plural(len(run.bricks), 'exported brick')} measured; estimate the models with"
                " python -m pytest_dlbricks compose --map MAPS --results <this run's --dlbricks-json report>"
            )
        if terminalreporter.verbosity >= 0:
            analysis = render_analysis(report, verbose=verbose)
            if analysis:
                write(analysis)
        if run.shared_cuts:
            write(
                f"dlbricks: {plural(len(run.shared_cuts), 'model')} took the cut of a model of the same graph,"
                " weights aside, instead of being loaded, optimized and cut again"
            )
        for text, is_error in run.messages:
            write(text, red=is_error)
        if report["partial"]:
            write(
                "dlbricks: the run stopped early; the report is partial, with the bricks measured until then",
                yellow=True,
            )
        for error in run.write_errors:
            write(f"dlbricks: {error}", red=True)
        for path in run.written:
            write(f"dlbricks: report written to {path}")

    def write_verdict(self, terminalreporter: pytest.TerminalReporter) -> None:
        """The run's last line, once: how far its estimates can be trusted (see :mod:`.verdict`)."""
        verdict = (self.run.report or {}).get("verdict")
        if self.verdict_written or not verdict:
            return
        self.verdict_written = True
        trusted = verdict.get("trusted", True) and verdict.get("margin") is not None
        self.line_writer(terminalreporter)(verdict_line(verdict), yellow=not trusted, bold=True)

    def width(self) -> int:
        """The terminal's width, as pytest's own lines take it."""
        return int(self.config.get_terminal_writer().fullwidth)

    def line_writer(self, terminalreporter: pytest.TerminalReporter) -> Callable[..., None]:
        """``write_line`` with the text's lines fitted to the terminal's width, except at ``-v``."""
        if terminalreporter.verbosity > 0:
            return terminalreporter.write_line
        width = self.width()

        def write(text: str, **markup: bool) -> None:
            terminalreporter.write_line(fit_lines(text, width), **markup)

        return write


def shows_progress(terminalreporter: pytest.TerminalReporter, verbosity: int) -> bool:
    """Whether to show progress, as pytest shows its collecting line: on a terminal, not under ``-q``, not in CI."""
    on_ci = any(os.environ.get(name) for name in ("CI", "BUILD_NUMBER"))
    return bool(terminalreporter.isatty()) and verbosity >= 0 and not on_ci


def benchmark_timer(config: pytest.Config) -> Callable[[], float]:
    """The timer pytest-benchmark times with (``--benchmark-timer``, a dotted name), as a function."""
    name = str(config.getoption("benchmark_timer", None) or "time.perf_counter")
    module, _, attribute = name.rpartition(".")
    # pytest-benchmark takes pep418.<name> for time.<name>.
    return getattr(importlib.import_module("time" if module == "pep418" else module), attribute)  # type: ignore[no-any-return]
