"""pytest hooks of pytest-dlbricks; cheap to import, the machinery loads only when dlbricks is enabled."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .options import add_options, read_settings

if TYPE_CHECKING:
    from .session import DLBricksSession
    from .tracking import Tracking

SESSION_KEY: pytest.StashKey[DLBricksSession] = pytest.StashKey()
TRACKING_KEY: pytest.StashKey[Tracking] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    settings = read_settings(config)
    if settings is None:
        return
    from .distributed import is_worker, warn_no_estimates
    from .interruption import TerminateAsInterrupt
    from .runtime import ThreadPoolConflict, use_thread_pool
    from .session import DLBricksSession
    from .tracking import Tracking

    try:
        use_thread_pool(settings.thread_pool, settings.intra_op_threads)
    except ThreadPoolConflict as error:
        raise pytest.UsageError(f"--dlbricks-thread-pool: {error}") from None
    session = DLBricksSession(config, settings)
    tracking = Tracking(config, settings, session)
    config.stash[SESSION_KEY] = session
    config.stash[TRACKING_KEY] = tracking
    config.pluginmanager.register(session, "dlbricks-session")
    config.pluginmanager.register(tracking, "dlbricks-tracking")
    warn_no_estimates(config)
    if not is_worker(config):
        config.pluginmanager.register(TerminateAsInterrupt(), "dlbricks-sigterm")
