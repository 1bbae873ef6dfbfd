"""pytest-xdist (``-n 2``): bricks are checked in the workers but not timed; no estimates, one note."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_plugin import run

from pytest_dlbricks.wiring.distributed import NO_ESTIMATES


def test_distributed_run_checks_bricks_without_estimates(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    (pytester.path / "models" / "broken.onnx").write_bytes(b"not a model")
    single = run(pytester, "--dlbricks-granularity=2", "--collect-only", "-q", "models")
    bricks = sum("::brick[" in line for line in single.stdout.lines)

    result = run(pytester, "-n", "2", "--dlbricks-granularity=2", "--dlbricks-json=r.json", "models")

    result.assert_outcomes(passed=bricks, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*ERROR at setup of models/broken.onnx::load*", f"dlbricks: {NO_ESTIMATES}"])
    assert "- dlbricks: granularity" not in result.stdout.str()
    assert not (pytester.path / "r.json").exists()


def test_zero_workers_is_a_single_process(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    result = run(pytester, "-n", "0", "--dlbricks-granularity=3", "--dlbricks-json=r.json", "models/mlp.onnx")
    assert result.ret == 0
    assert "pytest-xdist distributes" not in result.stdout.str()
    assert (pytester.path / "r.json").exists()


def test_warnings_as_errors_do_not_turn_the_note_into_an_internal_error(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
    result = run(pytester, "-n", "2", "--dlbricks-granularity=3", "models/mlp.onnx")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines([f"dlbricks: {NO_ESTIMATES}"])


def test_the_gate_under_xdist_is_a_usage_error(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    """pytest-benchmark times nothing under -n: a gate there would pass every change unseen."""
    result = run(pytester, "-n", "2", "--dlbricks-granularity=3", "--dlbricks-compare", "models/mlp.onnx")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dlbricks-compare needs brick times, which * under pytest-xdist; run the gate*"])
