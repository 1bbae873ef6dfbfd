"""Stop an onnxruntime run that takes too long or too much memory, so a hostile model cannot hang the session.

A ``Loop`` told to iterate 2**62 times runs for ever; one that also stacks a value per iteration
eats all the memory of the machine within a minute. Runs the plugin makes before timing starts (a
whole model's, to learn its shapes; each brick's first, to check it) go through :func:`run_watched`:
a thread watches the run and sets onnxruntime's ``RunOptions.terminate`` once the run has taken
:data:`RUN_TIME_LIMIT_S`, or has grown the process by more than the memory limit of
:func:`~pytest_dlbricks.screening.memory_limit` (where the resident size can be read: Linux).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np
import onnxruntime as ort

from .screening import format_bytes, memory_limit

#: Seconds one watched run may take.
RUN_TIME_LIMIT_S = 120.0
#: Seconds between two looks at the run.
POLL_S = 0.05
#: onnxruntime logs the stop as an error; the user learns of it from our message instead.
_LOG_FATAL_ONLY = 4


class RunStopped(Exception):
    """A run went over the time or memory limit and onnxruntime stopped it; the message says which."""


def run_watched(session: ort.InferenceSession, names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[Any]:
    """``session.run(names, feeds)``, stopped (raising :class:`RunStopped`) when it goes over a limit."""
    options = ort.RunOptions()
    options.log_severity_level = _LOG_FATAL_ONLY
    watch = _Watch(options)
    watch.start()
    try:
        return session.run(names, feeds, options)
    except Exception as error:  # onnxruntime's exception types are not part of its API
        if watch.reason is not None:
            raise RunStopped(f"{watch.reason}, so onnxruntime stopped it") from error
        raise
    finally:
        watch.finish()


class _Watch(threading.Thread):
    """Created and started by :func:`run_watched` for one run, finished when the run returns."""

    def __init__(self, options: ort.RunOptions) -> None:
        super().__init__(name="dlbricks-watchdog", daemon=True)
        self.options = options
        self.done = threading.Event()
        self.reason: str | None = None

    def run(self) -> None:
        start, base, limit = time.monotonic(), _resident_bytes(), memory_limit()
        while not self.done.wait(POLL_S):
            resident = _resident_bytes()
            if time.monotonic() - start > RUN_TIME_LIMIT_S:
                self.reason = f"one run did not finish within {RUN_TIME_LIMIT_S:g} s"
            elif base is not None and resident is not None and resident - base > limit:
                self.reason = f"one run needed more than {format_bytes(limit)} of memory (the memory limit)"
            else:
                continue
            self.options.terminate = True
            return

    def finish(self) -> None:
        self.done.set()
        self.join()


def _resident_bytes() -> int | None:
    """The process's resident memory, where the system tells it cheaply (Linux), else None."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
