"""Whether the same first run gives the same estimates, and whether each run's verdict covers how far they move.

Runs the plugin as a user would, ``--dlbricks-store=none`` (every brick timed afresh) at one granularity,
``--runs`` times one after the other on the onnx wheel's 9 CNNs, ``sample_models/`` or the zoo of
``bench/zoo/build.py`` (``--models zoo --cache DIR``: every model of the manifest in one session, each at its
own dimensions, as ``bench/zoo.py`` runs them), and reads each JSON report. Prints, per model, its
sequential estimate in every run and the largest distance of one from their median; then each run's
verdict (``+-X%``) and whether every model's distance lies within the narrowest margin the runs' verdicts
printed. The verdict promises that much: a run whose estimates move further than it says is a verdict that
does not hold.

``--validate`` runs each with ``--dlbricks-validate``, whose verdict also counts how far the estimates moved when
validation timed the same bricks again (the estimates compared stay the item estimates).

``--machine-known`` gives every run one brick store in a folder of its own, with ``--dlbricks-remeasure``: every brick
is still timed afresh, but each run knows the machine's fast state the runs before it met (see
``pytest_dlbricks.timing.speed_trace``), as a user's runs do on a machine the store has seen; the first run knows
nothing. A line per run gives the fast state it met, the one it knew, and how far above it stayed.

``--busy-runs N`` then runs the same command N more times while another process keeps one core busy (a
Python loop), and sets each model's estimate in those runs against the median of the quiet runs: a busy
run holds when every model lies within its own verdict's margin of the quiet median.

Run it from the repository root, in the environment where pytest-dlbricks is installed, alone on the
machine (another timing job beside it is load it would measure)::

    python bench/repeatability.py [--runs 3] [--models light|samples|zoo] [--cache DIR] [--busy-runs 0]
                                  [--granularity 2] [--threads N] [--validate] [--machine-known] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import onnx
from zoo_manifest import dim_options, read_manifest

LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SAMPLE_MODELS = Path(__file__).resolve().parent.parent / "sample_models"
SAMPLE_DIMS = ("--dlbricks-dim=batch=1", "--dlbricks-dim=seq=16")


def run_once(models: list[Path], root: Path, report: Path, args: argparse.Namespace, dims: list[str]) -> dict:
    """One first run of the plugin on ``models`` (files or a folder) under ``root``, its report read back."""
    ini = report.with_suffix(".ini")
    ini.write_text("[pytest]\n")
    command = [
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ini), f"--rootdir={root}"),
        *(f"--dlbricks-granularity={args.granularity}", f"--dlbricks-json={report}"),
        *((f"--dlbricks-store={report.parent / 'store'}", "--dlbricks-remeasure") if args.machine_known else ()),
        *(() if args.machine_known else ("--dlbricks-store=none",)),
        *((f"--dlbricks-threads={args.threads}",) if args.threads else ()),
        *(("--dlbricks-validate",) if args.validate else ()),
        *dims,
        *map(str, models),
    ]
    subprocess.run(command, check=False, capture_output=True, cwd=report.parent)
    return json.loads(report.read_text())


def zoo_models(cache: Path) -> tuple[list[Path], list[str]]:
    """Every model of the zoo's manifest under ``cache``, and the options giving each its own dimensions."""
    manifest, entries = read_manifest(cache)
    paths = [manifest.parent / m["path"] for m in entries]
    return paths, [option for m, path in zip(entries, paths) for option in dim_options(path, m["dims"])]


@contextlib.contextmanager
def busy_core() -> Iterator[None]:
    """Another process keeping one core busy while the block runs."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def estimates_of(report: dict) -> dict[str, float]:
    """Every complete model's sequential estimate in a report, by file name."""
    return {
        Path(model["path"]).name: model["sequential_s"]
        for model in report["models"]
        if model.get("complete") and model.get("sequential_s")
    }


def describe_run(label: str, report: dict) -> str:
    verdict = report.get("verdict") or {}
    load = (report.get("summary") or {}).get("load") or {}
    margin = verdict.get("margin")
    return (
        f"{label}: verdict {'+-' + format(margin, '.1%') if margin is not None else 'no margin'}"
        f" (sources {verdict.get('sources')}, not measured {verdict.get('unmeasured') or {}});"
        f" timing thread on its core {load.get('core_share', float('nan')):.0%}"
    )


def describe_speed(label: str, report: dict) -> str:
    """The fast state the run met, the one earlier runs on the store's machine met, and how far above it stayed."""
    speed = (report.get("summary") or {}).get("speed") or {}

    def us(key: str) -> str:
        value = speed.get(key)
        return f"{value * 1e6:.1f} us" if isinstance(value, float) else "-"

    above = speed.get("above_known")
    return (
        f"{label}: reference {us('median_s')} at its median; fast state met {us('fast_s')}, known {us('known_fast_s')}"
        f", above it {format(above, '.0%') if isinstance(above, float) else '-'}; {speed.get('waits')} timings waited"
        f" {speed.get('waited_s') or 0:.1f} s, {speed.get('timed_slow')} timed slow"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--busy-runs", type=int, default=0, help="runs more with one core kept busy (default: 0)")
    parser.add_argument("--models", choices=("light", "samples", "zoo"), default="light")
    parser.add_argument("--cache", type=Path, default=Path("~/.cache/dlbricks-zoo"), help="the zoo's folder")
    parser.add_argument("--granularity", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="--dlbricks-threads (default: onnxruntime's)")
    parser.add_argument(
        "--validate", action="store_true", help="--dlbricks-validate: the verdict counts the bricks timed again"
    )
    parser.add_argument(
        "--machine-known", action="store_true", help="one store for the runs, every brick timed again in each"
    )
    parser.add_argument("--keep", type=Path, help="keep every run's JSON report in this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.models == "zoo":
            root = args.cache.expanduser()
            models, dims = zoo_models(root)
        else:
            root = Path(folder)
            source = LIGHT_MODELS.glob("light_*.onnx") if args.models == "light" else SAMPLE_MODELS.glob("*.onnx")
            (root / "models").mkdir()
            for path in sorted(source):
                shutil.copy(path, root / "models" / path.name)
            models, dims = [root / "models"], list(SAMPLE_DIMS if args.models == "samples" else ())
        reports, busy, walls = [], [], []
        for number in range(args.runs + args.busy_runs):
            quiet = number < args.runs
            start = time.perf_counter()
            with contextlib.nullcontext() if quiet else busy_core():
                report = run_once(models, root, Path(folder) / f"run{number}.json", args, dims)
            (reports if quiet else busy).append(report)
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                name = f"run{number}.json" if quiet else f"busy{number - args.runs}.json"
                (args.keep / name).write_text(json.dumps(report))
            walls.append(time.perf_counter() - start)
    estimates: dict[str, list[float]] = {}
    for report in reports:
        for name, value in estimates_of(report).items():
            estimates.setdefault(name, []).append(value)
    print(
        f"{len(reports)} first runs, G={args.granularity}, {args.models}; wall "
        + ", ".join(f"{w:.1f} s" for w in walls[: len(reports)])
    )
    print(f"{'model':40s} {'estimates (ms)':>32s} {'max from median':>16s}")
    worst = 0.0
    medians = {}
    for name, values in sorted(estimates.items()):
        medians[name] = median = statistics.median(values)
        distance = max(abs(value / median - 1) for value in values)
        worst = max(worst, distance) if len(values) == len(reports) else worst
        shown = ", ".join(f"{value * 1e3:.3f}" for value in values)
        print(f"{name:40s} {shown:>32s} {distance:>15.1%}")
    for number, report in enumerate(reports):
        own = {name: abs(value / medians[name] - 1) for name, value in estimates_of(report).items() if name in medians}
        margin = (report.get("verdict") or {}).get("margin")
        farthest = max(own.values(), default=0.0)
        held = "no margin" if margin is None else "covered" if farthest <= margin else "NOT covered"
        print(describe_run(f"run {number}", report) + f"; its farthest model {farthest:.1%} from the median: {held}")
        print("  " + describe_speed(f"run {number}", report))
    given = [margin for report in reports if (margin := (report.get("verdict") or {}).get("margin")) is not None]
    if given:
        held = worst <= min(given)
        print(
            f"largest move from the median {worst:.1%}; narrowest verdict +-{min(given):.1%}:"
            f" {'covered' if held else 'NOT covered'}"
        )
    for number, report in enumerate(busy):
        print(f"\nbusy run {number} ({walls[len(reports) + number]:.1f} s wall), one core kept busy:")
        print(describe_run(f"busy run {number}", report))
        moves = {name: value / medians[name] - 1 for name, value in estimates_of(report).items() if name in medians}
        for name, move in sorted(moves.items()):
            print(f"  {name:40s} {move:+.1%} from the quiet median")
        margin = (report.get("verdict") or {}).get("margin")
        farthest = max((abs(move) for move in moves.values()), default=0.0)
        within = sum(abs(move) <= 0.10 for move in moves.values())
        covered = margin is not None and farthest <= margin
        print(
            f"  {within}/{len(moves)} models within 10% of the quiet median; farthest {farthest:.1%};"
            f" its verdict +-{margin:.1%}: {'covered' if covered else 'NOT covered'}"
            if margin is not None
            else f"  {within}/{len(moves)} models within 10%; farthest {farthest:.1%}; no margin given"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
