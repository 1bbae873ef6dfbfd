"""The plugin's own warning category, shared by the collector and the xdist support."""

from __future__ import annotations

import pytest


class DLBricksWarning(pytest.PytestWarning):
    """Something about a model the user should know, such as a guessed input dimension."""
