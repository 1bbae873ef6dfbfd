"""Whether the same first run gives the same estimates, and whether each run's verdict covers how far they move.

Runs the plugin as a user would, ``--dlbricks-store=none`` (every brick timed afresh) at one granularity,
``--runs`` times one after the other on the onnx wheel's 9 CNNs (or ``sample_models/``), and reads each
JSON report. Prints, per model, its sequential estimate in every run and the largest distance of one from
their median; then each run's verdict (``+-X%``) and whether every model's distance lies within the
narrowest margin the runs' verdicts printed. The verdict promises that much: a run whose estimates move
further than it says is a verdict that does not hold.

Run it from the repository root, in the environment where pytest-dlbricks is installed, alone on the
machine (another timing job beside it is load it would measure)::

    python bench/repeatability.py [--runs 3] [--models light|samples] [--granularity 2] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SAMPLE_MODELS = Path(__file__).resolve().parent.parent / "sample_models"
SAMPLE_DIMS = ("--dlbricks-dim=batch=1", "--dlbricks-dim=seq=16")


def run_once(models: Path, report: Path, args: argparse.Namespace, dims: tuple[str, ...]) -> dict:
    """One first run of the plugin on ``models``, its report read back."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--rootdir={models.parent}",
        f"--dlbricks-granularity={args.granularity}",
        "--dlbricks-store=none",
        f"--dlbricks-json={report}",
        *((f"--dlbricks-threads={args.threads}",) if args.threads else ()),
        *dims,
        str(models),
    ]
    subprocess.run(command, check=False, capture_output=True, cwd=models.parent)
    return json.loads(report.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", choices=("light", "samples"), default="light")
    parser.add_argument("--granularity", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="--dlbricks-threads (default: onnxruntime's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        models = Path(folder) / "models"
        models.mkdir()
        source = LIGHT_MODELS.glob("light_*.onnx") if args.models == "light" else SAMPLE_MODELS.glob("*.onnx")
        for path in sorted(source):
            shutil.copy(path, models / path.name)
        dims = SAMPLE_DIMS if args.models == "samples" else ()
        reports, walls = [], []
        for number in range(args.runs):
            start = time.perf_counter()
            reports.append(run_once(models, Path(folder) / f"run{number}.json", args, dims))
            walls.append(time.perf_counter() - start)
    estimates: dict[str, list[float]] = {}
    for report in reports:
        for model in report["models"]:
            if model.get("complete") and model.get("sequential_s"):
                estimates.setdefault(Path(model["path"]).name, []).append(model["sequential_s"])
    margins = [(report.get("verdict") or {}).get("margin") for report in reports]
    print(
        f"{len(reports)} first runs, G={args.granularity}, {args.models}; wall "
        + ", ".join(f"{w:.1f} s" for w in walls)
    )
    print(f"{'model':40s} {'estimates (ms)':>32s} {'max from median':>16s}")
    worst = 0.0
    for name, values in sorted(estimates.items()):
        median = statistics.median(values)
        distance = max(abs(value / median - 1) for value in values)
        worst = max(worst, distance) if len(values) == len(reports) else worst
        shown = ", ".join(f"{value * 1e3:.3f}" for value in values)
        print(f"{name:40s} {shown:>32s} {distance:>15.1%}")
    for number, report in enumerate(reports):
        verdict = report.get("verdict") or {}
        load = (report.get("summary") or {}).get("load") or {}
        margin = verdict.get("margin")
        print(
            f"run {number}: verdict {'+-' + format(margin, '.1%') if margin is not None else 'no margin'}"
            f" (sources {verdict.get('sources')}, not measured {verdict.get('unmeasured') or {}});"
            f" timing thread on its core {load.get('core_share', float('nan')):.0%}"
        )
    given = [margin for margin in margins if margin is not None]
    if given:
        held = worst <= min(given)
        print(
            f"largest move from the median {worst:.1%}; narrowest verdict +-{min(given):.1%}:"
            f" {'covered' if held else 'NOT covered'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
