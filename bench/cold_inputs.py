"""How much a layer's time depends on where its inputs are: in the caches, as a brick's rewritten inputs are, or pushed
out by what the model reads between the layer that wrote them and the layer that reads them.

Inside a model, a layer reads inputs written some layers before: a Concat joins branches written long before it, an
Add right after the layer that wrote one of its inputs. Bricks have their inputs written again right before each call
(see :meth:`~pytest_dlbricks.timing.running.BrickRunner.prepare_call`), so they find them in the caches. Per
single-layer brick of the given operators (granularity 1, the graph onnxruntime runs), in one process on the run's
shared thread pool, it prints each layer's reuse distance (what the layers between its inputs' writers and it bring
into the caches, by :func:`~pytest_dlbricks.timing.caches.read_bytes`), its median call time in microseconds with
its inputs written again (as bricks are timed), and with that many bytes read before each call, then the sums per
operator. Compare with the same layers' kernels inside the model (``bench/breakdown.py --layers --json``).

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/cold_inputs.py MODEL.onnx [--ops Concat,Add,Relu] [--threads 0]
    python bench/cold_inputs.py MODEL.onnx ... --count G

``--count G`` times nothing: per model, how many distinct bricks at granularity G read an input from beyond a core's
cache (a brick used at several places counts at its furthest), and how many bytes one call of each would read
first, which pushing such inputs out before every call would cost.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from pytest_dlbricks.core.runtime import use_thread_pool
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import ModelPlan, plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.timing.caches import MAX_FLUSH_BYTES, CacheFlusher, cache_sizes, read_bytes
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


def reuse_distances(plan: ModelPlan) -> list[int]:
    """Per brick of ``plan`` (a window of its layers), what the bricks between its inputs' writers and it bring into
    the caches, for its furthest input (see :func:`~pytest_dlbricks.timing.caches.read_bytes`)."""
    reads = [read_bytes(brick) if isinstance(brick, BrickSpec) else 0 for brick in plan.bricks]
    return [
        max((sum(reads[writer + 1 : index]) for writer, _ in plan.graph.in_edges(index)), default=0)
        for index in range(len(plan.bricks))
    ]


def count(models: list[Path], settings: Settings) -> None:
    """Per model, the distinct bricks at the run's granularity whose furthest input lies beyond a core's cache, and
    the bytes a call of each would read first (its largest distance, at most what the flush of weights reads)."""
    core_cache, last_level_cache = cache_sizes()
    for path in models:
        plan = plan_model(load_model(path, {}, settings, reach=settings.granularity), settings.granularity, path.name)
        furthest: dict[str, int] = {}
        for brick, distance in zip(plan.bricks, reuse_distances(plan)):
            if isinstance(brick, BrickSpec):
                furthest[brick.signature] = max(distance, furthest.get(brick.signature, 0))
        cold = [min(d, 2 * last_level_cache, MAX_FLUSH_BYTES) for d in furthest.values() if d > core_cache]
        print(
            f"{path.name}: {len(cold)} of {len(furthest)} distinct bricks read an input from beyond a core's cache"
            f" ({core_cache / 2**20:.0f} MiB); {sum(cold) / 2**20:.1f} MiB to read before one call of each"
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
    distances = reuse_distances(plan)
    print(f"{'layer':>5} {'op':14} {'distance MB':>11} {'in caches us':>12} {'pushed out us':>13}")
    for index, brick in enumerate(plan.bricks):
        if not isinstance(brick, BrickSpec) or brick.ops[0] not in ops:
            continue
        distance = distances[index]
        runner = BrickRunner(brick, settings, optimized=True)
        runner.check()
        for _ in range(WARM_CALLS):
            runner.prepare_call()
            runner()
        hot = median_call(runner, CALLS)
        cold = median_call(PushedOut(runner, flusher.reader(distance)), CALLS) if distance else hot
        op = brick.ops[0]
        sums[op, "hot"] += hot
        sums[op, "cold"] += cold
        counts[op] += 1
        print(f"{index:5d} {op:14} {distance / 1e6:11.2f} {hot * 1e6:12.1f} {cold * 1e6:13.1f}")
    for op in sorted(counts):
        hot, cold = sums[op, "hot"] * 1e6, sums[op, "cold"] * 1e6
        print(f"{op}: {counts[op]} layers, {hot:.1f} us in caches, {cold:.1f} us pushed out (each a call's cost too)")


if __name__ == "__main__":
    main()
