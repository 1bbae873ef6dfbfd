"""Peak resident memory of collection: one model at a time, and no float weight read unless onnxruntime must.

Each figure is the peak resident set size (Linux's VmHWM) of a fresh Python process that runs
``pytest --collect-only`` with dlbricks on one workload, next to the same process collecting a tiny
model: the *floor*, what importing pytest, onnx and onnxruntime costs. For contrast, a process that
loads the external-data model with ``onnx.load`` (reading its weights, as a naive loader would) is
measured too. Workloads, written into a temporary folder, each collected with both cuts:

* the 9 light models of the onnx wheel, whose weights ConstantOfShape builds at run time;
* one model whose weights (``--external-mib``) lie in an external data file beside it;
* one, then five, models holding ``--inline-mib`` of weights each inside the file: five must cost
  what one costs, since models are collected one after the other and none is kept.

With ``--dlbricks-cut=original`` collection never reads a float weight: it costs the model file
(read whole, then parsed). The default ``optimized`` cut has onnxruntime build and optimize a
session of each model, which materialises its weights (and folds ConstantOfShape weights into
real ones) while that model is collected.

The machine is shared: rounds are interleaved (every workload once per round) and medians reported.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/memory.py [--rounds R] [--external-mib N] [--inline-mib N]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from pytest_dlbricks.cut.loading import load_model

LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SAMPLE_MODELS = Path(__file__).resolve().parent.parent / "sample_models"
#: Width of the square MatMul weights of the generated models: 16 MiB each.
WIDTH = 2048
INLINE_MODELS = 5
MIB = 1 << 20
#: A child process ends by printing its peak resident memory in KiB: VmHWM, the high-water mark of
#: its own address space (ru_maxrss would also count the parent's, inherited through fork).
PEAK_LINE = "dlbricks-peak-kib"
_CHILD = """
import re, sys
{action}
status = open("/proc/self/status").read()
print("{marker}", re.search(r"^VmHWM:\\s+(\\d+) kB", status, re.MULTILINE).group(1), file=sys.stderr)
"""
COLLECT = (
    "import pytest; pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', '--dlbricks-granularity=1',"
    " '--dlbricks-cut={cut}', {folder!r}])"
)
CUTS = ("optimized", "original")
ONNX_LOAD = "import onnx; onnx.load({path!r})"


@dataclass
class Workload:
    """A process to measure, the weights its models hold, and its peaks in MiB, one per round."""

    name: str
    action: str
    weights_mib: float | None = None
    #: Whether it runs collection, so that the floor (collection's imports) applies to it.
    collects: bool = True
    peaks_mib: list[float] = field(default_factory=list)

    @property
    def peak_mib(self) -> float:
        return statistics.median(self.peaks_mib)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", metavar="R", type=int, default=3, help="Interleaved rounds. Default: %(default)r")
    parser.add_argument(
        "--external-mib", metavar="N", type=int, default=512, help="Weights in external data. Default: %(default)r"
    )
    parser.add_argument(
        "--inline-mib",
        metavar="N",
        type=int,
        default=100,
        help="Weights inside each of five models. Default: %(default)r",
    )
    args = parser.parse_args()
    if min(args.rounds, args.external_mib, args.inline_mib) < 1:
        parser.error("--rounds, --external-mib and --inline-mib must be at least 1")
    return args


def matmul_chain(layers: int, weight: Callable[[str], TensorProto]) -> onnx.ModelProto:
    """``layers`` MatMuls of a ``[1, WIDTH]`` input by ``[WIDTH, WIDTH]`` float weights made by ``weight(name)``."""
    nodes, weights, current = [], [], "x"
    for index in range(layers):
        weights.append(weight(f"w{index}"))
        nodes.append(helper.make_node("MatMul", [current, f"w{index}"], [f"h{index}"]))
        current = f"h{index}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [1, WIDTH])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime accepts; make_model stamps the newest
    return model


def layers_for(mib: int) -> int:
    return max(1, round(mib * MIB / (WIDTH * WIDTH * 4)))


def write_external_model(folder: Path, mib: int) -> Path:
    """A chain whose weights are written straight to ``weights.bin``, never all in memory here either."""
    folder.mkdir()
    values = np.full((WIDTH, WIDTH), 0.01, dtype=np.float32)
    with (folder / "weights.bin").open("wb") as data:

        def weight(name: str) -> TensorProto:
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[WIDTH, WIDTH])
            for key, value in (("location", "weights.bin"), ("offset", data.tell()), ("length", values.nbytes)):
                tensor.external_data.add(key=key, value=str(value))
            tensor.data_location = TensorProto.EXTERNAL
            values.tofile(data)
            return tensor

        model = matmul_chain(layers_for(mib), weight)
    path = folder / "external.onnx"
    onnx.save(model, str(path))
    return path


def write_inline_models(folder: Path, mib: int) -> None:
    folder.mkdir()
    values = np.full((WIDTH, WIDTH), 0.01, dtype=np.float32)
    for index in range(INLINE_MODELS):
        model = matmul_chain(layers_for(mib), lambda name: onnx.numpy_helper.from_array(values, name))
        onnx.save(model, str(folder / f"inline{index}.onnx"))


def light_weights_mib() -> float:
    """What the light models' weights take once built (the optimized cut has onnxruntime build them)."""
    total = 0
    for path in sorted(LIGHT_MODELS.glob("*.onnx")):
        graph = load_model(path)
        total += sum(graph.specs[name].nbytes for name in graph.weights)
    return total / MIB


def measure(action: str) -> float:
    """Peak resident MiB of a fresh Python process running ``action``."""
    result = subprocess.run(
        [sys.executable, "-c", _CHILD.format(action=action, marker=PEAK_LINE)],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(rf"^{PEAK_LINE} (\d+)$", result.stderr, flags=re.MULTILINE)
    if found is None:
        sys.exit(f"measuring {action!r} failed:\n{result.stdout}{result.stderr}")
    return int(found.group(1)) / 1024


def render(workloads: list[Workload], floor: Workload, rounds: int) -> str:
    header = f"{'workload':<44} {'weights (MiB)':>13} {'peak RSS (MiB)':>14} {'above floor (MiB)':>17}"
    rows = [header, "-" * len(header)]
    for workload in [floor, *workloads]:
        weights = f"{workload.weights_mib:.0f}" if workload.weights_mib is not None else "-"
        above = str(round(workload.peak_mib - floor.peak_mib)) if workload.collects else "-"
        rows.append(f"{workload.name:<44} {weights:>13} {workload.peak_mib:>14.0f} {above:>17}")
    return f"peak resident memory, medians of {rounds} interleaved rounds\n\n" + "\n".join(rows)


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="dlbricks-memory-") as tmp:
        root = Path(tmp)
        tiny = root / "tiny"
        tiny.mkdir()
        shutil.copy(SAMPLE_MODELS / "mlp.onnx", tiny)
        light = root / "light"
        shutil.copytree(LIGHT_MODELS, light, ignore=shutil.ignore_patterns("*.pb", "test_data_set*"))
        external = write_external_model(root / "external", args.external_mib)
        write_inline_models(root / "inline", args.inline_mib)
        (root / "inline1").mkdir()
        shutil.copy(root / "inline" / "inline0.onnx", root / "inline1")
        external_mib = (external.parent / "weights.bin").stat().st_size / MIB
        inline_mib = (root / "inline1" / "inline0.onnx").stat().st_size / MIB

        floor = Workload("floor: collect one tiny model", COLLECT.format(cut="original", folder=str(tiny)))
        light_mib = light_weights_mib()
        workloads = []
        for cut in CUTS:
            collect = {
                name: COLLECT.format(cut=cut, folder=str(root / name))
                for name in ("light", "external", "inline1", "inline")
            }
            workloads += [
                Workload(f"{cut}: the 9 light models", collect["light"], light_mib),
                Workload(f"{cut}: the external-data model", collect["external"], external_mib),
                Workload(f"{cut}: 1 model with inline weights", collect["inline1"], inline_mib),
                Workload(
                    f"{cut}: {INLINE_MODELS} models with inline weights", collect["inline"], INLINE_MODELS * inline_mib
                ),
            ]
        workloads.append(
            Workload(
                "contrast: onnx.load the external-data model",
                ONNX_LOAD.format(path=str(external)),
                external_mib,
                collects=False,
            )
        )
        for index in range(args.rounds):
            for workload in [floor, *workloads]:
                workload.peaks_mib.append(measure(workload.action))
            print(f"round {index + 1}/{args.rounds} done", file=sys.stderr)
    print(render(workloads, floor, args.rounds))


if __name__ == "__main__":
    main()
