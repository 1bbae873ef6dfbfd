"""The run's state: models cut, distinct bricks, their times; composes and reports at session end."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .bricks import BrickSpec
from .collector import ModelFile
from .cutting import ModelPlan, plan_model
from .errors import ModelError
from .loading import load_model
from .reporting import BrickResult, FailedModel, build_report, render_table, write_json
from .settings import Settings

#: pytest-benchmark statistics kept per brick.
KEPT_STATS = ("min", "max", "mean", "median", "stddev", "iqr", "rounds")


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
        self.report: dict[str, object] | None = None
        self.write_error: str | None = None

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in self.settings.globs):
            return ModelFile.from_parent(parent, path=file_path, dlbricks=self)
        return None

    def add_model(self, path: Path, display_path: str) -> tuple[ModelPlan, list[BrickSpec]]:
        """Cut the model at ``path``; returns its plan and the bricks no earlier model had."""
        try:
            graph = load_model(path, self.settings.dims)
        except ModelError as error:
            self.failed.append(FailedModel(display_path, error.cause))
            raise
        plan = plan_model(graph, self.settings.granularity, display_path)
        self.plans.append(plan)
        new_bricks = []
        for brick in plan.bricks:
            if isinstance(brick, BrickSpec) and brick.signature not in self.bricks:
                self.bricks[brick.signature] = brick
                new_bricks.append(brick)
        return plan, new_bricks

    def models_using(self, signature: str) -> dict[str, int]:
        return {plan.path: plan.signatures[signature] for plan in self.plans if signature in plan.signatures}

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Let ``-k`` select a brick by the name of any model that uses it, not only the first."""
        for item in items:
            signature = getattr(item.obj, "dlbricks_signature", None) if isinstance(item, pytest.Function) else None
            if signature is not None:
                item.extra_keyword_matches.update(Path(path).stem for path in self.models_using(signature))

    def brick_test(self, signature: str) -> Callable[..., None]:
        """The test function of one distinct brick: builds it, checks it, times it with pytest-benchmark."""

        def test_brick(benchmark: Any) -> None:
            from .running import BrickError, BrickRunner

            brick = self.bricks[signature]
            try:
                runner = BrickRunner(brick, self.settings)
                runner.check()
            except BrickError as error:
                users = ", ".join(self.models_using(signature))
                pytest.fail(f"brick {brick.label} (used by {users}): {error}", pytrace=False)
            benchmark.extra_info.update(
                {"signature": signature, "ops": list(brick.ops), "models": self.models_using(signature)}
            )
            benchmark(runner)
            if benchmark.stats:
                stats = benchmark.stats.stats
                self.results[signature] = BrickResult(
                    stats={name: float(getattr(stats, name)) for name in KEPT_STATS}, provider=runner.provider
                )

        test_brick.dlbricks_signature = signature  # type: ignore[attr-defined]
        return test_brick

    def pytest_sessionfinish(self) -> None:
        if not self.plans and not self.failed:
            return
        self.report = build_report(self.settings, self.plans, self.failed, self.bricks, self.results)
        if self.settings.json_path is not None:
            try:
                write_json(self.settings.json_path, self.report)
            except OSError as error:
                self.write_error = f"cannot write {self.settings.json_path}: {error.strerror or error}"

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.report is None:
            return
        settings = self.settings
        terminalreporter.write_sep(
            "-", f"dlbricks: granularity {settings.granularity}, {settings.statistic} brick times"
        )
        terminalreporter.write_line(render_table(self.report))
        if self.write_error is not None:
            terminalreporter.write_line(f"dlbricks: {self.write_error}", red=True)
        elif settings.json_path is not None:
            terminalreporter.write_line(f"dlbricks: report written to {settings.json_path}")
