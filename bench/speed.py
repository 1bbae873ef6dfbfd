"""What a run of the plugin costs, next to benchmarking every model end to end with pytest-benchmark.

The method exists to save benchmarking time, so the yardstick is what a user would write instead:
one pytest-benchmark test per model that creates an onnxruntime session and times ``session.run``
on the whole model, at the same precision (``--benchmark-precision`` at the plugin's
``--dlbricks-precision`` and confidence). Both run as a user runs them, each in a pytest process of
its own, one after the other in this script's run, so that their ratio compares things measured
close together on a shared machine. Scenarios, each the plugin beside the baseline:

* ``first``: a first run, brick store empty;
* ``unchanged``: a re-run with nothing changed (brick times and cut models come from the store);
* ``changed``: a re-run after one layer of one model changed (an activation replaced by another);
* ``sweep``: a first run at several sizes of one dimension (``--sweep-dim``, default batch 1,2,4,8),
  on the models that have that dimension; the baseline times every model at every size;
* ``variants``: a first run on k fine-tuned variants of one model (``--variant-of``, default a ResNet-50
  where there is one; k from ``--variants``, default 4 and 8): its layers, every weight scaled by noise of
  its own, and every quantized one (8-bit integers of two or more dimensions) moved by a step of its own
  (weights that old exporters compute with ConstantOfShape are made real weights first), one row per k
  (``variants4``, ``variants8``).
* ``family``: a first run on a family of three sizes of one architecture: ResNet-10, -18 and -34 as torchvision
  lays them out (basic blocks of two 3x3 convolutions, 64 to 512 channels, batch norms folded into the
  convolutions as onnxruntime folds them, random weights, 224x224 at batch 1), built here: the deeper members
  repeat the shallower ones' layers, as the sizes of a real family do;
* ``history``: a model's version history as CI runs it: ``--commits`` commits (default 10), each changing one
  more activation of one model (the swappable model with the most activations) while the others stay, every
  commit a run of the whole suite; the plugin keeps its store from commit to commit (filled by a run of the
  commit before the first, not counted), the baseline times every model end to end at every commit. Both
  sides' times are the sums over the commits.

Prints, per scenario, both whole-process times and their ratio (median and range over
``--repeat`` rounds), the peak memory of both and of the plugin's collection, and where the plugin's
time goes: process start, collection, and per brick item its fixed cost (everything but the
rounds pytest-benchmark times) split into session creation, the first run that checks the brick,
the call-overhead measurement, the machine's peak, input rewriters, the budget's one timed call, the
speed trace's reference calls around the rounds (and its waits for the machine's fast state),
pytest-benchmark's calibration, saving the time in the store, and pytest's own per-item work; then the timed rounds
themselves and the report at the end.

The split is learned by this file acting as a pytest plugin inside every pytest process it starts
(``-p speed``): it wraps the functions named above with timers and writes what it saw to a JSON file.

Models come from the zoo of ``bench/zoo/build.py`` (its manifest gives each model's symbolic
dimensions; all models run in one session, each given its own by a pattern, as in ``bench/zoo.py``), or
with ``--light`` from the 9 CNNs of the onnx wheel.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/speed.py [--only NAMES | --subset ci|all] [--light] [--scenarios first,unchanged,changed,sweep]
                          [--granularity 2] [--precision 0.02] [--repeat 1] [--sweep-dim batch --sizes 1,2,4,8]
                          [--variant-of NAME --variants 4,8] [--commits 10]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from zoo_manifest import dim_options, read_manifest, select

DEFAULT_CACHE = Path("~/.cache/pytest-dlbricks/zoo").expanduser()
#: Environment variable naming the file the plugin part of this script writes its figures to.
PROBE_OUT = "DLBRICKS_SPEED_OUT"
#: The plugin's confidence level for its precision (items.PRECISION_CONFIDENCE), given to the baseline too.
CONFIDENCE = 0.95
#: Activations a changed layer swaps, each for the next: same shapes, another brick.
SWAPS = {"Relu": "Sigmoid", "Sigmoid": "Relu", "Tanh": "Sigmoid", "HardSwish": "Relu", "LeakyRelu": "Relu"}
#: Basic blocks per stage of the family's members: torchvision's ResNet-18 and -34, and one a stage for a ResNet-10.
FAMILY = {"resnet10": (1, 1, 1, 1), "resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}
#: Relative spread of the noise each fine-tuned variant scales its weights by.
TUNING_NOISE = 0.05
#: Float tensors of more values than this are weights to vary (smaller ones may steer computation).
MAX_KEPT_FLOATS = 16
#: Phases of a brick item's fixed cost, in the order printed.
PHASES = ("session", "check", "overhead", "peak", "rewriters", "budget", "trace", "calibration", "store", "pytest")

BASELINE_TEST = """\
import numpy as np
import onnxruntime as ort
import pytest

MODELS = {models!r}
SIZES = {sizes!r}
TYPES = {{"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
         "tensor(bool)": np.bool_, "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}}


def feeds(session, dims):
    rng = np.random.default_rng(0)
    values = {{}}
    for value in session.get_inputs():
        shape = [d if isinstance(d, int) else dims.get(d, 1) for d in value.shape]
        dtype = TYPES.get(value.type, np.int64)
        kind = np.dtype(dtype).kind
        values[value.name] = (rng.random(shape) + 0.5).astype(dtype) if kind == "f" else np.zeros(shape, dtype)
    return values


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("path,dims", MODELS, ids=[path.rsplit("/", 1)[-1] for path, _ in MODELS])
def test_model(benchmark, path, dims, size):
    dims = {{**dims, **({{}} if size is None else {{SWEPT: size}})}}
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    benchmark(session.run, None, feeds(session, dims))
"""


# The plugin part: loaded with -p speed in every pytest process this script starts.


class _Probe:
    """Times phases of the current item, each exclusive of the phases nested in it."""

    def __init__(self) -> None:
        self.item: dict[str, Any] | None = None
        self.stack: list[float] = []
        self.items: list[dict[str, Any]] = []
        self.figures: dict[str, Any] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        self.stack.append(0.0)
        try:
            yield
        finally:
            total = time.perf_counter() - start
            nested = self.stack.pop()
            if self.stack:
                self.stack[-1] += total
            if self.item is not None:
                phases = self.item["phases"]
                phases[name] = phases.get(name, 0.0) + total - nested

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        original = getattr(owner, attribute, None)
        if original is None:  # a version of the plugin without it (an older one, on PYTHONPATH)
            return

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)


_probe = _Probe()


def _peak_bytes() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(PROBE_OUT) is None:
        return
    from pytest_benchmark.fixture import BenchmarkFixture

    _probe.wrap(BenchmarkFixture, "_calibrate_timer", "calibration")
    _probe.wrap(BenchmarkFixture, "_raw", "timing")
    _probe.wrap(BenchmarkFixture, "_raw_pedantic", "timing")
    try:
        from pytest_dlbricks.storage import store
        from pytest_dlbricks.timing import running, speed_trace
        from pytest_dlbricks.wiring import engine, items
    except ImportError:
        return
    _probe.wrap(items, "_budget_rounds", "budget")
    _probe.wrap(store.Shelf, "put", "store")
    _probe.wrap(running.BrickRunner, "__init__", "session")
    _probe.wrap(running.BrickRunner, "check", "check")
    for method in ("settled", "now", "sample_if_due"):
        _probe.wrap(speed_trace.SpeedTrace, method, "trace")
    _probe.wrap(running, "input_rewriter", "rewriters")
    _probe.wrap(engine.DLBricksRun, "measure_overhead", "overhead")
    _probe.wrap(engine.DLBricksRun, "measure_peak", "peak")
    measure_run = engine.measure_run

    def timed_measure_run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return measure_run(*args, **kwargs)
        finally:
            _probe.figures["measure_run_s"] = time.perf_counter() - start

    engine.measure_run = timed_measure_run


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Any:
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        _probe.figures["collection_s"] = time.perf_counter() - start
        _probe.figures["collection_peak_bytes"] = _peak_bytes()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Any:
    record: dict[str, Any] = {"brick": item.name.startswith("brick["), "phases": {}, "outcome": "passed"}
    _probe.item = record
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        record["protocol_s"] = time.perf_counter() - start
        _probe.items.append(record)
        _probe.item = None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _probe.item is not None and report.outcome != "passed":
        _probe.item["outcome"] = report.outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop() -> Any:
    try:
        return (yield)
    finally:
        _probe.figures["loop_end"] = time.perf_counter()


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary() -> Any:
    # The session's end is timed from the end of the items, not by a wrapper of its own: the plugin composes
    # in a wrapper that runs first, which would leave its work out of the report's time.
    start = time.perf_counter()
    if "loop_end" in _probe.figures:
        _probe.figures["finish_s"] = start - _probe.figures.pop("loop_end")
    try:
        return (yield)
    finally:
        _probe.figures["summary_s"] = time.perf_counter() - start


def pytest_unconfigure() -> None:
    out = os.environ.get(PROBE_OUT)
    if out is not None:
        Path(out).write_text(json.dumps({**_probe.figures, "peak_bytes": _peak_bytes(), "items": _probe.items}))


# The script.


@dataclass
class Process:
    """One pytest process: its whole time and what the probe saw."""

    seconds: float
    exit_code: int
    figures: dict[str, Any]

    @property
    def items(self) -> list[dict[str, Any]]:
        return self.figures.get("items", [])


@dataclass
class Run:
    """One side of a scenario: the pytest processes it took (one per run, one per commit in a history)."""

    processes: list[Process] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.processes)

    def total(self, key: str) -> float:
        return sum(p.figures.get(key) or 0.0 for p in self.processes)

    def peak(self, key: str) -> int:
        return max((p.figures.get(key) or 0 for p in self.processes), default=0)

    @property
    def items(self) -> list[dict[str, Any]]:
        return [item for p in self.processes for item in p.items]

    @property
    def exit_codes(self) -> list[int]:
        return [p.exit_code for p in self.processes]


@dataclass
class Model:
    name: str
    path: Path
    dims: dict[str, int]


def main() -> None:
    args = parse_args()
    scenarios = args.scenarios.split(",")
    counts = [int(count) for count in args.variants.split(",")] if "variants" in scenarios else []
    rows: dict[str, list[tuple[Run, Run]]] = {
        row: [] for name in scenarios for row in ([f"variants{k}" for k in counts] if name == "variants" else [name])
    }
    with tempfile.TemporaryDirectory(prefix="dlbricks-speed-") as scratch:
        work = Path(scratch)
        models = select_models(args, work / "models")
        variants = {k: make_variants(variant_source(args, models), k, work / f"variants-{k}") for k in counts}
        family = make_family(work / "family") if "family" in scenarios else []
        changed = next((m for m in models if swappable(m.path)), None)
        history = max(models, key=lambda m: swappable(m.path))
        swept = [m for m in models if args.sweep_dim in m.dims]
        (work / "pytest.ini").write_text("[pytest]\n")
        # A user's model files were written well before the run: one written within SETTLED_NS of being read could
        # change again without its times moving, so its digest would not be kept and every re-run would read it.
        # (Imported here: this file is also the probe plugin of the baseline's processes, which must not load it.)
        from pytest_dlbricks.storage.file_digests import SETTLED_NS

        time.sleep(SETTLED_NS / 1e9)
        for repeat in range(args.repeat):
            store = work / f"store-{repeat}"
            for name in scenarios:
                if (name == "changed" and changed is None) or (name == "sweep" and not swept):
                    continue
                if name == "changed":
                    change = swap_activation(changed.path)
                    print(f"changed: {change}", file=sys.stderr)
                if name == "unchanged" and "first" not in scenarios:
                    run_plugin(args, work, models, store, None)  # fills the store
                if name == "variants":
                    for k, tuned in variants.items():
                        pair = (
                            run_plugin(args, work, tuned, work / f"variants-store-{k}-{repeat}", None),
                            run_baseline(args, work, tuned, None),
                        )
                        rows[f"variants{k}"].append(pair)
                        print(
                            f"variants{k} #{repeat + 1}: plugin {pair[0].seconds:.1f} s,"
                            f" baseline {pair[1].seconds:.1f} s",
                            file=sys.stderr,
                        )
                    continue
                if name == "history":
                    if swappable(history.path) < args.commits:
                        continue
                    pair = run_history(args, work, models, history, work / f"history-store-{repeat}")
                elif name == "family":
                    pair = (
                        run_plugin(args, work, family, work / f"family-store-{repeat}", None),
                        run_baseline(args, work, family, None),
                    )
                elif name == "sweep":
                    pair = (
                        run_plugin(args, work, swept, work / f"sweep-store-{repeat}", args.sweep_dim),
                        run_baseline(args, work, swept, args.sweep_dim),
                    )
                else:
                    pair = run_plugin(args, work, models, store, None), run_baseline(args, work, models, None)
                rows[name].append(pair)
                if name == "changed":
                    swap_activation(changed.path, undo=True)
                print(
                    f"{name} #{repeat + 1}: plugin {pair[0].seconds:.1f} s, baseline {pair[1].seconds:.1f} s",
                    file=sys.stderr,
                )
    print(render(args, models, swept, rows))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="zoo folder (default: %(default)s)")
    parser.add_argument("--subset", choices=("ci", "all"), default="ci", help="zoo subset (default: %(default)s)")
    parser.add_argument("--only", help="comma-separated zoo model names (instead of --subset)")
    parser.add_argument("--light", action="store_true", help="the onnx wheel's 9 CNNs instead of the zoo")
    parser.add_argument("--scenarios", default="first,unchanged,changed,sweep", help="(default: %(default)s)")
    parser.add_argument("--granularity", type=int, default=2, help="(default: %(default)s)")
    parser.add_argument("--precision", type=float, default=0.02, help="both sides' precision (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every scenario (default: %(default)s)")
    parser.add_argument("--sweep-dim", default="batch", help="dimension swept (default: %(default)s)")
    parser.add_argument("--sizes", default="1,2,4,8", help="its sizes (default: %(default)s)")
    parser.add_argument("--variant-of", help="model the variants scenario tunes (default: a resnet50, else the first)")
    parser.add_argument("--variants", default="4,8", help="numbers of variants, one row each (default: %(default)s)")
    parser.add_argument("--commits", type=int, default=10, help="history scenario's commits (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per pytest process (default: %(default)s)")
    return parser.parse_args()


def select_models(args: argparse.Namespace, folder: Path) -> list[Model]:
    """The models, each linked into a folder of its own under ``folder`` (so that one can be changed)."""
    if args.light:
        import onnx

        light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
        sources = [(path.stem, path, {}) for path in sorted(light.glob("*.onnx"))]
    else:
        manifest_path, entries = read_manifest(args.cache)
        chosen = select(manifest_path, entries, args.subset, args.only)
        sources = [(m["name"], manifest_path.parent / m["path"], m["dims"]) for m in chosen]
    models = []
    for name, source, dims in sources:
        target = folder / name
        target.mkdir(parents=True)
        for file in source.parent.iterdir():  # external data lies beside the model
            if _sample_inputs(file):
                continue
            if file.is_dir():
                (target / file.name).symlink_to(file.resolve(), target_is_directory=True)
            else:  # copied: the plugin refuses external data whose link leads out of the model's folder
                shutil.copy2(file, target / file.name)
        models.append(Model(name, target / source.name, dims))
    return models


def variant_source(args: argparse.Namespace, models: list[Model]) -> Model:
    """The model the variants scenario tunes."""
    if args.variant_of:
        named = [model for model in models if model.name == args.variant_of]
        if not named:
            sys.exit(f"--variant-of {args.variant_of}: not among the models ({', '.join(m.name for m in models)})")
        return named[0]
    return next((model for model in models if "resnet50" in model.name.replace("-", "")), models[0])


def make_variants(model: Model, count: int, folder: Path) -> list[Model]:
    """``count`` fine-tuned variants of ``model``, each in a folder of its own: the same layers, every weight
    (a float tensor of more than :data:`MAX_KEPT_FLOATS` values) scaled by noise of its own, every quantized
    weight moved by -1, 0 or +1 (within its type's range) at random, as a model tuned, then quantized again."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    base = real_weights(onnx.load(str(model.path)))
    variants = []
    for number in range(count):
        rng = np.random.default_rng(number)
        variant = onnx.ModelProto()
        variant.CopyFrom(base)
        for tensor in variant.graph.initializer:
            values = numpy_helper.to_array(tensor)
            if values.dtype.kind == "f" and values.size > MAX_KEPT_FLOATS:
                noise = 1 + TUNING_NOISE * rng.standard_normal(values.shape)
                tensor.CopyFrom(numpy_helper.from_array((values * noise).astype(values.dtype), tensor.name))
            elif values.dtype in (np.int8, np.uint8) and values.ndim >= 2:
                limits = np.iinfo(values.dtype)
                moved = np.clip(values.astype(np.int16) + rng.integers(-1, 2, values.shape), limits.min, limits.max)
                tensor.CopyFrom(numpy_helper.from_array(moved.astype(values.dtype), tensor.name))
        target = folder / f"{model.name}-{number}" / model.path.name
        target.parent.mkdir(parents=True)
        onnx.save(variant, str(target))
        variants.append(Model(f"{model.name}-{number}", target, model.dims))
    return variants


def make_family(folder: Path) -> list[Model]:
    """The family scenario's three networks (see :data:`FAMILY`), each in a folder of its own."""
    return [_write_resnet(name, blocks, folder / name / f"{name}.onnx") for name, blocks in FAMILY.items()]


def _write_resnet(name: str, blocks: tuple[int, ...], path: Path) -> Model:
    """A ResNet of basic blocks, ``blocks`` per stage, with random weights, written to ``path``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(sum(blocks))
    nodes: list[Any] = []
    weights: list[Any] = []

    def conv(x: str, inputs: int, outputs: int, kernel: int, stride: int) -> str:
        out = f"t{len(nodes)}"
        scale = (2.0 / (inputs * kernel * kernel)) ** 0.5
        weight = (rng.standard_normal((outputs, inputs, kernel, kernel)) * scale).astype(np.float32)
        weights.extend(
            [
                numpy_helper.from_array(weight, f"{out}_w"),
                numpy_helper.from_array(np.zeros(outputs, np.float32), f"{out}_b"),
            ]
        )
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{out}_w", f"{out}_b"],
                [out],
                kernel_shape=[kernel] * 2,
                strides=[stride] * 2,
                pads=[kernel // 2] * 4,
            )
        )
        return out

    def op(op_type: str, inputs: list[str], **attributes: Any) -> str:
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op_type, inputs, [out], **attributes))
        return out

    x = op("Relu", [conv("input", 3, 64, 7, 2)])
    x = op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, count in enumerate(blocks):
        width = 64 * 2**stage
        for block in range(count):
            stride = 2 if stage and not block else 1
            shortcut = conv(x, channels, width, 1, stride) if stride > 1 else x
            y = conv(op("Relu", [conv(x, channels, width, 3, stride)]), width, width, 3, 1)
            x, channels = op("Relu", [op("Add", [y, shortcut])]), width
    x = op("Flatten", [op("GlobalAveragePool", [x])])
    classifier = (rng.standard_normal((1000, channels)) * 0.01).astype(np.float32)
    weights.append(numpy_helper.from_array(classifier, "fc_w"))
    nodes.append(helper.make_node("Gemm", [x, "fc_w"], ["logits"], transB=1))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True)
    onnx.save(model, str(path))
    return Model(name, path, {})


def real_weights(model: Any) -> Any:
    """``model`` with the weights old exporters compute (ConstantOfShape of a constant shape: one value
    everywhere) made initializers of random values, as a trained model holds them."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in initializers:
            kept.append(node)
            continue
        shape = numpy_helper.to_array(initializers[node.input[0]]).astype(int)
        value = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "value"), None)
        dtype = numpy_helper.to_array(value).dtype if value is not None else np.dtype(np.float32)
        values = (rng.standard_normal(shape) * 0.05).astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype)
        model.graph.initializer.append(numpy_helper.from_array(values, node.output[0]))
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def _sample_inputs(file: Path) -> bool:
    """Sample inputs beside a model (ONNX's test_data_set_N folders, an .npz sidecar): left out, so that
    both sides time synthetic inputs of the sizes given (samples would fix the sizes a sweep changes)."""
    return (file.is_dir() and file.name.startswith("test_data_set_")) or file.suffix == ".npz"


def run_plugin(args: argparse.Namespace, work: Path, models: list[Model], store: Path, swept: str | None) -> Run:
    """The plugin on ``models`` in one pytest process, each model given its own dimensions by a pattern (as a
    user gives models of different sizes theirs), ``swept`` at ``--sizes`` for all."""
    run = Run()
    report = work / "report.json"
    dims = [option for model in models for option in dim_options(model.path, model.dims, skip=swept)]
    command = [
        *[str(model.path) for model in models],
        f"--dlbricks-granularity={args.granularity}",
        f"--dlbricks-precision={args.precision}",
        f"--dlbricks-store={store}",
        f"--dlbricks-json={report}",
        *dims,
        *([f"--dlbricks-dim={swept}={args.sizes}"] if swept is not None else []),
    ]
    report.unlink(missing_ok=True)
    process = run_pytest(args, work, command)
    if report.exists():  # the run's noise, and the margin of error each estimate reached
        written = json.loads(report.read_text())
        process.figures["noise"] = written["summary"].get("noise")
        process.figures["margins"] = [m.get("precision") for m in written["models"] if "sequential_s" in m]
    run.processes.append(process)
    return run


def run_baseline(args: argparse.Namespace, work: Path, models: list[Model], swept: str | None) -> Run:
    run = Run()
    sizes = [int(size) for size in args.sizes.split(",")] if swept else [None]
    test = work / "baseline.py"
    listed = [(str(model.path), model.dims) for model in models]
    test.write_text(BASELINE_TEST.format(models=listed, sizes=sizes).replace("SWEPT", repr(swept)))
    command = [str(test), f"--benchmark-precision={args.precision}", f"--benchmark-confidence={CONFIDENCE}"]
    run.processes.append(run_pytest(args, work, command))
    return run


def run_pytest(args: argparse.Namespace, work: Path, arguments: list[str]) -> Process:
    out = work / "probe.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, PROBE_OUT: str(out), "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(work / "pytest.ini"),
        f"--rootdir={work}",
        "-p",
        "no:cacheprovider",
        "-p",
        "speed",
        "-q",
        "-rN",
        *arguments,
    ]
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=False, env=env)
    seconds = time.perf_counter() - start
    if completed.returncode not in (0, 1):
        print(completed.stdout[-3000:] + completed.stderr[-3000:], file=sys.stderr)
    figures = json.loads(out.read_text()) if out.exists() else {}
    return Process(seconds, completed.returncode, figures)


def run_history(
    args: argparse.Namespace, work: Path, models: list[Model], changed: Model, store: Path
) -> tuple[Run, Run]:
    """Both sides of the history scenario: a run per commit, each commit one more activation of ``changed``
    swapped; the plugin's store filled by the commit before the first (not counted)."""
    original = changed.path.with_suffix(".orig")
    changed.path.rename(original)
    shutil.copy2(original, changed.path)
    plugin, baseline = Run(), Run()
    try:
        run_plugin(args, work, models, store, None)
        for commit in range(1, args.commits + 1):
            change = swap_activations(original, changed.path, commit)
            plugin.processes += run_plugin(args, work, models, store, None).processes
            baseline.processes += run_baseline(args, work, models, None).processes
            print(
                f"history commit {commit} ({change}): plugin {plugin.processes[-1].seconds:.1f} s,"
                f" baseline {baseline.processes[-1].seconds:.1f} s",
                file=sys.stderr,
            )
    finally:
        changed.path.unlink()
        original.rename(changed.path)
    return plugin, baseline


def swap_activations(original: Path, path: Path, count: int) -> str:
    """Write ``path`` as ``original`` with its first ``count`` activations each replaced by another."""
    import onnx

    model = onnx.load(str(original), load_external_data=False)
    nodes = [node for node in model.graph.node if node.op_type in SWAPS][:count]
    for node in nodes:
        node.op_type = SWAPS[node.op_type]
        del node.attribute[:]
    onnx.save(model, str(path))
    return f"{path.parent.name}: layer {nodes[-1].name or nodes[-1].output[0]} -> {nodes[-1].op_type}"


def swappable(path: Path) -> int:
    """How many of the model's layers are activations a changed layer can swap."""
    import onnx

    return sum(node.op_type in SWAPS for node in onnx.load(str(path), load_external_data=False).graph.node)


def swap_activation(path: Path, *, undo: bool = False) -> str:
    """Replace the model's first activation by another (a real file in place of the link); undo restores the link."""
    import onnx

    if undo:
        target = Path(os.readlink(path.with_suffix(".orig")))
        path.unlink()
        path.with_suffix(".orig").rename(path)
        return str(target)
    model = onnx.load(str(path), load_external_data=False)
    node = next(node for node in model.graph.node if node.op_type in SWAPS)
    before = node.op_type
    node.op_type = SWAPS[before]
    del node.attribute[:]
    path.rename(path.with_suffix(".orig"))
    onnx.save(model, str(path))
    return f"{path.parent.name}: layer {node.name or node.output[0]} {before} -> {node.op_type}"


def render(
    args: argparse.Namespace, models: list[Model], swept: list[Model], rows: dict[str, list[tuple[Run, Run]]]
) -> str:
    lines = [
        f"pytest-dlbricks speed: {len(models)} models ({', '.join(m.name for m in models)}), G={args.granularity},"
        f" precision {args.precision:g} at {CONFIDENCE:g} confidence on both sides;"
        f" sweep {args.sweep_dim}={args.sizes} on {len(swept)} models; {args.repeat} round(s)",
        "",
        f"{'scenario':<10} {'plugin s':>9} {'baseline s':>11} {'ratio':>6} {'range':>13}  {'bricks timed':>12}"
        f" {'plugin peak':>11} {'collection peak':>15} {'baseline peak':>13}  exit codes",
    ]
    for name, pairs in rows.items():
        if not pairs:
            lines.append(f"{name:<10} skipped: no model to {'sweep' if name == 'sweep' else 'change'}")
            continue
        ratios = [plugin.seconds / baseline.seconds for plugin, baseline in pairs]
        plugin, baseline = pairs[len(pairs) // 2]
        timed = sum(1 for item in plugin.items if item["brick"] and "timing" in item["phases"])
        lines.append(
            f"{name:<10} {statistics.median(p.seconds for p, _ in pairs):>9.1f}"
            f" {statistics.median(b.seconds for _, b in pairs):>11.1f} {statistics.median(ratios):>6.2f}"
            f" {min(ratios):>6.2f}-{max(ratios):<6.2f}  {timed:>12} {_mib(plugin.peak('peak_bytes')):>11}"
            f" {_mib(plugin.peak('collection_peak_bytes')):>15} {_mib(baseline.peak('peak_bytes')):>13}"
            f"  {plugin.exit_codes} {baseline.exit_codes}"
        )
    for name, pairs in rows.items():
        if pairs:
            lines += ["", *breakdown(name, [plugin for plugin, _ in pairs])]
            lines.append(baseline_breakdown([baseline for _, baseline in pairs]))
    return "\n".join(lines)


def baseline_breakdown(runs: list[Run]) -> str:
    """The baseline's time in the same parts as the plugin's: its items create a session and time it."""

    def median(value: Callable[[Run], float]) -> float:
        return statistics.median(value(run) for run in runs)

    def items_s(run: Run) -> float:
        return sum(item["protocol_s"] for item in run.items)

    def timed_s(run: Run) -> float:
        return sum(item["phases"].get("timing", 0.0) for item in run.items)

    def start_s(run: Run) -> float:
        return run.seconds - run.total("collection_s") - items_s(run) - run.total("finish_s") - run.total("summary_s")

    return (
        f"  baseline's whole process {median(lambda r: r.seconds):.2f} s = start {median(start_s):.2f}"
        f" + collection {median(lambda r: r.total('collection_s')):.2f} + items {median(items_s):.2f}"
        f" (timed rounds {median(timed_s):.2f}; the rest is mostly session creation)"
        f" + report {median(lambda r: r.total('finish_s') + r.total('summary_s')):.2f}"
    )


def breakdown(name: str, runs: list[Run]) -> list[str]:
    """Where the plugin's time went in one scenario (medians over rounds), and its per-brick fixed cost."""

    def median(value: Callable[[Run], float], among: list[Run] = runs) -> float:
        return statistics.median(value(run) for run in among)

    def bricks(run: Run) -> list[dict[str, Any]]:
        return [item for item in run.items if item["brick"] and "timing" in item["phases"]]

    def fixed(item: dict[str, Any]) -> float:
        return item["protocol_s"] - item["phases"]["timing"]

    def items_s(run: Run) -> float:
        return sum(item["protocol_s"] for item in run.items)

    def start_s(run: Run) -> float:
        return run.seconds - run.total("collection_s") - items_s(run) - run.total("finish_s") - run.total("summary_s")

    lines = [
        f"{name}: plugin's whole process {median(lambda r: r.seconds):.2f} s ="
        f" start {median(start_s):.2f} + collection {median(lambda r: r.total('collection_s')):.2f}"
        f" + items {median(items_s):.2f}"
        f" (timed rounds {median(lambda r: sum(i['phases'].get('timing', 0) for i in bricks(r))):.2f})"
        f" + report {median(lambda r: r.total('finish_s') + r.total('summary_s')):.2f}"
        f" (of which the models' load times and a peak not measured before the first brick"
        f" {median(lambda r: r.total('measure_run_s')):.2f})"
    ]
    noises = [p.figures["noise"] for run in runs for p in run.processes if p.figures.get("noise") is not None]
    margins = sorted(m for p in runs[len(runs) // 2].processes for m in p.figures.get("margins", []) if m is not None)
    if noises or margins:
        lines.append(
            f"  noise (bricks' median relative IQR) {', '.join(f'{n:.1%}' for n in noises) or '-'};"
            + (
                f" estimates' margin of error reached: median {statistics.median(margins):.1%},"
                f" max {margins[-1]:.1%} ({len(margins)} models)"
                if margins
                else ""
            )
        )
    count = median(lambda r: len(bricks(r)))
    timing = [run for run in runs if bricks(run)]  # the rounds that timed a brick, for the per-brick figures
    if not count or not timing:
        return lines
    per_phase = {
        phase: median(
            lambda r, p=phase: (
                sum(
                    (fixed(i) - sum(v for k, v in i["phases"].items() if k != "timing"))
                    if p == "pytest"
                    else i["phases"].get(p, 0.0)
                    for i in bricks(r)
                )
                / len(bricks(r))
            ),
            timing,
        )
        for phase in PHASES
    }
    middle = timing[len(timing) // 2]
    costs = sorted(fixed(i) for i in bricks(middle))
    lines.append(
        f"  {count:.0f} bricks timed; fixed cost per brick: median {statistics.median(costs) * 1e3:.1f} ms,"
        f" mean {sum(costs) / len(costs) * 1e3:.1f} ms, p90 {costs[int(len(costs) * 0.9)] * 1e3:.1f} ms;"
        f" collection {median(lambda r: r.total('collection_s') / len(bricks(r)), timing) * 1e3:.1f} ms per brick"
    )
    lines.append(
        "  mean per brick: " + ", ".join(f"{phase} {value * 1e3:.2f} ms" for phase, value in per_phase.items())
    )
    rounds = [i["phases"]["timing"] for i in bricks(middle)]
    lines.append(
        f"  timed rounds per brick: median {statistics.median(rounds) * 1e3:.1f} ms,"
        f" mean {sum(rounds) / len(rounds) * 1e3:.1f} ms"
    )
    return lines


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB" if size else "-"


if __name__ == "__main__":
    main()
