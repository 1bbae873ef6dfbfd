"""The report's entry on onnxruntime's parallel executor: which model of it the parallel estimates used and why, or
why a report has none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..rendering.executor_text import executor_line
from ..timing.overhead import CallOverhead
from ..timing.probes import ExecutorDetection

#: How the parallel estimate is composed, by whether the parallel executor runs independent nodes at once.
ONE_AT_A_TIME = "one node at a time"
SCHEDULE = "list schedule"
#: Why a report has no parallel estimate when none was asked for.
NOT_ASKED = "no parallel estimate was asked for (--dlbricks-executor=sequential)"
#: Why it has none when left to what the parallel executor does, and it runs one node at a time.
ONE_AT_A_TIME_HERE = (
    "onnxruntime's parallel executor runs one node at a time here, so its estimate would be the sequential"
    " one at another call cost: none is made (--dlbricks-executor=parallel makes it all the same)"
)


def executor_fields(
    executor: ExecutorDetection | None,
    error: str | None,
    overhead: CallOverhead | None,
    measured_at: str | None = None,
    reused: bool = False,
    *,
    setting: str = "parallel",
) -> dict[str, Any] | None:
    """Which model of onnxruntime's parallel executor the parallel estimates used, and why: what was
    detected, when, whether in this run or in an earlier one (``reused`` from the brick store), with
    its figures, and the call costs composed with. Where the models have no parallel estimate, the
    entry says why: none was asked for (``setting``, see :data:`.settings.EXECUTORS`), the executor runs
    one node at a time here (with what was detected), or it could not be tried (``error``)."""
    if setting == "sequential":
        return {"model": None, "reason": NOT_ASKED}
    if executor is None:
        return None if error is None else {"model": None, "error": error}
    origin = {"detection": executor.as_json(), "measured_at": measured_at, "reused": reused}
    if setting == "auto" and not executor.concurrent:
        return {"model": None, "reason": ONE_AT_A_TIME_HERE, **origin}
    if error is not None:
        return {"model": None, "error": error, **origin}
    pool = executor.pool
    return {
        "model": SCHEDULE if executor.concurrent else ONE_AT_A_TIME,
        "threads": executor.threads,
        # Bricks whose layers take at least pool_layer_s each split their work over the intra-op
        # pool, and count pool_factor times their time (see probes.PoolSlowdown).
        "pool_factor": pool.factor if pool is not None else 1.0,
        "pool_layer_s": pool.layer_s if pool is not None else None,
        **origin,
        "call_s": overhead.fixed_s if overhead is not None else None,
        "parallel_call_s": overhead.parallel_fixed_s if overhead is not None else None,
        "parallel_layer_s": overhead.parallel_layer_s if overhead is not None else None,
        "critical_path": "the lower bound for an executor with unlimited parallelism",
    }


def explained(executor: Mapping[str, Any]) -> dict[str, Any]:
    """An ``executor`` entry with its ``explanation``: the line ``-v`` prints, how the parallel executor was
    detected and what the parallel estimate is (or why there is none), from the entry's figures."""
    entry = {key: value for key, value in executor.items() if key != "explanation"}
    return {**entry, "explanation": executor_line(entry, verbose=True)}
