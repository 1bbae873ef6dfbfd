"""The HTML report's charts, drawn with HTML and CSS alone: where each model's time goes by operator type, and its
estimate against its measured time."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from .formatting import format_ratio, format_seconds, format_share
from .html_parts import _path, _table

#: Colours of common operator types, fixed so that an operator looks the same in every report.
OP_COLOURS = {
    "Conv": "#4e79a7", "FusedConv": "#a0cbe8", "Gemm": "#e15759", "FusedGemm": "#ff9d9a",
    "MatMul": "#f28e2b", "FusedMatMul": "#ffbe7d", "Attention": "#59a14f", "MultiHeadAttention": "#8cd17d",
    "LayerNormalization": "#b6992d", "SkipLayerNormalization": "#f1ce63", "Softmax": "#499894",
    "Add": "#86bcb6", "Mul": "#d37295", "Relu": "#fabfd2", "MaxPool": "#b07aa1", "AveragePool": "#d4a6c8",
    "GlobalAveragePool": "#9d7660", "BatchNormalization": "#d7b5a6", "LSTM": "#7b4ea3", "GRU": "#2f6f8f",
    "Transpose": "#8c6d31", "Concat": "#bcbd22", "Gelu": "#17becf", "Sigmoid": "#ad494a",
    "ReorderInput": "#8ca252", "ReorderOutput": "#cedb9c", "Reshape": "#636363",
}  # fmt: skip
#: Operator types drawn in a colour of their own, heaviest over all models first; the rest are "other".
SHOWN_OP_TYPES = 12
OTHER_COLOUR = "#bab0ac"
#: Colour and label of a model's own inference call, counted once in its estimate.
CALL_COLOUR = "#d4dae1"
CALL = "inference call"
#: Operator types named beside each model's bar, largest first.
NAMED_PARTS = 3


def _op_chart(models: Sequence[Mapping[str, Any]], colours: Mapping[str, str]) -> str:
    """A bar per model, 100% wide, in segments by operator type; its estimate and largest parts beside it."""
    rows = [m for m in models if "error" not in m]
    if not rows:
        return "<p class=muted>No model was cut into bricks.</p>"
    body = []
    for model in rows:
        op_time = _op_times(model)
        total = sum(op_time.values()) if op_time else 0.0
        if not op_time or total <= 0:
            plot, parts = '<span class="muted">incomplete: not every brick was measured</span>', ""
        else:
            segments = [
                f'<span style="width:{100 * seconds / total:.3f}%;background:{_colour(op, colours)}"'
                f' title="{escape(op)}: {escape(format_seconds(seconds))} ({escape(format_share(seconds / total))})">'
                "</span>"
                for op, seconds in _grouped(op_time, colours)
            ]
            plot = f'<div class="stack">{"".join(segments)}</div>'
            largest = sorted(op_time.items(), key=lambda item: -item[1])[:NAMED_PARTS]
            parts = escape(", ".join(f"{op} {format_share(seconds / total)}" for op, seconds in largest))
        estimate = escape(format_seconds(model["sequential_s"]))
        body.append([_path(model["path"]), plot, estimate, f"<span class=muted>{parts}</span>"])
    table = _table(["Model", "Time by operator type", "Sequential", "Largest parts"], body, numeric={2}, chart=True)
    legend = "".join(f'<span><i style="background:{colour}"></i>{escape(op)}</span>' for op, colour in colours.items())
    if any(op not in colours for m in rows for op in (m.get("op_time_s") or {})):
        legend += f'<span><i style="background:{OTHER_COLOUR}"></i>other</span>'
    if any(m.get("call_s") for m in rows):
        legend += f'<span><i style="background:{CALL_COLOUR}"></i>{CALL} (once per model)</span>'
    note = (
        "<p class=muted>Share of each model's sequential estimate by operator type, and of the model's own"
        " inference call. Hover a segment for its time.</p>"
    )
    return f"{note}{table}<div class=legend>{legend}</div>"


def _colour(op: str, colours: Mapping[str, str]) -> str:
    return CALL_COLOUR if op == CALL else colours.get(op, OTHER_COLOUR)


def _grouped(op_time: Mapping[str, float], colours: Mapping[str, str]) -> list[tuple[str, float]]:
    """Operator types in legend order, those without a colour of their own summed as "other", the call last."""
    shown = [(op, op_time[op]) for op in colours if op in op_time]
    other = sum(seconds for op, seconds in op_time.items() if op not in colours and op != CALL)
    return shown + ([("other", other)] if other > 0 else []) + ([(CALL, op_time[CALL])] if CALL in op_time else [])


def _op_times(model: Mapping[str, Any]) -> dict[str, float]:
    """The model's time by operator type and, when it has one, its own inference call."""
    times = dict(model.get("op_time_s") or {})
    if times and model.get("call_s"):
        times[CALL] = model["call_s"]
    return times


def _ratio_chart(models: Sequence[Mapping[str, Any]]) -> str:
    """Sequential / Measured per model on a common axis, with the +-10% band, and the two times beside it."""
    ratios = [float(m["ratio"]) for m in models if m.get("ratio") is not None]
    low = min([0.8, *ratios]) - 0.05
    high = max([1.2, *ratios]) + 0.05

    def at(ratio: float) -> str:
        return f"{100 * (ratio - low) / (high - low):.2f}%"

    band = (
        f'<span class="band" style="left:{at(0.9)};width:{100 * 0.2 / (high - low):.2f}%"></span>'
        f'<span class="one" style="left:{at(1.0)}"></span>'
    )
    ticks = "".join(f'<span class="tick" style="left:{at(tick)}">{tick:.1f}</span>' for tick in _ticks(low, high))
    body = []
    for model in models:
        ratio = model.get("ratio")
        dot = ""
        if ratio is not None:
            paired = model.get("paired_ratio")
            tip = f"{model['path']}: ratio {format_ratio(ratio)}" + (
                f"; in paired rounds {format_ratio(paired)}" if paired is not None else ""
            )
            grade = "good" if 0.9 <= ratio <= 1.1 else "off"
            dot = f'<span class="dot {grade}" style="left:{at(float(ratio))}" title="{escape(tip)}"></span>'
        body.append(
            [
                _path(model["path"]),
                f'<div class="axis">{band}{dot}</div>',
                escape(format_seconds(model["sequential_s"])),
                escape(format_seconds(model["measured_s"])),
                format_ratio(ratio),
            ]
        )
    body.append(["", f'<div class="axis">{ticks}</div>', "", "", ""])
    columns = ["Model", "Sequential / Measured", "Sequential", "Measured", "Ratio"]
    table = _table(columns, body, numeric={2, 3, 4}, chart=True)
    note = (
        "<p class=muted>The sequential estimate, composed from the brick items, over the model measured whole;"
        " the band is +-10%. Hover a point for the ratio of paired rounds, where the bricks were timed again"
        " just before each timed call of the model.</p>"
    )
    return note + table


def _ticks(low: float, high: float) -> list[float]:
    step = 0.1 if high - low <= 1.5 else 0.5
    first = round(low / step + 0.4999) * step
    return [round(first + i * step, 2) for i in range(int((high - first) / step) + 1)]


def _colours(models: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """A colour for each of the heaviest operator types over all models: its own in every report."""
    totals: Counter[str] = Counter()
    for model in models:
        for op, seconds in (model.get("op_time_s") or {}).items():
            totals[op] += seconds
    return {op: op_colour(op) for op, _ in totals.most_common(SHOWN_OP_TYPES)}


def op_colour(op: str) -> str:
    """An operator type's colour: fixed for the common ones, else a hue made from its name alone."""
    if op in OP_COLOURS:
        return OP_COLOURS[op]
    digest = hashlib.sha256(op.encode()).digest()
    hue = int.from_bytes(digest[:2], "big") % 360
    return f"hsl({hue} 50% {(45, 60, 75)[digest[2] % 3]}%)"
