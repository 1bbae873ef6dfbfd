"""How much collection costs, next to what onnxruntime needs just to open the same models.

Collecting a model means loading it (checking, ordering, folding constants, inferring shapes) and
cutting it into bricks. Benchmarking a model the usual way starts with one onnxruntime session for
it, so that session's creation time is the yardstick: collection should cost no more than about
twice as much. This script measures both on the 9 real models shipped in the onnx wheel
(``onnx/backend/test/data/light``), interleaved in the same run because the machine is shared and
noisy: every round times, for every model, an onnxruntime session created from the file and
``load_model`` followed by ``plan_model``; it reports the medians over the rounds. It then runs
``pytest --collect-only`` once on a copy of the models to show the plugin's cost end to end.
These models store their weights as ConstantOfShape subgraphs, which onnxruntime materialises while
creating the session (hundreds of MiB for vgg19) and collection never does: the yardstick is
heaviest for the models with the largest weights.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/collect.py [--granularity G] [--rounds R] [--cut optimized|original]

With the default ``--cut optimized``, collection includes onnxruntime optimizing each model (one
session creation and saving the graph it runs), which is what the plugin does by default.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnxruntime as ort

from pytest_dlbricks.core.settings import CUT_MODES, Settings
from pytest_dlbricks.cut.cutting import ModelPlan, plan_model
from pytest_dlbricks.cut.loading import load_model

MODELS_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
#: Collection should cost no more than about this many times onnxruntime's session creation.
TARGET_RATIO = 2.0
#: onnxruntime log level that keeps errors only (warnings about unused initializers are noise here).
LOG_ERRORS_ONLY = 3


@dataclass
class ModelTimes:
    """One model's shape once cut, and its timings, one per round, in seconds."""

    path: Path
    layers: int = 0
    bricks: int = 0
    session_s: list[float] = field(default_factory=list)
    collection_s: list[float] = field(default_factory=list)

    @property
    def session_median(self) -> float:
        return statistics.median(self.session_s)

    @property
    def collection_median(self) -> float:
        return statistics.median(self.collection_s)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--granularity", metavar="G", type=int, default=1, help="Layers per brick. Default: %(default)r"
    )
    parser.add_argument("--rounds", metavar="R", type=int, default=5, help="Interleaved rounds. Default: %(default)r")
    parser.add_argument("--cut", choices=CUT_MODES, default="optimized", help="What is cut. Default: %(default)s")
    args = parser.parse_args()
    if args.granularity < 1 or args.rounds < 1:
        parser.error("--granularity and --rounds must be at least 1")
    return args


def time_session(path: Path) -> float:
    """Seconds onnxruntime takes to create a CPU session from the file."""
    options = ort.SessionOptions()
    options.log_severity_level = LOG_ERRORS_ONLY
    start = time.perf_counter()
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return time.perf_counter() - start


def time_collection(path: Path, granularity: int, cut: str) -> tuple[float, ModelPlan]:
    """Seconds the plugin's collection takes for the model (load, then cut), and the plan it made."""
    optimize = Settings(granularity) if cut == "optimized" else None
    start = time.perf_counter()
    plan = plan_model(load_model(path, {}, optimize), granularity, path.name)
    return time.perf_counter() - start, plan


def measure_round(models: list[ModelTimes], granularity: int, cut: str, *, session_first: bool) -> None:
    """Time both for every model; which one goes first alternates between rounds."""
    for model in models:
        if session_first:
            model.session_s.append(time_session(model.path))
        seconds, plan = time_collection(model.path, granularity, cut)
        model.collection_s.append(seconds)
        model.layers, model.bricks = plan.layers, len(plan.bricks)
        if not session_first:
            model.session_s.append(time_session(model.path))


def measure(paths: list[Path], granularity: int, rounds: int, cut: str) -> list[ModelTimes]:
    models = [ModelTimes(path) for path in paths]
    for index in range(rounds):
        start = time.perf_counter()
        measure_round(models, granularity, cut, session_first=index % 2 == 0)
        print(f"round {index + 1}/{rounds}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return models


def run_pytest_collect(model_dir: Path, options: list[str]) -> tuple[float, str]:
    """Wall seconds of ``pytest --collect-only`` on ``model_dir`` and the last line pytest printed."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        *options,
        str(model_dir),
    ]
    start = time.perf_counter()
    result = subprocess.run(command, check=False, cwd=model_dir, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    # 5 is pytest's "no tests collected", expected when dlbricks is off.
    if result.returncode not in (0, 5):
        sys.exit(f"{' '.join(command)} failed with exit code {result.returncode}:\n{result.stdout}{result.stderr}")
    lines = result.stdout.strip().splitlines()
    return seconds, lines[-1] if lines else ""


def end_to_end(paths: list[Path], granularity: int, cut: str) -> tuple[tuple[float, str], tuple[float, str]]:
    """pytest collection of a copy of the models with dlbricks on, then with it off (start-up alone)."""
    with tempfile.TemporaryDirectory(prefix="dlbricks-collect-") as tmp:
        model_dir = Path(tmp)
        for path in paths:
            shutil.copy(path, model_dir / path.name)
        enabled = run_pytest_collect(model_dir, [f"--dlbricks-granularity={granularity}", f"--dlbricks-cut={cut}"])
        disabled = run_pytest_collect(model_dir, [])
    return enabled, disabled


def render_table(models: list[ModelTimes]) -> str:
    header = (
        f"{'model':<24} {'layers':>6} {'bricks':>6} {'session create (ms)':>19} {'collection (ms)':>15} {'ratio':>6}"
    )
    rows = [header, "-" * len(header)]
    rows += [_row(m.path.stem, m.layers, m.bricks, m.session_median, m.collection_median) for m in models]
    rows.append("-" * len(header))
    rows.append(
        _row(
            "total",
            sum(m.layers for m in models),
            sum(m.bricks for m in models),
            sum(m.session_median for m in models),
            sum(m.collection_median for m in models),
        )
    )
    return "\n".join(rows)


def _row(name: str, layers: int, bricks: int, session_s: float, collection_s: float) -> str:
    return (
        f"{name:<24} {layers:>6} {bricks:>6} {session_s * 1e3:>19.1f} {collection_s * 1e3:>15.1f}"
        f" {collection_s / session_s:>5.2f}x"
    )


def render_verdict(models: list[ModelTimes]) -> str:
    ratios = [m.collection_median / m.session_median for m in models]
    total = sum(m.collection_median for m in models) / sum(m.session_median for m in models)
    over = [f"{m.path.stem} {r:.2f}x" for m, r in zip(models, ratios) if r > TARGET_RATIO]
    if total > TARGET_RATIO:
        verdict = "NOT met"
    elif over:
        verdict = f"met in total, NOT met for {', '.join(over)}"
    else:
        verdict = "met, for every model"
    geometric_mean = statistics.geometric_mean(ratios)
    return "\n".join(
        [
            f"total ratio: {total:.2f}x (geometric mean of the per-model ratios: {geometric_mean:.2f}x)",
            f"target: collection costs no more than about {TARGET_RATIO:g}x session creation: {verdict}",
        ]
    )


def render_end_to_end(models: list[ModelTimes], enabled: tuple[float, str], disabled: tuple[float, str]) -> str:
    sessions_s = sum(m.session_median for m in models)
    return "\n".join(
        [
            "end to end, once (wall time includes interpreter and pytest start-up):",
            f"  pytest --collect-only, dlbricks on:  {enabled[0] * 1e3:8.1f} ms  (pytest: {enabled[1]})",
            f"  same, dlbricks off (start-up only):  {disabled[0] * 1e3:8.1f} ms  (no onnx/onnxruntime import)",
            f"  sum of session-creation medians:     {sessions_s * 1e3:8.1f} ms",
        ]
    )


def main() -> None:
    args = parse_args()
    paths = sorted(MODELS_DIR.glob("*.onnx"))
    models = measure(paths, args.granularity, args.rounds, args.cut)
    enabled, disabled = end_to_end(paths, args.granularity, args.cut)
    print(
        f"dlbricks collection vs onnxruntime {ort.__version__} session creation (CPU),"
        f" granularity {args.granularity}, cut {args.cut}, medians of {args.rounds} interleaved rounds\n"
    )
    print(render_table(models))
    print()
    print(render_verdict(models))
    print()
    print(render_end_to_end(models, enabled, disabled))


if __name__ == "__main__":
    main()
