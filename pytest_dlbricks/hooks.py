"""The hooks pytest-dlbricks calls, for conftest files and other plugins to implement."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import numpy as np


@pytest.hookspec(firstresult=True)
def pytest_dlbricks_model_inputs(path: Path, config: pytest.Config) -> Mapping[str, np.ndarray] | None:
    """Sample inputs for the model at ``path``: a mapping of input names to arrays, or None.

    Called once per model file while it is collected; the first implementation that returns a
    mapping wins, over the sample files beside the model (``<model>.npz``, ``test_data_set_*``).
    The arrays must have the element types the model takes and the sizes it fixes; their sizes set
    the model's symbolic dimensions. Inputs left out get synthetic values. For example, in
    ``conftest.py``::

        import numpy as np

        def pytest_dlbricks_model_inputs(path, config):
            if path.name == "vad.onnx":
                return {"sr": np.array(16000, dtype=np.int64), "input": np.zeros((1, 512), np.float32)}
            return None
    """
