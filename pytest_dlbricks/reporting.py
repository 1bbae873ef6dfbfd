"""The report: built as plain data from plans and brick times, rendered as text or written as JSON."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .bricks import BrickSpec
from .composition import compose
from .cutting import ModelPlan
from .settings import Settings

REPORT_VERSION = 1


@dataclass(frozen=True)
class BrickResult:
    """One distinct brick's timing, in seconds, as pytest-benchmark measured it."""

    stats: Mapping[str, float]
    provider: str


@dataclass(frozen=True)
class FailedModel:
    """A model that could not be loaded or cut; reported with its cause."""

    path: str
    cause: str


def build_report(
    settings: Settings,
    plans: Sequence[ModelPlan],
    failed: Sequence[FailedModel],
    bricks: Mapping[str, BrickSpec],
    results: Mapping[str, BrickResult],
) -> dict[str, object]:
    """The report as JSON-ready data; times are in seconds, the statistic is ``settings.statistic``."""
    times = {signature: result.stats[settings.statistic] for signature, result in results.items()}
    users: dict[str, Counter[str]] = {signature: Counter() for signature in bricks}
    for plan in plans:
        for signature, count in plan.signatures.items():
            users[signature][plan.path] += count
    models: list[dict[str, object]] = []
    for plan in plans:
        estimate = compose(plan, times)
        models.append(
            {
                "path": plan.path,
                "layers": plan.layers,
                "bricks": len(plan.bricks),
                "unique_bricks": len(plan.signatures) + len(plan.broken),
                "measured_bricks": estimate.measured_bricks,
                "sequential_s": estimate.sequential_s,
                "critical_path_s": estimate.critical_path_s,
                "complete": estimate.complete,
                "guessed_dims": plan.guessed_dims,
                "unbuildable_layers": [
                    {"layer": b.layer_index, "op": b.op_type, "cause": b.reason} for b in plan.broken
                ],
            }
        )
    models.extend(
        {"path": model.path, "complete": False, "error": model.cause, "sequential_s": None, "critical_path_s": None}
        for model in failed
    )
    total_bricks = sum(len(plan.bricks) for plan in plans)
    return {
        "version": REPORT_VERSION,
        "granularity": settings.granularity,
        "settings": settings.describe(),
        "summary": {
            "models": len(plans) + len(failed),
            "failed_models": len(failed),
            "layers": sum(plan.layers for plan in plans),
            "bricks": total_bricks,
            "distinct_bricks": len(bricks),
            "distinct_ratio": len(bricks) / total_bricks if total_bricks else None,
            "measured_bricks": len(times),
        },
        "models": models,
        "bricks": [
            {
                "signature": signature,
                "ops": list(brick.ops),
                "time_s": times.get(signature),
                "stats": dict(results[signature].stats) if signature in results else None,
                "provider": results[signature].provider if signature in results else None,
                "models": dict(users[signature]),
            }
            for signature, brick in bricks.items()
        ],
    }


def write_json(path: Path, data: object) -> None:
    """Write ``data`` as JSON so that readers never see a half-written file (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; a report is not
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2)
            stream.write("\n")
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def format_seconds(seconds: float | None) -> str:
    """A duration in the unit that reads best, chosen after rounding (so never "1000.0 us")."""
    if seconds is None:
        return "-"
    if round(seconds * 1e6, 1) < 1000:
        return f"{seconds * 1e6:.1f} us"
    if round(seconds * 1e3, 2) < 1000:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


_COLUMNS = ("Model", "Layers", "Bricks", "Distinct", "Sequential", "Critical path", "Complete")


def render_table(report: Mapping[str, object]) -> str:
    """One row per model and a closing line on uniqueness, as printed after pytest-benchmark's table."""
    models: Sequence[Mapping[str, object]] = report["models"]  # type: ignore[assignment]
    rows = [_COLUMNS]
    for model in models:
        if "error" in model:
            rows.append((str(model["path"]), "-", "-", "-", "-", "-", "error"))
            continue
        complete = "yes" if model["complete"] else f"no ({model['measured_bricks']}/{model['bricks']})"
        rows.append(
            (
                str(model["path"]),
                str(model["layers"]),
                str(model["bricks"]),
                str(model["unique_bricks"]),
                format_seconds(model["sequential_s"]),  # type: ignore[arg-type]
                format_seconds(model["critical_path_s"]),  # type: ignore[arg-type]
                complete,
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(_COLUMNS))]
    lines = [
        "  ".join(
            cell.ljust(width) if column in (0, 6) else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    summary: Mapping[str, object] = report["summary"]  # type: ignore[assignment]
    ratio = summary["distinct_ratio"]
    lines.append(
        f"{summary['models']} models, {summary['layers']} layers, {summary['bricks']} bricks,"
        f" {summary['distinct_bricks']} distinct"
        + (f" ({ratio:.0%})" if isinstance(ratio, float) else "")
        + f", {summary['measured_bricks']} measured"
    )
    return "\n".join(lines)
