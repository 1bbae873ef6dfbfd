"""Run pytest-dlbricks on the zoo of real models and show, per model, whether it got an estimate.

Builds nothing: the zoo comes from ``bench/zoo/build.py`` (its ``zoo.json`` manifest names every
model and the values of its symbolic dimensions). For each granularity and validation setting the plugin
runs as a user runs it, in a pytest subprocess with ``--dlbricks-json`` and ``--junitxml``, on a fresh
brick store, all models in one session, each given its own dimensions by a pattern
(``--dlbricks-dim "NAME/NAME.onnx: height=320 x[2]=48"``). Prints per model: loaded, complete,
estimate (``sequential_s``), measured (``measured_s``, with validation), their ratio, what it ran on
(its sample inputs, such as the ``test_data_set_0`` the zoo build writes beside a model, or synthetic
inputs, starred where the model has operators whose work depends on data), and the reason when a model
gets no estimate; then the accuracy exp(-mean |ln ratio|), the share within 5% and 10%, the
plugin's own noise figure and its speed trace (how far the machine's speed moved); with validation,
the same scores of the paired rounds' ratios, of the drift between the item and the paired
estimates (how far the machine's speed moved between them), and of the item estimates composed again
from the same report with each brick's call cost as measured, not scaled to the machine's speed around
the brick's timing (what scaling it brings, paired within the run). Where the parallel executor was
validated, the accuracy of the parallel estimates, and the best it could reach had the run measured
another slowdown of the layers that use the intra-op pool: the factor tuned on the very models it is
scored on, so a ceiling of that way of estimating, not a result.

With validation, it also scores the per-machine calibration (:mod:`pytest_dlbricks.estimating.calibration`)
honestly, raw against calibrated: leave one model out (each model's estimate calibrated on all the
others), and held out (calibrated on ``--calibration-models`` only, scored on the models that took no
part in calibration). ``--from-reports DIR,...`` scores the reports kept by earlier runs (``--reports``)
instead of running, so that a zoo timed in several sessions is scored as one.

``--repeatability DIR,DIR,...`` reads the reports kept by runs of the same command, each folder one
run, and prints the floor an estimate is scored against: how far the runs' measurements of the same
model agree with each other (exp(-mean |ln ratio|) of each pair of runs, and the share within 10%),
beside the estimates' agreement and each run's accuracy. An estimate cannot agree with a measurement
better than the measurements agree with each other; on a machine where they agree to 0.76, an
accuracy of 0.79 says nothing of the method.

``--check`` also runs every model that has no estimate in onnxruntime itself (the plugin's synthetic
inputs at the manifest's dimensions, others at 1) and exits 1 when onnxruntime runs a
model that the plugin gave no estimate: onnxruntime is the authority on what is runnable.

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/zoo.py [--cache DIR] [--subset ci|all] [--only NAMES] [--granularities 1,2,5]
                        [--validate both|on|off] [--max-time 0.05] [--reports DIR] [--check]
                        [--calibration-models NAMES] [--from-reports DIR,...] [--repeatability DIR,DIR,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from zoo_manifest import dim_options, read_manifest, select

from pytest_dlbricks.estimating.calibration import MIN_MODELS, Calibration, CalibrationRecord, fit, record_of
from pytest_dlbricks.estimating.composition import ParallelExecutor, compose_calls, model_costs
from pytest_dlbricks.estimating.validation import accuracy
from pytest_dlbricks.reporting.recomposition import brick_references, brick_times, calls_of, graph_of, overhead_of

DEFAULT_CACHE = Path("~/.cache/pytest-dlbricks/zoo").expanduser()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="zoo folder (default: %(default)s)")
    parser.add_argument("--subset", choices=("ci", "all"), default="all", help="(default: %(default)s)")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--granularities", default="1,2,5", help="comma-separated (default: %(default)s)")
    parser.add_argument("--validate", choices=("both", "on", "off"), default="both", help="(default: %(default)s)")
    parser.add_argument("--max-time", default="0.05", help="--benchmark-max-time per brick (default: %(default)s)")
    parser.add_argument("--precision", default="off", help="--dlbricks-precision (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per pytest session (default: %(default)s)")
    parser.add_argument("--reports", type=Path, help="keep each session's JSON, junit XML and output here")
    parser.add_argument("--check", action="store_true", help="exit 1 if onnxruntime runs a model with no estimate")
    parser.add_argument(
        "--calibration-models",
        help="models the held-out score calibrates on (default: the onnx wheel's light CNNs, light_*)",
    )
    parser.add_argument("--from-reports", help="comma-separated folders of kept reports to score instead of running")
    parser.add_argument(
        "--repeatability", help="comma-separated folders of kept reports, one run of the same command each, to compare"
    )
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    args = parser.parse_args()
    manifest_path, entries = read_manifest(args.cache)
    models = select(manifest_path, entries, args.subset, args.only)
    cache = manifest_path.parent
    calibration_models = (
        args.calibration_models.split(",")
        if args.calibration_models
        else [m["name"] for m in entries if m["name"].startswith("light_")]
    )
    validations = {"both": (False, True), "on": (True,), "off": (False,)}[args.validate]
    results: dict[tuple[int, bool], dict[str, dict]] = {}
    noises: dict[tuple[int, bool], float | None] = {}
    if args.repeatability:
        for granularity in [int(g) for g in args.granularities.split(",")]:
            for validate in validations:
                label = f"g{granularity}-{'validate' if validate else 'plain'}"
                print(_repeatability(cache, models, args.repeatability.split(","), label))
        return
    if args.from_reports:
        for granularity in [int(g) for g in args.granularities.split(",")]:
            for validate in validations:
                key = (granularity, validate)
                label = f"g{granularity}-{'validate' if validate else 'plain'}"
                results[key], noises[key] = _kept(cache, models, args.from_reports.split(","), label)
        print(_render(models, results, noises))
        print(_calibration(models, results, noises, calibration_models))
        return
    with tempfile.TemporaryDirectory(prefix="dlbricks-zoo-") as scratch:
        kept = args.reports or Path(scratch)
        kept.mkdir(parents=True, exist_ok=True)
        ini = Path(scratch) / "pytest.ini"
        ini.write_text("[pytest]\n")
        for granularity in [int(g) for g in args.granularities.split(",")]:
            for validate in validations:
                key = (granularity, validate)
                label = f"g{granularity}-{'validate' if validate else 'plain'}"
                results[key], noises[key] = _session(cache, models, granularity, validate, args, ini, kept, label)
    print(_render(models, results, noises))
    print(_calibration(models, results, noises, calibration_models))
    if args.check:
        sys.exit(_check(cache, models, results))


def _session(
    cache: Path,
    models: list[dict],
    granularity: int,
    validate: bool,
    args: argparse.Namespace,
    ini: Path,
    kept: Path,
    label: str,
) -> tuple[dict[str, dict], float | None]:
    """One pytest session of the plugin on some models; per model name its row, and the noise figure."""
    report, junit, store = kept / f"{label}.json", kept / f"{label}.xml", Path(tempfile.mkdtemp(dir=kept))
    command = [
        sys.executable,
        "-m",
        "pytest",
        *[str(cache / model["path"]) for model in models],
        "-c",
        str(ini),
        f"--rootdir={cache}",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rN",
        f"--dlbricks-granularity={granularity}",
        f"--dlbricks-json={report}",
        f"--dlbricks-store={store}",
        f"--dlbricks-precision={args.precision}",
        f"--benchmark-max-time={args.max_time}",
        f"--junitxml={junit}",
        *[option for model in models for option in dim_options(cache / model["path"], model["dims"])],
        *(["--dlbricks-validate", "--dlbricks-executor=parallel"] if validate else []),
        *args.pytest_args,
    ]
    start = time.perf_counter()
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=False)
        output, code = completed.stdout + completed.stderr, completed.returncode
    except subprocess.TimeoutExpired as expired:
        output, code = f"{expired.stdout or ''}{expired.stderr or ''}", "timeout"
    (kept / f"{label}.txt").write_text(output)
    print(f"{label}: {len(models)} models, pytest exit {code} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    if not report.exists():
        cause = f"no report (pytest exit {code}): {output.strip().splitlines()[-1] if output.strip() else ''}"
        return {model["name"]: {"error": cause} for model in models}, None
    return _read_report(cache, models, report, junit)


def _read_report(cache: Path, models: list[dict], report: Path, junit: Path) -> tuple[dict[str, dict], float | None]:
    """Per model name its row in one session's report (with what calibration needs), and the noise figure."""
    data = json.loads(report.read_text())
    failures = _failures(junit)
    by_path = {(cache / model["path"]).resolve(): model for model in data["models"]}
    overhead = overhead_of(data["summary"])
    times = brick_times(data["bricks"], data["settings"].get("statistic", "median"))
    executor = ParallelExecutor.from_report(data.get("executor"))
    references = brick_references(data["bricks"])
    layers = {brick["signature"]: len(brick["ops"]) for brick in data["bricks"]}
    noise = (data.get("accuracy") or {}).get("noise")
    rows = {}
    for model in models:
        found = by_path.get((cache / model["path"]).resolve(), {"error": "not in the plugin's report"})
        rows[model["name"]] = _row(found, model["name"], data, failures)
        if "composition" in found:
            composition = found["composition"]
            rows[model["name"]].update(
                bytes=found["bytes"],
                call_s=model_costs(calls_of(composition), overhead, references).of(*composition["io"]),
                layers=found["layers"],
                layer_bound_s=overhead.trivial_layer_s,
            )
            unscaled = compose_calls(
                calls_of(composition), graph_of(composition), tuple(composition["io"]), times, overhead
            ).sequential_s
            measured = found.get("measured_s")
            rows[model["name"]]["unscaled_ratio"] = unscaled / measured if unscaled and measured else None
            measured_parallel = ((found.get("validation") or {}).get("parallel") or {}).get("measured_s")
            if executor is not None and executor.pool_layer_s is not None and measured_parallel:
                rows[model["name"]]["parallel_ratio"] = (found.get("parallel_s") or 0) / measured_parallel or None
                rows[model["name"]]["parallel_at"] = {
                    factor: (
                        compose_calls(
                            calls_of(composition),
                            graph_of(composition),
                            tuple(composition["io"]),
                            times,
                            overhead,
                            dataclasses.replace(executor, pool_factor=factor),
                            layers,
                            references,
                        ).parallel_s
                        or 0
                    )
                    / measured_parallel
                    for factor in POOL_FACTORS
                }
        rows[model["name"]]["noise"] = noise
        rows[model["name"]]["speed_spread"] = (data["summary"].get("speed") or {}).get("spread")
    return rows, noise


def _kept(cache: Path, models: list[dict], folders: list[str], label: str) -> tuple[dict[str, dict], float | None]:
    """Rows of the models found in the kept reports ``<folder>/<label>.json`` (the later folder wins), and
    the largest noise any of those sessions reported."""
    rows: dict[str, dict] = {}
    noises = []
    for folder in folders:
        report = Path(folder) / f"{label}.json"
        if not report.exists():
            continue
        found, noise = _read_report(cache, models, report, report.with_suffix(".xml"))
        rows.update({name: row for name, row in found.items() if row.get("loaded")})
        noises += [noise] if noise is not None else []
    return rows, max(noises) if noises else None


def _repeatability(cache: Path, models: list[dict], folders: list[str], label: str) -> str:
    """Per model its measured time in each run (``<folder>/<label>.json``) and its estimate / measured ratio;
    then, for each pair of runs, how far their measurements and their estimates of the same models agree,
    and each run's accuracy: the measurements' agreement is the floor of what an estimate can score."""
    runs = [
        (folder, _read_report(cache, models, Path(folder) / f"{label}.json", Path(folder) / f"{label}.xml")[0])
        for folder in folders
        if (Path(folder) / f"{label}.json").exists()
    ]
    if len(runs) < 2:
        return f"{label}: fewer than two of the folders hold a kept report {label}.json"
    measured = {model["name"]: [rows.get(model["name"], {}).get("measured_s") for _, rows in runs] for model in models}
    estimated = {
        model["name"]: [
            rows.get(model["name"], {}).get("sequential_s") if rows.get(model["name"], {}).get("complete") else None
            for _, rows in runs
        ]
        for model in models
    }
    width = max(len(model["name"]) for model in models)
    lines = ["", f"{label}, {len(runs)} runs: measured_ms in each run (estimate / measured)", ""]
    for model in models:
        cells = [
            f"{_ms(m):>9s} ({e / m:.3f})" if m and e else f"{_ms(m):>9s} (  -  )"
            for m, e in zip(measured[model["name"]], estimated[model["name"]])
        ]
        lines.append(f"{model['name']:{width}s} " + "  ".join(cells))
    lines.append("")
    for (a, (folder_a, _)), (b, (folder_b, _)) in itertools.combinations(enumerate(runs), 2):
        lines.append(f"{folder_a} against {folder_b}:")
        for what, values in (("measured", measured), ("estimates", estimated)):
            ratios = [x / y for x, y in ((v[a], v[b]) for v in values.values()) if x and y]
            lines.append(f"  {what} agree: {_score(ratios)}")
    for folder, rows in runs:
        ratios = [
            row["sequential_s"] / row["measured_s"]
            for row in rows.values()
            if row.get("complete") and row.get("sequential_s") and row.get("measured_s")
        ]
        lines.append(f"{folder}: estimate / measured {_score(ratios)}; plugin's noise {_noise(_run_noise(rows))}")
    return "\n".join(lines)


def _run_noise(rows: dict[str, dict]) -> float | None:
    return next((row["noise"] for row in rows.values() if row.get("noise") is not None), None)


def _failures(junit: Path) -> dict[str, str]:
    """Failed or erroring items of a junit XML report: nodeid-like name -> first line of the message."""
    if not junit.exists():
        return {}
    failed = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        for problem in [*case.findall("failure"), *case.findall("error")]:
            text = (problem.get("message") or problem.text or "").strip()
            text = text.split('failed on setup with "', 1)[-1].removeprefix("Failed: ").rstrip('"')
            failed[f"{case.get('classname')}::{case.get('name')}"] = " ".join(text.split())[:400]
    return failed


def _row(found: dict, name: str, data: dict, failures: dict[str, str]) -> dict:
    """What the table shows of one model: its figures and, when it has no full estimate, why."""
    row = {
        key: found.get(key)
        for key in (
            *("sequential_s", "measured_s", "ratio", "complete", "guessed_dims", "inputs", "data_dependent_ops"),
            *("calibrated_s", "paired_ratio", "estimate_drift"),
        )
    }
    row["loaded"] = "error" not in found
    own = [message for case, message in failures.items() if f"{name}.onnx" in case.split("::")[0]]
    causes = []
    if "error" in found:
        causes.append(str(found["error"]))
    causes += [f"layer {b['layer']} {b['op']}: {b['cause']}" for b in found.get("unbuildable_layers") or []]
    causes += [message for message in own if not any(cause in message for cause in causes)]
    if row["loaded"] and not row["complete"] and not causes:
        shared = [b for b in data.get("bricks", []) if b["time_s"] is None and found.get("path") in b["models"]]
        causes.append(f"{len(shared)} brick(s) without a time, failed under another model" if shared else "incomplete")
    row["cause"] = "; ".join(dict.fromkeys(causes))
    return row


def _render(models: list[dict], results: dict[tuple[int, bool], dict[str, dict]], noises: dict) -> str:
    width = max(len(model["name"]) for model in models)
    lines = []
    for (granularity, validate), rows in results.items():
        lines += ["", f"G={granularity}, validation {'on' if validate else 'off'}", ""]
        lines.append(f"{'model':{width}s} loaded complete  estimate_ms  measured_ms  ratio  inputs           cause")
        ratios = []
        for model in models:
            row = rows.get(model["name"], {"loaded": False, "cause": "not run"})
            estimate, measured = row.get("sequential_s"), row.get("measured_s")
            ratio = estimate / measured if estimate and measured else None
            if ratio and row.get("complete"):
                ratios.append(ratio)
            guessed = f" [dims left at 1: {', '.join(row['guessed_dims'])}]" if row.get("guessed_dims") else ""
            lines.append(
                f"{model['name']:{width}s} {'yes' if row.get('loaded') else 'NO':6s} "
                f"{'yes' if row.get('complete') else 'NO':8s} {_ms(estimate):>11s}  {_ms(measured):>11s}  "
                f"{f'{ratio:.3f}' if ratio else '-':>5s}  {_inputs(row):16s} {row.get('cause') or ''}{guessed}"
            )
        estimated = sum(1 for row in rows.values() if row.get("complete") and row.get("sequential_s"))
        lines.append(f"{estimated}/{len(models)} models complete with an estimate")
        real = [name for name, row in rows.items() if row.get("inputs") not in (None, "synthetic")]
        lines.append(f"{len(real)} ran on their sample inputs; * synthetic inputs, but operators that depend on data")
        noise = f"plugin's noise {_noise(noises.get((granularity, validate)))}"
        # The speed trace of the session (the largest, from kept reports of several sessions).
        spreads = [row["speed_spread"] for row in rows.values() if row.get("speed_spread")]
        if spreads:
            noise += f", machine speed +-{max(spreads):.1%} through the run"
        # Accuracy exp(-mean |ln ratio|) of the estimates, then of the paired rounds and of the drift between them.
        if ratios:
            lines.append(f"{_score(ratios)}; {noise}")
        for key, what in (
            ("paired_ratio", "paired rounds (bricks timed again before each timed call of the model)"),
            ("estimate_drift", "item estimates / paired estimates (the machine's speed moving between them)"),
            ("unscaled_ratio", "item estimates with each brick's call cost as measured, not at its moment"),
        ):
            values = [row[key] for row in rows.values() if row.get("complete") and row.get(key)]
            if values:
                lines.append(f"  {what}: {_score(values)}")
        lines += _parallel_ceiling(rows)
    return "\n".join(lines)


#: Slowdowns of the layers that use the intra-op pool under the parallel executor tried for its ceiling.
POOL_FACTORS = tuple(round(1 + step / 4, 2) for step in range(29))


def _parallel_ceiling(rows: dict[str, dict]) -> list[str]:
    """The parallel estimates' accuracy as the run measured them, and at the pool slowdown that would
    have scored best on these models (a ceiling of estimating by one factor, tuned on what it scores)."""
    validated = [row for row in rows.values() if row.get("complete") and row.get("parallel_at")]
    if not validated:
        return []

    def scored(factor: float) -> float:
        ratios = [row["parallel_at"][factor] for row in validated if row["parallel_at"][factor]]
        return (accuracy(ratios) or {}).get("accuracy", 0.0)

    best = max(POOL_FACTORS, key=scored)
    return [
        f"parallel estimates against the parallel executor: {_score([row.get('parallel_ratio') for row in validated])}",
        f"  at the pool slowdown best for these models, x{best:.2f} (a ceiling tuned on them, not a result):"
        f" {_score([row['parallel_at'][best] for row in validated])}",
    ]


def _calibration(models: list[dict], results: dict, noises: dict, calibration_models: list[str]) -> str:
    """Raw against calibrated estimates, scored where no model calibrates its own estimate: leave one model
    out (each model calibrated on all the others) and held out (calibrated on ``calibration_models``,
    scored on the models that took no part)."""
    lines = []
    for (granularity, validate), rows in results.items():
        records = {
            name: record_of(
                name,
                name,
                granularity,
                row["sequential_s"],
                row["bytes"],
                row["call_s"],
                row["measured_s"],
                row["layers"],
            )
            for name, row in rows.items()
            if validate and row.get("complete") and row.get("measured_s") and row.get("sequential_s") and "bytes" in row
        }
        if len(records) <= MIN_MODELS:  # each left out, the others must still calibrate it
            continue
        # The machine's cost of a trivial layer, the median over the reports the rows come from.
        bounds = [rows[name]["layer_bound_s"] for name in records if rows[name]["layer_bound_s"]]
        bound = statistics.median(bounds) if bounds else None
        everything = list(records.values())
        loo = {name: fit(everything, granularity, layer_bound_s=bound, leave_out=name) for name in records}
        calibrators = [records[name] for name in calibration_models if name in records]
        held_out = fit(calibrators, granularity, layer_bound_s=bound)
        scored = [name for name in records if name not in calibration_models]
        width = max(len(name) for name in records)
        lines += ["", f"Calibration, G={granularity}: raw and calibrated estimate / measured", ""]
        lines.append(f"{'model':{width}s}  MB moved  measured_ms     raw  leave-one-out  held-out")
        for model in models:
            name = model["name"]
            if name not in records:
                continue
            record = records[name]
            raw = _raw(record)
            lomo = _calibrated(loo[name], record)
            held = _calibrated(held_out, record) if name in scored else None
            lines.append(
                f"{name:{width}s}  {record.bytes / 1e6:8.1f}  {record.measured_s * 1e3:11.3f}  {raw:6.3f}"
                f"  {_ratio(lomo):>13s}  {_ratio(held) if name in scored else 'calibrates':>8s}"
            )
        noise = _noise(noises.get((granularity, validate)))
        lines.append("")
        fitted = _fitted(everything, bound)
        lines.append(f"leave one model out, {len(records)} models (plugin's noise {noise}){fitted}:")
        lines.append(f"  raw        {_score([_raw(r) for r in everything])}")
        lines.append(f"  calibrated {_score([_calibrated(loo[name], r) for name, r in records.items()])}")
        if held_out is None:
            lines.append(f"held out: fewer than {MIN_MODELS} calibration models validated; not scored")
            continue
        lines.append(
            f"held out, calibrated on {len(calibrators)} models ({', '.join(held_out.models)}):"
            f" {_coefficients(held_out)}; scored on the {len(scored)} others"
        )
        lines.append(f"  raw        {_score([_raw(records[name]) for name in scored])}")
        lines.append(f"  calibrated {_score([_calibrated(held_out, records[name]) for name in scored])}")
        own = [
            rows[name]["calibrated_s"] / rows[name]["measured_s"] for name in scored if rows[name].get("calibrated_s")
        ]
        if own:  # the session ran on a store that holds a calibration (--dlbricks-calibrate in an earlier run)
            lines.append(f"  as the plugin calibrated them from its store: {_score(own)}")
    return "\n".join(lines)


def _raw(record: CalibrationRecord) -> float:
    return (record.work_s + record.call_s) / record.measured_s


def _calibrated(calibration: Calibration | None, record: CalibrationRecord) -> float | None:
    if calibration is None:
        return None
    return calibration.apply(record.work_s, record.bytes, record.layers or 0, record.call_s) / record.measured_s


def _fitted(records: list[CalibrationRecord], bound: float | None) -> str:
    """The coefficients fitted on every model, which those left out one at a time are close to."""
    calibration = fit(records, records[0].granularity, layer_bound_s=bound)
    if calibration is None:
        return ""
    return f"; fitted on all: {_coefficients(calibration)}"


def _coefficients(calibration: Calibration) -> str:
    """The fitted coefficients, or why the fit leaves estimates raw."""
    if calibration.declined is not None:
        return calibration.declined
    if calibration.per_layer_missing is not None:
        per_layer = f"no cost per layer ({calibration.per_layer_missing})"
    else:
        per_layer = f"{calibration.per_layer_s * 1e6:.2f} us per layer"
    return f"work x{calibration.work_factor:.3f}, {calibration.per_byte_s * 1e12:.2f} us per MB moved, {per_layer}"


def _ratio(ratio: float | None) -> str:
    return f"{ratio:.3f}" if ratio else "-"


def _score(ratios: list[float | None]) -> str:
    """Accuracy exp(-mean |ln ratio|), and the share within 5% and within 10% of the measurement, as the plugin
    scores them (|ratio - 1|, as nn-Meter counts)."""
    found = [r for r in ratios if r]
    scored = accuracy(found)
    if scored is None:
        return "no model"
    return (
        f"accuracy {scored['accuracy']:.3f} over {len(found)} models,"
        f" within 5%: {scored['within_5_percent']}/{len(found)},"
        f" within 10%: {scored['within_10_percent']}/{len(found)}"
    )


def _inputs(row: dict) -> str:
    """What the model ran on; synthetic inputs starred where operators of the model depend on data."""
    inputs = row.get("inputs") or "-"
    return f"{inputs}*" if inputs == "synthetic" and row.get("data_dependent_ops") else inputs


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3f}" if isinstance(seconds, float) else "-"


def _noise(noise: float | None) -> str:
    return f"+-{noise / 2:.1%}" if isinstance(noise, float) else "not reported"


def _check(cache: Path, models: list[dict], results: dict[tuple[int, bool], dict[str, dict]]) -> int:
    """1 when onnxruntime runs a model on the plugin's inputs but some run gave it no estimate."""
    refused = 0
    for model in models:
        missing = [key for key, rows in results.items() if not rows.get(model["name"], {}).get("complete")]
        if not missing:
            continue
        problem = onnxruntime_runs(cache / model["path"], model["dims"])
        where = ", ".join(f"G={g}{' validate' if v else ''}" for g, v in missing)
        if problem is None:
            refused += 1
            print(f"CHECK: onnxruntime runs {model['name']} but the plugin gave no estimate at {where}")
            continue
        print(f"check: onnxruntime itself refuses {model['name']} on the plugin's inputs: {problem}")
        if model.get("samples"):
            sampled = onnxruntime_runs(cache / model["path"], model["dims"], cache / model["samples"])
            print(f"       on its sample inputs: {'runs' if sampled is None else sampled}")
    return 1 if refused else 0


def onnxruntime_runs(path: Path, dims: dict[str, int], samples: Path | None = None) -> str | None:
    """None when onnxruntime loads the model and runs it on synthetic inputs as the plugin makes them
    (floats in [0.5, 1.5), integers and booleans zero, dimensions by input axis or name, else 1), or on the
    sample inputs (ONNX's test_data_set layout) when given; else onnxruntime's message."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import numpy_helper

    onnxruntime.set_default_logger_severity(3)
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        if samples is not None:
            tensors = [onnx.load_tensor(str(file)) for file in sorted(samples.glob("input_*.pb"))]
            session.run(None, {tensor.name: numpy_helper.to_array(tensor) for tensor in tensors})
            return None
        feed = {}
        rng = np.random.default_rng(0)
        for value in session.get_inputs():
            shape = [
                d if isinstance(d, int) and d > 0 else dims.get(f"{value.name}[{axis}]", dims.get(d, 1))
                for axis, d in enumerate(value.shape)
            ]
            dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}.get(
                value.type
            )
            if dtype is not None:
                feed[value.name] = (rng.random(shape) + 0.5).astype(dtype)
            else:
                numpy_type = {
                    "tensor(bool)": np.bool_,
                    "tensor(int32)": np.int32,
                    "tensor(int8)": np.int8,
                    "tensor(uint8)": np.uint8,
                }.get(value.type, np.int64)
                feed[value.name] = np.zeros(shape, numpy_type)
        session.run(None, feed)
    except Exception as error:  # onnxruntime's own refusal is the answer
        return " ".join(str(error).split())[:300]
    return None


if __name__ == "__main__":
    main()
