"""Shared fixtures and helpers: where the bundled and the onnx wheel's models are, quick timing flags, a model
loaded and cut, pytest run on models as a user runs it."""

from __future__ import annotations

import functools
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from pytest_dlbricks.core import runtime
from pytest_dlbricks.cut.cutting import ModelPlan, plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.reporting import report
from pytest_dlbricks.timing import probes
from pytest_dlbricks.timing.load import LoadMeter
from pytest_dlbricks.wiring import run_state
from pytest_dlbricks.wiring.warning_types import DLBricksWarning

SAMPLE_MODELS = Path(__file__).resolve().parent.parent / "sample_models"
LIGHT_MODELS = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def light_models() -> list[Path]:
    """The onnx wheel's 9 real CNNs; the test is skipped if the installed onnx no longer ships them."""
    paths = sorted(LIGHT_MODELS.glob("light_*.onnx"))
    if len(paths) != 9:
        pytest.skip(f"the installed onnx {onnx.__version__} does not ship its 9 light models in {LIGHT_MODELS}")
    return paths


#: pytest-benchmark flags for runs where timing itself is not under test.
QUICK_TIMING = ("--benchmark-min-rounds=2", "--benchmark-max-time=0.000001")
#: The symbolic dimensions of the bundled sample models, as flags.
SAMPLE_DIMS = ("--dlbricks-dim", "batch=1", "--dlbricks-dim", "seq=16")
#: Columns of the terminal runs in tests print to (see :func:`a_terminal_wide_enough_for_any_line`).
WIDE_TERMINAL = 4000
#: Seconds any one test may take: a hung onnxruntime session must not hold CI until its own limit.
TEST_TIMEOUT = 300


@pytest.fixture(autouse=True)
def one_pair_of_executor_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs measure the parallel executor's cost for layers using the thread pool in one pair of sessions,
    not a dozen: a second each is too much for a test of anything else (test_probes measures it in full)."""
    monkeypatch.setattr(probes, "measure_pool_slowdown", functools.partial(probes.measure_pool_slowdown, sessions=1))


@pytest.fixture(autouse=True)
def runs_inside_an_xdist_worker_time_their_bricks(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``pytest -n``, pytest-benchmark finds PYTEST_XDIST_WORKER in the environment of the runs the tests
    make in the worker's process, and stops timing there too: those runs are not distributed."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)


@pytest.fixture(autouse=True)
def a_terminal_wide_enough_for_any_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs print to a terminal no line of theirs exceeds, so that tests read lines whole and cells unshortened;
    the tests of fitting the output to the terminal set a width of their own."""
    monkeypatch.setenv("COLUMNS", str(WIDE_TERMINAL))


@pytest.fixture(autouse=True)
def a_timing_thread_that_keeps_its_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs read their timing thread as on its core throughout (its CPU clock is the wall clock), whatever else
    the machine runs: the verdict of a run in a test must not follow the load of the machine the suite runs on.
    The tests of load (test_load, test_verdict) stub their readings."""
    monkeypatch.setattr(
        run_state, "LoadMeter", functools.partial(LoadMeter, cpu=time.perf_counter, load_average=lambda: None)
    )


@pytest.fixture(autouse=True)
def runs_never_measured_under_high_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs are never marked as measured under high noise, which would pass them over as baselines: the sample
    MLP's bricks of microseconds spread by 15-50% beside a busy core, and their interquartile range passed their
    median in 15 rounds on a noisy machine. The tests of high noise set a threshold of their own."""
    monkeypatch.setattr(report, "HIGH_NOISE", math.inf)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


@pytest.fixture
def copy_models(pytester: pytest.Pytester) -> Callable[..., list[Path]]:
    """Copy models (paths) into the pytester directory, optionally under a sub-folder."""

    def copy(*sources: Path, folder: str = "models") -> list[Path]:
        target = pytester.path / folder
        target.mkdir(parents=True, exist_ok=True)
        return [Path(shutil.copy(source, target / source.name)) for source in sources]

    return copy


@pytest.fixture
def sample_models(copy_models: Callable[..., list[Path]]) -> list[Path]:
    """The bundled sample models, copied into the pytester directory under ``models/``."""
    return copy_models(*sorted(SAMPLE_MODELS.glob("*.onnx")))


def plan_of(path: Path, granularity: int, name: str | None = None) -> ModelPlan:
    """The model file at ``path`` loaded and cut into bricks of ``granularity`` layers, named after the file."""
    return plan_model(load_model(path), granularity, path.name if name is None else name)


def runtime_ops(model: onnx.ModelProto | Path, folder: Path) -> list[str]:
    """The operators of the graph onnxruntime makes of ``model`` (a file, as a user's session reads it, or a
    model in memory) with its default optimizations and one thread, as it saves that graph."""
    options = runtime.new_options()  # a global thread pool set by an earlier run in this process is taken
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # onnxruntime warns of every weight listed as an input
    options.optimized_model_filepath = str(folder / "runtime_graph.onnx")
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return [node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node]


def run_dlbricks(
    pytester: pytest.Pytester, *args: str, dims: tuple[str, ...] = SAMPLE_DIMS, timing: tuple[str, ...] = QUICK_TIMING
) -> pytest.RunResult:
    """pytest run in-process as a user runs it on the sample models, with quick timing unless told otherwise.

    ``dims`` are given to runs on any of the models: no warning that some model lacks them.
    """
    quiet = ("-W", f"ignore:dlbricks:{DLBricksWarning.__module__}.DLBricksWarning") if dims else ()
    return pytester.runpytest("-p", "no:cacheprovider", *dims, *quiet, *timing, *args)
