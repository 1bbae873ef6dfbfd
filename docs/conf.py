"""Sphinx configuration of pytest-dlbricks' documentation: ``sphinx-build -W -b html docs build/docs``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest_dlbricks

sys.path.insert(0, str(Path(__file__).parent / "_ext"))  # the extension that writes the reference

project = "pytest-dlbricks"
version = release = pytest_dlbricks.__version__
extensions = ["dlbricks_reference"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
smartquotes_action = "qe"  # no dashes: "--dlbricks-..." stays two hyphens wherever it is written
html_theme_options = {"description": "ONNX models benchmarked brick by brick", "page_width": "1100px"}
