"""What the brick result store saves: wall time of a first run, of a re-run, of a re-run after a model changed.

Copies the bundled ``sample_models/`` and the 9 real models shipped in the onnx wheel
(``onnx/backend/test/data/light``) into a temporary folder and runs pytest on them three times, the way
CI would on three commits, each run saving its estimates (``--benchmark-autosave``) and the later ones
comparing with the previous run (``--dlbricks-compare --dlbricks-compare-fail``):

1. first run: every distinct brick is timed and saved in the store;
2. nothing changed: every brick time comes from the store;
3. one layer of one model changed (a 3x3 Conv of ``tiny_resnet.onnx`` becomes 7x7, same output
   shape): only the bricks that changed are timed, and the gate is expected to flag that model.

Targets: run 2 takes at least 20x less wall time than run 1, run 3 at least 10x less, and run 3 fails
naming the changed model. Wall time includes interpreter start-up, imports and collection. Few timing
rounds keep the whole script to a minute or two; the ratios grow with more rounds.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/incremental.py [--granularity G] [--min-rounds N] [--max-time SECONDS] [--threshold PCT]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_MODELS = ROOT / "sample_models"
LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
CHANGED_MODEL = "tiny_resnet.onnx"
#: Wall-time reductions the store must reach, against the first run.
TARGET_UNCHANGED = 20.0
TARGET_CHANGED = 10.0
PYTEST_INI = "[pytest]\n# Symbolic dimensions of the bundled sample models.\ndlbricks_dims =\n    batch=1\n    seq=16\n"


@dataclass
class Run:
    name: str
    seconds: float
    exit_code: int
    distinct: int
    reused: int
    output: str

    @property
    def timed(self) -> int:
        return self.distinct - self.reused


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--granularity", metavar="G", type=int, default=2, help="Layers per brick. Default: %(default)r"
    )
    parser.add_argument(
        "--min-rounds", metavar="N", type=int, default=5, help="--benchmark-min-rounds. Default: %(default)r"
    )
    parser.add_argument(
        "--max-time", metavar="SECONDS", default="0.02", help="--benchmark-max-time. Default: %(default)r"
    )
    parser.add_argument(
        "--threshold", metavar="PCT", default="10%", help="--dlbricks-compare-fail. Default: %(default)r"
    )
    return parser.parse_args()


def widen_a_conv(path: Path) -> str:
    """Turn the middle 3x3 Conv of the model at ``path`` into a 7x7 one with the same output shape."""
    model = onnx.load(str(path))
    convs = [
        node
        for node in model.graph.node
        if node.op_type == "Conv" and helper.get_attribute_value(_attribute(node, "kernel_shape")) == [3, 3]
    ]
    conv = convs[len(convs) // 2]
    weights = {tensor.name: tensor for tensor in model.graph.initializer}
    old = numpy_helper.to_array(weights[conv.input[1]])
    new = np.random.default_rng(0).uniform(0.01, 0.1, (*old.shape[:2], 7, 7)).astype(old.dtype)
    weights[conv.input[1]].CopyFrom(numpy_helper.from_array(new, conv.input[1]))
    _attribute(conv, "kernel_shape").CopyFrom(helper.make_attribute("kernel_shape", [7, 7]))
    _attribute(conv, "pads").CopyFrom(helper.make_attribute("pads", [3, 3, 3, 3]))
    onnx.save(model, str(path))
    return f"{path.name}: Conv {conv.name or conv.output[0]} 3x3 -> 7x7"


def _attribute(node: onnx.NodeProto, name: str) -> onnx.AttributeProto:
    return next(attribute for attribute in node.attribute if attribute.name == name)


def run_pytest(workdir: Path, name: str, options: list[str]) -> Run:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, "models"]
    print(f"{name}: {' '.join(command[1:])}", file=sys.stderr)
    start = time.perf_counter()
    result = subprocess.run(command, check=False, cwd=workdir, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode not in (0, 1, 6):  # 6: the gate could not tell
        sys.exit(f"pytest failed with exit code {result.returncode}:\n{result.stdout}{result.stderr}")
    distinct = re.search(r"(\d+) distinct", result.stdout)
    reused = re.search(r"(\d+) brick times reused", result.stdout)
    if distinct is None:
        sys.exit(f"no dlbricks table in the output of {' '.join(command)}:\n{result.stdout}{result.stderr}")
    return Run(name, seconds, result.returncode, int(distinct[1]), int(reused[1]) if reused else 0, result.stdout)


def comparison_section(output: str) -> str:
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if "estimates compared with" in line), len(lines))
    return "\n".join(line for line in lines[start:] if not line.startswith("=")).rstrip()


def main() -> None:
    args = parse_args()
    timing = [
        f"--dlbricks-granularity={args.granularity}",
        f"--benchmark-min-rounds={args.min_rounds}",
        f"--benchmark-max-time={args.max_time}",
        "--benchmark-autosave",
    ]
    gate = ["--dlbricks-compare", f"--dlbricks-compare-fail={args.threshold}"]
    models = sorted(SAMPLE_MODELS.glob("*.onnx")) + sorted(LIGHT_MODELS.glob("*.onnx"))
    with tempfile.TemporaryDirectory(prefix="dlbricks-incremental-") as tmp:
        workdir = Path(tmp)
        (workdir / "models").mkdir()
        for path in models:
            shutil.copy(path, workdir / "models" / path.name)
        (workdir / "pytest.ini").write_text(PYTEST_INI)
        first = run_pytest(workdir, "first run", timing)
        unchanged = run_pytest(workdir, "nothing changed", [*timing, *gate])
        change = widen_a_conv(workdir / "models" / CHANGED_MODEL)
        changed = run_pytest(workdir, "one layer changed", [*timing, *gate])
    runs = [first, unchanged, changed]
    print(
        f"pytest-dlbricks incremental runs: {len(models)} models ({len(list(SAMPLE_MODELS.glob('*.onnx')))} sample,"
        f" {len(list(LIGHT_MODELS.glob('*.onnx')))} light), granularity {args.granularity},"
        f" --benchmark-min-rounds={args.min_rounds} --benchmark-max-time={args.max_time},"
        f" gate {args.threshold}; changed: {change}\n"
    )
    print(f"{'run':<20} {'wall time':>10} {'vs first':>9} {'timed':>6} {'reused':>7} {'exit':>5}")
    for run in runs:
        ratio = first.seconds / run.seconds
        print(f"{run.name:<20} {run.seconds:>8.2f} s {ratio:>8.1f}x {run.timed:>6} {run.reused:>7} {run.exit_code:>5}")
    print()
    flagged = changed.exit_code == 1 and f"models/{CHANGED_MODEL}" in changed.output.split("performance regression")[-1]
    checks = [
        (f"nothing changed: at least {TARGET_UNCHANGED:g}x less wall time", first.seconds / unchanged.seconds),
        (f"one layer changed: at least {TARGET_CHANGED:g}x less wall time", first.seconds / changed.seconds),
    ]
    for (label, ratio), target in zip(checks, (TARGET_UNCHANGED, TARGET_CHANGED)):
        print(f"{label}: {ratio:.1f}x, {'met' if ratio >= target else 'NOT met'}")
    print(f"nothing changed: gate passes: {'met' if unchanged.exit_code == 0 else 'NOT met'}")
    print(f"one layer changed: gate flags models/{CHANGED_MODEL}: {'met' if flagged else 'NOT met'}")
    print(f"\nrun 3, {comparison_section(changed.output)}")


if __name__ == "__main__":
    main()
