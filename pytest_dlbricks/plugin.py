"""pytest hooks of pytest-dlbricks; cheap to import, the machinery loads only when dlbricks is enabled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from .wiring.options import add_options, read_settings

if TYPE_CHECKING:
    from .wiring.heap import FrozenCollection
    from .wiring.interruption import TerminateAsInterrupt
    from .wiring.session import DLBricksSession
    from .wiring.tracking import Tracking

SESSION_KEY: pytest.StashKey[DLBricksSession] = pytest.StashKey()
TRACKING_KEY: pytest.StashKey[Tracking] = pytest.StashKey()
SIGTERM_KEY: pytest.StashKey[TerminateAsInterrupt] = pytest.StashKey()
FROZEN_KEY: pytest.StashKey[FrozenCollection] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Declare the hooks conftest files may implement (see :mod:`.hooks`)."""
    from . import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_configure(config: pytest.Config) -> None:
    settings = read_settings(config)
    if settings is None:
        return
    # Here, not at the top: every pytest run imports this module, only runs with dlbricks on need these.
    from .core.runtime import ThreadPoolConflict, ask_for_thread_pool
    from .wiring.distributed import is_worker
    from .wiring.heap import FrozenCollection
    from .wiring.interruption import TerminateAsInterrupt
    from .wiring.session import DLBricksSession
    from .wiring.tracking import Tracking

    if not hasattr(config.option, "benchmark_disable"):  # pytest-benchmark's options: loaded under any name
        raise pytest.UsageError(
            "dlbricks times its bricks with pytest-benchmark, which this run disabled (-p no:benchmark)"
            " or cannot load: enable it, or leave dlbricks out (-p no:dlbricks)"
        )
    try:
        ask_for_thread_pool(settings.thread_pool, settings.intra_op_threads)
    except ThreadPoolConflict as error:
        raise pytest.UsageError(f"--dlbricks-thread-pool: {error}") from None
    session = DLBricksSession(config, settings)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "dlbricks-session")
    config.stash[TRACKING_KEY] = tracking = Tracking(config, settings, session)
    config.pluginmanager.register(tracking, "dlbricks-tracking")
    config.stash[FROZEN_KEY] = frozen = FrozenCollection()
    config.pluginmanager.register(frozen, "dlbricks-frozen-collection")
    config.add_cleanup(frozen.thaw)
    if not is_worker(config):
        config.stash[SIGTERM_KEY] = sigterm = TerminateAsInterrupt()
        config.pluginmanager.register(sigterm, "dlbricks-sigterm")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Unregister what ``pytest_configure`` registered, so that a config reused in-process starts clean."""
    _unregister(config, SIGTERM_KEY)
    _unregister(config, FROZEN_KEY)
    _unregister(config, TRACKING_KEY)
    _unregister(config, SESSION_KEY)


def _unregister(config: pytest.Config, key: pytest.StashKey[Any]) -> None:
    plugin = config.stash.get(key, None)
    if plugin is not None:
        del config.stash[key]
        config.pluginmanager.unregister(plugin)
