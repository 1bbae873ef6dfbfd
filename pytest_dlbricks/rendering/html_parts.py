"""The HTML report's building blocks: sections, tables, definition lists, bars and model paths, each escaped as it
is built."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from .formatting import format_share

#: Longest model path shown before it is shortened from the left.
LABEL_CHARS = 42


def _muted(lines: Iterable[str | None]) -> str:
    """Closing lines of the terminal's summary, as the page's notes under a section."""
    return "".join(f"<p class=muted>{escape(line)}</p>\n" for line in lines if line)


def _section(title: str, body: str, anchor: str | None = None) -> str:
    attribute = f' id="{anchor}"' if anchor else ""
    return f"<section{attribute}><h2>{escape(title)}</h2>\n{body}\n</section>\n"


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: set[int], chart: bool = False) -> str:
    """A table of cells that are HTML already, with the ``numeric`` columns right-aligned.

    The last cell of a row shorter than the header spans the remaining columns.
    """

    def cls(index: int) -> str:
        return ' class="num"' if index in numeric else ""

    def cells(row: Sequence[str]) -> str:
        html = [f"<td{cls(i)}>{cell}</td>" for i, cell in enumerate(row[:-1])]
        span = len(columns) - len(row) + 1
        html.append(f'<td colspan="{span}">{row[-1]}</td>' if span > 1 else f"<td{cls(len(row) - 1)}>{row[-1]}</td>")
        return "".join(html)

    head = "".join(f"<th{cls(i)}>{escape(column)}</th>" for i, column in enumerate(columns))
    body = "".join(f"<tr>{cells(row)}</tr>" for row in rows)
    kind = ' class="chart"' if chart else ""
    return f"<div class=wide><table{kind}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _definitions(values: Mapping[str, Any]) -> str:
    items = "".join(f"<dt>{escape(str(key))}</dt><dd>{escape(_value(value))}</dd>" for key, value in values.items())
    return f"<dl>{items}</dl>"


def _value(value: Any) -> str:
    """A setting as a user writes it: on and off for switches, none for nothing."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, Mapping):
        return ", ".join(f"{key}={item}" for key, item in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def _bar(fraction: float | None) -> str:
    """A share as text, and beside it a bar of that length (capped at 100%)."""
    if fraction is None:
        return "-"
    width = max(0.0, min(fraction, 1.0)) * 100
    return (
        f'<div class="bar"><span class="text">{escape(format_share(fraction))}</span>'
        f'<span class="track"><span class="fill" style="width:{width:.1f}%"></span></span></div>'
    )


def _path(path: str) -> str:
    """A model path whole on one line, shortened from the left past :data:`LABEL_CHARS` characters (its
    file name stays), the full path in its title: a path broken mid-name reads as two."""
    short = _short(path)
    title = f' title="{escape(path)}"' if short != path else ""
    return f"<code class=path{title}>{escape(short)}</code>"


def _short(path: str, limit: int = LABEL_CHARS) -> str:
    return path if len(path) <= limit else "..." + path[-(limit - 3) :]
