"""The CI gate on a noisy runner: no false alarm in unchanged runs, a regression caught.

Copies the bundled ``sample_models/`` into a temporary folder and runs pytest on them as CI would, one
command line for every run: each run saved (``--benchmark-autosave``) and compared with the latest saved run
(``--dlbricks-compare --dlbricks-compare-fail``). A second process keeps one core busy throughout.

1. **Unchanged runs**: a first run records the baseline, then ``--runs`` unchanged runs follow; none may
   fail the gate (exit status 1). Inconclusive runs (exit status 6) are counted apart.
2. **Regression check**: one model, ``tiny_resnet.onnx``, is replaced by a slower one: one or two
   convolutions widened from 3x3 to 5x5 or 7x7 (zero-padded weights, the same outputs and shapes): of all
   its convolutions, both widths and the pairs that may come close, the one that brings the whole model,
   timed interleaved with the original before the busy process starts (beside it, one variant's slowdown
   read from -30% to +100%), closest to ``--slowdown`` is chosen. ``--changed-runs`` runs of it follow, each
   from the state the unchanged runs left (their saved runs and brick store): every one must fail the gate,
   naming the model and the bricks.

Two costs (``--cost``):

* ``wall-clock`` (the default): fresh timings in every run (``--dlbricks-store=none``), gate 10%, a 15%
  slowdown, one changed run;
* ``simulated`` (``--dlbricks-cost=simulated``; needs valgrind and the ``simulated`` extra): gate 1%, a 5%
  slowdown, ten changed runs. ``--store none`` counts every brick afresh in every run, so the unchanged runs
  test how far counts repeat; ``--store kept`` keeps the brick store between runs, as a CI cache does, so
  an unchanged model's counts are reused and a changed one counts only its new bricks.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/gate.py [--cost wall-clock|simulated] [--store none|kept] [--runs N] [--changed-runs N]
                         [--threshold PCT] [--slowdown PCT] [--granularity G] [--no-load]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_MODELS = ROOT / "sample_models"
CHANGED_MODEL = "tiny_resnet.onnx"
PYTEST_INI = "[pytest]\n# Symbolic dimensions of the bundled sample models.\ndlbricks_dims =\n    batch=1\n    seq=16\n"
BUSY_LOOP = "while True:\n    pass\n"
REGRESSION, INCONCLUSIVE = 1, 6
#: Two widenings are timed together when their slowdowns alone add up to within this of the target.
PAIR_MARGIN = 0.04


@dataclass
class Run:
    name: str
    exit_code: int
    seconds: float
    #: Per model path, its comparison as the JSON report has it (``change``, ``judged``, ``verdict``...).
    models: dict[str, dict]
    noise: float | None
    output: str


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cost",
        choices=("wall-clock", "simulated"),
        default="wall-clock",
        help="--dlbricks-cost. Default: %(default)r",
    )
    parser.add_argument(
        "--store",
        choices=("none", "kept"),
        default="none",
        help="none: fresh figures in every run; kept: the brick store kept between runs. Default: %(default)r",
    )
    parser.add_argument("--runs", metavar="N", type=int, default=10, help="Unchanged runs. Default: %(default)r")
    parser.add_argument(
        "--changed-runs", metavar="N", type=int, help="Runs of the changed model. Default: 1, simulated 10"
    )
    parser.add_argument("--threshold", metavar="PCT", help="--dlbricks-compare-fail. Default: '10%%', simulated '1%%'")
    parser.add_argument(
        "--slowdown", metavar="PCT", type=float, help="Slowdown of the changed model. Default: 15, simulated 5"
    )
    parser.add_argument(
        "--granularity", metavar="G", type=int, default=2, help="Layers per brick. Default: %(default)r"
    )
    parser.add_argument(
        "--threads",
        metavar="N",
        type=int,
        default=0,
        help="--dlbricks-threads, also for timing the variant (0: onnxruntime's default). Default: %(default)r",
    )
    parser.add_argument("--no-load", action="store_true", help="Leave out the process keeping one core busy.")
    args = parser.parse_args()
    simulated = args.cost == "simulated"
    if args.changed_runs is None:
        args.changed_runs = 10 if simulated else 1
    if args.threshold is None:
        args.threshold = "1%" if simulated else "10%"
    if args.slowdown is None:
        args.slowdown = 5.0 if simulated else 15.0
    return args


def widened(model: onnx.ModelProto, conv_name: str, kernel: int) -> onnx.ModelProto:
    """``model`` with the 3x3 Conv ``conv_name`` widened to ``kernel``: zero-padded weights, the same outputs."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    conv = next(node for node in copy.graph.node if node.name == conv_name)
    weights = next(tensor for tensor in copy.graph.initializer if tensor.name == conv.input[1])
    grow = (kernel - 3) // 2
    wide = np.pad(numpy_helper.to_array(weights), [(0, 0), (0, 0), (grow, grow), (grow, grow)])
    weights.CopyFrom(numpy_helper.from_array(wide, conv.input[1]))
    for attribute in conv.attribute:
        if attribute.name == "kernel_shape":
            attribute.CopyFrom(helper.make_attribute("kernel_shape", [kernel, kernel]))
        elif attribute.name == "pads":
            attribute.CopyFrom(helper.make_attribute("pads", [value + grow for value in attribute.ints]))
    return copy


def slowdown(
    original: onnx.ModelProto, changed: onnx.ModelProto, threads: int, rounds: int = 15, calls: int = 40
) -> float:
    """How much slower ``changed`` runs than ``original`` on ``threads`` intra-op threads, timed whole,
    interleaved round by round."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    sessions = [
        ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
        for m in (original, changed)
    ]
    feed = {"image": np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)}

    def median_call(session: ort.InferenceSession) -> float:
        for _ in range(3):
            session.run(None, feed)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            session.run(None, feed)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return statistics.median(median_call(sessions[1]) / median_call(sessions[0]) for _ in range(rounds)) - 1


def regressed_model(path: Path, target: float, threads: int) -> tuple[onnx.ModelProto, str, float]:
    """The widening of one 3x3 Conv of the model at ``path``, or of two, that slows it closest to ``target``
    (one alone may not come close: tiny_resnet's give about +4%, +10%, +13%, +21% and +26% or more), and
    its slowdown timed again, apart from the choice."""
    model = onnx.load(str(path))
    convs = [
        node.name
        for node in model.graph.node
        if node.op_type == "Conv" and next(a.ints for a in node.attribute if a.name == "kernel_shape") == [3, 3]
    ]
    measured: dict[tuple[tuple[str, int], ...], float] = {
        ((name, kernel),): slowdown(model, widened(model, name, kernel), threads) for name in convs for kernel in (5, 7)
    }
    pairs = [
        first + second
        for first, second in itertools.combinations(list(measured), 2)
        if first[0][0] != second[0][0] and abs(measured[first] + measured[second] - target) < PAIR_MARGIN
    ]
    measured.update({pair: slowdown(model, widened_all(model, pair), threads) for pair in pairs})
    best = min(measured, key=lambda choice: abs(measured[choice] - target))
    variant = widened_all(model, best)
    described = " and ".join(f"{name} widened 3x3 -> {kernel}x{kernel}" for name, kernel in best)
    return variant, described, slowdown(model, variant, threads, rounds=31)


def widened_all(model: onnx.ModelProto, widenings: tuple[tuple[str, int], ...]) -> onnx.ModelProto:
    for name, kernel in widenings:
        model = widened(model, name, kernel)
    return model


def run_pytest(workdir: Path, name: str, options: list[str]) -> Run:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, "models"]
    start = time.perf_counter()
    result = subprocess.run(command, check=False, cwd=workdir, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode not in (0, REGRESSION, INCONCLUSIVE):
        sys.exit(f"pytest failed with exit code {result.returncode}:\n{result.stdout}{result.stderr}")
    report = json.loads((workdir / "report.json").read_text())
    models = {model["path"]: model for model in (report.get("comparison") or {}).get("models", [])}
    run = Run(name, result.returncode, seconds, models, report["summary"].get("noise"), result.stdout)
    print(f"{name}: exit {run.exit_code} in {seconds:.1f} s, run noise {_percent(run.noise)}", file=sys.stderr)
    return run


def main() -> None:
    args = parse_args()
    options = [
        f"--dlbricks-granularity={args.granularity}",
        f"--dlbricks-cost={args.cost}",
        *(["--dlbricks-store=none"] if args.store == "none" else []),
        "--benchmark-autosave",
        "--dlbricks-compare",
        f"--dlbricks-compare-fail={args.threshold}",
        "--dlbricks-json=report.json",
        *([f"--dlbricks-threads={args.threads}"] if args.threads else []),
    ]
    # The variant's true slowdown is a property of the code: measured on the quiet machine, before the load.
    model, conv, true_slowdown = regressed_model(SAMPLE_MODELS / CHANGED_MODEL, args.slowdown / 100, args.threads)
    print(f"variant: {conv}, whole model {true_slowdown:+.1%} (timed interleaved, no load)", file=sys.stderr)
    load = None if args.no_load else subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        with tempfile.TemporaryDirectory(prefix="dlbricks-gate-") as tmp:
            workdir = Path(tmp)
            (workdir / "models").mkdir()
            for path in sorted(SAMPLE_MODELS.glob("*.onnx")):
                shutil.copy(path, workdir / "models" / path.name)
            (workdir / "pytest.ini").write_text(PYTEST_INI)
            baseline = run_pytest(workdir, "baseline", options)
            unchanged = [run_pytest(workdir, f"unchanged {index}", options) for index in range(1, args.runs + 1)]
            onnx.save(model, str(workdir / "models" / CHANGED_MODEL))
            regressed = []
            kept = workdir / "kept"  # the saved runs and the brick store the unchanged runs left
            shutil.copytree(workdir / ".benchmarks", kept)
            for index in range(1, args.changed_runs + 1):
                shutil.rmtree(workdir / ".benchmarks")
                shutil.copytree(kept, workdir / ".benchmarks")
                regressed.append(run_pytest(workdir, f"changed {index}", options))
    finally:
        if load is not None:
            load.kill()
            load.wait()
    report(args, baseline, unchanged, regressed, conv, true_slowdown)


def report(
    args: argparse.Namespace, baseline: Run, unchanged: list[Run], regressed: list[Run], conv: str, true: float
) -> None:
    load = "no other load" if args.no_load else "a second process keeping one core busy"
    threads = f", {args.threads} intra-op thread(s)" if args.threads else ""
    figures = "simulated cost" if args.cost == "simulated" else "wall-clock timings"
    store = "fresh (--dlbricks-store=none)" if args.store == "none" else "the brick store kept between runs"
    print(
        f"pytest-dlbricks gate: {len(list(SAMPLE_MODELS.glob('*.onnx')))} sample models, granularity"
        f" {args.granularity}{threads}, {figures}, {store}, gate {args.threshold}, {load}\n"
    )
    print(f"baseline run: exit {baseline.exit_code} (records the baseline)")
    print(f"\n{'run':<14} {'exit':>4} {'noise':>6} {'largest measured change':>34} {'verdicts':>10}")
    for run in unchanged:
        changes = {path: model["change"] for path, model in run.models.items() if model.get("change") is not None}
        worst = max(changes, key=lambda path: abs(changes[path]), default=None)
        largest = f"{changes[worst]:+.1%} ({Path(worst).name})" if worst else "-"
        verdicts = ",".join(sorted({model["verdict"] for model in run.models.values()}))
        print(f"{run.name:<14} {run.exit_code:>4} {_percent(run.noise):>6} {largest:>34} {verdicts:>10}")
    failed = sum(run.exit_code == REGRESSION for run in unchanged)
    unsure = sum(run.exit_code == INCONCLUSIVE for run in unchanged)
    print(
        f"\nunchanged runs: {failed} of {len(unchanged)} failed the gate, {unsure} inconclusive:"
        f" {'met' if failed == 0 else 'NOT met'}"
    )
    print(f"changed model: {conv}, whole model {true:+.1%} slower (timed interleaved, no load)")
    path = f"models/{CHANGED_MODEL}"
    caught = 0
    for run in regressed:
        model = run.models.get(path, {})
        judged = model.get("judged") or {}
        message = run.output.split("performance regression:")[-1] if run.exit_code == REGRESSION else ""
        named = path in message and "bricks that changed: " in message
        caught += named
        interval = f" [{judged['low']:+.1%}, {judged['high']:+.1%}]" if judged else ""
        print(
            f"  {run.name}: estimate {_percent(model.get('change'), signed=True)} as measured,"
            f" {_percent(judged.get('change'), signed=True)}{interval} at the baseline's machine speed"
            f" (run noise {_percent(run.noise)}); verdict {model.get('verdict', '-')}, exit {run.exit_code}"
            f"{'' if named else ', model and bricks NOT named'}"
        )
    print(
        f"regression check: {caught} of {len(regressed)} changed runs failed the gate naming the model and its"
        f" bricks: {'met' if caught == len(regressed) else 'NOT met'}"
    )
    section = regressed[-1].output.split("- dlbricks: median estimates compared with")[-1]
    print("\n".join(line for line in section.splitlines()[1:] if not line.startswith("=")))


def _percent(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else f"{value:+.1%}" if signed else f"{value:.1%}"


if __name__ == "__main__":
    main()
