"""The process that valgrind runs: counts jobs between the instrumentation hooks, each in a child of its own.

Run as ``python -m pytest_dlbricks.simulating.simulation_worker JOBS.json WORKER`` under ``valgrind
--tool=callgrind --instr-atstart=no`` (see :mod:`.simulation`). Instrumentation stays off through Python's
start and the imports; then the worker forks a child for each job, and pytest-codspeed's compiled hooks
switch instrumentation on around the child's counted calls only (zeroing the counts first) and dump them.

Every child starts from the same state of the worker, whatever jobs were counted before it or beside it:
the heap that one job's sessions leave (glibc's, Python's, onnxruntime's arenas) moved the next job's counts
by up to a quarter when one process counted job after job. onnxruntime's telemetry, which sends events when
enough wall-clock time has passed, is switched off: it ran inside the counted calls of some runs only; so are
its threads, by the variable the worker is started with (see :func:`.simulation.worker_env`). The worker's own
steps between two forks are the same whichever jobs the other worker took: it forks a child for every job of
the list, and the child claims the job or ends. A call's cost depends on the heap it starts from wherever it
makes Python objects, so calls make none beyond their own (see :func:`_calls`).

Before the first fork the worker creates and calls a session of the tiny model it is told to warm up with:
the code every session runs is then translated by valgrind once, in the worker, not again in
each child (a tiny brick's child took half the processor time).

The workers of one simulation take jobs from one list, each job taken once by the child that first creates
its claim file, so that a worker idles only when no job is left. A job listed under ``each`` is counted by every worker
first, to show how far counts of one job repeat between processes. Each child writes its result beside
the jobs file (its process id, whose callgrind dump holds its counts, or its error).

Calls go through an I/O binding, as timed bricks' do (see :func:`..core.runtime.bind`): ``run()`` would copy
every output into a new numpy array, work a brick's layers do not do inside the model.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: Calls of each job before counting: the first call allocates, the next find the arena warm; a light job's
#: instructions a call still moved by 0.7% with two warm calls instead of four. A job counted in one call (a heavy
#: one, see :func:`.simulation.calls_for`) gets one: an uncounted call under valgrind takes nearly as long as a
#: counted one: the light ResNet-50 whole spent 873 s in four warm calls and 238 s in its counted call.
WARM_CALLS = 4


def main(jobs_file: Path, worker: int) -> None:
    import numpy as np
    import onnxruntime as ort
    from pytest_codspeed.instruments.hooks import dist_instrument_hooks as hooks  # type: ignore[attr-defined]

    ort.disable_telemetry_events()
    spec = json.loads(jobs_file.read_text(encoding="utf-8"))
    instrument = hooks.instrument_hooks_init()
    if spec.get("warm"):
        with contextlib.suppress(Exception):  # a tiny model of ours: the children report any trouble
            session, feeds = _session(spec["warm"], ort, np)
            session.run(None, feeds)
            del session
    # No collection at a moment that earlier allocations decide: the children start with it off.
    gc.collect()
    gc.disable()
    # The worker's steps between two forks are the same whichever jobs the other worker took: a child is forked
    # for every job of the list, and the child claims it (see :func:`worker_tasks`).
    for key, job, index in worker_tasks(spec, worker):
        child = os.fork()
        if child == 0:
            if index is None or claim_job(jobs_file, index):
                _count_to_file(job, jobs_file.with_name(f"result.{key}.json"), ort, np, hooks, instrument)
            os._exit(0)
        os.waitpid(child, 0)


def worker_tasks(spec: dict[str, Any], worker: int) -> Iterator[tuple[str, dict[str, Any], int | None]]:
    """Every job this worker may count, with the key of its result and the index it is claimed by (None for a
    job of ``each``, which every worker counts): every job of ``each``, then every job of the list."""
    for job in spec["each"]:
        yield f"repeat{worker}", job, None
    for index, job in enumerate(spec["jobs"]):
        yield str(index), job, index


def _count_to_file(job: dict[str, Any], result: Path, ort: Any, np: Any, hooks: Any, instrument: Any) -> None:
    """Count a job (see :func:`_count`) and write its result: this process's id, whose dump holds its counts,
    or its error."""
    try:
        _count(job, ort, np, hooks, instrument)
        entry: dict[str, Any] = {"pid": os.getpid()}
    except Exception as error:  # onnxruntime's exception types are not part of its API
        entry = {"error": f"{type(error).__name__}: {error}"}
    result.write_text(json.dumps(entry), encoding="utf-8")


def claim_job(jobs_file: Path, index: int) -> bool:
    """Whether this worker takes job ``index``: the first to create its claim file does."""
    try:
        os.close(os.open(jobs_file.with_name(f"claim.{index}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _count(job: dict[str, Any], ort: Any, np: Any, hooks: Any, instrument: Any) -> None:
    """One job's warm calls, then its counted calls between the hooks, dumped as this process's counts: through an
    I/O binding, or ``run()`` where the binding fails (see :func:`_calls`)."""
    session, feeds = _session(job, ort, np)
    warm = 1 if job["calls"] == 1 else WARM_CALLS
    bound, unbound = _calls(session, feeds, ort)
    try:
        _count_calls(bound, warm, job["calls"], hooks, instrument)
    except Exception:  # onnxruntime's exception types are not part of its API
        if bound is unbound:
            raise
        _count_calls(unbound, warm, job["calls"], hooks, instrument)  # the counts start again from zero
    hooks.instrument_hooks_set_executed_benchmark(instrument, os.getpid(), job["name"].encode())


def _count_calls(call: Callable[[], object], warm: int, calls: int, hooks: Any, instrument: Any) -> None:
    """``warm`` calls, then ``calls`` calls with instrumentation on (its start zeroes the counts)."""
    for _ in range(warm):
        call()
    hooks.instrument_hooks_start_benchmark(instrument)
    try:
        for _ in range(calls):
            call()
    finally:
        hooks.instrument_hooks_stop_benchmark(instrument)


def _session(job: dict[str, Any], ort: Any, np: Any) -> tuple[Any, dict[str, Any]]:
    """A job's session, on one thread, and its inputs."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    # Idle threads that spin would be counted as work; with one thread there should be none, and none may spin.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, job["optimization"])
    if job.get("data_dir"):
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", job["data_dir"])
    disabled = job.get("disabled_optimizers") or None
    session = ort.InferenceSession(
        job["model"], options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
    )
    with np.load(job["feeds"], allow_pickle=False) as arrays:
        return session, {name: arrays[f"arr_{i}"] for i, name in enumerate(job["inputs"])}


def _calls(session: Any, feeds: dict[str, Any], ort: Any) -> tuple[Callable[[], object], Callable[[], object]]:
    """One inference with the inputs bound in place and the outputs left in onnxruntime's memory, and the same
    through ``run()``; ``run()`` alone (twice) where onnxruntime cannot bind them (strings, sequences of tensors:
    the rule of :func:`..core.runtime.bind`, which this process does not import, to start sooner). A bound call
    can also fail from the second call on (a model whose outputs do not have the shapes it declares refuses the
    first call's outputs as the second's): the caller then counts ``run()``."""

    # Run options given, never None, with the graph id onnxruntime's Python layer reads from them (its default):
    # pybind11 takes None for them only after a lookup that raises and clears an AttributeError, and without the
    # entry that layer raises and catches a RuntimeError; either way every call made and freed Python objects,
    # 2,000 instructions whose count moved with the heap the child was forked from.
    options = ort.RunOptions()
    options.add_run_config_entry("gpu_graph_id", "0")

    def unbound() -> object:
        return session.run(None, feeds, options)

    kinds = [output.type for output in session.get_outputs()]
    if any(array.dtype.kind in "OSU" for array in feeds.values()) or not all(
        kind.startswith(("tensor(", "seq(map(")) and "string" not in kind for kind in kinds
    ):
        return unbound, unbound
    binding = session.io_binding()
    for name, array in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array))
    for output in session.get_outputs():
        binding.bind_output(output.name, "cpu")

    def bound() -> object:
        return session.run_with_iobinding(binding, options)

    return bound, unbound


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
