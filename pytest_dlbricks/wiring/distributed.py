"""pytest-xdist: bricks are built and checked in the workers, but not timed, so no estimate is made.

pytest-benchmark stops timing when xdist distributes tests, because timings taken in parallel
disturb each other; brick times, and the estimates composed from them, need a single process.
Under ``-n``, each brick still runs once in a worker, so broken models and bricks fail as usual;
the controller says so once in its summary, and no report is printed or written. A line of the
summary, not a warning: a run with ``filterwarnings = error`` turns warnings issued while pytest
configures itself into an internal error, and this one tells of no fault.
"""

from __future__ import annotations

import pytest

NO_ESTIMATES = (
    "pytest-xdist distributes this run, so pytest-benchmark does not time the bricks: each brick is"
    " built and checked once, and dlbricks makes no estimates and writes no report."
    " Run without -n (or with -n 0) for estimates."
)


def is_distributed(config: pytest.Config) -> bool:
    """pytest-benchmark's own test: tests are distributed, or this process is an xdist worker."""
    return config.getoption("dist", "no") != "no" or is_worker(config)


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def is_controller_without_estimates(config: pytest.Config) -> bool:
    """Whether this process is the one that says why a distributed run has no estimates."""
    return is_distributed(config) and not is_worker(config)
