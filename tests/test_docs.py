"""The documentation's promises: the options reference is the plugin's parser, and the README's Quick start
shows the closing lines its command prints."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conftest import QUICK_TIMING, SAMPLE_MODELS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def reference_extension() -> ModuleType:
    """The Sphinx extension that writes the reference, imported without Sphinx."""
    spec = importlib.util.spec_from_file_location("dlbricks_reference", DOCS / "_ext" / "dlbricks_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_options_reference_lists_every_option_pytest_help_shows(pytester: pytest.Pytester) -> None:
    extension = reference_extension()
    reference = extension.options_rst(extension.recorded_options())
    help_text = pytester.runpytest("--help").stdout.str()
    flags = set(re.findall(r"^  (--dlbricks-\S+)", help_text, flags=re.MULTILINE))
    inis = set(re.findall(r"^  (dlbricks_\w+) \(", help_text, flags=re.MULTILINE))
    assert len(flags) > 20 and len(inis) > 10, "the --help block was read"
    assert set(re.findall(r"^   \* - ``(--dlbricks-[^`]+)``", reference, flags=re.MULTILINE)) == flags
    assert set(re.findall(r"^     - ``(dlbricks_\w+)``", reference, flags=re.MULTILINE)) == inis


def test_the_docs_build_their_options_table_from_the_parser() -> None:
    assert '"dlbricks_reference"' in (DOCS / "conf.py").read_text()
    assert "\n.. dlbricks-options::\n" in (DOCS / "reference" / "options.rst").read_text()


def quick_start() -> str:
    return (ROOT / "README.rst").read_text().split("\nQuick start\n")[1].split("\nCommon tasks\n")[0]


def shown_outputs() -> list[list[str]]:
    """The Quick start's literal blocks that show what a run prints (the others are commands), line by line."""
    blocks = re.findall(r"::\n\n((?:    .*\n|\n)+)", quick_start())
    return [
        [line[4:] for line in block.splitlines() if line.strip()]
        for block in blocks
        if not block.strip().startswith("python3 -m venv")
    ]


def as_pattern(shown: str) -> str:
    """A shown line as a pattern of ``fnmatch_lines``: ``N`` (or ``N.NN``) stands for a number that depends on
    the machine, ``...`` within a line for any text, and the rule of ``=`` around pytest's last line for the
    terminal's width."""
    pattern = re.sub(r"([*?\[])", r"[\1]", shown).replace("...", "*")
    pattern = re.sub(r"(?<![\w.])N(\.N+)?(?=s\b|\W|$)", "*", pattern)  # "N layers", "(N%)", "in N.NNs"
    return re.sub(r"^=+ | =+$", "*", pattern)


def test_the_quick_start_shows_the_closing_lines_its_command_prints(pytester: pytest.Pytester) -> None:
    """The Quick start's command, run twice on copies of the sample models and the repository's ini file, ends
    with the lines the README shows (its ``...`` stands for any lines; timing is quick, which they do not show)."""
    main_job = re.search(r"\.venv/bin/pytest (.*)$", quick_start(), flags=re.MULTILINE)
    assert main_job is not None
    shutil.copytree(SAMPLE_MODELS, pytester.path / "sample_models", ignore=shutil.ignore_patterns("*.npz"))
    shutil.copy(ROOT / "setup.cfg", pytester.path / "setup.cfg")
    first_run, re_run = shown_outputs()
    for shown in (first_run, re_run):
        result = pytester.runpytest("-p", "no:cacheprovider", *QUICK_TIMING, *main_job.group(1).split())
        result.stdout.fnmatch_lines([as_pattern(line) for line in shown if line != "..."], consecutive=False)
