"""Every model of a brick store estimated on every machine and settings in it, side by side.

The store keeps each model as cut into bricks and each machine's brick times, so any model can be
estimated on every machine that measured all of its bricks, whenever that was: the multi-system
comparison of DLBricks, from the data day-to-day runs leave in the store.
"""

from __future__ import annotations

from collections import Counter

from ..core.identity import describe_machine, describe_timing
from ..core.wording import counted, plural
from ..estimating.composition import compose_calls
from ..rendering.formatting import format_seconds, format_table
from ..storage.store import BrickStore
from ..storage.store_records import references_of, times_of
from ..timing.overhead import NO_OVERHEAD

#: A model's cell when some of its windows have no brick the provider runs.
UNSUPPORTED = "unsupported"


def store_report(store: BrickStore, statistic: str = "median", critical_path: bool = False) -> str:
    """Models as rows, machines and settings as columns, and each other column's ratio to the first."""
    shelves = store.shelves()
    models = store.models()
    kind = "critical-path" if critical_path else "sequential"
    lines = [
        f"Brick store {store.root}: {plural(len(models), 'model')}, {kind} estimates from {statistic} brick"
        f" times, from {plural(len(shelves), 'combination')} of machine and settings:"
    ]
    bricks = [shelf.bricks() for shelf in shelves]
    overheads = [shelf.get_overhead() or NO_OVERHEAD for shelf in shelves]
    for index, (shelf, found) in enumerate(zip(shelves, bricks), start=1):
        lines.append(
            f"[{index}] {describe_machine(shelf.identity.machine)}; {describe_timing(shelf.identity.timing)};"
            f" {plural(len(found), 'brick')}"
        )
    damaged = store.discarded + sum((shelf.discarded for shelf in shelves), Counter())
    if damaged:
        kinds = ", ".join(counted(count, kind) for kind, count in sorted(damaged.items()))
        lines.append(
            f"Skipped {plural(sum(damaged.values()), 'damaged record')} ({kinds}); a run on their machine repairs them."
        )
    if not shelves or not models:
        return "\n".join(lines)
    times = [times_of(found, statistic) for found in bricks]
    references = [references_of(found) for found in bricks]
    header = ["Model", "G", "Dims", *(f"[{i}]" for i in range(1, len(shelves) + 1))]
    header += [f"[{i}]/[1]" for i in range(2, len(shelves) + 1)]
    rows = [header]
    for model in models:
        estimates = []
        for shelf_times, overhead, shelf_references in zip(times, overheads, references):
            estimate = compose_calls(
                model.windows, model.graph, model.io, shelf_times, overhead, references=shelf_references
            )
            estimates.append(estimate.critical_path_s if critical_path else estimate.sequential_s)
        first = estimates[0]
        ratios = [f"{e / first:.2f}" if e is not None and first else "-" for e in estimates[1:]]
        dims = " ".join(f"{name}={size}" for name, size in sorted(model.dims.items())) or "-"
        # A window without a brick: the provider could not run it when the model was cut, on no machine.
        cells = [UNSUPPORTED] * len(estimates) if None in model.windows else list(map(format_seconds, estimates))
        rows.append([model.path, str(model.granularity), dims, *cells, *ratios])
    lines += ["", format_table(rows, left=(0, 2))]
    shown = {cell for row in rows[1:] for cell in row[3 : 3 + len(shelves)]}
    legend = [
        text
        for cell, text in (
            ("-", "-: the machine has not measured every brick of the model"),
            (UNSUPPORTED, f"{UNSUPPORTED}: some layers have no brick the provider runs at the model's types"),
        )
        if cell in shown
    ]
    return "\n".join([*lines, "", *legend] if legend else lines)
