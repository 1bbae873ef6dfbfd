"""Models that wait on reading their weights, estimated with and without their weights pushed out of the caches.

docs/method.rst ("Weights out of the caches") and docs/validation.rst give the figures. A brick that waits on
reading its weights is timed after as many bytes as the rest of its model reads were read (see
``pytest_dlbricks.timing.caches``). This runs the plugin as a user does, with ``--dlbricks-validate``, in
pairs of runs one after the other: as it is, and with that reading turned off (a pytest plugin written to a
scratch folder sets every brick's flush to none), so that the two meet the machine in the same stretch.
Per model and run it prints the estimate over the measured time (``ratio``, what accuracy scores), the same
in the paired rounds of validation (its bricks timed again right before each call of the model, so that the
machine's moves between bricks and model mostly cancel), the verdict and the run's wall time.

Without model paths it writes and times two chains of 16 MatMuls of one row by a square matrix: 1024x1024
(64 MiB of weights, beyond a 32 MiB last-level cache) and 512x512 (16 MiB, within it); ``--rows`` gives the
chains more rows, ``rows / 2`` FLOPs per byte of weights, to find where reading the weights stops mattering.
``--modes`` adds ``all``: every brick whose weights a core's cache cannot hold is read for, whatever its FLOPs
per byte. Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/cache_flush.py [--pairs 3] [--modes off,on,all] [--rows 1,8,64] [--threads 1] [--granularity 2]
                                [MODEL.onnx ... --dim NAME=SIZE ...]

A decoder at batch 1 is the real case: ``transformers``' ``GPT2LMHeadModel`` of the small size (12 layers of
768, random weights) exported with the TorchScript exporter, at ``--dim batch=1 --dim seq=8``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: A pytest plugin that turns the reading off, for the runs it is given to.
NO_FLUSH = '''"""Times every brick with its weights where its last call left them."""
from pytest_dlbricks.wiring import run_state

run_state.RunState.flush_bytes = lambda self, signature: 0
'''
#: A pytest plugin that reads before the calls of every brick whose weights a core's cache cannot hold, whatever
#: its FLOPs per byte of them.
ALL_FLUSH = '''"""Times every brick of weights beyond a core's cache after reading what the rest of its model reads."""
from pytest_dlbricks.timing import caches

caches.FLOPS_PER_BYTE = float("inf")
'''
#: The plugins of the modes other than the plugin's own (``on``).
MODE_PLUGINS = {"off": "no_flush", "all": "all_flush"}


def chain(width: int, layers: int = 16, rows: int = 1) -> onnx.ModelProto:
    """``layers`` MatMuls of ``rows`` x ``width`` by ``width`` x ``width`` matrices of random weights: ``rows / 2``
    FLOPs per byte of weights."""
    rng = np.random.default_rng(0)
    nodes, weights = [], []
    for layer in range(layers):
        weights.append(
            numpy_helper.from_array((rng.standard_normal((width, width)) * 0.03).astype(np.float32), f"w{layer}")
        )
        nodes.append(helper.make_node("MatMul", [f"x{layer}", f"w{layer}"], [f"x{layer + 1}"]))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [rows, width])],
        [helper.make_tensor_value_info(f"x{layers}", TensorProto.FLOAT, [rows, width])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run(folder: Path, models: list[Path], args: argparse.Namespace, mode: str, scratch: Path) -> dict:
    """One pytest session of the plugin on ``models``, its reading before calls as ``mode`` says; its JSON report."""
    report = scratch / f"report-{mode}.json"
    command = [
        sys.executable,
        "-m",
        "pytest",
        *map(str, models),
        "-c",
        str(scratch / "pytest.ini"),
        f"--rootdir={folder}",
        "-p",
        "no:cacheprovider",
        "-q",
        *(["-p", MODE_PLUGINS[mode]] if mode in MODE_PLUGINS else []),
        f"--dlbricks-granularity={args.granularity}",
        "--dlbricks-store=none",
        "--dlbricks-validate",
        f"--dlbricks-json={report}",
        *([f"--dlbricks-threads={args.threads}"] if args.threads else []),
        *[f"--dlbricks-dim={dim}" for dim in args.dim],
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(scratch), os.environ.get("PYTHONPATH")]))}
    completed = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if not report.exists():
        output = completed.stdout[-3000:] + completed.stderr[-2000:]
        sys.exit(f"pytest wrote no report (exit {completed.returncode}):\n{output}")
    return json.loads(report.read_text())


def accuracy(ratios: list[float]) -> float:
    """exp(-mean |ln ratio|), as the plugin scores accuracy."""
    return math.exp(-sum(abs(math.log(ratio)) for ratio in ratios) / len(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", type=Path, help="model files, all in one folder (default: two chains)")
    parser.add_argument("--pairs", type=int, default=3, help="rounds of runs, one per mode (default: %(default)s)")
    parser.add_argument(
        "--modes",
        default="off,on",
        help="off: no reading before calls; on: as the plugin reads; all: for every brick of weights beyond a"
        " core's cache, whatever its FLOPs per byte (default: %(default)s)",
    )
    parser.add_argument(
        "--rows", default="1", help="comma-separated rows of the chains' input: rows/2 FLOPs per byte of weights"
    )
    parser.add_argument("--threads", type=int, default=1, help="--dlbricks-threads, 0: onnxruntime's choice")
    parser.add_argument("--granularity", type=int, default=2)
    parser.add_argument("--dim", action="append", default=[], help="NAME=SIZE, as --dlbricks-dim")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlbricks-flush-") as name:
        scratch = Path(name)
        (scratch / "no_flush.py").write_text(NO_FLUSH)
        (scratch / "all_flush.py").write_text(ALL_FLUSH)
        modes = args.modes.split(",")
        (scratch / "pytest.ini").write_text("[pytest]\n")
        models = [path.resolve() for path in args.models]
        if not models:
            (scratch / "chains").mkdir()
            for rows in map(int, args.rows.split(",")):
                for width in (1024, 512):
                    models.append(scratch / "chains" / f"chain{width}x{rows}.onnx")
                    onnx.save(chain(width, rows=rows), models[-1])
        folder = models[0].parent
        rows: dict[str, dict[str, list[tuple[float, float]]]] = {}
        walls: dict[str, list[float]] = {mode: [] for mode in modes}
        for pair in range(args.pairs):
            for mode in modes:
                report = run(folder, models, args, mode, scratch)
                walls[mode].append(report["summary"]["wall_time_s"])
                verdict = report["verdict"]
                margin = verdict["margin"]
                print(
                    f"pair {pair + 1}, flush {mode}: verdict {'+-%.0f%%' % (100 * margin) if margin else 'none'}"
                    f" ({', '.join(f'{k} +-{v:.0%}' for k, v in verdict['sources'].items())}),"
                    f" wall {report['summary']['wall_time_s']:.1f} s",
                    file=sys.stderr,
                )
                for model in report["models"]:
                    if model.get("ratio") is not None:
                        rows.setdefault(Path(model["path"]).name, {mode: [] for mode in modes})[mode].append(
                            (model["ratio"], model.get("paired_ratio") or math.nan)
                        )
    print(f"{'model':24} {'flush':5} {'ratio (estimate / measured)':36} {'paired rounds':36}")
    for name, modes in rows.items():
        for mode, values in modes.items():
            ratios = ", ".join(f"{ratio:.3f}" for ratio, _ in values)
            paired = ", ".join(f"{value:.3f}" for _, value in values)
            print(f"{name:24} {mode:5} {ratios:36} {paired:36}")
    for mode in modes:
        ratios = [ratio for modes in rows.values() for ratio, _ in modes[mode]]
        if ratios:
            print(
                f"flush {mode}: accuracy {accuracy(ratios):.3f} over {len(ratios)} model runs;"
                f" wall time median {float(np.median(walls[mode])):.1f} s"
            )


if __name__ == "__main__":
    main()
