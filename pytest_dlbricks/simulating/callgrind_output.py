"""Reading callgrind's output files: the part number and the event totals of each, nothing else.

callgrind's output format (valgrind's manual, "Callgrind Format Specification") starts a file with
header lines: ``part:`` numbers the dumps of one process and ``events:`` names the counted events;
``totals:``, at the end, gives their sum over the whole part (``summary:`` where a file has no
``totals:``). Only these lines are read; the cost lines of functions and calls are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CallgrindPart:
    """One dump of a callgrind run: its number and its event totals by event name."""

    part: int
    totals: dict[str, int]


def read_part(path: Path) -> CallgrindPart:
    """The part number and totals of one callgrind output file; raises :class:`CallgrindOutputError`."""
    header: dict[str, str] = {}
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                key, colon, value = line.partition(":")
                if colon and key in ("part", "events", "totals", "summary"):
                    header.setdefault(key, value.strip())
    except OSError as error:
        raise CallgrindOutputError(f"{path}: cannot read it: {error.strerror or error}") from None
    events = header.get("events", "").split()
    figures = (header.get("totals") or header.get("summary") or "").split()
    if not events or not figures:
        raise CallgrindOutputError(f"{path}: not a callgrind output file (no events: or totals: line)")
    try:
        counts = [int(figure) for figure in figures]
        part = int(header.get("part", "1"))
    except ValueError:
        raise CallgrindOutputError(f"{path}: its totals or part line is not made of whole numbers") from None
    # The format lets a totals line leave out trailing events, which then count zero.
    return CallgrindPart(part, {name: counts[i] if i < len(counts) else 0 for i, name in enumerate(events)})


class CallgrindOutputError(Exception):
    """A callgrind output file is missing, unreadable or not in callgrind's format."""
