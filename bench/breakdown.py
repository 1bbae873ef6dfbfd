"""Where the composed estimate and the measured model part ways: onnxruntime's profiler, model against bricks.

For each model, cut as the plugin cuts it (the graph onnxruntime runs, granularity G), the whole model
(all its layers as one network, built by the same synthesis as its bricks, so weights and inputs are
alike) and each distinct brick are timed as the plugin times them (shared thread pool, I/O binding,
inputs written again before each call, the weights of a brick that waits on reading them pushed out of
the caches first; a brick in a burst of calls as pytest-benchmark times it, the
models right after the bricks, after validation's untimed calls one timed, as validation times them), round by
round, and then profiled. Every layer
keeps its index as its node name, so each kernel's time inside the model is matched with its time
inside its brick. Per model it prints, in microseconds per call:

- ``file``: the user's file as validation measures it (real weights, the inputs the bricks were cut
  for), but outside pytest-benchmark's round, which adds a little to a call (``bench/round_cost.py``
  measures it; it matters to models of microseconds); ``model``: the whole graph the bricks were cut
  from, built by the same synthesis as the bricks;
  ``composed``: the bricks' times less their call cost plus the model's, as the plugin composes them;
  ``ratio``: composed / file (what the zoo scores), ``syn``: model / file (what synthesis changes);
- ``sized``: the file with its inputs' symbolic sizes written in, where onnxruntime folds what the file
  computes on sizes (shapes, masks, positions), / file: how much of the file's time those computations take
  (blank for a file with no symbolic size);
- ``nodes``: the layers the bricks were cut into / the kernels the file runs per call (a file whose
  graph runs more nodes at its symbolic sizes than at concrete ones is cut from that graph; else
  onnxruntime folds shape computations at the concrete sizes the bricks are cut at);
  ``kern@file``: the file's kernel time;
- ``kern@model`` and ``kern@brick``: the kernel time of the layers both runs executed as the same
  nodes, inside the model and inside the bricks (summed over every occurrence), and their ratio: what
  the model's context (caches, threads) does to the same kernels;
- ``refused``: kernel time of layers onnxruntime fused or rewrote differently in a brick than in the
  model (the model's side);
- ``gap@model``: the model's call less its kernels (dispatch, allocation, thread hand-offs, the call);
  ``gap@bricks``: the same summed over brick occurrences, less the call cost composition takes off;
- ``calls``: the call cost composition charges (bricks' removed, the model's added), each brick's scaled to the
  reference call's time around its bursts, as the plugin scales it (the model's to their median).

Then a second table says where the gap between the file's measured time and the composed estimate
goes, each part as a share of the file's time, the parts adding up to ``1 - ratio``:

- ``file``: what the file runs beyond the graph the bricks were cut from (file less model);
- ``context``: the same kernels slower in the model than in their bricks (caches, threads);
- ``between``: the model's time between kernels beyond its call, less the bricks' beyond theirs;
- ``fused``: kernels the model ran that the bricks did not run as the same nodes, and the other way;

and names the largest. The profiler's split of a model's own gap between ``context`` and ``between``
is indicative: profiling slows nodes unevenly (most in networks of microseconds, where only their sum
means something); ``file`` and the sum of the other parts come from plain timings alone.

Profiling slows runs: its times only split the measured ones into parts, they are never the figures.
The parts are scaled so that ``kern+gap`` equals each measured call. A machine with another job on it
gives numbers that mean little: run it on a quiet one.

A model of many bricks of microseconds (a small transformer: 150 bricks of T5 summed to twice its model's
time) is composed as a small difference of large numbers, and each brick here is timed call by call, not
in pytest-benchmark's loop that the call cost taken off is measured for: a microsecond per brick moves
such a model's ``composed`` by a fifth. Its ``ratio`` read 0.48 to 0.79 where the plugin's paired
rounds read 0.81 to 0.95; read such models from those (``--dlbricks-validate``), and their split here as
indicative only.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/breakdown.py [--zoo DIR] [--only NAMES] [--granularity 2] [--rounds 30] [--threads N]
                              [--json OUT] [--layers] [MODEL.onnx ... [--dim NAME=SIZE ...]]

``--json`` also writes, per model, each matched layer's operator, kernel time in the model and in its
brick, FLOPs, bytes, place in its brick and index: the evidence a per-machine correction of context effects would
be learned from. ``--layers`` prints them under the model's row.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import onnx

from pytest_dlbricks.core.placement import kernel_events
from pytest_dlbricks.core.runtime import create_session, use_thread_pool
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec, describe_brick
from pytest_dlbricks.cut.cutting import ModelPlan, plan_model
from pytest_dlbricks.cut.loading import load_model, whole_model
from pytest_dlbricks.cut.samples import find_samples
from pytest_dlbricks.estimating.analysis import plan_work
from pytest_dlbricks.estimating.composition import brick_calls, compose, model_costs
from pytest_dlbricks.timing.caches import CacheFlusher, cache_sizes, flush_bytes, read_bytes, rest_of_model
from pytest_dlbricks.timing.overhead import REFERENCE, CallOverhead, measure_call_overhead, reference_call
from pytest_dlbricks.timing.retiming import warm
from pytest_dlbricks.timing.running import BrickRunner, ModelRunner
from pytest_dlbricks.timing.speed_trace import SpeedTrace
from pytest_dlbricks.timing.synthesis import brick_feeds, build_brick_model

DEFAULT_ZOO = Path("~/.cache/pytest-dlbricks/zoo").expanduser()


@dataclass
class Breakdown:
    """One model's measured and composed times and the parts they split into, in seconds per call."""

    name: str
    file_s: float
    model_s: float
    composed_s: float
    kernels_in_model_s: float
    kernels_in_bricks_s: float
    unmatched_s: float
    gap_in_model_s: float
    gap_in_bricks_s: float
    call_cost_s: float
    layers: int
    file_kernels: int
    kernels_in_file_s: float
    #: The file with its symbolic sizes written in (None when it declares none).
    sized_file_s: float | None
    #: Per layer both runs executed as the same node: operator, kernel seconds in the model and in its
    #: brick (scaled to the measured calls), FLOPs (None when unknown), bytes moved, its place in its brick
    #: (0: the brick's first layer, the first its call runs) and its index in the model.
    matched: list[tuple[str, float, float, int | None, int, int, int]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="model files (default: the zoo's models)")
    parser.add_argument("--zoo", type=Path, default=DEFAULT_ZOO, help="zoo folder (default: %(default)s)")
    parser.add_argument("--only", help="comma-separated zoo model names")
    parser.add_argument("--granularity", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per model (default: %(default)s)")
    parser.add_argument("--profiled-runs", type=int, default=10, help="profiled calls per network")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument(
        "--layers", action="store_true", help="also print each matched layer's kernel in the model and in its brick"
    )
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (default: its own choice)")
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=SIZE", help="a symbolic size of the model files given"
    )
    args = parser.parse_args()
    settings = Settings(granularity=args.granularity, intra_op_threads=args.threads)
    use_thread_pool(settings.thread_pool, settings.intra_op_threads)
    overhead = measure_call_overhead(settings)
    rows = []
    print(_header(), flush=True)
    for name, path, dims in zoo_models(args):
        try:
            rows.append(breakdown(name, path, dims, settings, overhead, args.rounds, args.profiled_runs))
        except Exception as error:  # one model that cannot be broken down does not stop the others
            print(f"{name}: {type(error).__name__}: {error}", file=sys.stderr)
        else:
            print(_row(rows[-1]), flush=True)
            if args.layers:
                print(_layer_rows(rows[-1]), flush=True)
            if args.json:  # after each model: a run stopped by a time limit keeps what it measured
                args.json.write_text(json.dumps([row.__dict__ for row in rows]))
    print(_totals(rows))
    print(_parts(rows))


def zoo_models(args: argparse.Namespace) -> list[tuple[str, Path, dict[str, int]]]:
    """The model files given, else the zoo's (``--only`` some), each with its name and manifest sizes."""
    if args.models:
        dims = {name: int(size) for name, size in (dim.split("=") for dim in args.dim)}
        return [(path.stem, path, dims) for path in args.models]
    manifest = json.loads((args.zoo / "zoo.json").read_text())
    names = set(args.only.split(",")) if args.only else None
    return [
        (m["name"], args.zoo / m["path"], {k: int(v) for k, v in (m.get("dims") or {}).items()})
        for m in manifest["models"]
        if names is None or m["name"] in names
    ]


def breakdown(
    name: str,
    path: Path,
    dims: dict[str, int],
    settings: Settings,
    overhead: CallOverhead,
    rounds: int,
    profiled_runs: int,
) -> Breakdown:
    sample = find_samples(path)
    graph = load_model(path, dims, settings, sample=sample, reach=settings.granularity)
    plan = plan_model(graph, settings.granularity, path.name)
    if plan.broken:
        raise ValueError(f"{len(plan.broken)} bricks cannot be built: {plan.broken[0]}")
    whole = describe_brick(graph, 0, len(graph.layers))
    windows = _windows(plan)
    distinct = {brick.signature: brick for brick, _ in windows}

    file, feeds = whole_model(path, dims, sample=sample)
    file_runner = ModelRunner(file, feeds, settings, data_dir=None if isinstance(file, Path) else path.parent)
    model_runner = BrickRunner(whole, settings, optimized=True)
    work = plan_work(graph, plan)
    # Weights pushed out of the caches as the plugin's items push them (see pytest_dlbricks.timing.caches).
    sizes, flusher = cache_sizes(), CacheFlusher()
    model_read = sum(read_bytes(brick) for brick, _ in windows)
    flushes = {
        signature: flush_bytes(brick, work[signature].flops, rest_of_model(brick, [model_read]), sizes)
        for signature, brick in distinct.items()
    }
    runners = {
        signature: BrickRunner(
            brick, settings, optimized=True, flush=flusher.reader(flushes[signature]) if flushes[signature] else None
        )
        for signature, brick in distinct.items()
    }
    sized = _sized_file(path, feeds) if isinstance(file, Path) else None
    models = {"file": file_runner, "model": model_runner}
    if sized is not None:
        models["sized"] = ModelRunner(sized, feeds, settings, data_dir=path.parent)
    for runner in [*models.values(), *runners.values()]:
        runner.check()
    samples: dict[str, list[float]] = defaultdict(list)
    trace, around = SpeedTrace(lambda: reference_call(settings), REFERENCE), defaultdict(list)
    for _ in range(rounds):
        for signature, runner in runners.items():
            if (moment := trace.now()) is not None:
                around[signature].append(moment)
            samples[signature] += _burst(runner, BURST)
        for key, runner in models.items():
            samples[key].append(_timed_again(runner))
    times = {key: statistics.median(values) for key, values in samples.items()}
    # Each brick's call cost at the speed the reference call read around its bursts, as the plugin takes it off.
    references = {signature: statistics.median(values) for signature, values in around.items()}
    estimate = compose(plan, {s: times[s] for s in runners}, overhead, references=references)

    file_kernels, file_share = _file_profile(file, feeds, path, settings, profiled_runs)
    in_model = _kernels(whole, range(len(graph.layers)), settings, profiled_runs)
    in_bricks: dict[int, float] = {}
    brick_runs: list[tuple[dict[int, float], float]] = []
    profiled: dict[str, tuple[dict[int, float], float]] = {}
    for brick, begin in windows:
        if brick.signature not in profiled:
            profiled[brick.signature] = _kernels(brick, range(len(brick.nodes)), settings, profiled_runs)
        kernels, run_s = profiled[brick.signature]
        in_bricks.update({begin + index: seconds for index, seconds in kernels.items()})
        brick_runs.append((kernels, run_s))
    kernels_model, run_model = in_model
    matched = set(kernels_model) & set(in_bricks)
    scale_in_bricks = {}

    # Profiled runs are slower than plain ones: scale each network's parts to its measured call.
    model_scale = times["model"] / run_model
    kern_model = sum(kernels_model[i] for i in matched) * model_scale
    unmatched = sum(s for i, s in kernels_model.items() if i not in matched) * model_scale
    gap_model = times["model"] - sum(kernels_model.values()) * model_scale
    kern_bricks = 0.0
    gap_bricks = 0.0
    for (brick, begin), (kernels, run_s) in zip(windows, brick_runs):
        scale = times[brick.signature] / run_s
        kern_bricks += sum(s for i, s in kernels.items() if begin + i in matched) * scale
        scale_in_bricks.update({begin + i: s * scale for i, s in kernels.items()})
        gap_bricks += times[brick.signature] - sum(kernels.values()) * scale
    calls_of_bricks = sum(
        overhead.of_brick(len(b.inputs), b.output_count, references.get(b.signature)) for b, _ in windows
    )
    model_call = model_costs(brick_calls(plan), overhead, references).of(*plan.io)
    layer_work = [layer for brick, _ in windows for layer in work[brick.signature].layers]
    places = [place for brick, _ in windows for place in range(len(brick.nodes))]
    return Breakdown(
        name=name,
        file_s=times["file"],
        model_s=times["model"],
        composed_s=estimate.sequential_s,
        kernels_in_model_s=kern_model,
        kernels_in_bricks_s=kern_bricks,
        unmatched_s=unmatched,
        gap_in_model_s=gap_model,
        gap_in_bricks_s=gap_bricks - calls_of_bricks,
        call_cost_s=model_call,
        layers=len(graph.layers),
        file_kernels=file_kernels,
        kernels_in_file_s=times["file"] * file_share,
        sized_file_s=times.get("sized"),
        matched=[
            (
                layer_work[i].op_type,
                kernels_model[i] * model_scale,
                scale_in_bricks[i],
                layer_work[i].flops,
                layer_work[i].bytes,
                places[i],
                i,
            )
            for i in sorted(matched)
        ],
    )


def _layer_rows(row: Breakdown) -> str:
    """Each matched layer of ``row``: its index, operator, place in its brick, kernel microseconds in the model and
    in its brick, and their ratio."""
    lines = [f"  {'layer':>5} {'op':24} {'place':>5} {'@model':>8} {'@brick':>8} {'brick/model':>11}"]
    for op, in_model, in_brick, _, _, place, index in row.matched:
        ratio = f"{in_brick / in_model:11.2f}" if in_model > 0 else f"{'-':>11}"
        lines.append(f"  {index:5d} {op[:24]:24} {place:5d} {in_model * 1e6:8.1f} {in_brick * 1e6:8.1f} {ratio}")
    return "\n".join(lines)


def _windows(plan: ModelPlan) -> list[tuple[BrickSpec, int]]:
    """Each brick occurrence with the index of its first layer (windows are consecutive runs of layers)."""
    windows, begin = [], 0
    for brick in plan.bricks:
        assert isinstance(brick, BrickSpec)
        windows.append((brick, begin))
        begin += len(brick.nodes)
    return windows


def _sized_file(path: Path, feeds: dict) -> onnx.ModelProto | None:
    """The file with the sizes of ``feeds`` written into its inputs' symbolic dimensions; None if it has none."""
    model = onnx.load(str(path), load_external_data=False)
    symbolic = [
        (dim, feeds[value.name].shape[axis])
        for value in model.graph.input
        if value.name in feeds
        for axis, dim in enumerate(value.type.tensor_type.shape.dim)
        if not dim.HasField("dim_value")
    ]
    for dim, size in symbolic:
        dim.dim_value = size
    return model if symbolic else None


#: Calls of a brick timed back to back each round, as pytest-benchmark times a brick item (the first
#: call of a burst is left out: it finds the caches as the bricks before it left them).
BURST = 5


def _burst(runner: BrickRunner, calls: int) -> list[float]:
    return [_timed(runner) for _ in range(calls + 1)][1:]


def _timed_again(runner: BrickRunner) -> float:
    """A model's call timed as validation times it: after its untimed calls (see :func:`.validation.warm`; after
    one alone, a GPT-2 of a millisecond read 1.25x its time called again and again), its inputs written again."""
    warm(runner)
    return _timed(runner)


def _timed(runner: BrickRunner) -> float:
    runner.prepare_call()
    start = time.perf_counter()
    runner()
    return time.perf_counter() - start


def _kernels(brick: BrickSpec, layers: range, settings: Settings, runs: int) -> tuple[dict[int, float], float]:
    """Median kernel time of each layer (by its index in ``brick``) and of the whole call, profiled.

    One profiled session runs ``runs`` calls after one untimed warm-up call (its first run allocates).
    """
    model = build_brick_model(brick)
    for index, node in zip(layers, model.graph.node):
        node.name = f"L{index}"
    feeds = brick_feeds(brick)
    with tempfile.TemporaryDirectory(prefix="dlbricks-breakdown-") as folder:
        session = create_session(model, settings, profile_to=Path(folder) / "run", optimized=True)
        for _ in range(runs + 1):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
    calls = [e["dur"] * 1e-6 for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"][1:]
    per_layer: dict[int, list[float]] = defaultdict(list)
    for event in events:
        label = event.get("name", "")
        if event.get("cat") == "Node" and label.startswith("L") and label.endswith("_kernel_time"):
            index = label[1 : -len("_kernel_time")]
            if index.isdigit():
                per_layer[int(index)].append(event["dur"] * 1e-6)
    # The first event of each layer is the warm-up call's.
    return {index: statistics.median(values[1:] or values) for index, values in per_layer.items()}, statistics.median(
        calls
    )


def _file_profile(file: object, feeds: dict, path: Path, settings: Settings, runs: int) -> tuple[int, float]:
    """Kernels the user's file runs per call, and the share of its profiled call they take."""
    with tempfile.TemporaryDirectory(prefix="dlbricks-breakdown-") as folder:
        data_dir = None if isinstance(file, Path) else path.parent
        session = create_session(file, settings, data_dir, profile_to=Path(folder) / "run")  # type: ignore[arg-type]
        for _ in range(runs + 1):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
    calls = [e["dur"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    kernels = [e["dur"] for e in kernel_events(events)]
    return round(len(kernels) / len(calls)), sum(kernels) / sum(calls)


def _header() -> str:
    return (
        f"{'model':28} {'file':>9} {'syn':>5} {'sized':>5} {'composed':>9} {'ratio':>6} {'nodes':>9} {'kern@file':>9}"
        f" {'kern@model':>10} {'kern@brick':>10} {'ctx':>5}"
        f" {'refused':>8} {'gap@model':>9} {'gap@bricks':>10} {'calls':>6}"
    )


def _row(row: Breakdown) -> str:
    us = 1e6
    ctx = row.kernels_in_model_s / row.kernels_in_bricks_s if row.kernels_in_bricks_s else math.nan
    sized = f"{row.sized_file_s / row.file_s:5.2f}" if row.sized_file_s is not None else " " * 5
    return (
        f"{row.name[:28]:28} {row.file_s * us:9.1f} {row.model_s / row.file_s:5.2f} {sized} {row.composed_s * us:9.1f}"
        f" {row.composed_s / row.file_s:6.3f} {f'{row.layers}/{row.file_kernels}':>9}"
        f" {row.kernels_in_file_s * us:9.1f}"
        f" {row.kernels_in_model_s * us:10.1f} {row.kernels_in_bricks_s * us:10.1f} {ctx:5.2f}"
        f" {row.unmatched_s * us:8.1f} {row.gap_in_model_s * us:9.1f} {row.gap_in_bricks_s * us:10.1f}"
        f" {row.call_cost_s * us:6.1f}"
    )


#: The parts of the gap, as :func:`_parts` splits it: name, and the part in seconds of one row.
PARTS = {
    "file": lambda row: row.file_s - row.model_s,
    "context": lambda row: row.kernels_in_model_s - row.kernels_in_bricks_s,
    "between": lambda row: row.gap_in_model_s - row.call_cost_s - row.gap_in_bricks_s,
    # What is left once the others are counted: kernels matched in one run only (see ``refused``).
    "fused": lambda row: (
        row.model_s
        - row.composed_s
        - (row.kernels_in_model_s - row.kernels_in_bricks_s)
        - (row.gap_in_model_s - row.call_cost_s - row.gap_in_bricks_s)
    ),
}


def _parts(rows: list[Breakdown]) -> str:
    """Where each model's gap goes, as shares of the file's time, and the largest part."""
    lines = [f"{'model':28} {'ratio':>6} " + " ".join(f"{name:>8}" for name in PARTS) + "  largest"]
    for row in rows:
        shares = {name: part(row) / row.file_s for name, part in PARTS.items()}
        largest = max(shares, key=lambda name: abs(shares[name]))
        lines.append(
            f"{row.name[:28]:28} {row.composed_s / row.file_s:6.3f} "
            + " ".join(f"{share:+8.1%}" for share in shares.values())
            + f"  {largest}"
        )
    return "\n".join(lines)


def _totals(rows: list[Breakdown]) -> str:
    if not rows:
        return "no model could be broken down"
    ratios = [row.composed_s / row.file_s for row in rows]
    accuracy = math.exp(-statistics.fmean(abs(math.log(r)) for r in ratios))
    within = sum(abs(r - 1) <= 0.10 for r in ratios)
    share = {
        part: statistics.fmean(getattr(row, field) / row.model_s for row in rows)
        for part, field in (
            ("kernels both ran alike", "kernels_in_model_s"),
            ("kernels fused differently", "unmatched_s"),
            ("between kernels", "gap_in_model_s"),
        )
    }
    parts = ", ".join(f"{part} {value:.0%}" for part, value in share.items())
    return (
        f"{len(rows)} models: composed / file accuracy {accuracy:.3f}, {within} within 10%;"
        f" of the model's time on average: {parts}"
    )


if __name__ == "__main__":
    main()
