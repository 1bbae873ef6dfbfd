"""The parallel executor in words: what was detected, its call costs and thread pools, in one line or at -v in
full."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from ..core.wording import plural
from ..estimating.composition import is_number
from .formatting import format_seconds


def executor_line(executor: Mapping[str, Any] | None, *, verbose: bool = True) -> str | None:
    """Which model of onnxruntime's parallel executor the Parallel column used, and why: in a short line, or
    (``verbose``) with how it was detected and the figures; where there is no parallel estimate, why
    (``verbose`` only, unless the executor could not be tried)."""
    if not executor:
        return None
    if executor.get("error"):
        return f"Parallel: not estimated, the parallel executor could not be tried: {executor['error']}"
    if executor.get("model") is None:
        reason = executor.get("reason")
        return (
            f"Parallel{_detected(executor)}: not estimated: {reason}" if verbose and isinstance(reason, str) else None
        )
    if not verbose:
        return _executor_summary(executor)
    found = executor["detection"]
    # The ratio decides, and is the median of the rounds' ratios: not the ratio of the two medians beside it.
    figures = (
        f"{found['graph']}, {found['rounds']} rounds: medians {format_seconds(found['sequential_s'])} sequential,"
        f" {format_seconds(found['parallel_s'])} parallel; median of the rounds' parallel / sequential"
        f" {found['ratio']:.2f}"
    )
    under = found["ratio"] < found["concurrent_below"]
    figures += f", {'' if under else 'not '}under {found['concurrent_below']}{_profile_clause(found, under)}"
    if executor["model"] == "list schedule":
        how = (
            f"onnxruntime's parallel executor ran independent nodes at once here ({figures}), so Parallel is"
            f" a list schedule of the bricks on {plural(executor['threads'], 'thread')}{_layer_cost(executor)}"
        )
    else:
        how = (
            f"onnxruntime's parallel executor ran one node at a time here ({figures}), so Parallel is Sequential"
            f" at {_call_costs(executor)}"
        )
    return f"Parallel{_detected(executor)}: {how}{_pool_clause(executor)}; Critical path: {executor['critical_path']}"


def _executor_summary(executor: Mapping[str, Any]) -> str:
    """The model of the parallel executor in one short line, pointing to ``-v`` for the rest."""
    if executor["model"] == "list schedule":
        how = f"a list schedule of the bricks on {plural(executor['threads'], 'thread')}{_layer_cost(executor)}"
    else:
        how = f"Sequential at {_call_costs(executor)}"
        factor = executor.get("pool_factor")
        if executor.get("pool_layer_s") is not None and is_number(factor):
            how += f", bricks using the intra-op pool at {factor:.2f}x"
    return f"Parallel: {how} (-v: how the parallel executor was detected)"


def _call_costs(executor: Mapping[str, Any]) -> str:
    """The parallel executor's call cost beside the sequential one's, where the two read differently, and what
    it costs more a layer, where that was measured."""
    parallel, sequential = format_seconds(executor.get("parallel_call_s")), format_seconds(executor.get("call_s"))
    per_layer = _layer_cost(executor, joined=" and")
    if parallel == sequential:
        return f"the parallel executor's call cost ({parallel}, as the sequential one's){per_layer}"
    return f"the parallel executor's call cost ({parallel} instead of {sequential}){per_layer}"


def _layer_cost(executor: Mapping[str, Any], joined: str = ",") -> str:
    """What each layer costs the parallel executor more than the sequential one, where it was measured, after
    ``joined``."""
    layer = executor.get("parallel_layer_s")
    return f"{joined} {format_seconds(layer)} more a layer" if is_number(layer) and layer > 0 else ""


def _profile_clause(found: Mapping[str, Any], under: bool) -> str:
    """What onnxruntime's profile of the branchy graph showed, where the detection profiled it."""
    at_once = found.get("nodes_at_once")
    if at_once is None:
        return ""
    if at_once == 0:
        seen = "in onnxruntime's profile no node started while another ran"
        return f", but {seen}: the machine's speed moved between rounds" if under else f"; {seen}"
    seen = f"in onnxruntime's profile {plural(at_once, 'node')} started while another ran"
    return f"; {seen}" if under else f", though {seen}: running them at once gained too little"


def _detected(executor: Mapping[str, Any]) -> str:
    """When the detection was made: in this run, or in an earlier one whose detection the store kept."""
    when = executor.get("measured_at")
    if not isinstance(when, str):
        return ""
    if not executor.get("reused"):
        return ", as detected in this run"
    moment = when.replace("T", " ")[:16]
    return f", as detected {moment} UTC and kept in the brick store (--dlbricks-remeasure detects it again)"


def _pool_clause(executor: Mapping[str, Any]) -> str:
    """How the Parallel column counts the bricks whose layers use the intra-op thread pool, and why."""
    layer_s = executor.get("pool_layer_s")
    pool = executor["detection"].get("pool")
    if layer_s is None or not pool:
        return ""
    return (
        f", bricks whose layers take {format_seconds(layer_s)} or more each (onnxruntime splits their work"
        f" over its intra-op thread pool) at {executor['pool_factor']:.2f}x their time, as the parallel"
        f" executor ran such layers here ({pool['graph']}{_pool_figures(pool, executor['pool_factor'])})"
    )


def _pool_figures(pool: Mapping[str, Any], factor: float) -> str:
    """The times the pool slowdown follows from, when the detection's sessions give it back (those of an
    older detection method, or damaged ones, do not: nothing is printed then)."""
    sessions = pool.get("sessions")
    if not isinstance(sessions, list) or not sessions:
        return ""
    if not all(
        isinstance(pair, list | tuple) and len(pair) == 2 and all(is_number(t) for t in pair) for pair in sessions
    ):
        return ""
    sequential, parallel = [pair[0] for pair in sessions], [pair[1] for pair in sessions]
    mean_parallel, median_sequential = statistics.mean(parallel), statistics.median(sequential)
    if median_sequential <= 0 or not math.isclose(mean_parallel / median_sequential, factor, rel_tol=1e-6):
        return ""
    return (
        f": the mean parallel time, {format_seconds(mean_parallel)} ({format_seconds(min(parallel))} to"
        f" {format_seconds(max(parallel))} by session), over the median sequential one,"
        f" {format_seconds(median_sequential)}"
    )
