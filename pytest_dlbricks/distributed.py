"""pytest-xdist: bricks are built and checked in the workers, but not timed, so no estimate is made.

pytest-benchmark stops timing when xdist distributes tests, because timings taken in parallel
disturb each other; brick times, and the estimates composed from them, need a single process.
Under ``-n``, each brick still runs once in a worker, so broken models and bricks fail as usual;
the controller warns once, and no report is printed or written.
"""

from __future__ import annotations

import pytest

from .warning_types import DLBricksWarning

NO_ESTIMATES_WARNING = (
    "pytest-xdist distributes this run, so pytest-benchmark does not time the bricks: each brick is"
    " built and checked once, and dlbricks makes no estimates and writes no report."
    " Run without -n (or with -n 0) for estimates."
)


def is_distributed(config: pytest.Config) -> bool:
    """pytest-benchmark's own test: tests are distributed, or this process is an xdist worker."""
    return config.getoption("dist", "no") != "no" or is_worker(config)


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def warn_no_estimates(config: pytest.Config) -> None:
    """Say once, from the controller, why a distributed run has no estimates."""
    if is_distributed(config) and not is_worker(config):
        config.issue_config_time_warning(DLBricksWarning(NO_ESTIMATES_WARNING), stacklevel=2)
