"""A stopped run still reports what it measured: SIGTERM interrupts like Ctrl-C, and the report says partial.

pytest turns Ctrl-C into KeyboardInterrupt, stops the run, and still calls ``pytest_sessionfinish``,
where the report is written. SIGTERM (sent by CI systems, ``timeout`` and ``kill``) would end the
process at once and lose every brick measured so far; while dlbricks is enabled it raises
KeyboardInterrupt instead.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from _pytest._code.code import TracebackEntry


class TerminateAsInterrupt:
    """Registered as a plugin by ``pytest_configure`` when dlbricks is enabled, except in xdist workers
    (their controller stops them). Installs its SIGTERM handler when created, if SIGTERM still has
    Python's default action (a handler someone else installed, or an ignored SIGTERM, is left alone);
    ``pytest_unconfigure`` restores the default.
    """

    def __init__(self) -> None:
        self.installed = (
            threading.current_thread() is threading.main_thread()  # only the main thread may set handlers
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        )
        if self.installed:
            signal.signal(signal.SIGTERM, self._interrupt)

    @staticmethod
    def _interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Drop the frames a signal caught between two lines: Python reports no line number for them
        (``tb_lineno`` is None), and pytest's summary of the interrupt would fail on them and exit 1.
        """
        excinfo.traceback = excinfo.traceback.filter(_has_line_number)

    def pytest_unconfigure(self) -> None:
        if self.installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self.installed = False


def _has_line_number(entry: TracebackEntry) -> bool:
    try:
        return entry.lineno >= 0
    except TypeError:  # pytest computes the frame's tb_lineno - 1, and tb_lineno is None
        return False


def stopped_early(session: pytest.Session, exitstatus: int) -> bool:
    """Whether the run ended before every collected item ran: interrupted, or stopped by ``-x``/``--maxfail``."""
    return exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop) or bool(session.shouldfail)
