"""pytest nodes: a model file collects one benchmark item per brick it is the first to use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from .errors import ModelError

if TYPE_CHECKING:
    from .session import DLBricksSession


class DLBricksWarning(pytest.PytestWarning):
    """Something about a model the user should know, such as a guessed input dimension."""


class ModelFile(pytest.File):
    """An ONNX model: cut into bricks on collection; its new distinct bricks become benchmark items."""

    def __init__(self, *, dlbricks: DLBricksSession, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dlbricks = dlbricks

    def collect(self) -> Iterator[pytest.Item]:
        try:
            plan, new_bricks = self.dlbricks.add_model(self.path, self.nodeid)
        except ModelError as error:
            yield FailingItem.from_parent(self, name="load", message=f"{self.nodeid}: {error.cause}")
            return
        for name, value in plan.guessed_dims.items():
            self.warn(
                DLBricksWarning(
                    f"{self.nodeid}: symbolic dimension {name!r} was not given, using {value}"
                    f" (set it with --dlbricks-dim {name}=N)"
                )
            )
        for brick in new_bricks:
            item = pytest.Function.from_parent(
                self, name=f"brick[{brick.label}]", callobj=self.dlbricks.brick_test(brick.signature)
            )
            item.extra_keyword_matches.update(brick.ops)
            for mark in self.dlbricks.timing_marks():
                item.add_marker(mark)
            yield item
        if self.dlbricks.settings.validate:
            for executor in self.dlbricks.executors_to_validate(plan):
                name = "e2e" if executor == "sequential" else f"e2e-{executor}"
                yield pytest.Function.from_parent(self, name=name, callobj=self.dlbricks.e2e_test(plan, executor))
        for broken in plan.broken:
            yield FailingItem.from_parent(
                self,
                name=f"unbuildable[{broken.label}]",
                message=f"{self.nodeid}: layer {broken.layer_index} ({broken.op_type}) cannot be benchmarked"
                f" as a brick: {broken.reason}",
            )


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
