"""``python -m pytest_dlbricks``: compose estimates from private maps, merge the reports of shards,
report a brick store's models on every machine in it.

Compose and merge produce what a pytest run produces: the table, the report as JSON (``--json``, the
format of ``--dlbricks-json``) and HTML (``--html``), the estimates as pytest-benchmark entries with
the ``dlbricks`` block (``--benchmark-json``, a file pytest-benchmark's storage and ``--dlbricks-compare``
read), and the gate (``--compare`` and ``--compare-fail``). A file that cannot be used, or reports that
cannot be merged, end the command with a message naming the file and what is wrong, and exit status
1; a usage error, 2. The gate exits as pytest does: 1 on a regression, 6 when inconclusive.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from ..core.errors import named_error
from ..core.identity import differences
from ..core.settings import DEFAULT_STORE, STATISTICS, parse_choice, parse_percentage
from ..core.verdict import judge_report, verdict_line
from ..core.wording import plural
from ..rendering.formatting import fit_lines
from ..rendering.html import render_html
from ..rendering.terminal import render_table
from ..reporting.comparing import (
    Comparison,
    compare,
    conditions_of,
    exit_status,
    make_block,
    render_comparison,
    render_inconclusive,
    render_not_timed,
    render_regressions,
)
from ..reporting.estimates import model_estimates
from ..reporting.machines import store_report
from ..reporting.maps import MapError, check_results, compose_from_maps, read_json, read_maps
from ..reporting.merging import IncompatibleReports, merge_reports
from ..reporting.recomposition import damaged_executor
from ..storage.atomic_files import write_text
from ..storage.store import BrickStore

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
    _add_outputs(compose)
    merge = commands.add_parser(
        "merge",
        help="combine the reports of shards into one",
        description="Combine reports of shards (--dlbricks-shard) run on comparable machines into one report.",
    )
    merge.add_argument(
        "reports", metavar="RESULT.json", type=Path, nargs="+", help="reports written by --dlbricks-json"
    )
    merge.add_argument(
        "--allow-missing-shards",
        action="store_true",
        help="merge although shards of the split are missing (their models are then incomplete)",
    )
    _add_outputs(merge)
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


def _add_outputs(command: argparse.ArgumentParser) -> None:
    """The outputs and the gate compose and merge share with a pytest run."""
    command.add_argument("--json", metavar="PATH", type=Path, help="also write the report as JSON to PATH")
    command.add_argument("--html", metavar="PATH", type=Path, help="also write the report as HTML to PATH")
    command.add_argument(
        "--benchmark-json",
        metavar="PATH",
        type=Path,
        help="also write the estimates as pytest-benchmark entries, with the dlbricks block, to PATH",
    )
    command.add_argument(
        "--compare",
        metavar="PATH",
        type=Path,
        help="compare the estimates with a saved run: a pytest-benchmark JSON file with a dlbricks block"
        " (--benchmark-save, --benchmark-json) or a report (--json, --dlbricks-json)",
    )
    command.add_argument(
        "--compare-fail",
        metavar="PCT",
        type=parse_percentage,
        help="with --compare, exit 1 when a model's changed bricks make it slower by more than PCT, 6 when"
        " the noise is too high to tell",
    )


#: What reading a map or report whose insides were damaged raises.
_DAMAGE = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, ZeroDivisionError)


def _damaged(arguments: argparse.Namespace, error: Exception) -> str:
    """The files given to compose or merge, named as damaged, with what was wrong."""
    given = [*arguments.maps, arguments.results] if arguments.command == "compose" else arguments.reports
    files = ", ".join(str(path) for path in given)
    return f"the files given are damaged or were not written by pytest-dlbricks ({files}): {named_error(error)}"


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line ``argv``; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if arguments.command == "report":
        return _report(arguments, out, err)
    if arguments.compare_fail is not None and arguments.compare is None:
        parser.error("--compare-fail needs --compare, the saved run to compare with")
    try:
        report, warnings = _compose(arguments) if arguments.command == "compose" else _merge(arguments)
    except (MapError, IncompatibleReports) as error:
        print(f"{PROG} {arguments.command}: error: {error}", file=err)
        return 1
    except _DAMAGE as error:  # a file of the right kind whose insides were damaged or edited
        print(f"{PROG} {arguments.command}: error: {_damaged(arguments, error)}", file=err)
        return 1
    for warning in warnings:
        print(f"{PROG} {arguments.command}: warning: {warning}", file=err)
    comparison = None
    if arguments.compare is not None:
        try:
            comparison = _compare(report, arguments.compare, arguments.compare_fail)
        except MapError as error:
            print(f"{PROG} {arguments.command}: error: {error}", file=err)
            return 1
        except _DAMAGE as error:
            print(
                f"{PROG} {arguments.command}: error: cannot compare with {arguments.compare}: it or the files"
                f" given are damaged ({named_error(error)})",
                file=err,
            )
            return 1
        report["comparison"] = comparison.as_dict()
    try:
        status = _emit(report, arguments, out, err)
    except _DAMAGE as error:
        print(f"{PROG} {arguments.command}: error: {_damaged(arguments, error)}", file=err)
        return 1
    if comparison is None or status:
        return status
    print(f"estimates compared with {comparison.baseline}:", file=out)
    print(render_comparison(comparison), file=out)
    if comparison.regressions:
        print("performance regression:\n" + _indented(render_regressions(comparison)), file=out)
    elif comparison.inconclusive:
        print(
            f"inconclusive: the noise is too high for a {comparison.threshold or 0.0:.0%} threshold:\n"
            + _indented(render_inconclusive(comparison)),
            file=out,
        )
    if comparison.not_timed:
        print("cannot tell whether these models are slower:\n" + _indented(render_not_timed(comparison)), file=out)
    return exit_status(comparison)


def _compare(report: dict[str, Any], path: Path, threshold: float | None) -> Comparison:
    """Compare ``report`` with the saved run at ``path``; refuses one measured under other conditions."""
    saved = read_json(path)
    if isinstance(saved, dict) and isinstance(saved.get("dlbricks"), dict):
        before = saved["dlbricks"]
    elif isinstance(saved, dict) and "models" in saved and "bricks" in saved:
        before = make_block(saved, conditions_of(saved))
    else:
        raise MapError(f"{path} is neither a saved run with a dlbricks block nor a pytest-dlbricks report")
    now = make_block(report, conditions_of(report))
    mismatches = [m for m in differences(now, before) if "None then" not in m and "None now" not in m]
    if mismatches:
        raise MapError(f"{path} ran under other conditions ({'; '.join(mismatches)})")
    statistic = str(report["settings"].get("statistic", "median"))
    return compare(now, before, baseline=str(path), statistic=statistic, threshold=threshold)


def _indented(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


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
    warnings = [f"{name}: its executor entry is damaged and was left out" for name, r in reports if damaged_executor(r)]
    if "executor" not in merged and any(damaged_executor(r) for _, r in reports):
        warnings.append("no report says what the parallel executor does: the models have no parallel estimate")
    expected = int(shards[0].split("/")[1]) if shards else 0
    if len(shards) < expected:
        missing = f"{len(shards)} of {plural(expected, 'shard')} given"
        if not arguments.allow_missing_shards:
            raise IncompatibleReports(f"{missing}; pass --allow-missing-shards to merge them all the same")
        warnings.append(f"{missing}: models are incomplete")
    return merged, warnings


def _report(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not arguments.store.is_dir():
        print(f"{PROG} report: error: no brick store at {arguments.store}: run pytest first", file=err)
        return 1
    print(store_report(BrickStore(arguments.store), arguments.statistic, arguments.critical_path), file=out)
    return 0


def _emit(report: dict[str, Any], arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The table, and each output asked for; the estimates' verdict last; fitted to the terminal's width, as a
    pytest run's (``COLUMNS`` where the output is no terminal)."""
    width = shutil.get_terminal_size().columns
    verdict = judge_report(report)
    if verdict is not None:
        report["verdict"] = verdict.as_json()
    print(fit_lines(render_table(report, width), width), file=out)
    outputs = [
        (arguments.json, "report", lambda: json.dumps(report, indent=2) + "\n"),
        (arguments.html, "HTML report", lambda: render_html(report)),
        (arguments.benchmark_json, "pytest-benchmark entries", lambda: json.dumps(_benchmark_file(report), indent=2)),
    ]
    for path, what, render in outputs:
        if path is None:
            continue
        try:
            write_text(path, render())
        except OSError as error:
            print(f"{PROG}: error: cannot write {path}: {error.strerror or error}", file=err)
            return 1
        print(f"{what} written to {path}", file=out)
    if verdict is not None:
        print(fit_lines(verdict_line(report["verdict"]), width), file=out)
    return 0


def _benchmark_file(report: dict[str, Any]) -> dict[str, Any]:
    """A file in pytest-benchmark's format: the estimates as its entries, and the dlbricks block."""
    import pytest_benchmark  # here, not at the top: report and merge do not need it

    return {
        "machine_info": dict(report.get("machine") or {}),
        "commit_info": {},
        "benchmarks": [estimate.as_dict() for estimate in model_estimates(report)],
        "datetime": datetime.now(UTC).isoformat(),
        "version": pytest_benchmark.__version__,
        "dlbricks": make_block(report, conditions_of(report)),
    }
