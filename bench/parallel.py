"""How the Parallel column holds against onnxruntime's parallel executor, over fresh runs.

Runs the plugin as a user would, ``--dlbricks-executor=parallel --dlbricks-validate --dlbricks-store=none`` (the
parallel executor detected, its pool slowdown measured and every brick timed afresh in each run), ``--runs`` times
one after the other on ``sample_models/`` (or the model files given), and reads each JSON report. Per run it prints
its verdict's margin and its bricks' noise, the pool slowdown the Parallel column used, the median and mean of
the detection's fresh parallel sessions over the median sequential one, and how many sessions started slow (see
``pytest_dlbricks.timing.probes.PoolSlowdown``);
per model, over the runs: Parallel over Sequential (the estimates), the parallel executor's measured time over the
sequential one's (what validation measured), Parallel over the parallel executor's measured time, the first of
these over the second (the *parallel part*: what the Parallel column adds to Sequential, against what the parallel
executor adds to the sequential one, whatever the sequential estimate's own error), and how far Parallel lay above
Sequential beyond the two executors' call costs. Last, the accuracy of the parallel estimates and of their parallel
part (exp of minus the mean absolute log ratio, as for the sequential ones) over every model and run.

Run it from the repository root, in the environment where pytest-dlbricks is installed, alone on the machine::

    python bench/parallel.py [--runs 20] [--granularity 2] [--threads N] [MODEL.onnx ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SAMPLE_MODELS = Path(__file__).resolve().parent.parent / "sample_models"


def run_once(models: list[Path], folder: Path, index: int, args: argparse.Namespace) -> dict:
    """One fresh validated run with a parallel estimate, its JSON report read back."""
    report = folder / f"run{index}.json"
    ini = folder / "pytest.ini"
    ini.write_text("[pytest]\n")
    command = [
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ini), f"--rootdir={folder}"),
        *(f"--dlbricks-granularity={args.granularity}", "--dlbricks-store=none", f"--dlbricks-json={report}"),
        *("--dlbricks-executor=parallel", "--dlbricks-validate"),
        *((f"--dlbricks-threads={args.threads}",) if args.threads else ()),
        *map(str, models),
    ]
    subprocess.run(command, check=False, capture_output=True, cwd=folder)
    return json.loads(report.read_text())


def pool_line(index: int, executor: dict) -> str:
    """The pool slowdown a run used, beside the median and mean of its sessions and the slow ones."""
    pool = (executor.get("detection") or {}).get("pool") or {}
    sessions = pool.get("sessions") or []
    if not sessions:
        return f"run {index}: no pool slowdown measured (factor {executor.get('pool_factor')})"
    sequential = statistics.median(pair[0] for pair in sessions)
    parallel = [pair[1] for pair in sessions]
    median = statistics.median(parallel)
    slow = sum(1 for seconds in parallel if seconds > 2 * median)
    return (
        f"run {index}: pool factor {executor['pool_factor']:.2f}x; sessions' median {median / sequential:.2f}x,"
        f" mean {statistics.mean(parallel) / sequential:.2f}x, {slow} of {len(parallel)} over twice the median"
    )


def trust(report: dict) -> str:
    """How far the run could be trusted: its verdict's margin, and its bricks' noise."""
    margin = (report.get("verdict") or {}).get("margin")
    noise = (report.get("summary") or {}).get("noise")
    said = f"verdict +-{margin:.0%}" if isinstance(margin, float) else "no verdict margin"
    return said + (f", bricks' noise {noise:.0%}" if isinstance(noise, float) else "")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="model files (default: sample_models/)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--granularity", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="--dlbricks-threads (default: onnxruntime's)")
    args = parser.parse_args()
    models = [path.resolve() for path in args.models] or sorted(SAMPLE_MODELS.glob("*.onnx"))
    rows: dict[str, dict[str, list[float]]] = {}
    logs: dict[str, list[float]] = {"estimates": [], "parallel part": []}
    with tempfile.TemporaryDirectory(prefix="dlbricks-parallel-") as scratch:
        for index in range(1, args.runs + 1):
            report = run_once(models, Path(scratch), index, args)
            executor = report.get("executor") or {}
            print(f"{pool_line(index, executor)}; {trust(report)}", flush=True)
            calls = (executor.get("parallel_call_s") or 0.0) - (executor.get("call_s") or 0.0)
            for model in report["models"]:
                sequential, parallel = model.get("sequential_s"), model.get("parallel_s")
                measured, measured_parallel = model.get("measured_s"), model.get("measured_parallel_s")
                if not (sequential and parallel and measured and measured_parallel):
                    continue
                row = rows.setdefault(
                    Path(model["path"]).name, {"est": [], "meas": [], "acc": [], "part": [], "over_us": []}
                )
                row["est"].append(parallel / sequential)
                row["meas"].append(measured_parallel / measured)
                row["acc"].append(parallel / measured_parallel)
                row["part"].append(row["est"][-1] / row["meas"][-1])
                row["over_us"].append(max(parallel - sequential - calls, 0.0) * 1e6)
                logs["estimates"].append(abs(math.log(row["acc"][-1])))
                logs["parallel part"].append(abs(math.log(row["part"][-1])))
    print()
    columns = ("Parallel/Seq", "measured par/seq", "Parallel/measured", "parallel part")
    print(f"{'model':28} " + " ".join(f"{column:>18}" for column in columns) + f" {'over Seq+calls':>16}")
    for name, row in rows.items():
        over = [value for value in row["over_us"] if value > 0]
        print(
            f"{name:28} "
            + " ".join(f"{spread(row[key]):>18}" for key in ("est", "meas", "acc", "part"))
            + f" {len(over):>7}/{len(row['over_us'])} runs"
        )
    for what, values in logs.items():
        if values:
            within = sum(1 for value in values if value <= math.log(1.10))
            print(
                f"accuracy of the {what} over {len(values)} model runs: {math.exp(-statistics.mean(values)):.3f},"
                f" {within} within 10%"
            )


if __name__ == "__main__":
    main()
