"""pytest nodes: a model file collects one benchmark item per brick it is the first to use; a suite's
brick file, one item for its brick."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from ..core.errors import ModelError
from ..core.sweeps import SweepPoint
from ..core.wording import plural
from ..cut.bricks import BrickSpec
from ..reporting.suite import SuiteError, exported_distances, exported_reads, exported_work, read_brick
from .engine import DLBricksRun, unforeseen
from .items import brick_mark, brick_test, e2e_test
from .simulated import simulated_brick_test, simulated_model_test
from .warning_types import DLBricksWarning


def shown_path(node: pytest.File) -> str:
    """How a file is named in messages and reports: its node id, or for a file given on the command line outside
    the rootdir, whose node id pytest leaves empty, its path from the rootdir (two such models would otherwise
    share one empty name, and one's estimate be taken for the other's)."""
    return node.nodeid or os.path.relpath(node.path, node.config.rootpath).replace(os.sep, "/")


class ModelFile(pytest.File):
    """An ONNX model: cut into bricks on collection, at every sweep point; its new distinct bricks become
    benchmark items, their names ending with the point (``brick[Conv+Relu-3f2a91c0][batch=4]``)."""

    def __init__(self, *, run: DLBricksRun, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run = run

    def collect(self) -> Iterator[pytest.Item]:
        try:
            hooked = self.config.hook.pytest_dlbricks_model_inputs(path=self.path, config=self.config)
        except Exception as error:  # a conftest's bug fails this model alone, as a bad model file does
            raised = f"the pytest_dlbricks_model_inputs hook raised {type(error).__name__}: {error}"
            yield FailingItem.from_parent(self, name="load", message=f"{shown_path(self)}: {raised}")
            return
        for number, point in enumerate(self.run.points):
            yield from self._collect_point(point, hooked, warn=number == 0)

    def _collect_point(self, point: SweepPoint, hooked: object, *, warn: bool) -> Iterator[pytest.Item]:
        suffix = point.suffix
        try:
            plan, new_bricks = self.run.add_model(self.path, shown_path(self), point, hooked)
        except ModelError as error:
            yield FailingItem.from_parent(
                self, name=f"load{suffix}", message=f"{shown_path(self)}{suffix}: {error.cause}"
            )
            return
        except pytest.exit.Exception:
            raise
        except Exception as error:  # an input no check foresaw: it fails this model alone, never the session
            yield FailingItem.from_parent(
                self, name=f"load{suffix}", message=f"{shown_path(self)}{suffix}: {unforeseen(error)}"
            )
            return
        warnings = [
            f"{shown_path(self)}: symbolic dimension {name!r} was not given, using {value}"
            f" (set it with --dlbricks-dim {name}=N)"
            for name, value in plan.guessed_dims.items()
        ]
        if plan.weights_as_inputs:
            warnings.append(
                f"{shown_path(self)}: {plural(plan.weights_as_inputs, 'weight')} also listed as graph inputs, which"
                " onnxruntime lets a caller override and so neither folds nor pre-packs; its bricks are timed"
                " so too (take them out of the graph inputs if nothing overrides them)"
            )
        for message in warnings if warn else ():
            try:
                self.warn(DLBricksWarning(message))
            except DLBricksWarning as error:
                # filterwarnings = error: this model's load fails, not the session; its bricks, which later models
                # may share, are still timed.
                yield FailingItem.from_parent(self, name=f"load{suffix}", message=str(error))
        resolved = None
        for brick in new_bricks:
            item = brick_item(self, self.run, brick, point, resolved)
            # Every brick's test asks for the same fixtures: pytest resolves them once, as for a parametrized test.
            resolved = getattr(item, "_fixtureinfo", None)
            yield item
        if self.run.settings.validate:
            simulated = self.run.simulation is not None
            for executor in ["sequential"] if simulated else self.run.executors_to_validate(plan):
                # Named after the model: pytest-benchmark's table shows item names, not the file they are in.
                name = ("e2e" if executor == "sequential" else f"e2e-{executor}") + f"[{self.path.name}]{suffix}"
                test = simulated_model_test(self.run, plan) if simulated else e2e_test(self.run, plan, executor)
                item = pytest.Function.from_parent(self, name=name, callobj=test)
                item.extra_keyword_matches.update(point.keywords)
                yield item
        for broken in plan.broken:
            yield FailingItem.from_parent(
                self,
                name=f"unbuildable[{broken.label}]{suffix}",
                message=f"{plan.path}: layer {broken.layer_index} ({broken.op_type}) cannot be benchmarked"
                f" as a brick: {broken.reason}",
            )


class BrickFile(pytest.File):
    """A brick file of an exported suite (listed in the folder's manifest): one item, never cut again."""

    def __init__(self, *, run: DLBricksRun, entry: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run = run
        self.entry = entry

    def collect(self) -> Iterator[pytest.Item]:
        try:
            if "error" in self.entry:
                raise SuiteError(self.entry["error"])
            brick = read_brick(self.path, self.entry)
        except SuiteError as error:
            yield FailingItem.from_parent(self, name="load", message=f"{shown_path(self)}: {error}")
            return
        exported = (exported_reads(self.entry), exported_distances(self.entry, brick), exported_work(self.entry, brick))
        if self.run.add_exported_brick(brick, *exported):
            yield brick_item(self, self.run, brick)


def brick_item(
    parent: pytest.File,
    run: DLBricksRun,
    brick: BrickSpec,
    point: SweepPoint | None = None,
    fixtureinfo: Any = None,
) -> pytest.Function:
    """The benchmark item of a distinct brick, selectable with ``-k`` by its operators and sweep point;
    ``fixtureinfo``: its fixtures as pytest resolved them for another brick of ``parent`` (None: resolve them)."""
    point = point or SweepPoint()
    test = simulated_brick_test if run.simulation is not None else brick_test
    item = pytest.Function.from_parent(
        parent, name=f"brick[{brick.label}]{point.suffix}", callobj=test(run, brick.signature), fixtureinfo=fixtureinfo
    )
    item.extra_keyword_matches.update(brick.ops)
    item.extra_keyword_matches.update(point.keywords)
    item.add_marker(brick_mark(run, parent.config))
    return item


class FailingItem(pytest.Item):
    """Carries an error found during collection, so one bad model fails alone and the others still run."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def setup(self) -> None:
        pytest.fail(self.message, pytrace=False)

    def runtest(self) -> None:
        """Never reached: setup fails."""

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.nodeid
