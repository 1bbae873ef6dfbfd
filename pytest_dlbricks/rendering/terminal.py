"""Terminal text: the per-model table, the machine's peak in one line, and at ``-v`` where the time goes.

Pure functions of the report (the JSON form of :class:`pytest_dlbricks.reporting.report.RunReport`) that return text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.settings import DEFAULT_DIM
from ..core.wording import plural
from ..estimating.composition import is_count, is_number
from .accuracy_text import _speed_moved, accuracy_lines, calibration_line
from .executor_text import executor_line
from .formatting import (
    format_flops,
    format_margin,
    format_rate,
    format_ratio,
    format_seconds,
    format_share,
    format_table,
    shorten_path,
    table_width,
)

#: Operator types listed per model at ``-v``; the rest are summed as "other".
SHOWN_OP_TYPES = 5
#: How a model's own inference call, counted once, shows among its operator types.
CALL_LABEL = "(call)"
#: Bricks listed per model at ``-v``.
SHOWN_BRICKS = 3


def render_analysis(report: Mapping[str, Any], *, verbose: bool) -> str:
    """The peak line, and with ``verbose`` the per-model load, throughput, operator types and top bricks."""
    lines = [] if report.get("peak") is None else [_peak_line(report, verbose=verbose)]
    models = [model for model in report["models"] if "error" not in model]
    if verbose and models:
        lines += ["", *_model_rows(models, report.get("peak") is not None)]
        broken_down = [model for model in models if model.get("op_time_s")]
        if broken_down:
            lines += ["", "Time by operator type:"]
            lines += _labelled(broken_down, _op_shares)
            lines += ["", "Top bricks by time in the model:"]
            lines += _labelled(broken_down, _top_bricks)
    return "\n".join(lines)


def _peak_line(report: Mapping[str, Any], *, verbose: bool) -> str:
    peak = report["peak"]
    parts = [f"dlbricks: peak {format_rate(peak['flops_per_s'])} GFLOP/s (GEMM), {peak['bytes_per_s'] / 1e9:.1f} GB/s"]
    fractions = [m["peak_fraction"] for m in report["models"] if m.get("peak_fraction") is not None]
    if fractions:
        low, high = format_share(min(fractions)), format_share(max(fractions))
        parts.append(f"models reach {low} of the peak" if low == high else f"models reach {low} to {high} of the peak")
    unknown = report["summary"].get("unknown_flops_share")
    if unknown:
        parts.append(f"{format_share(unknown)} of the time is in bricks with unknown FLOPs")
    line = "; ".join(parts)
    return line if verbose else f"{line} (-v: load times, operator types)"


def _model_rows(models: Sequence[Mapping[str, Any]], with_peak: bool) -> list[str]:
    header = ("Model", "Load", "Sequential", "FLOPs", "GFLOP/s", "Of peak", "Unknown FLOPs")
    rows = [header]
    for model in models:
        unknown = model.get("unknown_flops_time_s")
        rows.append(
            (
                str(model["path"]),
                format_seconds(model.get("load_s")),
                format_seconds(model.get("sequential_s")),
                format_flops(model.get("flops")),
                format_rate(model.get("flops_per_s")),
                format_share(model.get("peak_fraction")) if with_peak else "-",
                "-" if not unknown else f"{format_seconds(unknown)} ({format_share(unknown / model['sequential_s'])})",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if column in (0, 6) else cell.rjust(w) for column, (cell, w) in enumerate(zip(row, widths))
        )
        for row in rows
    ]
    return [lines[0].rstrip(), "-" * len(lines[0].rstrip()), *(line.rstrip() for line in lines[1:])]


def _op_shares(model: Mapping[str, Any]) -> str:
    """The model's time by operator type, heaviest first, with its own inference call as ``(call)``."""
    times = dict(model["op_time_s"])
    if model.get("call_s"):
        times[CALL_LABEL] = model["call_s"]
    total = sum(times.values())
    if total <= 0:
        return "-"
    ordered = sorted(times.items(), key=lambda item: -item[1])
    shown = [f"{op} {format_share(seconds / total)}" for op, seconds in ordered[:SHOWN_OP_TYPES]]
    rest = ordered[SHOWN_OP_TYPES:]
    if rest:
        shown.append(f"{len(rest)} other {format_share(sum(seconds for _, seconds in rest) / total)}")
    return ", ".join(shown)


def _top_bricks(model: Mapping[str, Any]) -> str:
    return ", ".join(_brick_use(brick) for brick in model["top_bricks"][:SHOWN_BRICKS])


def _brick_use(brick: Mapping[str, Any]) -> str:
    """``Conv+Relu-3f2a91c0 x4 31%``: the brick, how often the model uses it, its share of the model's time."""
    count = f" x{brick['count']}" if brick["count"] > 1 else ""
    return f"{brick['label']}{count} {format_share(brick['share'])}"


def _labelled(models: Sequence[Mapping[str, Any]], describe: Callable[[Mapping[str, Any]], str]) -> list[str]:
    width = max(len(str(model["path"])) for model in models)
    return [f"  {str(model['path']).ljust(width)}  {describe(model)}" for model in models]


_COLUMNS = ("Model", "Layers", "Bricks", "Distinct", "Sequential", "Parallel", "Critical path", "Inputs", "Complete")
#: Each model's own margin, after its sequential estimate, where the run's verdict gives margins (see
#: :func:`.verdict.model_margins`).
_MARGIN_COLUMN = "Within"
_VALIDATION_COLUMNS = ("Measured", "Ratio")
#: The estimate corrected by the machine's calibration, beside the raw one (and its ratio when validated).
_CALIBRATED_COLUMNS = ("Calibrated",)
_CALIBRATED_RATIO = "Calibrated ratio"
#: Symbolic dimensions no one gave a size, which took the default: shown, as the estimate depends on them.
_GUESSED_COLUMN = f"Dims left at {DEFAULT_DIM}"
_LEFT_ALIGNED = ("Model", "Complete", "Inputs", _GUESSED_COLUMN)


#: Characters a model's path keeps when the table is fitted to the terminal: before columns are left out,
#: and at the least.
ROOMY_PATH_WIDTH = 20
MIN_PATH_WIDTH = 12
#: Columns left out, in this order, of a table that does not fit the terminal otherwise: the lower bound
#: beside the estimates, the cells explained under the table, the counts the closing line sums up.
DROPPED_FIRST = ("Critical path", "Inputs", "Layers", "Bricks")
#: Marks an Inputs cell whose explanation follows the table (see :func:`describe_inputs`).
INPUTS_NOTE = "*"


def parallel_estimated(report: Mapping[str, Any]) -> bool:
    """Whether the report's models have a parallel estimate: its ``executor`` entry names a model of the
    parallel executor (one that says why there is none, or none at all, gives no Parallel column)."""
    executor = report.get("executor")
    return isinstance(executor, Mapping) and executor.get("model") is not None


def render_table(report: Mapping[str, object], width: int | None = None, *, verbose: bool = False) -> str:
    """One row per model and closing lines on uniqueness and accuracy, printed after pytest-benchmark's table.

    With a terminal ``width`` the table is made to fit it where it can (model paths shortened from the
    left, explanations out of the cells and after the table); without, every cell says all. ``verbose``
    explains how the parallel executor was detected, and why there is no parallel estimate."""
    models: Sequence[Mapping[str, object]] = report["models"]  # type: ignore[assignment]
    short = width is not None
    validated = any("measured_s" in model for model in models)
    guessed = any(model.get("guessed_dims") for model in models)
    calibrated = any(model.get("calibrated_s") is not None for model in models)
    parallel = parallel_estimated(report)
    margins = model_margins_of(report)
    base = tuple(column for column in _COLUMNS if parallel or column != "Parallel")
    if margins is not None:
        at = base.index("Sequential") + 1
        base = (*base[:at], _MARGIN_COLUMN, *base[at:])
    columns = (
        base
        + (_VALIDATION_COLUMNS if validated else ())
        + ((*_CALIBRATED_COLUMNS, *((_CALIBRATED_RATIO,) if validated else ())) if calibrated else ())
        + ((_GUESSED_COLUMN,) if guessed else ())
    )
    rows = [columns] + [
        _row(model, validated, parallel=parallel, short=short, margins=margins)
        + _calibrated(model, validated) * calibrated
        + (_guessed(model),) * guessed
        for model in models
    ]
    dropped: list[str] = []
    if width is not None:
        rows, dropped = _fit(rows, width)
    left = [index for index, name in enumerate(rows[0]) if name in _LEFT_ALIGNED]
    lines = format_table(rows, left=left).splitlines()
    if short:
        lines.extend(inputs_notes(models))
    if dropped:
        lines.append(f"Left out to fit the terminal: {', '.join(dropped)} (-v shows every column)")
    summary: Mapping[str, object] = report["summary"]  # type: ignore[assignment]
    lines.append(count_line(summary))
    speed = speed_line(summary)
    if speed is not None:
        lines.append(speed)
    calibration = calibration_line(report.get("calibration"))  # type: ignore[arg-type]
    if calibration is not None:
        lines.append(calibration)
    executor = executor_line(report.get("executor"), verbose=verbose)  # type: ignore[arg-type]
    if executor:
        lines.append(executor)
    lines.extend(accuracy_lines(report.get("accuracy"), summary))  # type: ignore[arg-type]
    return "\n".join(lines)


def count_line(summary: Mapping[str, Any]) -> str:
    """Models, layers and bricks, and where the distinct bricks' times came from: this run or the store."""
    ratio = summary["distinct_ratio"]
    reused = summary.get("reused_bricks") or 0
    line = (
        f"{plural(summary['models'], 'model')}, {plural(summary['layers'], 'layer')},"
        f" {plural(summary['bricks'], 'brick')}, {summary['distinct_bricks']} distinct"
        + (f" ({ratio:.0%})" if isinstance(ratio, float) else "")
        + f", {summary['measured_bricks'] - reused} measured"
    )
    return line + (f", {reused} reused from the brick store" if reused else "")


def speed_line(summary: Mapping[str, Any]) -> str | None:
    """How far the machine's speed moved through the run, beside how far the bricks' own rounds spread
    (both half an interquartile range over a median), and how often timings waited for its fast state."""
    speed = summary.get("speed")
    if not speed or not is_number(speed.get("spread")):
        return None
    spread, noise = speed["spread"], summary.get("noise")
    line = (
        f"Machine speed through the run: {speed['reference']} took {format_seconds(speed['q1_s'])} to"
        f" {format_seconds(speed['q3_s'])} (quartiles of {speed['samples']} samples at least {speed['every_s']:g} s"
        f" apart; median {format_seconds(speed['median_s'])}): +-{spread:.1%}"
    )
    line += _waits(speed) + _above_known(speed)
    if not is_number(noise):
        return line
    line += f"; the bricks' own rounds typically +-{noise / 2:.1%}"
    if _speed_moved(spread, noise / 2):
        line += (
            ": each brick is timed within a moment, so estimates of bricks timed at other moments may be off"
            " by about as much as the speed moved"
        )
    return line


def _waits(speed: Mapping[str, Any]) -> str:
    """How many timings began in the machine's slow state and waited for its fast one (see
    :meth:`.speed_trace.SpeedTrace.settled`), and how many were timed slow all the same."""
    waits, waited, slow = speed.get("waits"), speed.get("waited_s"), speed.get("timed_slow")
    if not isinstance(waits, int) or waits <= 0 or not is_number(waited) or not isinstance(slow, int):
        return ""
    timings = "timing" if waits == 1 else "timings"
    text = f"; {waits} {timings} began in its slow state and waited {waited:.1f} s for the fast one"
    return text + (f", {slow} timed slow all the same (the wait's budget ran out)" if slow else "")


def _above_known(speed: Mapping[str, Any]) -> str:
    """How far above the machine's fast state earlier runs found this run stayed, where it never met it (see
    :mod:`.speed_trace`): its bricks agree with each other, and all read slow."""
    above, known, own = speed.get("above_known"), speed.get("known_fast_s"), speed.get("met_fast_s")
    if not (is_number(above) and above > 0 and is_number(known) and is_number(own)):
        return ""
    return (
        f"; this run never met the machine's fast state: {format_seconds(own)} at its fastest moments against"
        f" {format_seconds(known)} in earlier runs (+{above:.0%}), so its bricks may all read slow"
    )


def _fit(rows: list[tuple[str, ...]], width: int) -> tuple[list[tuple[str, ...]], list[str]]:
    """The rows fitted to ``width`` where they can be, and the columns left out: model paths shortened from
    the left to :data:`ROOMY_PATH_WIDTH`, then the columns of :data:`DROPPED_FIRST` left out in turn, then
    the paths shortened to :data:`MIN_PATH_WIDTH`."""
    rows = _fit_paths(rows, width, ROOMY_PATH_WIDTH)
    dropped = []
    for name in DROPPED_FIRST:
        if table_width(format_table(rows)) <= width:
            break
        if name in rows[0]:
            column = rows[0].index(name)
            rows = [row[:column] + row[column + 1 :] for row in rows]
            dropped.append(name)
    return _fit_paths(rows, width, MIN_PATH_WIDTH), dropped


def _fit_paths(rows: list[tuple[str, ...]], width: int, least: int) -> list[tuple[str, ...]]:
    """The rows with their model paths shortened from the left (``...ck.onnx``) as far as the table needs to
    fit ``width``, to ``least`` characters at the least."""
    excess = table_width(format_table(rows)) - width
    longest = max(len(row[0]) for row in rows)
    if excess <= 0 or longest <= least:
        return rows
    keep = max(least, longest - excess)
    return [rows[0], *((shorten_path(row[0], keep), *row[1:]) for row in rows[1:])]


def progress_line(path: str, number: int, found: int, width: int) -> str:
    """The collecting line while a model is cut: which one, and how many of the files found so far are left."""
    left = found - number
    tail = f" ({number} of {found}{f', {left} left' if left else ''})"
    keep = max(MIN_PATH_WIDTH, width - 1 - len("dlbricks: loading and cutting ") - len(tail))
    return f"dlbricks: loading and cutting {shorten_path(path, keep)}{tail}"


def model_margins_of(report: Mapping[str, object]) -> Mapping[str, object] | None:
    """Each model's own margin by path, as the report's verdict gives them; None where it gives none."""
    verdict = report.get("verdict")
    margins = verdict.get("models") if isinstance(verdict, Mapping) else None
    return margins if isinstance(margins, Mapping) and margins else None


def _row(
    model: Mapping[str, object],
    validated: bool,
    *,
    parallel: bool = True,
    short: bool = False,
    margins: Mapping[str, object] | None = None,
) -> tuple[str, ...]:
    """A model's cells; with ``margins`` (each model's own, by path), its margin after its sequential estimate."""
    within = () if margins is None else (format_margin(margins.get(str(model["path"]))),)
    if "error" in model:
        cells = (*("-",) * (7 if parallel else 6), "error")  # Layers, Bricks, Distinct, Sequential, ..., Complete
        return (str(model["path"]), *cells[:4], *within, *cells[4:]) + (("-", "-") if validated else ())
    unsupported = len(model.get("unsupported") or ())  # type: ignore[arg-type]
    missing = f"{model['measured_bricks']}/{model['bricks']}" + (f", {unsupported} unsupported" if unsupported else "")
    complete = "yes" if model["complete"] else f"no ({missing})"
    row = (
        str(model["path"]),
        str(model["layers"]),
        str(model["bricks"]),
        str(model["unique_bricks"]),
        format_seconds(model["sequential_s"]),  # type: ignore[arg-type]
        *within,
        *((format_seconds(model.get("parallel_s")),) if parallel else ()),  # type: ignore[arg-type]
        format_seconds(model["critical_path_s"]),  # type: ignore[arg-type]
        describe_inputs(model, short=short),
        complete,
    )
    if not validated:
        return row
    measured = model.get("measured_s")
    return (
        *row,
        format_seconds(measured if isinstance(measured, float) else None),
        format_ratio(model.get("ratio")),  # type: ignore[arg-type]
    )


def _calibrated(model: Mapping[str, object], validated: bool) -> tuple[str, ...]:
    """The calibrated estimate, and over the measured time when validated."""
    calibrated = model.get("calibrated_s")
    seconds = format_seconds(calibrated if isinstance(calibrated, float) else None)
    return (seconds, format_ratio(model.get("calibrated_ratio"))) if validated else (seconds,)  # type: ignore[arg-type]


def _guessed(model: Mapping[str, object]) -> str:
    return ", ".join(model.get("guessed_dims") or ()) or "-"  # type: ignore[arg-type]


def describe_inputs(model: Mapping[str, object], *, short: bool = False) -> str:
    """What a model ran on; on synthetic inputs, the operators whose work depends on data, as a warning; and
    the weights it lists as inputs, which onnxruntime neither folds nor pre-packs (the model runs slower so).
    ``short``: a mark instead of the sentences, explained after the table by :func:`inputs_notes`."""
    inputs = str(model.get("inputs", "synthetic"))
    ops: Sequence[str] = model.get("data_dependent_ops") or ()  # type: ignore[assignment]
    weights = model.get("weights_as_inputs")
    listed = is_count(weights) and bool(weights)
    if short:
        return inputs + INPUTS_NOTE if (inputs == "synthetic" and ops) or listed else inputs
    if inputs == "synthetic" and ops:
        verb = "depends" if len(ops) == 1 else "depend"
        inputs = f"synthetic, but {', '.join(ops)} {verb} on data: give sample inputs"
    if listed:
        as_what = "a graph input" if weights == 1 else "graph inputs"
        inputs += f"; {plural(weights, 'weight')} listed as {as_what}, not constants"  # type: ignore[arg-type]
    return inputs


def inputs_notes(models: Sequence[Mapping[str, object]]) -> list[str]:
    """The notes under a table whose Inputs cells are marked: which models' work depends on data, and which
    list weights as graph inputs."""
    steered = [
        f"{model['path']} ({', '.join(map(str, model['data_dependent_ops']))})"  # type: ignore[call-overload]
        for model in models
        if str(model.get("inputs", "synthetic")) == "synthetic" and model.get("data_dependent_ops")
    ]
    listing = [
        f"{model['path']} ({model['weights_as_inputs']})"
        for model in models
        if is_count(model.get("weights_as_inputs")) and model.get("weights_as_inputs")
    ]
    notes = []
    if steered:
        notes.append(
            f"{INPUTS_NOTE} synthetic inputs, but data steers the work of {'; '.join(steered)}: give sample inputs"
            " (an .npz of them beside the model, or the pytest_dlbricks_model_inputs hook)"
        )
    if listing:
        notes.append(
            f"{INPUTS_NOTE} weights listed as graph inputs, not constants, in {'; '.join(listing)}: onnxruntime"
            " neither folds nor pre-packs them (take them out of the graph inputs if nothing overrides them)"
        )
    return notes
