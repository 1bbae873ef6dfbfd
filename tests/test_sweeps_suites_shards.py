"""Sweeps, numeric types, providers, exported suites and shards end to end, as a user runs them."""

from __future__ import annotations

import functools
import io
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest
import tiny_models

from conftest import SAMPLE_MODELS, run_dlbricks
from pytest_dlbricks.core.identity import CUT_METHOD
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.bricks import BrickSpec
from pytest_dlbricks.cut.cutting import plan_model
from pytest_dlbricks.cut.loading import load_model
from pytest_dlbricks.estimating.composition import ParallelExecutor, compose
from pytest_dlbricks.reporting.recomposition import brick_references, overhead_of
from pytest_dlbricks.timing.overhead import ParallelCosts
from pytest_dlbricks.wiring import engine
from pytest_dlbricks.wiring.cli import main

DIMS = ("--dlbricks-dim", "seq=16")
MODELS = ("mlp.onnx", "tiny_inception.onnx", "transformer_block.onnx")


run = functools.partial(run_dlbricks, dims=DIMS)


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), out, err)
    return status, out.getvalue(), err.getvalue()


def compose_into(folder: Path, maps: Path, results: str) -> tuple[dict[str, Any], str]:
    """``compose`` the maps with a report in ``folder``; the report it writes and what it prints."""
    status, out, err = cli(
        "compose", "--map", str(maps), "--results", str(folder / results), "--json", str(folder / "c.json")
    )
    assert (status, err) == (0, "")
    return read(folder / "c.json"), out


def brick_items(result: pytest.RunResult, outcome: str = "PASSED") -> set[str]:
    return {line.split()[0] for line in result.stdout.lines if "::brick[" in line and f" {outcome}" in line}


def estimates(report: dict[str, Any]) -> dict[str, tuple[object, ...]]:
    return {m["path"]: (m["sequential_s"], m["critical_path_s"], m["complete"]) for m in report["models"]}


@pytest.fixture
def models(copy_models: Callable[..., list[Path]]) -> list[Path]:
    return copy_models(*(SAMPLE_MODELS / name for name in MODELS))


def test_help_shows_the_sweep_suite_and_shard_options(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # the width the lines below are wrapped at
    pytester.runpytest("--help").stdout.fnmatch_lines(
        [
            "  --dlbricks-dtype=TYPES",
            "*Numeric types to benchmark every model in,*",
            # pytest 9.0 and earlier break the line inside "comma-separated", 9.2 before it.
            "*separated: fp32, int8, fp16. fp32 is the model as*",
            "*written, int8 its dynamic quantization, fp16 its float16*",
            "*conversion (onnxruntime's tools). Ini: dlbricks_dtype.*",
            "*Default: fp32.",
            "  --dlbricks-providers=NAMES",
            "*onnxruntime execution providers in order of preference,*",
            "*comma-separated (cpu is short for CPUExecutionProvider);*",
            "*the provider that ran each brick is recorded. Ini:*",
            "*dlbricks_providers. Default: CPUExecutionProvider.",
            "  --dlbricks-export=DIR",
            "*Write every distinct brick to DIR as a standalone .onnx*",
            "*model with a manifest.json: a suite that runs with*",
            "*pytest anywhere and reveals neither weights nor models.*",
            "*Default: no export.",
            "  --dlbricks-export-maps=DIR",
            "*Where --dlbricks-export writes each model's private map*",
            "*(its bricks and their graph), for python -m*",
            "*pytest_dlbricks compose. Default: DIR-maps beside the*",
            "*suite.",
            "  --dlbricks-export-activations",
            "*With --dlbricks-export, also write the activations kept*",
            "*where an operator's work depends on its data (NonZero,*",
            "*If...), computed from the models' sample inputs; without*",
            "*it the suite carries only the steering values (shapes,*",
            "*indices, conditions) that its manifest lists. Default:*",
            "*off.",
            "  --dlbricks-shard=K/N  Benchmark only shard K of N of the distinct bricks (the",
            "*same split on every machine, balanced by expected cost);*",
            "*combine the reports with python -m pytest_dlbricks*",
            "*merge. Default: all bricks.",
        ],
        consecutive=True,
    )


def test_a_dimension_sweep_runs_the_suite_at_each_size(pytester: pytest.Pytester, models: list[Path]) -> None:
    result = run(
        pytester,
        "--dlbricks-granularity=1",
        "--dlbricks-dim=batch=1,4",
        "--dlbricks-json=r.json",
        "-v",
        "models/mlp.onnx",
    )
    report = read(pytester.path / "r.json")
    result.assert_outcomes(passed=report["summary"]["distinct_bricks"])
    result.stdout.re_match_lines([r"models/mlp\.onnx::brick\[FusedGemm-[0-9a-f]{8}\]\[batch=4\] PASSED.*"])
    result.stdout.fnmatch_lines(["models/mlp.onnx[[]batch=1] * yes", "models/mlp.onnx[[]batch=4] * yes"])
    one, four = report["models"]
    assert (one["path"], one["point"]) == ("models/mlp.onnx[batch=1]", {"seq": 16, "batch": 1, "dtype": "fp32"})
    assert four["point"]["batch"] == 4 and four["sequential_s"] > 0
    assert report["settings"]["sweep"] == {"batch": [1, 4]} and report["settings"]["dims"] == {"seq": 16}
    selected = run(
        pytester, "--dlbricks-granularity=1", "--dlbricks-dim=batch=1,4", "--co", "-q", "-k", "batch4", "models"
    )
    items = [line for line in selected.stdout.lines if "::brick[" in line]
    assert items and all(line.endswith("[batch=4]") for line in items)


def test_numeric_types_quantize_and_report_what_the_provider_cannot_run(
    pytester: pytest.Pytester, models: list[Path]
) -> None:
    """This CPU provider runs int8 bricks; it has no float16 kernels for the MLP's operators."""
    result = run(
        pytester,
        "--dlbricks-granularity=1",
        "--dlbricks-cut=original",
        "--dlbricks-dim=batch=2",
        "--dlbricks-dtype=fp32,int8,fp16",
        "--dlbricks-json=r.json",
        "-rs",
        "-v",
        "models/mlp.onnx",
    )
    assert result.ret == 0
    report = read(pytester.path / "r.json")
    fp32, int8, fp16 = report["models"]
    assert [fp32["path"], int8["path"], fp16["path"]] == [f"models/mlp.onnx[{t}]" for t in ("fp32", "int8", "fp16")]
    assert fp32["complete"] and int8["complete"]
    assert "MatMulInteger" in {op for brick in report["bricks"] for op in brick["ops"]}
    assert fp16["complete"] is False and fp16["sequential_s"] is None
    assert {u["cause"] for u in fp16["unsupported"]} >= {
        "CPUExecutionProvider has no float16 kernel for Gemm: onnxruntime would run it in float32 between casts"
    }
    skipped = [brick for brick in report["bricks"] if brick["unsupported"]]
    assert skipped and all(brick["time_s"] is None for brick in skipped)
    result.assert_outcomes(passed=report["summary"]["measured_bricks"], skipped=len(skipped))
    result.stdout.fnmatch_lines(
        [
            f"models/mlp.onnx[[]fp16] * no ({fp16['measured_bricks']}/10, {len(fp16['unsupported'])} unsupported)",
            "SKIPPED * brick Gemm-* is not supported here: CPUExecutionProvider has no float16 kernel for Gemm*",
        ]
    )
    assert any(line.startswith("models/mlp.onnx::brick[") and "][int8] PASSED" in line for line in result.stdout.lines)


def test_the_optimized_graph_of_a_float16_model_shows_float32_work(
    pytester: pytest.Pytester, models: list[Path]
) -> None:
    """onnxruntime casts around the operators it has no float16 kernel for: such bricks are unsupported too,
    and a model with such bricks has no estimate to validate."""
    result = run(
        pytester,
        "--dlbricks-granularity=1",
        "--dlbricks-dim=batch=1",
        "--dlbricks-dtype=fp16",
        "--dlbricks-validate",
        "--dlbricks-json=r.json",
        "-rs",
        "models/mlp.onnx",
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["SKIPPED * models/mlp.onnx[[]fp16]: * of its bricks are not supported here; no estimate"]
    )
    report = read(pytester.path / "r.json")
    (mlp,) = report["models"]
    assert mlp["complete"] is False
    assert any("works on float32 activations in the float16 model" in u["cause"] for u in mlp["unsupported"])
    # Each such brick's entry says why too, as one the provider refused when run does.
    causes = {u["signature"]: u["cause"] for u in mlp["unsupported"]}
    assert {b["signature"]: b["unsupported"] for b in report["bricks"] if b["signature"] in causes} == causes


def test_a_float16_point_with_float32_work_is_read_back_from_the_store_as_it_was_cut(
    pytester: pytest.Pytester, models: list[Path]
) -> None:
    """Its plan keeps the reasons its bricks cannot run by brick index, which JSON writes as text: every run after the
    first said the plan was damaged, and cut the model again."""
    arguments = (
        "--dlbricks-granularity=1",
        "--dlbricks-dim=batch=1",
        "--dlbricks-dtype=fp32,fp16",
        "--dlbricks-json=r.json",
    )
    first = run(pytester, *arguments, "models/mlp.onnx")
    assert first.ret == 0
    unsupported = read(pytester.path / "r.json")["models"][1]["unsupported"]
    again = run(pytester, *arguments, "models/mlp.onnx")
    assert again.ret == 0
    assert not [line for line in again.stdout.lines if "damaged" in line]
    assert read(pytester.path / "r.json")["models"][1]["unsupported"] == unsupported != []


def test_an_unavailable_provider_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--dlbricks-granularity=1", "--dlbricks-providers=cuda,cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--dlbricks-providers: execution provider 'cuda' is not available here (available: *)"]
    )


@pytest.mark.skipif(
    "AzureExecutionProvider" not in ort.get_available_providers(), reason="needs a second provider in the wheel"
)
def test_providers_are_tried_in_order_and_the_one_used_is_recorded(
    pytester: pytest.Pytester, models: list[Path]
) -> None:
    run(
        pytester,
        "--dlbricks-granularity=2",
        "--dlbricks-dim=batch=1",
        "--dlbricks-providers=azure,cpu",
        "--dlbricks-json=r.json",
        "models/mlp.onnx",
    )
    report = read(pytester.path / "r.json")
    assert report["settings"]["providers"] == ["AzureExecutionProvider", "CPUExecutionProvider"]
    for brick in report["bricks"]:
        assert brick["provider"] == "CPUExecutionProvider"
        assert set(brick["node_providers"]) == {"CPUExecutionProvider"}


def steady_parallel_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parallel executor's call cost at twice the sequential one: a loaded machine may give none."""
    monkeypatch.setattr(
        engine, "measure_parallel_costs", lambda settings, sequential: ParallelCosts(2 * sequential.fixed_s, 0.0)
    )


def test_an_exported_suite_runs_anywhere_and_composes_back(
    pytester: pytest.Pytester, models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    steady_parallel_call(monkeypatch)
    direct = run(
        pytester,
        "--dlbricks-executor=parallel",
        "--dlbricks-granularity=3",
        "--dlbricks-dim=batch=1",
        "--dlbricks-export=suite",
        "--dlbricks-json=direct.json",
        "models",
    )
    report = read(pytester.path / "direct.json")
    distinct = report["summary"]["distinct_bricks"]
    direct.assert_outcomes(passed=distinct)
    direct.stdout.fnmatch_lines(
        [
            f"dlbricks: exported {distinct} bricks to *suite (the suite to share) and the maps of 3 models to"
            " *suite-maps (private: keep them)"
        ]
    )
    assert report["settings"]["cut"] == "original", "a suite for other machines is cut as written"
    suite, maps = pytester.path / "suite", pytester.path / "suite-maps"
    assert len(list(suite.glob("*.onnx"))) == distinct and (suite / "manifest.json").is_file()
    assert sorted(p.name for p in maps.iterdir()) == [f"models--{name}.map.json" for name in sorted(MODELS)]

    # The owner's own results compose back to exactly the direct run's estimates, in a table fitted to the terminal.
    monkeypatch.setenv("COLUMNS", "80")
    own, out = compose_into(pytester.path, maps, "direct.json")
    rows = [line for line in out.splitlines() if line.startswith(("models/", "..."))]
    assert len(rows) == 3 and max(len(row) for row in rows) <= 80, out
    assert "inception.onnx" in out
    precisions = {m["path"]: m["precision"] for m in report["models"]}
    assert all(precisions.values()) and {m["path"]: m["precision"] for m in own["models"]} == pytest.approx(precisions)
    assert estimates(own) == estimates(report)

    # Elsewhere: the suite alone, at granularity 1, times each exported brick once, never cut again.
    (pytester.path / "models").rename(pytester.path / "private")
    vendor = run(
        pytester,
        "--dlbricks-granularity=1",
        "--dlbricks-executor=parallel",
        "--dlbricks-store=vendor",
        "--dlbricks-json=vendor.json",
        "suite",
    )
    vendor.assert_outcomes(passed=distinct)
    vendor_report = read(pytester.path / "vendor.json")
    assert vendor_report["models"] == [] and vendor_report["summary"]["measured_bricks"] == distinct
    assert {b["signature"] for b in vendor_report["bricks"]} == {b["signature"] for b in report["bricks"]}

    # The suite says each brick's layers' work: the vendor's run reports FLOPs and time by operator as the direct
    # run does, and so do the estimates composed from it.
    cut = {b["signature"]: (b["flops"], b["bytes"], sorted(b["op_time_s"])) for b in report["bricks"]}
    assert {b["signature"]: (b["flops"], b["bytes"], sorted(b["op_time_s"])) for b in vendor_report["bricks"]} == cut
    composed, _ = compose_into(pytester.path, maps, "vendor.json")
    assert all(model["complete"] for model in composed["models"])
    flops = {model["path"]: model["flops"] for model in report["models"]}
    assert {model["path"]: model["flops"] for model in composed["models"]} == flops
    assert all(model["op_time_s"] for model in composed["models"])
    # The suite's run detected the parallel executor on its machine: the estimates are for it.
    assert composed["executor"]["detection"] == vendor_report["executor"]["detection"]
    executor = ParallelExecutor.from_report(vendor_report["executor"])
    assert executor is not None
    # ... equal to composing the models directly with the suite's times.
    times = {b["signature"]: b["time_s"] for b in vendor_report["bricks"]}
    references = brick_references(vendor_report["bricks"])
    assert references.keys() == times.keys(), "every brick's call cost follows the speed around its timing"
    overhead = overhead_of(vendor_report["summary"])
    for model in composed["models"]:
        path = pytester.path / "private" / Path(model["path"]).name
        plan = plan_model(load_model(path, {"batch": 1, "seq": 16}), 3, model["path"])
        estimate = compose(plan, times, overhead, executor, references)
        assert (estimate.sequential_s, estimate.critical_path_s) == (model["sequential_s"], model["critical_path_s"])
        assert estimate.parallel_s is not None and estimate.parallel_s == model["parallel_s"]


def test_a_changed_suite_fails_where_it_changed(pytester: pytest.Pytester, models: list[Path]) -> None:
    run(
        pytester,
        "--dlbricks-granularity=1",
        "--dlbricks-dim=batch=1",
        "--dlbricks-export=suite",
        "--co",
        "models/mlp.onnx",
    )
    suite = pytester.path / "suite"
    files = sorted(suite.glob("*.onnx"))
    files[0].write_bytes(files[1].read_bytes())
    result = run(pytester, "--dlbricks-granularity=1", "suite")
    result.assert_outcomes(passed=len(files) - 1, errors=1)
    result.stdout.fnmatch_lines(
        [f"suite/{files[0].name}: {files[0].name} does not match the signature its manifest gives*"]
    )
    (suite / "manifest.json").write_text('{"kind": "pytest-dlbricks brick suite", "version": 2}')
    result = run(pytester, "--dlbricks-granularity=1", "suite")
    result.assert_outcomes(errors=len(files))
    result.stdout.fnmatch_lines(
        ["*manifest.json is version 2 of the suite format; this pytest-dlbricks reads version 1"]
    )


def test_the_command_line_runs_as_a_module(pytester: pytest.Pytester) -> None:
    pytester.path.joinpath("a.json").write_text('{"machine_info": {}, "benchmarks": []}')
    result = pytester.run(sys.executable, "-m", "pytest_dlbricks", "compose", "--map", ".", "--results", "a.json")
    assert result.ret == 1
    result.stderr.fnmatch_lines(["python -m pytest_dlbricks compose: error: * holds no maps (*.map.json)"])
    result = pytester.run(sys.executable, "-m", "pytest_dlbricks", "merge")
    assert result.ret == 2
    result.stderr.fnmatch_lines(["*error: the following arguments are required: RESULT.json"])


def test_three_shards_merge_into_the_single_run_composition(
    pytester: pytest.Pytester, models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    steady_parallel_call(monkeypatch)
    ran: list[set[str]] = []
    for shard in (1, 2, 3):
        result = run(
            pytester,
            "--dlbricks-granularity=2",
            "--dlbricks-executor=parallel",
            "--dlbricks-dim=batch=1",
            f"--dlbricks-shard={shard}/3",
            f"--dlbricks-json=s{shard}.json",
            "-v",
            "models",
        )
        assert result.ret == 0
        result.stdout.fnmatch_lines([f"dlbricks: shard {shard}/3 benchmarks * of * distinct bricks; *merge"])
        ran.append(brick_items(result))
    distinct = read(pytester.path / "s1.json")["summary"]["distinct_bricks"]
    assert sum(map(len, ran)) == len(set.union(*ran)) == distinct, "every brick on exactly one shard"
    assert max(map(len, ran)) <= math.ceil(distinct / 3), "no shard gets more than its equal share, rounded up"

    status, out, err = cli(
        "merge", *(str(pytester.path / f"s{k}.json") for k in (1, 2, 3)), "--json", str(pytester.path / "merged.json")
    )
    assert (status, err) == (0, "")
    merged = read(pytester.path / "merged.json")
    assert all(model["complete"] for model in merged["models"]) and "models/mlp.onnx" in out
    assert merged["summary"]["measured_bricks"] == distinct
    # The single-run composition of the same timings: the plugin's own cut and composition, in-process.
    times = {b["signature"]: b["time_s"] for b in merged["bricks"]}
    references = brick_references(merged["bricks"])
    overhead = overhead_of(merged["summary"])
    settings = Settings(granularity=2, dims={"batch": 1, "seq": 16})
    # The parallel executor as the first shard detected it, at the merged call costs.
    first = read(pytester.path / "s1.json")["executor"]
    assert merged["executor"]["detection"] == first["detection"]
    assert merged["executor"]["parallel_call_s"] == overhead.parallel_fixed_s
    executor = ParallelExecutor.from_report(first)
    for model in merged["models"]:
        path = pytester.path / model["path"]
        plan = plan_model(load_model(path, settings.dims, settings), 2, model["path"])
        assert {b.signature for b in plan.bricks if isinstance(b, BrickSpec)} <= set(times)
        estimate = compose(plan, times, overhead, executor, references)
        assert (estimate.sequential_s, estimate.critical_path_s) == (model["sequential_s"], model["critical_path_s"])
        assert estimate.parallel_s is not None and estimate.parallel_s == model["parallel_s"]
    # What the shards measured of the machine and the models' work, kept: the peak, FLOPs, time by operator.
    shard_peaks = [read(pytester.path / f"s{k}.json")["peak"] for k in (1, 2, 3)]
    assert merged["peak"] in shard_peaks and merged["peak"]["flops_per_s"] == max(p["flops_per_s"] for p in shard_peaks)
    assert all(model["flops"] and model["op_time_s"] and model["flops_per_s"] for model in merged["models"])
    status, _, err = cli(
        "merge", *(str(pytester.path / f"s{k}.json") for k in (1, 2, 3)), "--html", str(pytester.path / "m.html")
    )
    page = (pytester.path / "m.html").read_text()
    assert status == 0 and "not every brick was measured" not in page

    # A damaged executor entry counts as absent: the next report's is taken, and the user is told.
    damaged = read(pytester.path / "s1.json")
    damaged["executor"] = {"threads": "one"}
    (pytester.path / "s1.json").write_text(json.dumps(damaged))
    status, _, err = cli("merge", *(str(pytester.path / f"s{k}.json") for k in (1, 2, 3)))
    assert status == 0 and "s1.json: its executor entry is damaged and was left out" in err

    status, _, err = cli("merge", str(pytester.path / "s1.json"), str(pytester.path / "s1.json"))
    assert status == 1 and "are both shard 1/3; give each shard once" in err
    status, _, err = cli("merge", str(pytester.path / "s1.json"), str(pytester.path / "s2.json"))
    assert status == 1 and "2 of 3 shards given; pass --allow-missing-shards to merge them all the same" in err
    status, _, err = cli(
        "merge", "--allow-missing-shards", str(pytester.path / "s1.json"), str(pytester.path / "s2.json")
    )
    assert status == 0 and "2 of 3 shards given: models are incomplete" in err

    # Damaged insides: an error naming the files, no traceback.
    whole = read(pytester.path / "s2.json")
    for key in ("settings", "models"):
        damaged = dict(whole)
        del damaged[key]
        (pytester.path / "s2.json").write_text(json.dumps(damaged))
        status, out, err = cli("merge", *(str(pytester.path / f"s{k}.json") for k in (1, 2, 3)))
        assert status == 1 and "error: the files given are damaged or were not written by pytest-dlbricks" in err, key
        assert "s2.json" in err and "Traceback" not in out + err, key


def test_shards_with_and_without_the_store_merge_and_gate_like_a_direct_run(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    """After a one-layer change, one shard times the changed brick and the other takes all of its own from the
    store: each report carries its machine, the shards merge, and merge writes and gates what a run does."""
    models = pytester.path / "models"
    copy_models(SAMPLE_MODELS / "mlp.onnx")
    tiny_models.chain(models, "net.onnx", blocks=1, channels=16, size=32, kernel=1)
    common = ("--dlbricks-granularity=1", "--dlbricks-dim=batch=1", "--dlbricks-precision=off", "models")
    assert run(pytester, "--benchmark-autosave", *common).ret == 0
    (saved,) = (pytester.path / ".benchmarks").glob("*-*/0001_*.json")
    tiny_models.chain(models, "net.onnx", blocks=1, channels=16, size=32, kernel=9)
    measured = []
    for shard in (1, 2):
        result = run(pytester, f"--dlbricks-shard={shard}/2", f"--dlbricks-json=s{shard}.json", *common)
        assert result.ret == 0
        report = read(pytester.path / f"s{shard}.json")
        assert report["machine"]["cpu"] and report["machine"]["cores"], "a report knows its machine"
        measured.append(report["summary"]["measured_bricks"] - report["summary"]["reused_bricks"])
    assert sorted(measured) == [0, 1], "one shard timed the changed brick, the other reused all of its own"

    outputs = ("--json", "m.json", "--html", "m.html", "--benchmark-json", "m-bench.json")
    status, out, err = cli("merge", "s1.json", "s2.json", *outputs, "--compare", str(saved), "--compare-fail=10%")
    assert err == "" and status in (1, 6), out
    merged = read(pytester.path / "m.json")
    assert all(model["complete"] for model in merged["models"]) and merged["machine"]["cpu"]
    assert "<html" in (pytester.path / "m.html").read_text()
    entries = read(pytester.path / "m-bench.json")
    assert {b["fullname"] for b in entries["benchmarks"]} == {"dlbricks::models/mlp.onnx", "dlbricks::models/net.onnx"}
    assert entries["dlbricks"]["report"]["models"] == merged["models"]
    assert entries["dlbricks"]["timing"] == read(saved)["dlbricks"]["timing"], "comparable with the run's own"
    verdicts = {m["path"]: m["verdict"] for m in merged["comparison"]["models"]}
    assert verdicts["models/mlp.onnx"] == "unchanged" and verdicts["models/net.onnx"] in ("REGRESSION", "INCONCLUSIVE")
    assert "models/net.onnx" in out and "bricks that changed: " in out and "Conv" in out
    # The merged run's entries are a baseline like a saved run: compared with themselves, nothing changed.
    status, out, _ = cli("merge", "s1.json", "s2.json", "--compare", "m-bench.json", "--compare-fail=10%")
    assert status == 0 and "models/net.onnx" in out
    # A baseline saved by a version that cut otherwise (before the cut method was recorded) is refused.
    older = read(saved)
    del older["dlbricks"]["model"]["cut_method"]
    (pytester.path / "older.json").write_text(json.dumps(older))
    status, out, err = cli("merge", "s1.json", "s2.json", "--compare", "older.json", "--compare-fail=10%")
    assert status != 0 and f"cut method 1 then, {CUT_METHOD} now" in out + err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--dlbricks-shard=1/2", "--dlbricks-validate"],
            "*--dlbricks-shard cannot be combined with --dlbricks-validate*",
        ),
        (["--dlbricks-shard=3/2"], "*shard number must lie between 1 and 2, not 3*"),
        (["--dlbricks-dtype=fp64"], "*numeric type must be one of fp32, int8, fp16 (comma-separated), not 'fp64'*"),
        (["--dlbricks-export-maps=maps"], "*--dlbricks-export-maps needs --dlbricks-export*"),
        (["--dlbricks-export-activations"], "*--dlbricks-export-activations needs --dlbricks-export*"),
        (["--dlbricks-export=suite", "--dlbricks-export-maps=suite/maps"], "*lies inside the suite*private*"),
        (
            ["--dlbricks-export=models"],
            "*models is not empty and holds no brick suite; export into a new or empty folder*",
        ),
    ],
)
def test_bad_combinations_are_usage_errors(
    pytester: pytest.Pytester, models: list[Path], args: list[str], message: str
) -> None:
    result = pytester.runpytest("--dlbricks-granularity=1", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_an_export_over_a_manifest_naming_files_outside_deletes_nothing(
    pytester: pytest.Pytester, models: list[Path]
) -> None:
    suite = pytester.path / "suite"
    suite.mkdir()
    victims = [pytester.path / "victim.txt", pytester.path.parent / f"{pytester.path.name}-absolute.txt"]
    for victim in victims:
        victim.write_text("keep me")
    entries = [{"file": "../victim.txt"}, {"file": str(victims[1])}]
    manifest = {"kind": "pytest-dlbricks brick suite", "version": 1, "bricks": entries}
    (suite / "manifest.json").write_text(json.dumps(manifest))

    result = run(pytester, "--dlbricks-granularity=3", "--dlbricks-export=suite", "--collect-only", "models")

    result.stdout.fnmatch_lines(["dlbricks: cannot export: *manifest.json names a file outside its folder*"])
    assert [victim.read_text() for victim in victims] == ["keep me", "keep me"]
    assert sorted(path.name for path in suite.iterdir()) == ["manifest.json"]
