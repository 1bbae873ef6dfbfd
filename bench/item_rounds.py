"""What a brick's time holds of its item's rounds: each brick timed as its item times it, at one call a round and at
ten, and each call timed alone, as validation's paired rounds and the bricks timed again at a run's end time it.

pytest-benchmark reads the run's clock (the clock that leaves out the rewriting of a brick's inputs) before and after
every round. At one call a round, which is what it picks for bricks of microseconds, each call pays that in full; at
ten, a tenth. Composition takes off every brick what timing through its item costs a call (``timing_s`` of the run's
call costs), read over loops of a hundred calls. Per distinct brick of each model (cut as the plugin cuts it, the
graph onnxruntime runs, granularity G), in one process on the run's shared thread pool, it prints the median
seconds per call in microseconds of each way, then their sums over the model's distinct bricks, and the call costs
measured beside them.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/item_rounds.py sample_models/transformer_block.onnx [--granularity 2] [--threads 0] [--dim seq=16]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from pytest_dlbricks.core.clock import PausableClock
from pytest_dlbricks.core.runtime import use_thread_pool
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.timing.overhead import measure_call_overhead
from pytest_dlbricks.timing.retiming import median_call
from pytest_dlbricks.timing.running import BrickRunner

#: Rounds per way of timing, and calls timed alone.
ROUNDS = 300
#: Untimed calls of each brick before it is timed.
WARM_CALLS = 300
WAYS = ("1 a round", "10 a round", "alone")


def in_rounds(runner: BrickRunner, calls: int) -> float:
    """Median seconds per call over rounds of ``calls`` calls, each after its inputs are written again with the
    clock paused, the clock read around each round: what pytest-benchmark does with a brick item's ``call``."""
    clock = PausableClock(time.perf_counter)

    def call() -> None:
        clock.untimed(runner.prepare_call)
        runner()

    rounds = []
    for _ in range(ROUNDS):
        start = clock()
        for _ in range(calls):
            call()
        rounds.append((clock() - start) / calls)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--granularity", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (default: its own choice)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="a symbolic size")
    args = parser.parse_args()
    dims = {name: int(size) for name, size in (item.split("=", 1) for item in args.dim)}
    settings = Settings(granularity=args.granularity, intra_op_threads=args.threads)
    use_thread_pool(settings.thread_pool, settings.intra_op_threads)
    overhead = measure_call_overhead(settings)
    print(f"call costs: fixed {overhead.fixed_s * 1e6:.2f} us, timing_s {overhead.timing_s * 1e6:.2f} us")
    ways: dict[str, Callable[[BrickRunner], float]] = {
        WAYS[0]: lambda runner: in_rounds(runner, 1),
        WAYS[1]: lambda runner: in_rounds(runner, 10),
        WAYS[2]: lambda runner: median_call(runner, ROUNDS),
    }
    for path in args.models:
        graph = load_model(path, dims, settings, reach=settings.granularity)
        plan = plan_model(graph, settings.granularity, path.name)
        distinct = {brick.signature: brick for brick in plan.bricks if isinstance(brick, BrickSpec)}
        print(f"\n{path.name}: {len(distinct)} distinct bricks, us per call: " + ", ".join(WAYS))
        sums = dict.fromkeys(WAYS, 0.0)
        for brick in distinct.values():
            runner = BrickRunner(brick, settings, optimized=True)
            runner.check()
            for _ in range(WARM_CALLS):
                runner.prepare_call()
                runner()
            times = {way: measure(runner) for way, measure in ways.items()}
            for way, seconds in times.items():
                sums[way] += seconds
            print(_row("+".join(brick.ops), times.values()))
        print(_row("sum", sums.values()))
        per_brick = (sums[WAYS[0]] - sums[WAYS[2]]) / len(distinct) if distinct else 0.0
        taken = overhead.timing_s * 1e6
        print(f"  one call a round over alone: {per_brick * 1e6:.2f} us a brick (timing_s takes off {taken:.2f})")


def _row(name: str, seconds: Iterable[float]) -> str:
    return f"  {name[:44]:44s} " + " ".join(f"{value * 1e6:8.2f}" for value in seconds)


if __name__ == "__main__":
    main()
