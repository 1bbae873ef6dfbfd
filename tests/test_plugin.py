"""The plugin end to end, as a user runs it: through ``pytester.runpytest``."""

from __future__ import annotations

import functools
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import tiny_models

from conftest import SAMPLE_MODELS, light_models, run_dlbricks
from pytest_dlbricks.core.budget import LOOSEST
from pytest_dlbricks.core.noise import margin_of_error
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.estimating.composition import model_costs
from pytest_dlbricks.reporting.recomposition import brick_references, calls_of, overhead_of
from pytest_dlbricks.timing import probes, speed_trace
from pytest_dlbricks.timing.load import LoadMeter
from pytest_dlbricks.timing.overhead import ParallelCosts
from pytest_dlbricks.timing.probes import ExecutorDetection, PoolSlowdown
from pytest_dlbricks.wiring import engine, items, run_state
from pytest_dlbricks.wiring.engine import DLBricksRun

run = run_dlbricks


def read_report(path: Path) -> dict:
    return json.loads(path.read_text())


def seconds(value: str, unit: str) -> tuple[float, float]:
    """A time as the terminal prints it (``12.3 us``), in seconds, and half its last digit's step."""
    scale, half_step = {"us": (1e-6, 0.05e-6), "ms": (1e-3, 0.005e-3), "s": (1.0, 0.0005)}[unit]
    return float(value) * scale, half_step


def test_help_shows_every_option(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # the width the lines below are wrapped at
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "dlbricks: benchmark ONNX models brick by brick:",
            "  --dlbricks-granularity=G",
            "*Collect ONNX models and cut them into bricks of at most*",
            "*G layers; setting it enables dlbricks. Ini:*",
            "*dlbricks_granularity. Default: off.",
            "  --dlbricks-dim=NAME=VALUE",
            "*Size of a symbolic input dimension such as batch or seq,*",
            "*or of an input's axis (x[[]2]=48); repeatable. A pattern*",
            "*first gives sizes to some models only*",
            "*(ocr/[*].onnx:height=48 width=320), winning over sizes for*",
            "*all. A dimension not given is what the model's metadata*",
            "*says, else 1, with a warning. Several sizes*",
            "*(batch=1,4,16) run the whole suite at each. Ini:*",
            "*dlbricks_dims. Default: none given.",
            "  --dlbricks-json=PATH  Write per-model estimates and per-brick times as JSON.",
            "*Default: no file.",
            "  --dlbricks-html=PATH  Write the report as one self-contained HTML page with",
            "*charts. Default: no file.",
            "  --dlbricks-threads=N  onnxruntime intra-op threads; 0 is onnxruntime's own",
            "*choice. Ini: dlbricks_threads. Default: 0.",
            "  --dlbricks-thread-pool=POOL",
            "*shared: all onnxruntime sessions of the run use one*",
            "*thread pool, so each brick runs on threads as its layers*",
            "*do inside the model; every onnxruntime session created*",
            "*in the process after it must then set*",
            "*use_per_session_threads = False. per-session: a pool per*",
            "*session (less accurate: idle pools spin and slow the*",
            "*next brick). Ini: dlbricks_thread_pool. Default: shared.",
            "  --dlbricks-optimization=LEVEL",
            "*onnxruntime graph optimization level: disable, basic,*",
            "*extended, layout, all. Ini: dlbricks_optimization.*",
            "*Default: all (onnxruntime's default).",
            "  --dlbricks-statistic=STAT",
            "*Brick time statistic the estimates add up: median, mean,*",
            "*min. Ini: dlbricks_statistic. Default: median.",
            "  --dlbricks-executor=EXECUTOR",
            "*Which onnxruntime executors to estimate: sequential*",
            "*(onnxruntime's default) only; parallel: also*",
            "*ExecutionMode.ORT_PARALLEL (a Parallel column, its*",
            "*executor validated too); auto: the parallel one only*",
            "*where the installed onnxruntime runs independent nodes*",
            "*at once (checked on a small graph), which on CPU it does*",
            "*not since onnxruntime 1.14. Ini: dlbricks_executor.*",
            "*Default: auto.",
            "  --dlbricks-glob=PATTERN",
            "*File name pattern of the model files to collect;*",
            "*repeatable. Ini: dlbricks_globs. Default: [*].onnx.",
            "  --dlbricks-cut=GRAPH  Cut the graph onnxruntime runs for this provider,",
            "*optimization level and machine (optimized: fusions and*",
            "*layout included, accurate) or the model as written*",
            "*(original: portable bricks). Ini: dlbricks_cut. Default:*",
            "*optimized; original with --dlbricks-export.",
            "  --dlbricks-cost=MODE  What a brick costs: its time on this machine",
            "*(wall-clock), or its instructions and cache misses*",
            "*counted under valgrind's callgrind and a cycle model's*",
            "*time (simulated: the same on any load). Ini:*",
            "*dlbricks_cost. Default: wall-clock.",
            "  --dlbricks-precision=PCT",
            "*Time each brick until the margin of error of its mean is*",
            "*this small (95% confidence), so the estimates are that*",
            "*precise; off (or 0) keeps pytest-benchmark's time per*",
            "*item. Ini: dlbricks_precision. Default: 2%.",
            "  --dlbricks-validate   Also time every model end to end, interleaved with its",
            "*bricks, and report how close the estimates come (items*",
            "*<model>::e2e[[]<file name>[]] and, with*",
            "*--dlbricks-executor=parallel, ::e2e-parallel[[]<file*",
            "*name>[]] too). Ini: dlbricks_validate. Default: off.",
            "  --dlbricks-calibrate  The models validated in this run calibrate this machine:",
            "*their measured and composed times are kept in the brick*",
            "*store, and every estimate is then also given calibrated*",
            "*(learned from the calibration models kept there, never*",
            "*from the model itself). Calibrate on public models of*",
            "*your choice, such as the onnx wheel's light CNNs; needs*",
            "*--dlbricks-validate. Ini: dlbricks_calibrate. Default:*",
            "*off.",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(
        [
            "  --dlbricks-store=DIR  Folder where every measured brick time is saved, by",
            "*machine and settings, for later runs to reuse; none*",
            "*turns the store off. Ini: dlbricks_store. Default:*",
            "*.benchmarks/dlbricks under the rootdir.",
            "  --dlbricks-max-age=AGE",
            "*Measure again stored brick times older than AGE, such as*",
            "*12h, 30d or none. Ini: dlbricks_max_age. Default: 30d.",
            "  --dlbricks-remeasure  Time every brick and detect the parallel executor even",
            "*if the store has them, and save the new figures.",
            "*Default: off.",
            "  --dlbricks-compare=[[]NUM|PATH[]]",
            "*Compare per-model estimates with a run saved by*",
            "*--benchmark-save or --benchmark-autosave: its number,*",
            "*its file, or the latest when no value is given. Default:*",
            "*no comparison.",
            "  --dlbricks-compare-fail=PCT",
            "*With --dlbricks-compare, fail the session when a model's*",
            "*estimate is slower by more than PCT (such as 10%) and by*",
            "*more than the noise band of the brick times. Ini:*",
            "*dlbricks_compare_fail. Default: never fail.",
            "  --dlbricks-compare-incompatible",
            "*Compare with a run made on another machine or with other*",
            "*settings instead of refusing. Default: refuse.",
        ],
        consecutive=True,
    )


def test_models_are_ignored_unless_enabled(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "- dlbricks:" not in result.stdout.str()


def test_sample_models_become_brick_benchmarks_and_estimates(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    result = run(pytester, "--dlbricks-granularity=2", "--dlbricks-json=report.json", "models")
    report = read_report(pytester.path / "report.json")
    distinct = report["summary"]["distinct_bricks"]
    result.assert_outcomes(passed=distinct)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*- dlbricks: granularity 2, median brick times -*",
            "Model * Layers * Bricks * Distinct * Sequential * Critical path * Complete",
            "models/mlp.onnx * yes",
            "models/tiny_inception.onnx * yes",
            "models/tiny_resnet.onnx * yes",
            "models/tiny_rnn.onnx * yes",
            "models/transformer_block.onnx * yes",
            f"5 models, * layers, * bricks, {distinct} distinct (*), {distinct} measured",
            "dlbricks: report written to *report.json",
        ]
    )
    lines = result.stdout.lines
    title = next(index for index, line in enumerate(lines) if "- dlbricks: granularity 2" in line)
    assert len(lines[title]) == len(lines[title + 2]) > 80, "the title's rule is as wide as the table under it"
    assert set(lines[title + 2]) == {"-"}
    models = {model["path"]: model for model in report["models"]}
    assert set(models) == {f"models/{path.name}" for path in sample_models}
    for model in models.values():
        assert model["complete"] is True
        assert model["layers"] / 2 <= model["bricks"] <= model["layers"]
        assert 0 < model["critical_path_s"] <= model["sequential_s"]
    inception = models["models/tiny_inception.onnx"]
    assert inception["critical_path_s"] < inception["sequential_s"], "parallel branches shorten the critical path"
    assert sum(model["bricks"] for model in models.values()) == report["summary"]["bricks"]


def test_the_run_traces_the_machines_speed_between_its_items(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With samples allowed back to back, every item that times takes one, before its timing."""
    monkeypatch.setattr(speed_trace, "SAMPLE_EVERY_S", 0.0)
    result = run(pytester, "--dlbricks-granularity=2", "--dlbricks-json=report.json", "models/tiny_inception.onnx")
    report = read_report(pytester.path / "report.json")
    speed = report["summary"]["speed"]
    assert speed["samples"] == report["summary"]["measured_bricks"] == result.parseoutcomes()["passed"]
    assert (speed["reference"], speed["every_s"]) == ("a chain of 16 one-element Adds", 0.0)
    assert 0 < speed["q1_s"] <= speed["median_s"] <= speed["q3_s"] < 1e-3
    assert speed["spread"] == pytest.approx((speed["q3_s"] - speed["q1_s"]) / 2 / speed["median_s"])
    result.stdout.fnmatch_lines(
        [
            "1 model, * measured",
            f"Machine speed through the run: a chain of 16 one-element Adds took * us to * us (quartiles of"
            f" {speed['samples']} samples at least 0 s apart; median * us): +-*%*",
        ]
    )


def test_timings_begun_in_the_slow_state_wait_for_the_fast_one_and_the_run_says_so(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine read as slow at every moment: each timing waits its whole (tiny) budget, is timed all the same,
    and the report and the speed line count it."""
    monkeypatch.setattr(speed_trace, "SAMPLE_EVERY_S", 0.0)
    monkeypatch.setattr(speed_trace, "MIN_MOMENTS", 1)
    monkeypatch.setattr(speed_trace, "SLOW_BY", 1e-3)  # slow at every reading, however far apart they lie
    monkeypatch.setattr(speed_trace, "WAIT_MAX_S", 0.003)
    monkeypatch.setattr(speed_trace, "WAIT_SHARE", 1.0)
    result = run(pytester, "--dlbricks-granularity=2", "--dlbricks-json=report.json", "models/tiny_inception.onnx")
    report = read_report(pytester.path / "report.json")
    speed = report["summary"]["speed"]
    timed = report["summary"]["measured_bricks"]
    again = (report["summary"]["timed_again"] or {}).get("bricks", 0)  # timed once more at the run's end
    assert speed["waits"] == speed["timed_slow"] == timed - 1 + again, (
        "every timing but the first, knowing no fast state"
    )
    assert speed["waits"] * 0.003 <= speed["waited_s"] < speed["waits"] * 0.05
    waits = speed["waits"]
    said = f"*{waits} timings began in its slow state and waited * s for the fast one, {waits} timed slow all the same*"
    result.stdout.fnmatch_lines([said])


def test_a_run_waits_for_the_fast_state_earlier_runs_met_and_says_when_it_never_met_it(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store keeps the fast state each run met; the next run on the shelf starts from it. A run that stays far
    above it (here: one whose earlier run is made to have met a state ten times faster) waits for it, and its
    verdict and speed line count how far above it stayed."""
    monkeypatch.setattr(speed_trace, "SAMPLE_EVERY_S", 0.0)
    monkeypatch.setattr(speed_trace, "MIN_MOMENTS", 1)
    monkeypatch.setattr(speed_trace, "WAIT_MAX_S", 0.003)
    args = ("--dlbricks-granularity=2", "--dlbricks-json=report.json", "models/tiny_inception.onnx")
    run(pytester, *args)
    first = read_report(pytester.path / "report.json")["summary"]["speed"]
    assert "known_fast_s" not in first, "nothing known before the first run"
    (record,) = (pytester.path / ".benchmarks" / "dlbricks").glob("*/runs.json")
    runs = json.loads(record.read_text())
    (met,) = [kept["fast_s"] for kept in runs["runs"]]
    assert 0 < met < 1e-3
    runs["runs"][0]["fast_s"] = met / 10
    record.write_text(json.dumps(runs))
    result = run(pytester, *args, "--dlbricks-remeasure")
    report = read_report(pytester.path / "report.json")
    speed = report["summary"]["speed"]
    assert speed["known_fast_s"] == pytest.approx(met / 10)
    assert speed["above_known"] == pytest.approx(speed["met_fast_s"] / (met / 10) - 1) and speed["above_known"] > 1
    assert speed["fast_s"] == pytest.approx(met / 10), "timings were held to the faster"
    assert speed["waits"] >= report["summary"]["measured_bricks"], "every timing waited, the first too"
    assert report["verdict"]["sources"]["speed"] >= speed["above_known"]
    (model,) = report["models"]
    assert model["timed_above_fast"] > 1, "every brick timed far above the fast state"
    assert report["verdict"]["models"][model["path"]] >= model["timed_above_fast"]
    result.stdout.fnmatch_lines(["*this run never met the machine's fast state: * us at its fastest moments against*"])
    kept = [run["fast_s"] for run in json.loads(record.read_text())["runs"]]
    assert kept[0] == pytest.approx(met / 10) and kept[1] == pytest.approx(speed["met_fast_s"]), "its own"


def test_item_ids_carry_operators_and_short_signature(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    result = run(
        pytester,
        "--dlbricks-granularity=2",
        "--dlbricks-cut=original",
        "--collect-only",
        "-q",
        "models/tiny_resnet.onnx",
    )
    result.stdout.re_match_lines([r"models/tiny_resnet\.onnx::brick\[Conv\+BatchNormalization-[0-9a-f]{8}\]"])


def test_each_file_times_its_heaviest_bricks_first(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    """The first brick timed of a model must reach the whole precision: the heaviest reaches it soonest."""
    args = ("--dlbricks-granularity=2", "--collect-only", "-q", "models/tiny_rnn.onnx", "models/tiny_inception.onnx")
    listed = [line for line in run(pytester, *args).stdout.lines if "::brick[" in line]
    engine = DLBricksRun(Settings(granularity=2, dims={"batch": 1, "seq": 16}), time.perf_counter)
    expected = []
    for path in ("models/tiny_rnn.onnx", "models/tiny_inception.onnx"):
        _, bricks = engine.add_model(pytester.path / path, path)
        heaviest = sorted(bricks, key=lambda brick: engine.expected_cost(brick.signature), reverse=True)
        expected += [f"{path}::brick[{brick.label}]" for brick in heaviest]
    assert len(expected) > 10 and listed == expected


def test_repeated_layers_become_one_item(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    """The MLP's hidden layers repeat: at G=1 its five Gemms and four Relus are three distinct bricks."""
    result = run(
        pytester, "--dlbricks-granularity=1", "--dlbricks-cut=original", "--dlbricks-json=r.json", "models/mlp.onnx"
    )
    report = read_report(pytester.path / "r.json")
    (mlp,) = report["models"]
    assert (mlp["layers"], mlp["bricks"]) == (10, 10)
    assert mlp["unique_bricks"] < mlp["bricks"]
    result.assert_outcomes(passed=mlp["unique_bricks"])
    counts = sorted(next(iter(brick["models"].values())) for brick in report["bricks"])
    assert sum(counts) == 10 and max(counts) > 1


def test_bricks_shared_across_models_run_once(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    copy_models(SAMPLE_MODELS / "mlp.onnx", folder="a")
    copy_models(SAMPLE_MODELS / "mlp.onnx", folder="b")
    result = run(pytester, "--dlbricks-granularity=1", "--dlbricks-json=r.json", "a", "b")
    report = read_report(pytester.path / "r.json")
    assert [m["complete"] for m in report["models"]] == [True, True]
    assert report["models"][0]["sequential_s"] == report["models"][1]["sequential_s"]
    result.assert_outcomes(passed=report["summary"]["distinct_bricks"])
    assert all(set(brick["models"]) == {"a/mlp.onnx", "b/mlp.onnx"} for brick in report["bricks"])


def test_keyword_selection_leaves_models_incomplete(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    result = run(
        pytester,
        "--dlbricks-granularity=1",
        "--dlbricks-cut=original",
        "--dlbricks-json=r.json",
        "-k",
        "Gemm",
        "models/mlp.onnx",
    )
    report = read_report(pytester.path / "r.json")
    (mlp,) = report["models"]
    assert mlp["complete"] is False and mlp["sequential_s"] is None
    assert 0 < mlp["measured_bricks"] < mlp["bricks"]
    result.stdout.fnmatch_lines([f"models/mlp.onnx * no ({mlp['measured_bricks']}/10)"])
    assert result.ret == 0


def test_keyword_selects_a_shared_brick_by_any_model_name(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    copy_models(SAMPLE_MODELS / "mlp.onnx", folder="a")
    copy_models(SAMPLE_MODELS / "mlp.onnx", folder="b")
    (pytester.path / "b" / "mlp.onnx").rename(pytester.path / "b" / "other.onnx")
    result = run(
        pytester, "--dlbricks-granularity=1", "--dlbricks-cut=original", "--collect-only", "-q", "-k", "other", "a", "b"
    )
    selected = [line for line in result.stdout.lines if "::brick[" in line]
    assert len(selected) == 5 and all(line.startswith("a/mlp.onnx::") for line in selected)


def test_benchmark_disable_reports_incomplete_without_crashing(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    result = run(pytester, "--dlbricks-granularity=3", "--benchmark-disable", "models")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["models/mlp.onnx * no (0/*)", "5 models, * 0 measured"])


def test_the_table_is_printed_when_another_summary_raises(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    """pytest-benchmark's --benchmark-compare-fail raises from its summary on a regression."""
    copy_models(SAMPLE_MODELS / "mlp.onnx")
    pytester.makeconftest("def pytest_terminal_summary():\n    raise RuntimeError('a summary that raises')\n")
    result = run(pytester, "--dlbricks-granularity=2", "--dlbricks-store=none", "models")
    assert "a summary that raises" in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*dlbricks: granularity 2, median brick times*", "models/mlp.onnx *"])


def test_broken_model_fails_alone(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    (pytester.path / "models" / "broken.onnx").write_bytes(b"this is not a protobuf \xff\xfe")
    (pytester.path / "models" / "empty.onnx").write_bytes(b"")
    result = run(pytester, "--dlbricks-granularity=2", "--dlbricks-json=r.json", "models")
    report = read_report(pytester.path / "r.json")
    result.assert_outcomes(passed=report["summary"]["distinct_bricks"], errors=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of models/broken.onnx::load*",
            "models/broken.onnx: not an ONNX model (the protobuf does not parse: *)",
            "*ERROR at setup of models/empty.onnx::load*",
            "models/empty.onnx: the file is empty, not an ONNX model",
        ],
    )
    assert "Traceback" not in result.stdout.str()
    failed = [model for model in report["models"] if "error" in model]
    assert [model["path"] for model in failed] == ["models/broken.onnx", "models/empty.onnx"]
    assert sum(model["complete"] for model in report["models"]) == 5


def test_guessed_dimension_warns(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    """Warned, not raised: the suite's own ``filterwarnings = error`` would reach this run."""
    result = pytester.runpytest("-W", "default", "--dlbricks-granularity=2", "--collect-only", "models/mlp.onnx")
    result.stdout.fnmatch_lines(
        ["*DLBricksWarning: models/mlp.onnx: symbolic dimension 'batch' was not given, using 1*--dlbricks-dim batch=N*"]
    )


def test_warnings_as_errors_fail_the_model_that_warns_alone(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """Under ``filterwarnings = error`` a model whose dimension was guessed fails its load item; the session goes on
    (a collection error would have interrupted it: the other models never ran)."""
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
    tiny_models.chain(pytester.path / "models", "static.onnx", blocks=1)
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", "models/mlp.onnx", "models/static.onnx", dims=())
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*ERROR at setup of models/mlp.onnx::load*", "*models/mlp.onnx: symbolic dimension 'batch' was not given*"]
    )
    assert "Interrupted" not in result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes["errors"] == 1 and outcomes["passed"] >= 1, "the static model's bricks ran"


def test_benchmark_only_times_the_bricks_and_validates(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    """Brick and validation items ask for pytest-benchmark's fixture when they run: --benchmark-only, which skips
    what does not name it when collected, skipped them all and exited 0 with nothing measured."""
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.makeconftest(
        """
        import pytest

        def pytest_collection_modifyitems(items):
            mine = next(item for item in items if "brick[" in item.name)
            mine.add_marker(pytest.mark.skip(reason="mine"))
        """
    )
    result = run_dlbricks(
        pytester,
        "--benchmark-only",
        "--dlbricks-granularity=2",
        "--dlbricks-validate",
        "models/mlp.onnx",
        "test_plain.py",
    )
    assert result.ret == 0
    result.assert_outcomes(passed=3, skipped=2)  # the plain test, and the brick a conftest skipped


def test_weights_listed_as_inputs_warn(pytester: pytest.Pytester) -> None:
    tiny_models.weights_as_inputs(pytester.path)
    result = pytester.runpytest("-W", "default", "--dlbricks-granularity=2", "--collect-only", "weights_as_inputs.onnx")
    result.stdout.fnmatch_lines(
        ["*DLBricksWarning: weights_as_inputs.onnx: 6 weights also listed as graph inputs, which onnxruntime*"]
    )
    assert "<Function brick[" in result.stdout.str(), "its bricks are collected"


def test_dimension_changes_bricks(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    ids = {}
    for batch in (1, 8):
        result = pytester.runpytest(
            "--dlbricks-granularity=1", f"--dlbricks-dim=batch={batch}", "--collect-only", "-q", "models/mlp.onnx"
        )
        ids[batch] = {line for line in result.stdout.lines if "::brick[" in line}
    assert ids[1] and ids[8] and not ids[1] & ids[8]


def test_ini_enables_and_flag_wins(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    pytester.makeini(
        "[pytest]\ndlbricks_granularity = 3\ndlbricks_dims =\n    batch=2\n    seq=4\ndlbricks_statistic = min\n"
    )
    pytester.runpytest("--benchmark-disable", "--dlbricks-json=r.json", "models/mlp.onnx")
    report = read_report(pytester.path / "r.json")
    assert report["granularity"] == 3
    assert report["settings"]["dims"] == {"batch": 2, "seq": 4}
    assert report["settings"]["statistic"] == "min"
    pytester.runpytest("--benchmark-disable", "--dlbricks-granularity=1", "--dlbricks-json=r.json", "models/mlp.onnx")
    assert read_report(pytester.path / "r.json")["granularity"] == 1


@pytest.mark.skipif(pytest.version_tuple < (9, 2), reason="pytest reads TOML numbers into ini values from 9.2 on")
def test_native_toml_table_takes_numbers_and_booleans_unquoted(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    pytester.makepyprojecttoml(
        "[tool.pytest]\n"
        "dlbricks_granularity = 3\n"
        "dlbricks_validate = true\n"
        "dlbricks_precision = 0.05\n"
        'dlbricks_dims = ["batch=2", "seq=4"]\n'
    )
    result = run_dlbricks(pytester, "--dlbricks-json=r.json", "models/mlp.onnx", dims=())
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    report = read_report(pytester.path / "r.json")
    assert report["granularity"] == 3
    assert report["settings"]["validate"] is True
    assert report["settings"]["precision"] == 0.05
    assert report["settings"]["dims"] == {"batch": 2, "seq": 4}


def test_ini_truth_values_read_as_before(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    pytester.makeini("[pytest]\ndlbricks_granularity = 3\ndlbricks_validate = yes\ndlbricks_precision = 5%\n")
    run(pytester, "--dlbricks-json=r.json", "models/mlp.onnx")
    settings = read_report(pytester.path / "r.json")["settings"]
    assert settings["validate"] is True
    assert settings["precision"] == 0.05


def test_flag_dimensions_override_ini_dimensions_by_name(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    pytester.makeini("[pytest]\ndlbricks_granularity = 3\ndlbricks_dims =\n    batch=2\n    seq=4\n")
    result = pytester.runpytest(
        "--benchmark-disable", "--dlbricks-dim=seq=8", "--dlbricks-json=r.json", "models/transformer_block.onnx"
    )
    assert result.ret == pytest.ExitCode.OK
    assert read_report(pytester.path / "r.json")["settings"]["dims"] == {"batch": 2, "seq": 8}


def test_runtime_settings_are_recorded(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    # A process of its own: onnxruntime cannot give sessions their own thread pools once a process shares one.
    pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--dlbricks-granularity=2",
        "--dlbricks-threads=1",
        "--dlbricks-thread-pool=per-session",
        "--dlbricks-optimization=basic",
        "--dlbricks-statistic=mean",
        "--dlbricks-json=r.json",
        "models/mlp.onnx",
    ).assert_outcomes(passed=3)
    settings = read_report(pytester.path / "r.json")["settings"]
    assert settings["intra_op_threads"] == 1
    assert settings["thread_pool"] == "per-session"
    assert settings["optimization"] == "basic"
    assert settings["statistic"] == "mean"
    assert settings["providers"] == ["CPUExecutionProvider"]
    assert settings["onnxruntime"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dlbricks-granularity=0"], "*granularity must be at least 1, not 0*"),
        (["--dlbricks-granularity=two"], "*granularity must be a whole number, not 'two'*"),
        (["--dlbricks-granularity=1", "--dlbricks-dim=batch"], "*expected NAME=VALUE such as batch=8, not 'batch'*"),
        (["--dlbricks-granularity=1", "--dlbricks-optimization=max"], "*optimization level must be one of*"),
    ],
)
def test_bad_options_are_usage_errors(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_dlbricks_without_pytest_benchmark_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:benchmark", "--dlbricks-granularity=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*dlbricks times its bricks with pytest-benchmark, which this run disabled*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_pytest_benchmark_loaded_by_its_module_name_is_found(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_models(SAMPLE_MODELS / "mlp.onnx")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins = ("-p", "pytest_benchmark.plugin", "-p", "pytest_dlbricks.plugin")
    result = run(pytester, *plugins, "--dlbricks-granularity=2", "--dlbricks-store=none", "models")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()


def test_a_report_file_that_cannot_be_written_is_refused_before_timing(pytester: pytest.Pytester) -> None:
    pytester.mkdir("reports")
    pytester.makefile(".txt", afile="")
    result = pytester.runpytest("--dlbricks-granularity=2", "--dlbricks-json=reports")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dlbricks-json: */reports is a folder; name the file to write the report to*"])
    result = pytester.runpytest("--dlbricks-granularity=2", "--dlbricks-html=afile.txt/report.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dlbricks-html: cannot write */afile.txt/report.html: */afile.txt is a file*"])


def test_bad_ini_value_is_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ndlbricks_granularity = -3\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option dlbricks_granularity: granularity must be at least 1, not -3*"])


def test_benchmark_extra_info_names_users(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    run(
        pytester,
        "--dlbricks-granularity=1",
        "--dlbricks-cut=original",
        "--benchmark-json=bench.json",
        "models/mlp.onnx",
    )
    saved = json.loads((pytester.path / "bench.json").read_text())
    infos = [b["extra_info"] for b in saved["benchmarks"] if not b["fullname"].startswith("dlbricks::")]
    assert infos and all(set(info["models"]) == {"models/mlp.onnx"} for info in infos)
    assert {op for info in infos for op in info["ops"]} == {"Gemm", "Relu", "Softmax"}
    assert all(len(info["signature"]) == 64 for info in infos)


@pytest.mark.parametrize("granularity", [1, 4])
def test_light_models_of_the_onnx_wheel(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]], granularity: int
) -> None:
    """The 9 real architectures with old-IR quirks: all load, every brick runs, counts add up, ResNet-50 dedupes."""
    copy_models(*light_models(), folder="light")
    result = run(
        pytester, f"--dlbricks-granularity={granularity}", "--dlbricks-cut=original", "--dlbricks-json=r.json", "light"
    )
    report = read_report(pytester.path / "r.json")
    result.assert_outcomes(passed=report["summary"]["distinct_bricks"])
    models = {Path(model["path"]).stem: model for model in report["models"]}
    assert len(models) == 9 and all(model["complete"] for model in models.values())
    assert sum(model["layers"] for model in models.values()) == 1719
    for model in models.values():
        assert model["layers"] / granularity <= model["bricks"] <= model["layers"]
        assert 0 < model["critical_path_s"] <= model["sequential_s"]
    resnet = models["light_resnet50"]
    assert resnet["unique_bricks"] < resnet["bricks"] * (0.4 if granularity == 1 else 0.8)
    per_brick_uses = sum(sum(brick["models"].values()) for brick in report["bricks"])
    assert per_brick_uses == report["summary"]["bricks"]


def test_bricks_are_cut_from_the_graph_onnxruntime_runs_by_default(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """onnxruntime fuses the MLP's Gemm and Relu: fewer layers than written, and the report says which graph."""
    run(pytester, "--dlbricks-granularity=1", "--dlbricks-json=r.json", "models/mlp.onnx").assert_outcomes(passed=4)
    report = read_report(pytester.path / "r.json")
    (mlp,) = report["models"]
    assert mlp["layers"] < 10 and mlp["complete"]
    assert report["settings"]["cut"] == "optimized"


def test_weights_a_model_lists_as_inputs_are_timed_and_reported_so(pytester: pytest.Pytester) -> None:
    """Such weights make the same layers other bricks, timed apart from their plain twin's; the table says so."""
    folder = pytester.path / "models"
    folder.mkdir()
    tiny_models.weights_as_inputs(folder)
    tiny_models.weights_as_inputs(folder, listed=False)
    warned = ("-W", "ignore:models/weights_as_inputs.onnx:pytest_dlbricks.wiring.warning_types.DLBricksWarning")
    args = ("--dlbricks-granularity=2", "--dlbricks-cut=original", "--dlbricks-json=r.json", *warned, "models")
    result = run(pytester, *args)
    result.assert_outcomes(passed=2)
    report = read_report(pytester.path / "r.json")
    listed = next(m for m in report["models"] if m["path"].endswith("weights_as_inputs.onnx"))
    plain = next(m for m in report["models"] if m["path"].endswith("weights_plain.onnx"))
    assert (listed["weights_as_inputs"], plain["weights_as_inputs"]) == (6, 0)
    assert report["summary"]["distinct_bricks"] == 2
    assert all(len(brick["models"]) == 1 for brick in report["bricks"])
    result.stdout.fnmatch_lines(
        [
            "models/weights_as_inputs.onnx *synthetic[*] *",
            "[*] weights listed as graph inputs, not constants, in models/weights_as_inputs.onnx (6)*",
        ]
    )
    verbose = run(pytester, *args, "-v")
    verbose.stdout.fnmatch_lines(["models/weights_as_inputs.onnx *synthetic; 6 weights listed as graph inputs, not *"])


def test_the_parallel_executors_rounds_are_no_load(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parallel executor's caller waits on its inter-op threads by design: on a quiet machine its rounds
    read the timing thread off its core (a validated run was called untrusted, 84% on a core at load 0.7).
    The load is read over the rounds whose caller does the work: bricks' and the sequential executor's."""
    timed: list[object] = []

    class CountingMeter(LoadMeter):
        def around(self, rounds: Callable[[], None]) -> None:
            timed.append(rounds)
            super().around(rounds)

    meter = functools.partial(CountingMeter, cpu=time.perf_counter, load_average=lambda: None)
    monkeypatch.setattr(run_state, "LoadMeter", meter)
    args = ("--dlbricks-granularity=2", "--dlbricks-validate", "--dlbricks-executor=parallel", "models/mlp.onnx")
    result = run(pytester, *args, "-v")
    result.stdout.fnmatch_lines(["*::e2e-parallel[[]mlp.onnx[]] PASSED*"])
    passed = result.parseoutcomes()["passed"]
    assert len(timed) == passed - 1, "every brick item and the sequential e2e item, not the parallel one"


def test_validation_times_models_end_to_end_and_reports_accuracy(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    result = run(
        pytester,
        "--dlbricks-granularity=2",
        "--dlbricks-validate",
        "--dlbricks-executor=parallel",
        "--dlbricks-json=r.json",
        "models/tiny_resnet.onnx",
        "models/tiny_inception.onnx",
        "-v",
    )
    report = read_report(pytester.path / "r.json")
    result.stdout.fnmatch_lines_random(
        [
            "models/tiny_resnet.onnx::e2e[[]tiny_resnet.onnx[]] PASSED*",
            "models/tiny_inception.onnx::e2e[[]tiny_inception.onnx[]] PASSED*",
            "models/tiny_inception.onnx::e2e-parallel[[]tiny_inception.onnx[]] PASSED*",
            # A chain has nothing to overlap, but its parallel estimate (the pool's cost) is checked too.
            "models/tiny_resnet.onnx::e2e-parallel[[]tiny_resnet.onnx[]] PASSED*",
        ]
    )
    # pytest-benchmark's table names its rows by item name: each names its model.
    result.stdout.fnmatch_lines_random(["e2e[[]tiny_resnet.onnx[]] *", "e2e-parallel[[]tiny_inception.onnx[]] *"])
    result.assert_outcomes(passed=report["summary"]["distinct_bricks"] + 4)
    result.stdout.fnmatch_lines(
        [
            "Model * Complete * Measured * Ratio",
            "accuracy of sequential estimates (Sequential / Measured): *% (geometric mean ratio *, */2 models within*",
            "  in paired rounds (*): *% (geometric mean ratio *, */2 models within +-5%, */2 within +-10%)",
            "accuracy of critical paths against the parallel executor (*): *% (*, */2 models within +-5%, */2 within*",
            "  in paired rounds (*",
            "machine noise +-*; the parallel executor's rounds +-*; benchmarking speedup *x (end-to-end*; wall time *",
        ]
    )
    # Both models are timed under the parallel executor: the median of their rounds' spreads is the parallel noise.
    spreads = [m["validation"]["parallel"]["spread"] for m in report["models"]]
    assert report["accuracy"]["parallel_noise"] == pytest.approx(statistics.median(spreads))
    # ... and the machine noise is the sequential rounds' alone.
    sequential_spreads = [m["validation"]["sequential"]["spread"] for m in report["models"]]
    assert report["accuracy"]["noise"] == pytest.approx(statistics.median(sequential_spreads))
    rows = [line.split() for line in result.stdout.lines if line.startswith("models/") and "  yes  " in line]
    assert len(rows) == 2
    for row in rows:
        (sequential, sequential_step), (measured, measured_step) = seconds(*row[4:6]), seconds(*row[-3:-1])
        # Within what the times' last printed digit and the ratio's own rounding leave open.
        slack = sequential / measured * (sequential_step / sequential + measured_step / measured) + 0.005
        assert float(row[-1]) == pytest.approx(sequential / measured, abs=slack), "the ratio follows from the times"
    for model in report["models"]:
        assert model["measured_s"] > 0
        assert model["ratio"] == pytest.approx(model["sequential_s"] / model["measured_s"])
        assert 0.2 < model["paired_ratio"] < 5, "a sane ratio even on a noisy machine"
        assert model["validation"]["sequential"]["rounds"] >= 7
    assert report["accuracy"]["sequential"]["models"] == 2
    assert report["accuracy"]["critical_path"]["models"] == 2
    assert report["summary"]["call_overhead_s"]["fixed_s"] > 0
    assert report["executor"]["model"] is not None or report["executor"]["error"], "the parallel estimate was asked"


def test_bricks_are_timed_to_the_requested_precision(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    def brick_options(*args: str) -> list[dict]:
        run(
            pytester,
            "--dlbricks-granularity=1",
            "--dlbricks-store=none",
            "--benchmark-json=b.json",
            "--dlbricks-json=r.json",
            "models/mlp.onnx",
            *args,
        )
        saved = json.loads((pytester.path / "b.json").read_text())["benchmarks"]
        return [b["options"] for b in saved if not b["fullname"].startswith("dlbricks::")]

    options = brick_options()
    report = read_report(pytester.path / "r.json")
    (model,) = report["models"]
    errors = [
        model_count * brick["stats"]["mean"] * margin_of_error(brick["stats"])
        for brick in report["bricks"]
        for model_count in brick["models"].values()
    ]
    assert model["precision"] == pytest.approx(math.hypot(*errors) / model["sequential_s"]), "in quadrature"
    assert {o["confidence"] for o in options} == {0.95}
    assert all(0.02 <= o["precision"] <= LOOSEST for o in options), "loosened by the brick's part, never tightened"
    assert any(o["precision"] == pytest.approx(0.02) for o in options), (
        "the first brick is all that is known of its model (to the last bit: its call is taken off, the model's added)"
    )
    assert all(0.05 <= o["precision"] <= LOOSEST for o in brick_options("--dlbricks-precision=5%"))
    assert {o["precision"] for o in brick_options("--dlbricks-precision=off")} == {None}
    assert {o["precision"] for o in brick_options("--benchmark-precision=0.1")} == {0.1}, "the user's own wins"


def test_microsecond_bricks_are_timed_over_a_span(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    """Which bricks are spanned is decided from one probe of a shared, noisy machine, and tested exactly in
    ``test_budget.py`` (the user's max time bounding the span too); here, what a run makes of it:
    pytest-benchmark's rounds follow the span."""

    def spanned(bricks: list[dict]) -> list[dict]:
        return [b for b in bricks if b["options"].get("min_rounds", 0) > 100]

    def of(model: str, bricks: list[dict]) -> list[dict]:
        return [b for b in bricks if [Path(path).name for path in b["extra_info"]["models"]] == [model]]

    tiny_models.growing_concats(pytester.path / "models", layers=120)
    tiny_models.elementwise_row(pytester.path / "models")
    # Convolutions of about 40 MFLOP each (0.3 ms here): far above the span's threshold on a machine twice as fast too.
    tiny_models.chain(pytester.path / "models", name="convs.onnx", blocks=2, channels=48, size=32)
    models = ("models/elementwise_row.onnx", "models/convs.onnx", "models/growing_concats.onnx")
    run(
        pytester,
        "--dlbricks-granularity=2",
        "--dlbricks-store=none",
        "--dlbricks-precision=25%",
        "--benchmark-json=b.json",
        *models,
        timing=("--benchmark-max-time=1.0",),
    )
    saved = json.loads((pytester.path / "b.json").read_text())["benchmarks"]
    timed = [b for b in saved if not b["fullname"].startswith("dlbricks::")]
    of_row, of_concats, of_convs = (
        of(name, timed) for name in ("elementwise_row.onnx", "growing_concats.onnx", "convs.onnx")
    )
    assert len(of_row) == 3 and len(of_concats) == 60 and of_convs
    assert spanned(of_row), "a row of three microsecond bricks: each is a third of its model"
    assert len(spanned(of_concats)) < len(of_concats) / 4, "a sixtieth of its model is left to its budget"
    long = [b for b in timed if b["stats"]["min"] > 3 * items.SHORT_CALL_S]
    assert not spanned(long), "bricks slower than the threshold are left to their budget"
    assert [b for b in of_convs if b["stats"]["min"] > items.SHORT_CALL_S], (
        "the convolutions are slow enough to show it"
    )
    assert all(b["stats"]["rounds"] >= b["options"]["min_rounds"] for b in spanned(timed)), "rounds reach the span"


# -- analysis: FLOPs, peak, load times, HTML -----------------------------------------------------


def test_report_gains_flops_peak_and_load_times(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    models = ("models/mlp.onnx", "models/tiny_rnn.onnx")
    run(pytester, "--dlbricks-granularity=2", "--dlbricks-json=r.json", "-v", *models)
    report = read_report(pytester.path / "r.json")
    assert report["peak"]["flops_per_s"] > 0 and report["peak"]["bytes_per_s"] > 0
    assert report["machine"]["cores"] >= 1
    mlp, rnn = report["models"]
    for model in (mlp, rnn):
        assert model["load_s"] > 0
        assert model["flops"] > 0 and model["flops_per_s"] > 0 and model["peak_fraction"] > 0
        assert sum(model["op_time_s"].values()) + model["call_s"] == pytest.approx(model["sequential_s"])
        assert model["top_bricks"][0]["time_s"] >= model["top_bricks"][-1]["time_s"]
    assert "Softmax" in mlp["op_time_s"] and any("Gemm" in op for op in mlp["op_time_s"])
    assert mlp["unknown_flops_time_s"] == 0, "onnxruntime's fused operators are counted too"
    assert rnn["unknown_flops_time_s"] > 0, "the Loop's FLOPs are unknown"
    loop = next(brick for brick in report["bricks"] if "Loop" in brick["ops"])
    assert loop["flops"] is None and loop["unknown_flops_ops"] == ["Loop"]
    gemm = next(brick for brick in report["bricks"] if "Softmax" in brick["ops"])
    assert gemm["flops"] > 0 and gemm["bytes"] > 0 and gemm["flops_per_s"] > 0


def test_load_times_are_measured_only_where_the_run_shows_them(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load time costs a session per model, as much as starting to benchmark the model whole: it is
    measured for ``-v`` and the HTML report, which show it, and left out (None) of a run that shows none."""
    loaded: list[Path] = []
    time_session_creation = probes.time_session_creation

    def counted(path: Path, settings: Settings | None = None) -> float:
        loaded.append(path)
        return time_session_creation(path, settings)

    monkeypatch.setattr(probes, "time_session_creation", counted)
    run(pytester, "--dlbricks-granularity=2", "--dlbricks-json=r.json", "models/mlp.onnx")
    report = read_report(pytester.path / "r.json")
    assert report["peak"]["flops_per_s"] > 0, "the peak is still measured: the default output shows it"
    assert report["models"][0]["load_s"] is None and loaded == []
    for shown in ("-v", "--dlbricks-html=r.html"):
        run(
            pytester,
            "--dlbricks-granularity=2",
            "--dlbricks-json=r.json",
            "--dlbricks-store=none",
            shown,
            "models/mlp.onnx",
        )
        assert read_report(pytester.path / "r.json")["models"][0]["load_s"] > 0, shown
    assert [path.name for path in loaded] == ["mlp.onnx", "mlp.onnx"]


def test_verbose_shows_where_the_time_goes(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    result = run(pytester, "--dlbricks-granularity=1", "-v", "models/mlp.onnx", "models/tiny_resnet.onnx")
    result.stdout.fnmatch_lines(
        [
            "2 models, * measured",
            "dlbricks: peak * GFLOP/s (GEMM), * GB/s; models reach * of the peak",
            "Model * Load * Sequential * FLOPs * GFLOP/s * Of peak * Unknown FLOPs",
            # A load or an estimate may take under a millisecond or more: any unit will do.
            "models/mlp.onnx * ?s * ?s * kFLOP * -",
            "models/tiny_resnet.onnx * ?s * ?s * MFLOP * -",
            "Time by operator type:",
            "  models/mlp.onnx * *Gemm *%*",
            "  models/tiny_resnet.onnx * Conv *%, *",
            "Top bricks by time in the model:",
            # Mostly call cost, the mlp's bricks may rank in any order: its Gemm used thrice may come last.
            "  models/mlp.onnx * *Gemm-* x3 *%*",
        ]
    )


def test_default_output_stays_compact(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    result = run(pytester, "--dlbricks-granularity=2", "models/mlp.onnx")
    result.stdout.fnmatch_lines(
        ["1 model, * measured", "dlbricks: peak * GFLOP/s (GEMM), * (-v: load times, operator types)"]
    )
    assert "Time by operator type" not in result.stdout.str()
    quiet = run(pytester, "--dlbricks-granularity=2", "-q", "models/mlp.onnx")
    assert "dlbricks: peak" not in quiet.stdout.str()
    quiet.stdout.fnmatch_lines(["models/mlp.onnx * yes"])


def test_nothing_measured_means_no_peak_no_load_time_and_no_speed_trace(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(speed_trace, "SAMPLE_EVERY_S", 0.0)  # every item samples: the trace is long enough
    result = run(pytester, "--dlbricks-granularity=2", "--benchmark-disable", "--dlbricks-json=r.json", "-v", "models")
    assert "dlbricks: peak" not in result.stdout.str()
    report = read_report(pytester.path / "r.json")
    assert report["peak"] is None and report["summary"]["speed"] is None
    assert "Machine speed through the run" not in result.stdout.str()
    assert all(model["load_s"] is None and model["flops"] > 0 for model in report["models"])


def test_html_report_is_one_self_contained_file(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    result = run(pytester, "--dlbricks-granularity=2", "--dlbricks-html=out/report.html", "models")
    result.assert_outcomes(passed=result.parseoutcomes()["passed"])
    result.stdout.fnmatch_lines(["dlbricks: report written to *out/report.html"])
    page = (pytester.path / "out" / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    for name in ("mlp", "tiny_inception", "tiny_resnet", "tiny_rnn", "transformer_block"):
        assert f"{name}.onnx" in page
    assert page.count('<div class="stack">') == 5, "a bar per model; no validation ran"
    assert "Estimate vs measured" not in page
    for forbidden in ("<script", "<link", "http://", "https://", "url("):
        assert forbidden not in page
    assert sorted(p.name for p in (pytester.path / "out").iterdir()) == ["report.html"]


def test_an_html_report_that_fails_to_write_is_reported_and_the_json_still_written(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that fills up during the run (a path that cannot be written is refused before, see above)."""

    def disk_full(path: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(engine, "write_text", disk_full)
    result = run(
        pytester,
        "--dlbricks-granularity=3",
        "--dlbricks-html=report.html",
        "--dlbricks-json=r.json",
        "models/mlp.onnx",
    )
    result.stdout.fnmatch_lines(
        ["dlbricks: cannot write *report.html: No space left on device", "dlbricks: report written to *r.json"]
    )
    assert read_report(pytester.path / "r.json")["models"][0]["complete"] is True


def test_models_onnx_tools_reject_and_onnxruntime_runs_get_estimates(pytester: pytest.Pytester) -> None:
    """Each a cause of real models left without an estimate: onnxruntime's fusion in the default domain,
    a weight inside an If branch, a model output that is no tensor; the whole model is timed too."""
    import tiny_models

    folder = pytester.path / "models"
    folder.mkdir()
    for build in (tiny_models.rms_norm, tiny_models.if_branch_weight, tiny_models.zipmap_classifier):
        build(folder)
    result = run(pytester, "--dlbricks-granularity=2", "--dlbricks-validate", "--dlbricks-json=r.json", "models")
    report = read_report(pytester.path / "r.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert {model["path"]: model["complete"] for model in report["models"]} == {
        "models/if_branch_weight.onnx": True,
        "models/rms_norm.onnx": True,
        "models/zipmap.onnx": True,
    }
    assert all(model["measured_s"] > 0 for model in report["models"])


@pytest.mark.parametrize(("granularity", "dtypes"), [("1", "fp32"), ("2", "fp32,int8")])
def test_a_model_onnxruntime_refuses_sized_gets_an_estimate(
    pytester: pytest.Pytester, granularity: str, dtypes: str
) -> None:
    """silero-vad's case: onnxruntime runs the file at a batch of 2, and refuses it with that size written in
    (a branch not taken fails its shape inference); the model, converted or not, and its bricks are timed
    all the same."""
    import tiny_models

    (pytester.path / "models").mkdir()
    tiny_models.batch_squeeze_switch(pytester.path / "models")
    result = run(
        pytester,
        f"--dlbricks-granularity={granularity}",
        f"--dlbricks-dtype={dtypes}",
        "--dlbricks-validate",
        "--dlbricks-json=r.json",
        "models",
        dims=("--dlbricks-dim=batch=2",),
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    models = read_report(pytester.path / "r.json")["models"]
    assert len(models) == len(dtypes.split(","))
    assert all(model["complete"] is True and model["measured_s"] > 0 for model in models)


def test_a_model_onnxruntime_refuses_at_dimensions_left_at_1_names_them(pytester: pytest.Pytester) -> None:
    import tiny_models

    (pytester.path / "models").mkdir()
    tiny_models.image_conv(pytester.path / "models")
    result = run(pytester, "--dlbricks-granularity=2", "models", dims=())
    result.stdout.fnmatch_lines(
        ["models/image_conv.onnx: onnxruntime cannot * (height, width left at 1: give them with --dlbricks-dim)"]
    )
    run(
        pytester, "--dlbricks-granularity=2", "models", dims=("--dlbricks-dim=height=8", "--dlbricks-dim=width=8")
    ).assert_outcomes(passed=1)


def _image_models(pytester: pytest.Pytester) -> None:
    """The same 3x3 Conv on ``x[1, 3, height, width]`` under models/ocr/ and models/cls/."""
    import tiny_models

    for folder in ("ocr", "cls"):
        (pytester.path / "models" / folder).mkdir(parents=True)
        tiny_models.image_conv(pytester.path / "models" / folder)


SHOW_DLBRICKS_WARNINGS = ("-W", "always::pytest_dlbricks.wiring.warning_types.DLBricksWarning")


def test_each_model_gets_the_sizes_given_to_its_pattern(pytester: pytest.Pytester) -> None:
    """The ini sizes the OCR models, the command line the classifiers; a flag wins over the ini for the same model."""
    _image_models(pytester)
    pytester.makeini("[pytest]\ndlbricks_dims =\n    ocr/*.onnx: height=8 width=8\n    batch=1\n")
    result = run(
        pytester,
        "--dlbricks-granularity=2",
        "--dlbricks-dim=cls/*.onnx:height=6 width=6",
        "--dlbricks-dim=models/ocr/image_conv.onnx:width=10",
        "--dlbricks-json=r.json",
        "models",
        dims=(),
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    models = {model["path"]: model for model in read_report(pytester.path / "r.json")["models"]}
    assert models["models/ocr/image_conv.onnx"]["point"] == {"batch": 1, "height": 8, "width": 10, "dtype": "fp32"}
    assert models["models/cls/image_conv.onnx"]["point"] == {"batch": 1, "height": 6, "width": 6, "dtype": "fp32"}
    assert all(model["complete"] and model["guessed_dims"] == {} for model in models.values())
    result.assert_outcomes(passed=2)  # one brick each: their shapes differ
    settings = read_report(pytester.path / "r.json")["settings"]
    assert settings["model_dims"] == [
        ["ocr/*.onnx", {"height": 8, "width": 8}],
        ["cls/*.onnx", {"height": 6, "width": 6}],
        ["models/ocr/image_conv.onnx", {"width": 10}],
    ]


def test_a_models_own_sizes_make_its_plan_and_bricks_anew(pytester: pytest.Pytester) -> None:
    """Plans kept in the store are keyed by the sizes the model was given, not only those of every model."""
    _image_models(pytester)
    signatures = []
    for height in (8, 10):
        result = run(
            pytester,
            "--dlbricks-granularity=2",
            f"--dlbricks-dim=*.onnx:height={height} width=8",
            "--dlbricks-json=r.json",
            "models/ocr",
            dims=(),
        )
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        (model,) = read_report(pytester.path / "r.json")["models"]
        assert model["point"]["height"] == height
        signatures.append({brick["signature"] for brick in read_report(pytester.path / "r.json")["bricks"]})
    assert signatures[0] and signatures[1] and not signatures[0] & signatures[1]


def test_dimensions_given_that_no_model_has_are_warned_of(pytester: pytest.Pytester) -> None:
    _image_models(pytester)
    result = run(
        pytester,
        "--dlbricks-granularity=2",
        "--collect-only",
        "--dlbricks-dim=height=8",
        "--dlbricks-dim=width=8",
        "--dlbricks-dim=hieght=8",
        "--dlbricks-dim=nothing/*.onnx:height=3",
        "--dlbricks-dim=ocr/*.onnx:x[7]=3",
        *SHOW_DLBRICKS_WARNINGS,
        "models",
        dims=(),
    )
    result.stdout.fnmatch_lines_random(
        [
            "*DLBricksWarning: dlbricks: dimension 'hieght' was given, but no collected model has it",
            "*DLBricksWarning: dlbricks: 'nothing/[*].onnx' of --dlbricks-dim matches no collected model",
            "*DLBricksWarning: dlbricks: dimension 'x[[]7]' was given to 'ocr/[*].onnx', but none of its models has it",
        ]
    )
    assert "'height' was given" not in result.stdout.str()


def test_dimensions_left_at_1_show_in_the_table_and_the_report(pytester: pytest.Pytester) -> None:
    import tiny_models

    (pytester.path / "models").mkdir()
    tiny_models.symbolic_batch(pytester.path / "models")
    result = run(
        pytester, "--dlbricks-granularity=2", "--dlbricks-json=r.json", *SHOW_DLBRICKS_WARNINGS, "models", dims=()
    )
    result.stdout.fnmatch_lines(["Model * Complete * Dims left at 1", "models/* yes * batch"])
    (model,) = read_report(pytester.path / "r.json")["models"]
    assert model["guessed_dims"] == {"batch": 1}


def detected(concurrent: bool) -> ExecutorDetection:
    return ExecutorDetection(
        concurrent=concurrent,
        threads=2 if concurrent else 1,
        sequential_s=4e-3,
        parallel_s=2.1e-3 if concurrent else 4.2e-3,
        ratio=0.52 if concurrent else 1.05,
        rounds=7,
        graph="2 independent chains of 6 MatMuls 128x128 float32",
        # Every layer uses the intra-op pool, and takes three times as long under the parallel executor.
        pool=PoolSlowdown(3.0, 0.0, [(1e-3, 2e-3), (1.2e-3, 4e-3), (0.8e-3, 3e-3)], 3, "a chain of 18 MatMuls"),
        nodes_at_once=6 if concurrent else 0,
    )


@pytest.mark.parametrize("concurrent", [False, True])
def test_the_parallel_estimate_follows_what_the_parallel_executor_was_found_to_do(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, concurrent: bool
) -> None:
    monkeypatch.setattr(engine, "detect_executor", lambda settings, pool=True: detected(concurrent))
    # One node at a time, each of the diamond's five layers costs the parallel executor 0.2 us more.
    layer_s = 0.0 if concurrent else 2e-7
    monkeypatch.setattr(engine, "measure_parallel_costs", lambda settings, sequential: ParallelCosts(7e-6, layer_s))
    models = pytester.path / "models"
    models.mkdir()
    tiny_models.diamond(models)
    executor = "--dlbricks-executor=auto" if concurrent else "--dlbricks-executor=parallel"
    result = run_dlbricks(pytester, "--dlbricks-granularity=1", "--dlbricks-json=r.json", executor, "models", "-v")
    report = json.loads((pytester.path / "r.json").read_text())
    (model,) = report["models"]
    executor, call = report["executor"], report["summary"]["call_overhead_s"]
    assert executor["detection"] == json.loads(json.dumps(detected(concurrent).as_json()))
    assert executor["parallel_call_s"] == call["parallel_fixed_s"] and executor["call_s"] == call["fixed_s"]
    # The model's own call counts at the speed its bricks were timed at.
    references = brick_references(report["bricks"])
    own = model_costs(calls_of(model["composition"]), overhead_of(report["summary"]), references)
    assert own.parallel_fixed_s is not None
    if concurrent:
        assert executor["model"] == "list schedule" and executor["threads"] == 2
        # Two threads run the diamond's branches at once; the schedule waits for the longer one.
        # The critical path takes the cheaper of the two calls.
        assert model["parallel_s"] - own.parallel_fixed_s == pytest.approx(
            3.0 * (model["critical_path_s"] - min(own.fixed_s, own.parallel_fixed_s))
        )
        result.stdout.fnmatch_lines(
            [
                "Parallel, as detected in this run: *ran independent nodes at once here (*, under 0.8; in"
                " onnxruntime's profile 6 nodes started while another ran)*list schedule*2 threads*"
            ]
        )
    else:
        assert executor["model"] == "one node at a time" and executor["threads"] == 1
        assert executor["parallel_layer_s"] == call["parallel_layer_s"] == 2e-7
        assert own.parallel_layer_s is not None
        assert model["parallel_s"] == pytest.approx(
            3.0 * (model["sequential_s"] - own.fixed_s) + 5 * own.parallel_layer_s + own.parallel_fixed_s
        )
        result.stdout.fnmatch_lines(
            [
                "Parallel, as detected in this run: *one node at a time here (*, 7 rounds: medians *; median of the"
                " rounds' parallel / sequential 1.05, not under 0.8; in onnxruntime's profile no node started"
                " while another ran)*call cost (* instead of *) and 0.2 us more a layer*"
            ]
        )
    assert (executor["pool_factor"], executor["pool_layer_s"]) == (3.0, 0.0)
    result.stdout.fnmatch_lines(
        [
            "Parallel*: *bricks whose layers take 0.0 us or more each*at 3.00x their time*(a chain of 18 MatMuls:"
            " the mean parallel time, 3.00 ms (2.00 ms to 4.00 ms by session), over the median sequential one,"
            " 1.00 ms)*"
        ]
    )
    result.stdout.fnmatch_lines(["*Critical path: the lower bound for an executor with unlimited parallelism"])
    assert executor["explanation"] in result.stdout.lines, "the report carries what -v prints"


def test_without_the_parallel_executors_behaviour_there_is_no_parallel_estimate_and_the_report_says_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(settings: object, pool: bool = True) -> ExecutorDetection:
        raise RuntimeError("no parallel executor here")

    monkeypatch.setattr(engine, "detect_executor", refuse)
    models = pytester.path / "models"
    models.mkdir()
    tiny_models.diamond(models)
    result = run_dlbricks(pytester, "--dlbricks-granularity=1", "--dlbricks-json=r.json", "models")
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["models"][0]["parallel_s"] is None and report["models"][0]["sequential_s"] is not None
    line = "Parallel: not estimated, the parallel executor could not be tried: no parallel executor here"
    assert report["executor"] == {"model": None, "error": "no parallel executor here", "explanation": line}
    result.stdout.fnmatch_lines([line])


def _refuse(*args: object, **kwargs: object) -> object:
    raise AssertionError("not measured when no parallel estimate is shown")


@pytest.mark.parametrize("setting", ["", "--dlbricks-executor=auto"])
def test_where_the_parallel_executor_runs_one_node_at_a_time_nothing_more_is_measured_and_nothing_shown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    """By default the branchy graph alone is tried; running one node at a time, as onnxruntime does on CPU,
    the parallel executor's estimate would be the sequential one at another call cost: its pool slowdown and
    call cost are not measured, there is no Parallel column and no line about it, and the report says why."""
    tried = []

    def detect(settings: object, pool: bool = True) -> ExecutorDetection:
        tried.append(pool)
        return detected(False)

    monkeypatch.setattr(engine, "detect_executor", detect)
    monkeypatch.setattr(engine, "with_pool_slowdown", _refuse)
    monkeypatch.setattr(engine, "measure_parallel_costs", _refuse)
    models = pytester.path / "models"
    models.mkdir()
    tiny_models.diamond(models)
    result = run_dlbricks(
        pytester, "--dlbricks-granularity=1", "--dlbricks-json=r.json", *filter(None, [setting]), "models"
    )
    result.assert_outcomes(passed=5)
    assert tried == [False], "the branchy graph, without the pool's cost"
    report = json.loads((pytester.path / "r.json").read_text())
    (model,) = report["models"]
    assert model["parallel_s"] is None and model["critical_path_s"] is not None, "documented fields stay"
    assert report["executor"]["model"] is None and "one node at a time" in report["executor"]["reason"]
    assert report["executor"]["detection"]["ratio"] == 1.05, "what was detected, for whoever asks"
    assert report["summary"]["call_overhead_s"]["parallel_fixed_s"] is None
    assert "Parallel" not in result.stdout.str()
    result.stdout.fnmatch_lines(["Model * Sequential * Within  Critical path *"])


def test_with_the_sequential_executor_alone_the_parallel_one_is_never_tried(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "detect_executor", _refuse)
    models = pytester.path / "models"
    models.mkdir()
    tiny_models.diamond(models)
    result = run_dlbricks(
        pytester, "--dlbricks-granularity=1", "--dlbricks-json=r.json", "--dlbricks-executor=sequential", "models", "-v"
    )
    result.assert_outcomes(passed=5)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["executor"]["model"] is None and "no parallel estimate was asked for" in report["executor"]["reason"]
    assert report["models"][0]["parallel_s"] is None
    result.stdout.fnmatch_lines(["Parallel: not estimated: no parallel estimate was asked for*"])
    result.stdout.fnmatch_lines(["Model * Sequential * Within  Critical path *"])


def test_at_default_verbosity_the_parallel_estimate_takes_one_short_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "detect_executor", lambda settings, pool=True: detected(False))
    monkeypatch.setattr(
        engine, "measure_parallel_costs", lambda settings, sequential: ParallelCosts(sequential.fixed_s, 0.0)
    )
    models = pytester.path / "models"
    models.mkdir()
    tiny_models.diamond(models)
    result = run_dlbricks(pytester, "--dlbricks-granularity=1", "--dlbricks-executor=parallel", "models")
    result.stdout.fnmatch_lines(["Model * Sequential * Within  Parallel  Critical path *"])
    (line,) = [line for line in result.stdout.lines if line.startswith("Parallel")]
    assert len(line) < 200 and "-v" in line and "rounds" not in line
    assert "as the sequential one's" in line, "equal costs read as such, not as one instead of itself"
