"""pytest hooks of pytest-dlbricks; cheap to import, the machinery loads only when dlbricks is enabled."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .options import add_options, read_settings

if TYPE_CHECKING:
    from .session import DLBricksSession

SESSION_KEY: pytest.StashKey[DLBricksSession] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    settings = read_settings(config)
    if settings is None:
        return
    from .distributed import is_worker, warn_no_estimates
    from .interruption import TerminateAsInterrupt
    from .session import DLBricksSession

    session = DLBricksSession(config, settings)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "dlbricks-session")
    warn_no_estimates(config)
    if not is_worker(config):
        config.pluginmanager.register(TerminateAsInterrupt(), "dlbricks-sigterm")
