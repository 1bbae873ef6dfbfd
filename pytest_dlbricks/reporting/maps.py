"""Private maps: what an exported suite leaves out, kept by the models' owner to compose estimates.

A map (``<model>.map.json``) holds one entry per sweep point of one model: what the model's report
entry says whatever the times (path, point, layers, bricks, dimensions guessed, layers that cannot be
built) and its
``composition``: which brick each window is, how often, the brick graph for the critical path, and
the model's number of inputs and outputs. With the report of a run of the suite (``--dlbricks-json``
on any machine) it gives the model's estimates for that machine (:func:`compose_from_maps`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.wording import plural
from ..cut.cutting import ModelPlan
from ..storage.atomic_files import write_json
from .recomposition import (
    Report,
    damaged_executor,
    executor_of,
    overhead_of,
    recomposed_report,
    static_fields,
    unestimated_executor,
)

MAP_SUFFIX = ".map.json"
KIND = "pytest-dlbricks model map"
MAP_VERSION = 1
#: Settings under which bricks are timed that should match between the export and the suite's run.
TIMING_SETTINGS = ("optimization", "intra_op_threads")
#: Settings that decided how the models were cut: the maps', not those of the run that timed the suite.
CUT_SETTINGS = ("granularity", "cut", "dims", "model_dims")


class MapError(Exception):
    """A map or a report cannot be used for composition; the message says why."""


def map_file_name(model: str) -> str:
    """A flat file name for the map of the model at ``model`` (as pytest shows its path)."""
    return model.replace("\\", "/").replace("/", "--") + MAP_SUFFIX


def write_maps(folder: Path, report: Mapping[str, Any], plans: Sequence[ModelPlan]) -> int:
    """Write one map per model file of ``report`` into ``folder``; returns how many.

    Maps of models no longer cut are removed, so ``folder`` holds the maps of one export.
    """
    files = {plan.path: plan.file or plan.path for plan in plans}
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in report["models"]:
        if "composition" in entry:
            groups.setdefault(files.get(entry["path"], entry["path"]), []).append(static_fields(entry))
    folder.mkdir(parents=True, exist_ok=True)
    written = set()
    for model, entries in groups.items():
        name = map_file_name(model)
        document = {
            "kind": KIND,
            "version": MAP_VERSION,
            "model": model,
            "granularity": report["granularity"],
            "settings": report["settings"],
            "entries": entries,
        }
        write_json(folder / name, document)
        written.add(name)
    for stale in folder.glob(f"*{MAP_SUFFIX}"):
        if stale.name not in written and _is_map(stale):  # another tool's file of the same suffix stays
            stale.unlink()
    return len(written)


def _is_map(path: Path) -> bool:
    """Whether ``path`` is a map file of pytest-dlbricks (of any version)."""
    try:
        document = read_json(path)
    except MapError:
        return False
    return isinstance(document, dict) and document.get("kind") == KIND


def read_maps(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The maps in ``paths`` (map files, or folders searched for ``*.map.json``), in path order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.rglob(f"*{MAP_SUFFIX}"))
            if not found:
                raise MapError(f"{path} holds no maps (*{MAP_SUFFIX})")
            files.extend(found)
        else:
            files.append(path)
    return [_read_map(file) for file in files]


def _read_map(path: Path) -> dict[str, Any]:
    document = read_json(path)
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise MapError(f"{path} is not a pytest-dlbricks map (written by --dlbricks-export)")
    if document.get("version") != MAP_VERSION:
        raise MapError(f"{path} is map format version {document.get('version')}; this version reads {MAP_VERSION}")
    return document


def read_json(path: Path) -> Any:
    """The JSON document at ``path``; :class:`MapError` names the file when it cannot be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise MapError(f"cannot read {path}: {error.strerror or error}") from error
    except (ValueError, RecursionError) as error:  # nested deeper than the parser goes: not JSON either
        raise MapError(f"{path} is not JSON: {error}") from error


def check_results(results: Any, path: Path | str) -> None:
    """Refuse anything but a pytest-dlbricks report, explaining what was given instead."""
    if isinstance(results, dict) and "benchmarks" in results and "machine_info" in results:
        raise MapError(
            f"{path} is pytest-benchmark's JSON; pass the report written by --dlbricks-json, which also"
            " records the cost of one inference call that composition takes off every brick"
        )
    if not isinstance(results, dict) or not isinstance(results.get("bricks"), list):
        raise MapError(f"{path} is not a pytest-dlbricks report (written by --dlbricks-json)")
    if not isinstance(results.get("summary"), dict):
        raise MapError(f"{path} is not a pytest-dlbricks report (written by --dlbricks-json): it has no summary")
    try:
        overhead_of(results["summary"])
    except ValueError as error:
        raise MapError(f"{path}: its call overhead (summary.call_overhead_s) is damaged: {error}") from None


def compose_from_maps(
    maps: Sequence[Mapping[str, Any]], results: Mapping[str, Any], statistic: str | None = None
) -> tuple[Report, list[str]]:
    """Estimates of the mapped models from the brick times of ``results`` (a pytest-dlbricks report).

    Returns the report and warnings: timing settings that differ between the export and the run,
    or results that hold none of the maps' bricks.
    """
    settings = dict(results["settings"])
    if statistic is not None:
        settings["statistic"] = statistic
    # The maps were cut by the version that exported them, not the one that timed their bricks.
    methods = sorted({document["settings"].get("cut_method") or 1 for document in maps}, key=str)
    if methods:
        settings["cut_method"] = methods[0] if len(methods) == 1 else methods
    for name in CUT_SETTINGS:
        values = [document["settings"][name] for document in maps if name in document["settings"]]
        distinct = [value for index, value in enumerate(values) if value not in values[:index]]
        if distinct:
            settings[name] = distinct[0] if len(distinct) == 1 else distinct
    records = {str(record["signature"]): record for record in results["bricks"]}
    entries = [entry for document in maps for entry in document["entries"]]
    report = recomposed_report(
        granularity=maps[0]["granularity"] if maps else None,
        settings=settings,
        entries=entries,
        records=records,
        overhead=overhead_of(results["summary"]),
        executor=executor_of(results) or unestimated_executor(results),
        peak=results.get("peak"),
        extra={
            "machine": results.get("machine"),
            "conditions": results.get("conditions"),
            "maps": [document["model"] for document in maps],
        },
    )
    for name in ("noise", "high_noise", "speed", "memory", "load"):
        report["summary"][name] = results["summary"].get(name)
    warnings = []
    for name in TIMING_SETTINGS:
        exported = {document["settings"].get(name) for document in maps}
        if exported != {settings.get(name)}:
            warnings.append(
                f"the bricks were timed with {name} {settings.get(name)!r}, but the maps were made with"
                f" {', '.join(repr(value) for value in sorted(exported, key=str))}"
            )
    if damaged_executor(results):
        warnings.append("the results' executor entry is damaged: the models have no parallel estimate")
    untimed = [brick for brick in report["bricks"] if brick.get("time_s") is None and not brick.get("unsupported")]
    if report["bricks"] and report["summary"]["measured_bricks"] == 0:
        warnings.append("the results hold a time for none of the maps' bricks: are they from this suite?")
    elif untimed:
        incomplete = [str(model["path"]) for model in report["models"] if not model.get("complete")]
        shown = ", ".join(incomplete[:3]) + (f" and {len(incomplete) - 3} more" if len(incomplete) > 3 else "")
        warnings.append(
            f"the results hold no time for {len(untimed)} of the maps' {len(report['bricks'])} bricks, so"
            f" {plural(len(incomplete), 'model')} {'has' if len(incomplete) == 1 else 'have'} no estimate"
            f" ({shown}): were they timed from the whole suite, exported with these maps?"
        )
    return report, warnings
