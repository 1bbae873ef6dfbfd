"""One onnxruntime thread pool for every session of the process, as the layers of one model share one.

Each onnxruntime session otherwise owns a pool whose idle threads keep spinning for tens of
milliseconds after each run. The plugin keeps one session per distinct brick, so the threads of
the bricks just timed steal the cores of the next: on 2 cores, bricks timed one after another
took up to 5x their time, and a model run after its bricks 40% more. With one shared pool, a
brick runs on threads exactly as its layers do inside the model.

onnxruntime cannot go back: once a process shares its pool, every session created afterwards
must use it. :func:`new_options` gives options that do.
"""

from __future__ import annotations

import contextlib
import io

import onnx
import onnxruntime as ort
from onnxruntime.capi import _pybind_state

_shared_threads: int | None = None


class ThreadPoolConflict(ValueError):
    """This process's onnxruntime thread pool cannot be what the run asks for."""


def use(pool: str, threads: int) -> None:
    """Make the sessions created from now on share one pool of ``threads`` (0: onnxruntime's default),
    or keep a pool each; raises :class:`ThreadPoolConflict` when an earlier run in this process
    already shared a pool of another size, or when it shared one and ``pool`` is per-session.
    """
    global _shared_threads
    if _shared_threads is None and _runtime_shares_a_pool():
        # An earlier run in this process shared it, and this module was imported again since
        # (pytester's in-process runs do that): its size is no longer known, take it as asked.
        _shared_threads = threads
    if _shared_threads is not None:
        if pool != "shared":
            raise ThreadPoolConflict(
                "this process already runs onnxruntime on one shared thread pool, and onnxruntime"
                " cannot give sessions their own pools again; run --dlbricks-thread-pool=per-session"
                " in a process of its own"
            )
        if threads != _shared_threads:
            raise ThreadPoolConflict(
                f"this process already shares one onnxruntime thread pool of {_describe(_shared_threads)}, and"
                f" onnxruntime cannot resize it to {_describe(threads)}; run in a process of its own"
            )
        return
    if pool == "shared":
        _pybind_state.set_global_thread_pool_sizes(threads, 0)
        _shared_threads = threads


def new_options() -> ort.SessionOptions:
    """Session options that run on the shared pool when this process has one."""
    options = ort.SessionOptions()
    if _shared_threads is not None:
        options.use_per_session_threads = False
    return options


def _runtime_shares_a_pool() -> bool:
    """Whether onnxruntime already refuses sessions a thread pool of their own, in this process."""
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # onnxruntime prints its retry there
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's exception types are not part of its API
        return "global thread pool" in str(error)
    return False


def _describe(threads: int) -> str:
    return "onnxruntime's default size" if threads == 0 else f"{threads} threads"
