"""How numbers, paths and tables read in text: the formats every renderer shares, so the terminal, the HTML and the
comparisons print a figure alike."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence


def format_flops(flops: float | None) -> str:
    """A FLOP count to three significant digits with an SI prefix: ``812 FLOP``, ``1.35 MFLOP``, ``40.9 GFLOP``."""
    if flops is None:
        return "-"
    rounded = float(f"{flops:.3g}")
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if rounded >= scale:
            value = round(rounded / scale, 6)
            return f"{value:.{max(0, 2 - int(math.log10(value)))}f} {prefix}FLOP"
    return f"{flops:.0f} FLOP"


def format_rate(flops_per_s: float | None) -> str:
    """FLOP/s in GFLOP/s: one decimal from 10 on, three significant digits below."""
    if flops_per_s is None:
        return "-"
    giga = flops_per_s / 1e9
    return f"{giga:.1f}" if giga >= 10 else f"{giga:.3g}"


def format_share(fraction: float | None) -> str:
    """A fraction as a percentage: none above 10%, one decimal from 1%, two significant digits below."""
    if fraction is None:
        return "-"
    percent = fraction * 100
    if round(percent, 1) >= 10:
        return f"{percent:.0f}%"
    return f"{percent:.1f}%" if percent >= 1 else f"{percent:.2g}%"


def format_seconds(seconds: float | None) -> str:
    """A duration in the unit that reads best, chosen after rounding (so never "1000.0 us")."""
    if seconds is None:
        return "-"
    if round(seconds * 1e6, 1) < 1000:
        return f"{seconds * 1e6:.1f} us"
    if round(seconds * 1e3, 2) < 1000:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def format_table(rows: Sequence[Sequence[str]], left: Sequence[int] = (0,)) -> str:
    """Rows as aligned text columns, a rule under the header; columns ``left`` are left-aligned, others right."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(width) if column in left else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "-" * max(map(len, lines)))
    return "\n".join(lines)


def table_width(text: str) -> int:
    """The width of a table made by :func:`format_table` (its rule under the header), for a title rule above it."""
    return len(text.splitlines()[1])


def shorten_path(path: str, width: int) -> str:
    """``path`` in at most ``width`` characters, shortened from the left: its folders first, then, for a sweep
    point's row (``mlp.onnx[batch=1,fp32]``), the file's ``.onnx`` and the left of its name, the point kept whole,
    so that rows of several models at the same points still tell them apart."""
    if len(path) <= width:
        return path
    tail = "..." + path[len(path) - width + 3 :]
    name = path.rpartition("/")[2]
    point_at = name.find("[")
    if len(name) + 3 <= width or point_at <= 0:
        return tail
    stem, point = name[:point_at].removesuffix(".onnx"), name[point_at:]
    keep = width - 3 - len(point)
    return "..." + stem[-keep:] + point if keep >= min(3, len(stem)) else tail


def fit_lines(text: str, width: int) -> str:
    """Lines wider than ``width`` wrapped at spaces, their continuations indented; a word wider than the
    terminal (a path) is left whole, and so is a table's row (a gap of two spaces between its cells), whose
    columns wrapping would scramble."""
    fitted = []
    for line in text.splitlines():
        if len(line) <= width or "  " in line.strip():
            fitted.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        fitted.extend(
            textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
        )
    return "\n".join(fitted)


def format_margin(margin: object) -> str:
    """A model's own margin (see :func:`.verdict.model_margins`): ``+-8%``, at least 1% as the verdict says it; ``-``
    without one."""
    if isinstance(margin, int | float) and not isinstance(margin, bool) and math.isfinite(margin) and margin >= 0:
        return f"+-{max(margin, 0.01):.0%}"
    return "-"


def format_ratio(ratio: float | None) -> str:
    """An estimate over a measurement, to two decimals: what the two times printed beside it give."""
    return "-" if ratio is None else f"{ratio:.2f}"
