"""The call cost a model's own time implies for each of its bricks, beside the one composition takes off.

Composition takes each brick's call cost (``CallOverhead.of_brick``, measured on chains of trivial layers) off its
time and counts the model's once. If that were all that parts a brick timed alone from its layers inside the model,
the model's time would equal the bricks' raw times summed less ``bricks - 1`` such costs. So, per model cut at each
granularity asked, the distinct bricks and the whole model (all its layers as one network, built by the same
synthesis as the bricks) are timed as ``bench/breakdown.py`` times them, round by round, and it prints::

    implied = (sum of the bricks' raw times - the model's time) / (bricks - 1)

beside the measured cost. An implied cost above the measured one is time every brick pays alone that the layers do
not pay inside the model (a convolution on two threads waiting for the pool's other thread at the start of each
call: ``sample_models/tiny_resnet.onnx`` implied 13 us where 2.4 us is measured); one below it, time the layers pay
inside the model that their bricks do not (light layers after the model's other layers pushed them out of the
caches: GPT-2 implied 0.5 us at granularity 2, and less than nothing at 8, its 13 bricks' raw times summing to
less than the model's). The bricks' weights are not pushed out of the caches here, as the plugin's items push
those of bricks that wait on reading them; ``bench/breakdown.py`` does that, and splits the difference by layer.

Run it from the repository root, in the environment where pytest-dlbricks is installed, alone on the machine::

    python bench/implied_call.py [--zoo DIR] [--only NAMES] [--granularities 1,2,4] [--rounds 30] [--threads N]
                                 [MODEL.onnx ... [--dim NAME=SIZE ...]]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from breakdown import BURST, DEFAULT_ZOO, _burst, _windows, zoo_models

from pytest_dlbricks.core.runtime import use_thread_pool
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import describe_brick
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.cut.samples import find_samples
from pytest_dlbricks.timing.overhead import CallOverhead, measure_call_overhead
from pytest_dlbricks.timing.retiming import warm
from pytest_dlbricks.timing.running import BrickRunner

US = 1e6


def implied(path: Path, dims: dict[str, int], settings: Settings, overhead: CallOverhead, rounds: int) -> str:
    """One row: the model's time, its bricks' raw times summed, the call costs composition takes off them, the
    estimate it composes, and the per-brick call cost the model's time implies, in microseconds."""
    graph = load_model(path, dims, settings, sample=find_samples(path), reach=settings.granularity)
    plan = plan_model(graph, settings.granularity, path.name)
    if plan.broken:
        raise ValueError(f"{len(plan.broken)} bricks cannot be built: {plan.broken[0]}")
    windows = [brick for brick, _ in _windows(plan)]
    runners = {brick.signature: BrickRunner(brick, settings, optimized=True) for brick in windows}
    model = BrickRunner(describe_brick(graph, 0, len(graph.layers)), settings, optimized=True)
    for runner in [model, *runners.values()]:
        runner.check()
    samples: dict[str, list[float]] = defaultdict(list)
    for _ in range(rounds):
        for signature, runner in runners.items():
            samples[signature] += _burst(runner, BURST)
        warm(model)
        samples[""] += _burst(model, BURST)
    times = {key: statistics.median(values) for key, values in samples.items()}
    raw = sum(times[brick.signature] for brick in windows)
    calls = sum(overhead.of(len(brick.inputs), brick.output_count) for brick in windows)
    composed = raw - calls + overhead.of(1, 1)
    count = len(windows)
    implied_s = (raw - times[""]) / (count - 1) if count > 1 else float("nan")
    return (
        f"{path.stem[:28]:28} {settings.granularity:>2} {count:>6} {times[''] * US:9.1f} {raw * US:9.1f}"
        f" {calls / count * US:8.2f} {composed * US:9.1f} {composed / times[''] if times[''] else float('nan'):6.2f}"
        f" {implied_s * US:8.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="model files (default: the zoo's models)")
    parser.add_argument("--zoo", type=Path, default=DEFAULT_ZOO, help="zoo folder (default: %(default)s)")
    parser.add_argument("--only", help="comma-separated zoo model names")
    parser.add_argument("--granularities", default="2", help="comma-separated (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of every brick and the model")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (default: its own choice)")
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=SIZE", help="a symbolic size of the model files given"
    )
    args = parser.parse_args()
    granularities = [int(value) for value in args.granularities.split(",")]
    settings = Settings(granularity=granularities[0], intra_op_threads=args.threads)
    use_thread_pool(settings.thread_pool, settings.intra_op_threads)
    overhead = measure_call_overhead(settings)
    print(
        f"call cost measured: fixed {overhead.fixed_s * US:.2f} us,"
        f" each further input {overhead.per_input_s * US:.2f} us"
    )
    print(
        f"{'model':28} {'G':>2} {'bricks':>6} {'model':>9} {'raw sum':>9} {'call':>8} {'composed':>9}"
        f" {'ratio':>6} {'implied':>8}"
    )
    for name, path, dims in zoo_models(args):
        for granularity in granularities:
            try:
                print(
                    implied(
                        path,
                        dims,
                        Settings(granularity=granularity, intra_op_threads=args.threads),
                        overhead,
                        args.rounds,
                    ),
                    flush=True,
                )
            except Exception as error:  # one model that cannot be timed does not stop the others
                print(f"{name} at G={granularity}: {type(error).__name__}: {error}", flush=True)


if __name__ == "__main__":
    main()
