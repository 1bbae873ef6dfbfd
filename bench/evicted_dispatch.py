"""What light layers cost right after the caches were pushed out, as a model's heavy layers push them out.

A model's light layers (Shape, Reshape, Unsqueeze, Concat, Cast, a small Add: most of a transformer's
embedding and mask computations) cost onnxruntime's executor a fraction of a microsecond each when a brick
of them is called again and again: its nodes, kernels and tensors stay in the caches. Inside a model they
run after layers that read tens of megabytes (a decoder's LM head, its projections at batch 1), which
pushed all of that out. This times, with onnxruntime's sessions (no pytest), a model of one and a chain of
``--layers`` elementwise layers on one row of ``--width`` floats, each call right after ``--flush`` sizes of
a buffer were read (untimed, by the plugin's ``CacheFlusher``, as before a brick that waits on its weights),
and prints each call and what each further layer costs (the slope), the sizes taking turns round after round so that the
machine's moves hit them alike. ``--as-bricks`` writes the input again after the reading, on onnxruntime's
threads, as the plugin does before each timed call of a brick (``pytest_dlbricks.core.runtime.input_rewriter``).

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/evicted_dispatch.py [--layers 20] [--width 768] [--flush 0,1,16,64,256] [--threads 1]
                                     [--rounds 7] [--as-bricks]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from pytest_dlbricks.core.runtime import input_rewriter
from pytest_dlbricks.timing.caches import CacheFlusher

#: The chained layers, in turn: elementwise, of no work to speak of on one row.
LIGHT_OPS = ("Relu", "Neg", "Abs", "Neg")
#: Calls a session is called untimed before each round, and timed in it (the round's median is kept).
WARM_CALLS = 50
TIMED_CALLS = 200


def main() -> None:
    args = parse_args()
    print(
        f"onnxruntime {ort.__version__}, {args.threads or 'default'} intra-op thread(s), a row of {args.width} floats,"
        f" {args.layers} light layers"
    )
    one = session(args.width, 1, args.threads, as_bricks=args.as_bricks)
    chain = session(args.width, args.layers, args.threads, as_bricks=args.as_bricks)
    sizes = [int(size) for size in args.flush.split(",")]
    flusher = CacheFlusher()  # the plugin's own reading, the largest first so that every size shares one buffer
    reads = {size: flusher.reader(size << 20) for size in sorted(sizes, reverse=True) if size}
    rounds: dict[tuple[int, str], list[float]] = {}
    for _ in range(args.rounds):
        for size in sizes:
            flush = reads.get(size, lambda: None)
            for name, (call, rewrite) in (("one", one), ("chain", chain)):
                rounds.setdefault((size, name), []).append(median_call(call, flush, rewrite))
    print(f"{'read before':>12} {'one layer':>10} {'chain':>10} {'per further layer':>18}")
    for size in sizes:
        one_us, chain_us = (statistics.median(rounds[size, name]) * 1e6 for name in ("one", "chain"))
        slope = (chain_us - one_us) / (args.layers - 1)
        print(f"{size:>8} MiB {one_us:>7.2f} us {chain_us:>7.2f} us {slope:>15.2f} us")


def session(
    width: int, layers: int, threads: int, *, as_bricks: bool
) -> tuple[Callable[[], object], Callable[[], object]]:
    """A call of a model of ``layers`` light layers on a row of ``width`` floats, its input and output bound
    once, as the plugin binds a brick's; and what writes its input again (nothing unless ``as_bricks``)."""
    nodes, current = [], "x"
    for index in range(layers):
        nodes.append(helper.make_node(LIGHT_OPS[index % len(LIGHT_OPS)], [current], [f"light{index}"]))
        current = f"light{index}"
    graph = helper.make_graph(
        nodes,
        "evicted_dispatch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [1, width])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # every light layer runs
    if threads:
        options.intra_op_num_threads = threads
    runner = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = np.ones((1, width), np.float32)
    binding = runner.io_binding()
    binding.bind_cpu_input("x", feed)
    binding.bind_output(current, "cpu")
    return (lambda: runner.run_with_iobinding(binding)), input_rewriter(feed) if as_bricks else (lambda: None)


def median_call(call: Callable[[], object], flush: Callable[[], object], rewrite: Callable[[], object]) -> float:
    """The median time of ``call``, each timed call right after ``flush`` and ``rewrite`` (untimed)."""
    for _ in range(WARM_CALLS):
        call()
    times = []
    for _ in range(TIMED_CALLS):
        flush()
        rewrite()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=20, help="light layers chained (default: %(default)s)")
    parser.add_argument("--width", type=int, default=768, help="floats in the row (default: %(default)s)")
    parser.add_argument("--flush", default="0,1,16,64,256", help="MiB read before each call (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads, 0: onnxruntime's (default: 1)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of every session (default: %(default)s)")
    parser.add_argument("--as-bricks", action="store_true", help="write the input again after the reading")
    return parser.parse_args()


if __name__ == "__main__":
    main()
