"""The project's own promises: README's commands are the ones CI runs."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest_dlbricks

ROOT = Path(__file__).resolve().parent.parent
#: The modules that wire the domain to pytest (and ``__main__``, which runs the command line when imported).
PYTEST_LAYER = frozenset(
    {
        *("__main__", "hooks", "plugin", "wiring.collector", "wiring.distributed", "wiring.interruption"),
        *("wiring.items", "wiring.options", "wiring.session", "wiring.tracking", "wiring.baselines"),
        *("wiring.warning_types", "wiring.simulated", "wiring.heap"),
    }
)


def readme_commands() -> list[str]:
    """The indented shell commands of README.rst's quick start."""
    quick_start = (ROOT / "README.rst").read_text().split("\nQuick start\n")[1].split("\nCommon tasks\n")[0]
    return re.findall(r"^    (python3 -m venv .*)$", quick_start, flags=re.MULTILINE)


def test_ci_runs_the_readme_test_command() -> None:
    main_job, tests = readme_commands()
    assert "--dlbricks-granularity=2 sample_models/" in main_job
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


def test_changelog_names_the_current_version() -> None:
    from pytest_dlbricks import __version__

    assert __version__ in (ROOT / "CHANGELOG.rst").read_text()


def test_the_plugin_is_cheap_to_import() -> None:
    """Every pytest run of every user imports the plugin: onnx, onnxruntime, numpy and networkx wait."""
    heavy = "{'onnx', 'onnxruntime', 'numpy', 'networkx'}"
    code = f"import sys, pytest_dlbricks.plugin; print(sorted({heavy} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_domain_modules_never_import_pytest() -> None:
    """Only the pytest layer may import pytest; every other module of the package is found by pkgutil."""
    domain = [
        module.name
        for module in pkgutil.walk_packages(pytest_dlbricks.__path__, prefix="pytest_dlbricks.")
        if module.name.removeprefix("pytest_dlbricks.") not in PYTEST_LAYER
    ]
    assert len(domain) > len(PYTEST_LAYER), "the package is mostly domain modules"
    code = f"import sys; import {', '.join(domain)}; print('pytest' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
