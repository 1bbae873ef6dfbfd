"""The process that valgrind runs: counts each job's calls between the instrumentation hooks, one dump each.

Run as ``python -m pytest_dlbricks.simulating.simulation_worker JOBS.json`` under ``valgrind --tool=callgrind
--instr-atstart=no`` (see :mod:`.simulation`). Instrumentation stays off through Python's start,
the imports and every session's creation; pytest-codspeed's compiled hooks switch it on around the
counted calls only (zeroing the counts first) and dump them as one callgrind part per job. Each job
runs warm: its first calls, which allocate, are not counted. Calls go through an I/O binding, as timed
bricks' do (see :func:`..core.runtime.bind`): ``run()`` would copy every output into a new numpy array,
work a brick's layers do not do inside the model. A job that fails is listed with its
error and dumps nothing, so the parts stay in step with the jobs that ran.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Calls of each job before counting: the first call allocates, the second finds the arena warm.
WARM_CALLS = 2


def main(jobs_file: Path) -> None:
    import numpy as np
    import onnxruntime as ort
    from pytest_codspeed.instruments.hooks import dist_instrument_hooks as hooks  # type: ignore[attr-defined]

    spec = json.loads(jobs_file.read_text(encoding="utf-8"))
    instrument = hooks.instrument_hooks_init()
    done: list[dict[str, Any]] = []
    part = 0
    for job in spec["jobs"]:
        try:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            # Idle threads that spin would be counted as work; with one thread there should be none, and none may spin.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
            options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, job["optimization"])
            if job.get("data_dir"):
                options.add_session_config_entry(
                    "session.model_external_initializers_file_folder_path", job["data_dir"]
                )
            session = ort.InferenceSession(job["model"], options, providers=["CPUExecutionProvider"])
            with np.load(job["feeds"], allow_pickle=False) as arrays:
                feeds = {name: arrays[f"arr_{i}"] for i, name in enumerate(job["inputs"])}
            call = _bound_call(session, feeds)
            for _ in range(WARM_CALLS):
                call()
        except Exception as error:  # onnxruntime's exception types are not part of its API
            done.append({"name": job["name"], "error": f"{type(error).__name__}: {error}"})
            continue
        # Python's collector runs when allocations since its last run reach a count, which the jobs before set:
        # collected now and held off, it is counted in no job.
        gc.collect()
        gc.disable()
        hooks.instrument_hooks_start_benchmark(instrument)
        for _ in range(job["calls"]):
            call()
        hooks.instrument_hooks_stop_benchmark(instrument)
        gc.enable()
        hooks.instrument_hooks_set_executed_benchmark(instrument, os.getpid(), job["name"].encode())
        part += 1
        done.append({"name": job["name"], "part": part})
        del session, call
    Path(spec["done"]).write_text(json.dumps(done), encoding="utf-8")


def _bound_call(session: Any, feeds: dict[str, Any]) -> Callable[[], object]:
    """One inference with the inputs bound in place and the outputs left in onnxruntime's memory; ``run()`` where
    onnxruntime cannot bind them (strings, sequences of tensors: the rule of :func:`..core.runtime.bind`, which
    this process does not import, to start sooner), or where a second bound call fails (a model whose outputs
    do not have the shapes it declares refuses the first call's outputs as the second's)."""
    import onnxruntime as ort

    def unbound() -> object:
        return session.run(None, feeds)

    kinds = [output.type for output in session.get_outputs()]
    if any(array.dtype.kind in "OSU" for array in feeds.values()) or not all(
        kind.startswith(("tensor(", "seq(map(")) and "string" not in kind for kind in kinds
    ):
        return unbound
    binding = session.io_binding()
    for name, array in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array))
    for output in session.get_outputs():
        binding.bind_output(output.name, "cpu")

    def bound() -> object:
        return session.run_with_iobinding(binding)

    try:
        bound()
        bound()
    except Exception:  # onnxruntime's exception types are not part of its API
        return unbound
    return bound


if __name__ == "__main__":
    main(Path(sys.argv[1]))
