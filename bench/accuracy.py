"""How close the composed estimates come to whole-model measurements, at several granularities.

For each granularity, runs the plugin as a user would, with ``--dlbricks-validate``, on the 9 real
models shipped in the onnx wheel (``onnx/backend/test/data/light``) and on ``sample_models/``, and
reads its JSON report. Validation times every model round by round right after its bricks, so the
ratios compare things measured together on this shared, noisy machine. Prints one table of
estimate / measured ratios (model x granularity) and, per granularity, the accuracy
(exp(-mean |ln ratio|)), the geometric mean ratio, how many models are within +-10%, the machine's
noise and the paper's benchmarking speedup.

Brick items are timed briefly (``--benchmark-max-time``): the validation re-times the bricks itself.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/accuracy.py [--granularities 1,2,3,5,10] [--cut optimized|original] [--max-time 0.05] [--reports DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

from pytest_dlbricks.core.verdict import verdict_line
from pytest_dlbricks.estimating.validation import accuracy

LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SAMPLE_MODELS = Path(__file__).resolve().parent.parent / "sample_models"
SAMPLE_DIMS = ("--dlbricks-dim=batch=1", "--dlbricks-dim=seq=16")
#: The report's accuracy blocks printed per granularity: each estimate, then its paired rounds.
ACCURACIES = (
    "sequential",
    "sequential_paired",
    "parallel",
    "parallel_paired",
    "critical_path",
    "critical_path_paired",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--granularities", default="1,2,3,5,10", help="comma-separated (default: %(default)s)")
    parser.add_argument("--cut", default="optimized", choices=("optimized", "original"))
    parser.add_argument("--max-time", default="0.05", help="--benchmark-max-time for brick items")
    parser.add_argument("--reports", type=Path, help="folder to keep each granularity's JSON report in")
    args = parser.parse_args()
    granularities = [int(g) for g in args.granularities.split(",")]
    with tempfile.TemporaryDirectory(prefix="dlbricks-accuracy-") as folder:
        models = _copy_models(Path(folder) / "models")
        kept = args.reports or Path(folder)
        kept.mkdir(parents=True, exist_ok=True)
        reports = {g: _run(models, g, args.cut, args.max_time, kept / f"g{g}.json") for g in granularities}
    print(_render(reports, args.cut))


def _copy_models(target: Path) -> Path:
    for source in [*sorted(LIGHT_MODELS.glob("*.onnx")), *sorted(SAMPLE_MODELS.glob("*.onnx"))]:
        folder = target / source.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, folder / source.name)
    return target


def _run(models: Path, granularity: int, cut: str, max_time: str, report: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(models),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--rootdir={models}",
        f"--dlbricks-granularity={granularity}",
        f"--dlbricks-cut={cut}",
        "--dlbricks-validate",
        "--dlbricks-executor=parallel",
        f"--dlbricks-json={report}",
        f"--benchmark-max-time={max_time}",
        *SAMPLE_DIMS,
    ]
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    print(
        f"G={granularity}: pytest exit {completed.returncode} in {time.perf_counter() - start:.0f} s", file=sys.stderr
    )
    if not report.exists():
        sys.exit(f"no report for G={granularity}:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    return json.loads(report.read_text())


def _render(reports: dict[int, dict], cut: str) -> str:
    granularities = list(reports)
    paths = [model["path"] for model in next(iter(reports.values()))["models"]]
    width = max(len(Path(path).stem) for path in paths)
    lines = [f"sequential_s / measured_s, cut={cut}", ""]
    lines.append("model".ljust(width) + "".join(f"  G={g:<4}" for g in granularities))
    lines.append("-" * len(lines[-1]))
    for path in paths:
        cells = []
        for g in granularities:
            model = next(m for m in reports[g]["models"] if m["path"] == path)
            ratio = model.get("ratio")
            cells.append(f"  {ratio:6.3f}" if isinstance(ratio, float) else "       -")
        lines.append(Path(path).stem.ljust(width) + "".join(cells))
    lines.append("")
    for g in granularities:
        results = reports[g].get("accuracy") or {}
        summary = reports[g]["summary"]
        for executor in ACCURACIES:
            result = results.get(executor)
            if result:
                lines.append(
                    f"G={g:<3} {executor:20s} accuracy {result['accuracy']:.3f}, geometric mean ratio"
                    f" {result['geometric_mean_ratio']:.3f}, {_within(result)}"
                )
        light = accuracy_of_light_models(reports[g])
        if light:
            lines.append(
                f"      light models only: accuracy {light['accuracy']:.3f}, geometric mean ratio"
                f" {light['geometric_mean_ratio']:.3f}, {_within(light)}"
            )
        noise, speedup = results.get("noise"), results.get("speedup")
        lines.append(
            f"      noise +-{(noise or 0) / 2:.1%}, speedup {speedup or 0:.2f}x, distinct bricks"
            f" {summary['distinct_bricks']}/{summary['bricks']}, wall {summary['wall_time_s']:.0f} s"
        )
        if reports[g].get("verdict"):  # how far the run itself says its estimates hold
            lines.append(f"      {verdict_line(reports[g]['verdict'])}")
    return "\n".join(lines)


def _within(result: dict) -> str:
    """Models within 5% and within 10% of their measurement (the 10% band alone in older reports)."""
    close = f"{result['within_5_percent']}/{result['models']} within +-5%, " if "within_5_percent" in result else ""
    return f"{close}{result['within_10_percent']}/{result['models']} within +-10%"


def accuracy_of_light_models(report: dict) -> dict | None:
    """The sequential accuracy over the onnx wheel's real models alone (the sample models are tiny)."""
    ratios = [
        model["ratio"]
        for model in report["models"]
        if Path(model["path"]).parent.name == LIGHT_MODELS.name and isinstance(model.get("ratio"), float)
    ]
    return accuracy(ratios)


if __name__ == "__main__":
    main()
