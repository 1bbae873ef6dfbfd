"""``python -m pytest_dlbricks``: compose estimates from private maps, merge the reports of shards,
report a brick store's models on every machine in it.

Compose and merge print the table a pytest run prints and can write the report as JSON (``--json``),
in the same format as ``--dlbricks-json``. A file that cannot be used, or reports that cannot be merged, end the
command with a message naming the file and what is wrong, and exit status 1; a usage error, 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .machines import store_report
from .maps import MapError, check_results, compose_from_maps, read_json, read_maps
from .merging import IncompatibleReports, merge_reports
from .settings import DEFAULT_STORE, STATISTICS, parse_choice
from .store import BrickStore, write_json
from .terminal import render_table
from .wording import plural

PROG = "python -m pytest_dlbricks"
DESCRIPTION = (
    "Work with what pytest-dlbricks runs leave behind: compose estimates from private maps, merge the"
    " reports of shards, and report a brick store's models on every machine in it."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    compose = commands.add_parser(
        "compose",
        help="estimate models from their private maps and a suite run's report",
        description="Estimate every mapped model from the brick times of a run of its exported suite.",
    )
    compose.add_argument(
        "--map",
        dest="maps",
        metavar="MAPS",
        type=Path,
        action="append",
        required=True,
        help="a map file or a folder of them (written by --dlbricks-export); repeatable",
    )
    compose.add_argument(
        "--results",
        metavar="RESULT.json",
        type=Path,
        required=True,
        help="the report of the suite's run, written by --dlbricks-json",
    )
    compose.add_argument(
        "--statistic",
        type=parse_choice(STATISTICS, "statistic"),
        help=f"brick time statistic to add up: {', '.join(STATISTICS)} (default: the run's own)",
    )
    compose.add_argument("--json", metavar="PATH", type=Path, help="also write the report as JSON to PATH")
    merge = commands.add_parser(
        "merge",
        help="combine the reports of shards into one",
        description="Combine reports of shards (--dlbricks-shard) run on comparable machines into one report.",
    )
    merge.add_argument(
        "reports", metavar="RESULT.json", type=Path, nargs="+", help="reports written by --dlbricks-json"
    )
    merge.add_argument("--json", metavar="PATH", type=Path, help="also write the merged report as JSON to PATH")
    report = commands.add_parser(
        "report",
        help="every model of a brick store estimated on every machine in it, side by side",
        description="Estimate every model of a brick store (--dlbricks-store) on every machine and settings"
        " that measured its bricks, side by side, with each column's ratio to the first.",
    )
    report.add_argument(
        "store", nargs="?", type=Path, default=Path(DEFAULT_STORE), metavar="STORE", help=f"default: {DEFAULT_STORE}"
    )
    report.add_argument(
        "--statistic",
        type=parse_choice(STATISTICS, "statistic"),
        default="median",
        help=f"brick time statistic to add up: {', '.join(STATISTICS)} (default: median)",
    )
    report.add_argument("--critical-path", action="store_true", help="show critical paths instead of sequential sums")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line ``argv``; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    arguments = build_parser().parse_args(argv)
    if arguments.command == "report":
        return _report(arguments, out, err)
    try:
        report, warnings = _compose(arguments) if arguments.command == "compose" else _merge(arguments)
    except (MapError, IncompatibleReports) as error:
        print(f"{PROG} {arguments.command}: error: {error}", file=err)
        return 1
    for warning in warnings:
        print(f"{PROG} {arguments.command}: warning: {warning}", file=err)
    return _emit(report, arguments.json, out, err)


def _compose(arguments: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    maps = read_maps(arguments.maps)
    results = read_json(arguments.results)
    check_results(results, arguments.results)
    return compose_from_maps(maps, results, arguments.statistic)


def _merge(arguments: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    reports = []
    for path in arguments.reports:
        report = read_json(path)
        check_results(report, path)
        reports.append((str(path), report))
    merged = merge_reports(reports)
    shards = [r["settings"].get("shard") for _, r in reports if r["settings"].get("shard")]
    warnings = []
    expected = int(shards[0].split("/")[1]) if shards else 0
    if len(shards) < expected:
        warnings.append(f"{len(shards)} of {plural(expected, 'shard')} given: models are incomplete")
    return merged, warnings


def _report(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not arguments.store.is_dir():
        print(f"{PROG} report: error: no brick store at {arguments.store}: run pytest first", file=err)
        return 1
    print(store_report(BrickStore(arguments.store), arguments.statistic, arguments.critical_path), file=out)
    return 0


def _emit(report: dict[str, Any], json_path: Path | None, out: TextIO, err: TextIO) -> int:
    print(render_table(report), file=out)
    if json_path is not None:
        try:
            write_json(json_path, report)
        except OSError as error:
            print(f"{PROG}: error: cannot write {json_path}: {error.strerror or error}", file=err)
            return 1
        print(f"report written to {json_path}", file=out)
    return 0
