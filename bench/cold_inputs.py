"""How much a layer's time depends on where its inputs are: in the caches, as a brick's rewritten inputs are, or pushed
out by what the model reads between the layer that wrote them and the layer that reads them, as bricks are timed.

Inside a model, a layer reads inputs written some layers before: a Concat joins branches written long before it, an
Add right after the layer that wrote one of its inputs. Bricks have their near inputs written again right before each
call (see :meth:`~pytest_dlbricks.timing.running.BrickRunner.prepare_call`), so they find them in the caches. Per
single-layer brick of the given operators (granularity 1, the graph onnxruntime runs), in one process on the run's
shared thread pool, it prints each layer's reuse distance (what the layers between its inputs' writers and it bring
into the caches, by :func:`~pytest_dlbricks.timing.caches.reuse_distances`), its median call time in microseconds
with every input written again, with that many bytes read before each call (which pushes out everything, its
output's memory too), and on copies of its inputs beyond a core's cache taken in turn (as bricks are timed, see
:func:`~pytest_dlbricks.timing.caches.input_copies`), then the sums per operator. Compare with the same layers'
kernels inside the model (``bench/breakdown.py --layers --json``).

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/cold_inputs.py MODEL.onnx [--ops Concat,Add,Relu] [--threads 0]
    python bench/cold_inputs.py MODEL.onnx ... --count G

``--count G`` times nothing: per model, how many distinct bricks at granularity G read an input from beyond a core's
cache (a brick used at several places counts at its furthest), and how many bytes one call of each would read
first, which pushing such inputs out before every call would cost, and about what their copies hold.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from pytest_dlbricks.core.runtime import use_thread_pool
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.timing.caches import (
    MAX_FLUSH_BYTES,
    CacheFlusher,
    cache_sizes,
    cold_inputs,
    furthest_distances,
    reuse_distances,
)
from pytest_dlbricks.timing.retiming import median_call
from pytest_dlbricks.timing.running import BrickRunner

#: Calls timed each way, after untimed ones.
CALLS = 200
WARM_CALLS = 50


class PushedOut:
    """A brick whose inputs are written again and then pushed out of the caches by ``flush`` before each call."""

    def __init__(self, runner: BrickRunner, flush: Callable[[], None]) -> None:
        self.runner, self.flush = runner, flush

    def __call__(self) -> None:
        self.runner()

    def prepare_call(self) -> None:
        self.runner.prepare_call()
        self.flush()


def count(models: list[Path], settings: Settings) -> None:
    """Per model, the distinct bricks at the run's granularity whose inputs a run copies, at their furthest place,
    what one call of each would read first to push them out instead, and what their copies hold."""
    for path in models:
        try:
            graph = load_model(path, {}, settings, reach=settings.granularity)
        except Exception as error:  # a model that needs its sizes given, or that onnxruntime refuses
            print(f"{path.name}: not loaded ({error})")
            continue
        plan = plan_model(graph, settings.granularity, path.name)
        specs = {brick.signature: brick for brick in plan.bricks if isinstance(brick, BrickSpec)}
        furthest = furthest_distances([plan])
        sizes = cache_sizes()
        cold = {signature: cold_inputs(specs[signature], distances, sizes) for signature, distances in furthest.items()}
        copied = {signature: found for signature, found in cold.items() if found is not None}
        held = sum(
            found.copies * sum(specs[signature].inputs[position][1].nbytes for position in found.positions)
            for signature, found in copied.items()
        )
        print(
            f"{path.name}: {len(copied)} of {len(furthest)} distinct bricks take copies of inputs from beyond a core's"
            f" cache; {sum(found.distance for found in copied.values()) / 2**20:.1f} MiB to read before one call of"
            f" each instead; their copies hold {held / 2**20:.1f} MiB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--ops", default="Concat,Add,Relu,MaxPool,AveragePool", help="operators (comma-separated)")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (default: its own choice)")
    parser.add_argument(
        "--count", type=int, metavar="G", help="time nothing: count the bricks at granularity G with such inputs"
    )
    args = parser.parse_args()
    if args.count:
        count(args.models, Settings(granularity=args.count, intra_op_threads=args.threads))
        return
    ops = set(args.ops.split(","))
    settings = Settings(granularity=1, intra_op_threads=args.threads)
    use_thread_pool(settings.thread_pool, settings.intra_op_threads)
    (model,) = args.models
    plan = plan_model(load_model(model, {}, settings, reach=1), 1, model.name)
    flusher = CacheFlusher()
    sums: defaultdict[tuple[str, str], float] = defaultdict(float)
    counts: Counter[str] = Counter()
    sizes = cache_sizes()
    last_level_cache = sizes[1]
    print(f"{'layer':>5} {'op':14} {'distance MB':>11} {'in caches us':>12} {'pushed out us':>13} {'copies us':>9}")
    for index, (brick, distances) in enumerate(zip(plan.bricks, reuse_distances(plan.bricks, plan.input_writers))):
        if not isinstance(brick, BrickSpec) or brick.ops[0] not in ops:
            continue
        distance = min(max(distances, default=0), 2 * last_level_cache, MAX_FLUSH_BYTES)
        runners = [
            BrickRunner(brick, settings, optimized=True, cold=cold)
            for cold in (None, cold_inputs(brick, distances, sizes))
        ]
        for runner in runners:
            runner.check()
            for _ in range(WARM_CALLS):
                runner.prepare_call()
                runner()
        hot, copied = (median_call(runner, CALLS) for runner in runners)
        pushed = median_call(PushedOut(runners[0], flusher.reader(distance)), CALLS) if distance else hot
        op = brick.ops[0]
        for what, seconds in (("hot", hot), ("cold", pushed), ("copies", copied)):
            sums[op, what] += seconds
        counts[op] += 1
        print(f"{index:5d} {op:14} {distance / 1e6:11.2f} {hot * 1e6:12.1f} {pushed * 1e6:13.1f} {copied * 1e6:9.1f}")
    for op in sorted(counts):
        hot, pushed, copied = (sums[op, what] * 1e6 for what in ("hot", "cold", "copies"))
        print(
            f"{op}: {counts[op]} layers, {hot:.1f} us in caches, {pushed:.1f} us pushed out, {copied:.1f} us on"
            " copies of the inputs beyond a core's cache (each a call's cost too)"
        )


if __name__ == "__main__":
    main()
