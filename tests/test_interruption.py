"""Ctrl-C and SIGTERM in the middle of benchmarking: the report keeps every brick measured, marked partial."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from types import FrameType, TracebackType

import pytest

from conftest import SAMPLE_MODELS
from pytest_dlbricks.wiring.interruption import TerminateAsInterrupt

#: Seconds to wait for the run to reach its first brick, then to finish once signalled.
START_SECONDS = 120
STOP_SECONDS = 60
#: pytest as run from a terminal: a process started in the background (as CI runners and shells do)
#: inherits SIGINT ignored, and Python then never turns it into KeyboardInterrupt.
PYTEST_WITH_CTRL_C = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); sys.exit(pytest.main())"
)


class Output:
    """A process's output, read line by line in a thread so that waiting for a line can time out."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self.reader.start()

    def _read(self, stream: Iterable[str]) -> None:
        for line in stream:
            self.lines.put(line)

    def wait_for(self, text: str, seconds: float) -> None:
        """Wait until a line holds ``text``; raises queue.Empty after ``seconds`` without a line."""
        while not self.seen or text not in self.seen[-1]:
            self.seen.append(self.lines.get(timeout=seconds))

    def text(self, seconds: float) -> str:
        """Everything the process wrote, once it has closed its output (or after ``seconds``)."""
        self.reader.join(seconds)
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return "".join(self.seen)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_run_leaves_a_partial_report_of_what_was_measured(
    pytester: pytest.Pytester, signum: signal.Signals
) -> None:
    models = pytester.path / "models"
    models.mkdir()
    for name in ("mlp.onnx", "tiny_resnet.onnx"):
        (models / name).write_bytes((SAMPLE_MODELS / name).read_bytes())
    report = pytester.path / "out" / "report.json"
    command = [sys.executable, "-u", "-c", PYTEST_WITH_CTRL_C, "-v", "-p", "no:cacheprovider"]
    command += [
        "--dlbricks-granularity=1",
        "--dlbricks-dim=batch=1",
        "--benchmark-max-time=0.2",
        f"--dlbricks-json={report}",
        "models",
    ]
    with pytester.popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        output = Output(process)
        try:
            output.wait_for(" PASSED", START_SECONDS)
            process.send_signal(signum)
            process.wait(timeout=STOP_SECONDS)
        finally:
            process.kill()
        text = output.text(STOP_SECONDS)

    assert process.returncode == pytest.ExitCode.INTERRUPTED, text
    data = json.loads(report.read_text())
    assert data["partial"] is True
    measured = [brick for brick in data["bricks"] if brick["time_s"] is not None]
    assert 1 <= len(measured) < len(data["bricks"])
    assert all(brick["stats"]["rounds"] >= 1 for brick in measured)
    assert [path.name for path in report.parent.iterdir()] == ["report.json"], "a temporary file was left"
    assert "the report is partial" in text


def test_sigterm_handler_lives_only_while_dlbricks_is_enabled(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import signal\n"
        "def pytest_sessionstart(session):\n"
        "    session.config.handler_during_run = signal.getsignal(signal.SIGTERM)\n"
        "def pytest_terminal_summary(terminalreporter, config):\n"
        "    terminalreporter.write_line(f'during: {config.handler_during_run!r}')\n"
    )
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    before = signal.getsignal(signal.SIGTERM)
    enabled = pytester.runpytest("--dlbricks-granularity=1", "-p", "no:cacheprovider")
    enabled.stdout.fnmatch_lines(["during: <function TerminateAsInterrupt._interrupt*"])
    assert signal.getsignal(signal.SIGTERM) == before
    pytester.runpytest("-p", "no:cacheprovider").stdout.fnmatch_lines(["during: <Handlers.SIG_DFL: 0>"])


def test_a_handler_already_installed_is_left_alone() -> None:
    def own_handler(signum: int, frame: object) -> None:
        """Someone else's."""

    previous = signal.signal(signal.SIGTERM, own_handler)
    try:
        guard = TerminateAsInterrupt()
        assert not guard.installed
        guard.pytest_unconfigure()
        assert signal.getsignal(signal.SIGTERM) is own_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_handler_interrupts() -> None:
    guard = TerminateAsInterrupt()
    try:
        assert guard.installed
        with pytest.raises(KeyboardInterrupt, match="SIGTERM received"):
            signal.raise_signal(signal.SIGTERM)
    finally:
        guard.pytest_unconfigure()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def _looping() -> FrameType:
    """A frame whose code has instructions outside any line (loop and ``finally`` bookkeeping)."""
    for _ in range(1):
        try:
            pass
        finally:
            pass
    frame = sys._getframe()
    assert frame is not None
    return frame


def test_frames_caught_between_lines_do_not_break_the_interrupt_summary() -> None:
    frame = _looping()
    between_lines = [start for start, _, line in frame.f_code.co_lines() if line is None]
    if not between_lines:
        pytest.skip("this Python gives every instruction a line")
    inner = TracebackType(None, frame, between_lines[0], -1)
    assert inner.tb_lineno is None
    interrupt = KeyboardInterrupt("SIGTERM received")
    try:
        raise interrupt
    except KeyboardInterrupt:
        outer = sys.exc_info()[2]
    assert outer is not None
    excinfo = pytest.ExceptionInfo.from_exception(
        interrupt.with_traceback(TracebackType(inner, outer.tb_frame, outer.tb_lasti, outer.tb_lineno))
    )
    guard = TerminateAsInterrupt()
    try:
        guard.pytest_keyboard_interrupt(excinfo)
    finally:
        guard.pytest_unconfigure()

    assert "SIGTERM received" in str(excinfo.getrepr(funcargs=True))
    assert len(excinfo.traceback) == 1
