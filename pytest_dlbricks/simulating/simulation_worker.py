"""The process that valgrind runs: counts each job's calls between the instrumentation hooks, one dump each.

Run as ``python -m pytest_dlbricks.simulating.simulation_worker JOBS.json`` under ``valgrind --tool=callgrind
--instr-atstart=no`` (see :mod:`.simulation`). Instrumentation stays off through Python's start,
the imports and every session's creation; pytest-codspeed's compiled hooks switch it on around the
counted calls only (zeroing the counts first) and dump them as one callgrind part per job. Each job
runs warm: its first calls, which allocate, are not counted. A job that fails is listed with its
error and dumps nothing, so the parts stay in step with the jobs that ran.
"""

from __future__ import annotations

import gc
import json
import os
import sys
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
            for _ in range(WARM_CALLS):
                session.run(None, feeds)
        except Exception as error:  # onnxruntime's exception types are not part of its API
            done.append({"name": job["name"], "error": f"{type(error).__name__}: {error}"})
            continue
        # Python's collector runs when allocations since its last run reach a count, which the jobs before set:
        # collected now and held off, it is counted in no job.
        gc.collect()
        gc.disable()
        hooks.instrument_hooks_start_benchmark(instrument)
        for _ in range(job["calls"]):
            session.run(None, feeds)
        hooks.instrument_hooks_stop_benchmark(instrument)
        gc.enable()
        hooks.instrument_hooks_set_executed_benchmark(instrument, os.getpid(), job["name"].encode())
        part += 1
        done.append({"name": job["name"], "part": part})
        del session
    Path(spec["done"]).write_text(json.dumps(done), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
