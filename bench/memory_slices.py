"""How far a brick that waits on reading its weights moves from moment to moment, beside the reading before it.

docs/validation.rst ("Bricks that wait on memory") gives the figures. A brick whose weights are pushed out of the
caches before each call (see ``pytest_dlbricks.timing.caches``) reads them from memory, and memory's state on a
shared machine moves with whatever else uses it. The verdict's memory part follows the plugin's reads of memory
(see ``pytest_dlbricks.core.verdict``), bound by bandwidth. This times a fully connected layer and its Softmax (a row
by a 4096x1000 matrix, 16 MiB of weights, as the onnx wheel's CNNs end) in slices of calls some seconds apart, each
call after the plugin's own read of ``--flush-mib`` of memory, and prints per slice the brick's median and the
read's, then the swing (half the 10th-90th percentile distance over the median) of the slices' medians for both,
and of medians over runs of k slices: how much timing a brick at several moments steadies it. Run it from the
repository root, alone on the machine, in the environment where pytest-dlbricks is installed::

    python bench/memory_slices.py [--slices 30] [--calls 10] [--pause 2] [--flush-mib 256] [--threads 0]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pytest_dlbricks.core.runtime import create_session
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.timing.caches import CacheFlusher

ROWS, COLUMNS = 4096, 1000


def classifier() -> bytes:
    """A row times a 4096x1000 matrix of random weights, then Softmax."""
    weights = np.random.default_rng(0).standard_normal((ROWS, COLUMNS)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"]), helper.make_node("Softmax", ["y"], ["z"], axis=1)],
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ROWS])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, COLUMNS])],
        initializer=[numpy_helper.from_array(weights, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def swing(values: list[float]) -> float:
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    return float((p90 - p10) / (2 * median))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slices", type=int, default=30)
    parser.add_argument("--calls", type=int, default=10, help="timed calls per slice (default: %(default)s)")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between slices (default: %(default)s)")
    parser.add_argument("--flush-mib", type=int, default=256, help="MiB read before each call (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: onnxruntime's)")
    args = parser.parse_args()
    settings = Settings(granularity=1, intra_op_threads=args.threads)
    session = create_session(onnx.load_from_string(classifier()), settings)
    feeds = {"x": np.ones((1, ROWS), np.float32)}
    flusher = CacheFlusher()
    read = flusher.reader(args.flush_mib << 20)
    for _ in range(5):
        session.run(None, feeds)
    bricks, reads = [], []
    for _ in range(args.slices):
        times = []
        for _ in range(args.calls):
            read()
            start = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - start)
        bricks.append(statistics.median(times))
        reads.append(statistics.median(flusher.samples[args.flush_mib << 20][-args.calls :]))
        print(
            f"{time.strftime('%H:%M:%S')} brick {bricks[-1] * 1e3:7.3f} ms   read {reads[-1] * 1e3:7.2f} ms", flush=True
        )
        time.sleep(args.pause)
    print(f"\nslices' swing: brick +-{swing(bricks):.1%}, read +-{swing(reads):.1%}")
    for k in (2, 4, 6):
        medians = [statistics.median(bricks[i : i + k]) for i in range(0, len(bricks) - k + 1, k)]
        if len(medians) >= 3:
            print(f"medians over {k} slices in a row: brick +-{swing(medians):.1%} ({len(medians)} of them)")


if __name__ == "__main__":
    main()
