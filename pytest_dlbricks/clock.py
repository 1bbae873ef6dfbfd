"""A timer for pytest-benchmark that leaves out what is done to prepare each call."""

from __future__ import annotations

from collections.abc import Callable


class PausableClock:
    """pytest-benchmark's own timer, less the time spent in :meth:`untimed`.

    pytest-benchmark times a loop of calls; each brick call first writes its inputs again (see
    :meth:`~pytest_dlbricks.running.BrickRunner.rewrite_inputs`), which is not the brick's time.
    Brick items hand it to pytest-benchmark through the ``benchmark`` mark's ``timer`` option.
    """

    def __init__(self, timer: Callable[[], float]) -> None:
        self.timer = timer
        self.paused = 0.0

    def __call__(self) -> float:
        return self.timer() - self.paused

    def untimed(self, work: Callable[[], object]) -> None:
        start = self.timer()
        work()
        self.paused += self.timer() - start

    def __repr__(self) -> str:
        name = getattr(self.timer, "__qualname__", None) or repr(self.timer)
        return f"{getattr(self.timer, '__module__', None) or ''}.{name}".lstrip(".")
