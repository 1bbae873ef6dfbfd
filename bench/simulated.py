"""Simulated cost (``--dlbricks-cost=simulated``): repeatability, composition, and the time it takes.

Runs the plugin as a user would, ``--dlbricks-store=none --dlbricks-validate`` at one granularity, ``--runs``
times one after the other on ``sample_models/``, the onnx wheel's 9 CNNs (or both), or the models of a folder
(``--zoo DIR``, every ``.onnx`` below it, at their own sizes; with ``--models none``, those alone), or the
zoo of ``bench/zoo/build.py`` (``--manifest DIR``, its ``--subset``, default ``ci``, each model where it lies at
its manifest's dimensions), and reads each JSON report. Prints, per model:

* repeatability: its simulated sequential estimate in every run and the largest distance of one from their
  median (counts do not depend on load: runs identical in all but time should agree exactly);
* composition: composed against whole-model instructions and simulated time (``instructions_ratio``,
  ``simulated_s_ratio``) of the first run;

then each run's wall time and the simulation's own. Run it from the repository root, in the environment
where pytest-dlbricks is installed with its ``simulated`` extra and valgrind is on the ``PATH``::

    python bench/simulated.py [--runs 2] [--models samples|light|both|none] [--zoo DIR]
                              [--manifest DIR [--subset ci|all | --only NAMES]] [--granularity 2]
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
from zoo_manifest import dim_options, read_manifest, select

LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SAMPLE_MODELS = Path(__file__).resolve().parent.parent / "sample_models"
SAMPLE_DIMS = ("--dlbricks-dim=batch=1", "--dlbricks-dim=seq=16")


def run_once(
    models: list[Path], root: Path, report: Path, granularity: int, dims: tuple[str, ...]
) -> tuple[dict, float]:
    """One simulated, validated run of the plugin on ``models`` (files or folders) under ``root``: its report
    read back, and its wall time."""
    ini = report.with_suffix(".ini")
    ini.write_text("[pytest]\n")
    command = [
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ini), f"--rootdir={root}"),
        *(f"--dlbricks-granularity={granularity}", "--dlbricks-store=none", "--dlbricks-cost=simulated"),
        *("--dlbricks-validate", f"--dlbricks-json={report}", "--benchmark-disable", *dims, *map(str, models)),
    ]
    start = time.perf_counter()
    subprocess.run(command, check=False, capture_output=True, cwd=report.parent)
    return json.loads(report.read_text()), time.perf_counter() - start


def manifest_models(cache: Path, subset: str, only: str | None) -> tuple[list[Path], tuple[str, ...]]:
    """The models of the zoo's manifest under ``cache`` in ``subset`` (or named in ``only``, comma-separated),
    where they lie (with their sample inputs and external data), and the options giving each its own
    dimensions, as ``bench/zoo.py`` runs them."""
    manifest, entries = read_manifest(cache)
    chosen = select(manifest, entries, subset, only)
    paths = [manifest.parent / m["path"] for m in chosen]
    return paths, tuple(option for m, path in zip(chosen, paths) for option in dim_options(path, m["dims"]))


def study(
    name: str, source: Path, pattern: str, dims: tuple[str, ...], args: argparse.Namespace, *, in_place: bool = False
) -> None:
    """Run ``--runs`` times on the models below ``source`` matching ``pattern`` (copied into one folder), or with
    ``in_place`` on the manifest's models where they lie, and print what the reports say."""
    with tempfile.TemporaryDirectory() as folder:
        if in_place:
            models, own_dims = manifest_models(source, args.subset, args.only)
            dims, root = (*dims, *own_dims), source
        else:
            root = Path(folder)
            (root / "models").mkdir()
            for path in sorted(source.glob(pattern)):
                shutil.copy(path, root / "models" / str(path.relative_to(source)).replace("/", "_"))
            models = [root / "models"]
        reports = []
        for number in range(args.runs):
            report, wall_s = run_once(models, root, Path(folder) / f"run{number}.json", args.granularity, dims)
            simulated_s = report.get("simulation", {}).get("wall_s", 0.0)
            print(f"{name} run {number + 1}: {wall_s:.0f} s wall, {simulated_s:.0f} s of it simulating", flush=True)
            reports.append(report)
    print(f"\n{name}, G={args.granularity}: model, estimates (us) per run, largest move from their median")
    paths = [model["path"] for model in reports[0]["models"]]
    for path in paths:
        estimates = [next(m for m in r["models"] if m["path"] == path).get("sequential_s") for r in reports]
        known = [e for e in estimates if e]
        if not known:
            print(f"  {path}: no estimate")
            continue
        median = statistics.median(known)
        move = max(abs(e / median - 1) for e in known)
        print(f"  {path}: {' '.join(f'{e * 1e6:.2f}' for e in known)}  move {move:.4%}")
    print(f"\n{name}: composed / whole model, instructions and simulated time (first run)")
    ratios = []
    for path, entry in reports[0].get("simulation", {}).get("models", {}).items():
        instructions, simulated = entry.get("instructions_ratio"), entry.get("simulated_s_ratio")
        if instructions is None:
            print(f"  {path}: not composed")
            continue
        ratios.append(instructions)
        print(f"  {path}: instructions {instructions:.4f}  simulated time {simulated:.4f}")
    for bound in (0.02, 0.05, 0.10):
        within = sum(abs(ratio - 1) <= bound for ratio in ratios)
        print(f"  {within}/{len(ratios)} models' instructions within {bound:.0%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--models", choices=("samples", "light", "both", "none"), default="samples")
    parser.add_argument("--zoo", type=Path, metavar="DIR", help="also every .onnx model below DIR")
    parser.add_argument("--manifest", type=Path, metavar="DIR", help="also the zoo of bench/zoo/build.py in DIR")
    parser.add_argument("--subset", choices=("ci", "all"), default="ci", help="the zoo's models (default: %(default)s)")
    parser.add_argument("--only", help="comma-separated names of the zoo's models (instead of --subset)")
    parser.add_argument("--granularity", type=int, default=2)
    args = parser.parse_args()
    if args.models in ("samples", "both"):
        study("samples", SAMPLE_MODELS, "*.onnx", SAMPLE_DIMS, args)
    if args.models in ("light", "both"):
        study("light CNNs", LIGHT_MODELS, "*.onnx", (), args)
    if args.zoo:
        study("zoo", args.zoo, "**/*.onnx", (), args)
    if args.manifest:
        study(f"zoo ({args.only or args.subset + ' subset'})", args.manifest.expanduser(), "", (), args, in_place=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
