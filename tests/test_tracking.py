"""Runs tracked over time, end to end through ``pytester``: the brick store, histories, comparisons, the gate."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
import tiny_models

from conftest import QUICK_TIMING, SAMPLE_DIMS, SAMPLE_MODELS, run_dlbricks
from pytest_dlbricks.core.identity import CUT_METHOD
from pytest_dlbricks.core.noise import margin_of_error
from pytest_dlbricks.reporting.comparing import INCONCLUSIVE_EXIT
from pytest_dlbricks.timing import speed_trace
from pytest_dlbricks.timing.overhead import ParallelCosts
from pytest_dlbricks.wiring import engine, run_state
from pytest_dlbricks.wiring.cli import main

STORE = ".benchmarks/dlbricks"
#: Enough rounds for the quartiles the gate relies on, at a few milliseconds per brick; one thread, so that a
#: busy machine does not stall onnxruntime's thread pool for whole rounds.
GATE_TIMING = ("--benchmark-min-rounds=15", "--benchmark-max-time=0.000001")


def run(pytester: pytest.Pytester, *args: str, **options: Any) -> pytest.RunResult:
    """A run as :func:`run_dlbricks` makes it; its quick timing reaches no precision, so none is asked for
    (a stored brick is reused only by a run asking for no more precision than it reached), unless given."""
    if not any(arg.startswith("--dlbricks-precision") for arg in args):
        args = ("--dlbricks-precision=off", *args)
    return run_dlbricks(pytester, *args, **options)


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def brick_records(pytester: pytest.Pytester) -> list[Path]:
    return sorted((pytester.path / STORE).glob("*/bricks/*.json"))


def saved_runs(pytester: pytest.Pytester) -> list[Path]:
    return sorted((pytester.path / ".benchmarks").glob("*-*/0*.json"))


def rewrite_records(pytester: pytest.Pytester, change: Callable[[dict[str, Any]], None]) -> None:
    for path in brick_records(pytester):
        record = read(path)
        change(record)
        path.write_text(json.dumps(record))


def stop_at_third_item(pytester: pytest.Pytester, statement: str) -> None:
    """A conftest that runs ``statement`` (Ctrl-C, a crash) as the third item starts, after two bricks were timed."""
    pytester.makeconftest(
        f"""
        import os

        calls = []

        def pytest_runtest_setup(item):
            calls.append(item)
            if len(calls) == 3:
                {statement}
        """
    )


# -- the store -----------------------------------------------------------------------------------


def test_the_machine_peak_is_measured_once_per_shelf_and_reused(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """The peak takes a quarter of a second of every run that times a brick: a later run that times another
    takes it from the store, saying when it was measured; --dlbricks-remeasure measures it again."""
    args = ("--dlbricks-granularity=2", "--dlbricks-json=r.json", "--benchmark-max-time=0.01")
    run(pytester, *args, "models/mlp.onnx").assert_outcomes(passed=3)
    first = read(pytester.path / "r.json")["peak"]
    assert first["flops_per_s"] > 0 and "measured_at" not in first
    (stored,) = pytester.path.glob(f"{STORE}/*/peak.json")
    assert json.loads(stored.read_text())["peak"]["flops_per_s"] == first["flops_per_s"]

    run(pytester, *args, "models/mlp.onnx", "models/tiny_resnet.onnx").assert_outcomes(passed=6, deselected=3)
    again = read(pytester.path / "r.json")["peak"]
    assert again["flops_per_s"] == first["flops_per_s"] and again["bytes_per_s"] == first["bytes_per_s"]
    assert again["measured_at"] == json.loads(stored.read_text())["measured_at"]

    run(pytester, *args, "--dlbricks-remeasure", "models/mlp.onnx").assert_outcomes(passed=3)
    remeasured = read(pytester.path / "r.json")["peak"]
    assert "measured_at" not in remeasured
    assert json.loads(stored.read_text())["peak"]["flops_per_s"] == remeasured["flops_per_s"]


def test_a_rerun_says_how_far_the_machine_moved_while_its_reused_bricks_were_timed(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its estimates are those the measuring run made: so is the speed part of its verdict."""
    monkeypatch.setattr(speed_trace, "SAMPLE_EVERY_S", 0.0)  # every item samples: the trace is long enough
    args = (
        "--dlbricks-granularity=2",
        "--dlbricks-json=r.json",
        "--benchmark-max-time=0.01",
        "models/tiny_resnet.onnx",
    )
    run(pytester, *args).assert_outcomes(passed=6)
    measured = read(pytester.path / "r.json")
    # The bricks timed again at the run's end saw the machine's speed move too: the larger of the two is kept.
    speed = max(measured["verdict"]["sources"]["speed"], measured["verdict"]["sources"].get("drift", 0.0))
    assert measured["summary"]["reused_from"] is None
    (kept,) = json.loads(next(pytester.path.glob(f"{STORE}/*/runs.json")).read_text())["runs"]
    assert kept["speed"] == speed and kept["first"] <= kept["last"]

    again = run(pytester, *args)
    again.assert_outcomes(deselected=6)
    reused = read(pytester.path / "r.json")
    assert reused["summary"]["reused_from"] == {
        "bricks": 6,
        "known": 6,
        "speed": speed,
        "load": kept["load"],
        "memory": None,  # no brick was timed with its weights out of the caches
    }
    assert reused["verdict"]["sources"]["speed"] == speed
    assert "speed" not in reused["verdict"]["unmeasured"]
    assert "not measured: machine speed" not in again.stdout.str()


def test_a_rerun_reuses_every_brick_from_the_store(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    args = ("--dlbricks-granularity=2", "--dlbricks-json=r.json", "models/mlp.onnx", "models/tiny_rnn.onnx")
    first = run(pytester, *args)
    measured = read(pytester.path / "r.json")
    distinct = measured["summary"]["distinct_bricks"]
    first.assert_outcomes(passed=distinct)
    first.stdout.fnmatch_lines(
        [
            f"* {distinct} distinct (*), {distinct} measured",
            f"dlbricks: {distinct} bricks measured in this run and saved to store {STORE}",
        ]
    )
    assert len(brick_records(pytester)) == distinct

    again = run(pytester, *args)
    again.assert_outcomes(deselected=distinct)
    assert again.ret == pytest.ExitCode.OK, "every brick reused: no item ran, and the run succeeded"
    again.stdout.fnmatch_lines(
        [
            "models/mlp.onnx * yes",
            f"* {distinct} distinct (*), 0 measured, {distinct} reused from the brick store",
            # One time, or "from ... to ..." when the first run's bricks straddled a minute.
            f"dlbricks: {distinct} brick times reused from store {STORE}, measured *????-??-?? ??:?? UTC"
            " (their items deselected; --dlbricks-remeasure times them again);"
            " 0 bricks measured in this run and saved",
            f"=* {distinct} deselected*",
        ]
    )
    reused = read(pytester.path / "r.json")
    assert reused["summary"]["reused_bricks"] == distinct
    assert [m["sequential_s"] for m in reused["models"]] == [m["sequential_s"] for m in measured["models"]]
    assert [m["reused_bricks"] for m in reused["models"]] == [m["bricks"] for m in reused["models"]]
    assert all(brick["reused"] and brick["measured_at"] for brick in reused["bricks"])
    assert not any(brick["reused"] for brick in measured["bricks"])
    # Each brick's call cost follows the machine's speed around its timing, the same again on reuse.
    assert all(brick["reference_s"] > 0 for brick in measured["bricks"])
    assert [b["reference_s"] for b in reused["bricks"]] == [b["reference_s"] for b in measured["bricks"]]
    figures = ("sequential_s", "critical_path_s", "complete")
    assert [[m[f] for f in figures] for m in reused["models"]] == [[m[f] for f in figures] for m in measured["models"]]
    assert [b["time_s"] for b in reused["bricks"]] == [b["time_s"] for b in measured["bricks"]]


def test_reused_bricks_are_deselected_after_the_user_s_selection(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """Reuse deselects what ``-k`` left; a run that selects nothing keeps pytest's own exit status, and one whose
    items all fail or pass decides the outcome as usual."""
    args = ("--dlbricks-granularity=2", "--dlbricks-json=r.json", "models/mlp.onnx", "models/tiny_rnn.onnx")
    run(pytester, *args)
    distinct = read(pytester.path / "r.json")["summary"]["distinct_bricks"]

    mlp = run(pytester, "-k", "mlp", *args)
    mlp_bricks = read(pytester.path / "r.json")["summary"]["reused_bricks"]
    assert 0 < mlp_bricks < distinct
    mlp.assert_outcomes(deselected=distinct)
    assert mlp.ret == pytest.ExitCode.OK
    mlp.stdout.fnmatch_lines([f"dlbricks: {mlp_bricks} brick times reused from store {STORE}, *"])

    nothing = run(pytester, "-k", "no_such_brick", *args)
    nothing.assert_outcomes(deselected=distinct)
    assert nothing.ret == pytest.ExitCode.NO_TESTS_COLLECTED, "nothing selected, nothing reused: pytest's outcome"
    assert "reused from store" not in nothing.stdout.str()

    (pytester.path / "models" / "broken.onnx").write_bytes(b"not a model")
    broken = run(pytester, *args, "models/broken.onnx")
    broken.assert_outcomes(errors=1, deselected=distinct)
    assert broken.ret == pytest.ExitCode.TESTS_FAILED


def test_models_cut_before_are_not_loaded_again(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("--dlbricks-granularity=2", "--dlbricks-json=r.json", "models/mlp.onnx", "models/tiny_rnn.onnx")
    first = run(pytester, "--collect-only", "-q", *args)
    assert len(list((pytester.path / STORE).glob("*/plans/*.json"))) == 2
    run(pytester, *args)
    measured = read(pytester.path / "r.json")

    def never(*_: object) -> None:
        raise AssertionError("the model was loaded again")

    monkeypatch.setattr("pytest_dlbricks.wiring.engine.load_model", never)
    again = run(pytester, "--collect-only", "-q", *args)
    assert again.stdout.lines[:-2] == first.stdout.lines[:-2], "the same items, in the same order"
    run(pytester, *args).assert_outcomes(deselected=measured["summary"]["distinct_bricks"])
    reused = read(pytester.path / "r.json")
    assert [m["sequential_s"] for m in reused["models"]] == [m["sequential_s"] for m in measured["models"]]


def test_a_validation_run_does_not_change_later_estimates(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run measures the call costs, the parallel executor's too where its estimate is asked for (here at
    twice the sequential one: a loaded machine may give none), and keeps them beside the brick times."""
    monkeypatch.setattr(
        engine, "measure_parallel_costs", lambda settings, sequential: ParallelCosts(2 * sequential.fixed_s, 0.0)
    )
    models = pytester.path / "models"
    models.mkdir()
    tiny_models.chain(models, "chain.onnx", blocks=2)
    tiny_models.diamond(models)
    args = ("--dlbricks-granularity=1", "--dlbricks-executor=parallel", "--dlbricks-json=r.json", "models")

    def estimates() -> dict[str, tuple[float, float, float]]:
        report = read(pytester.path / "r.json")
        return {m["path"]: (m["sequential_s"], m["critical_path_s"], m["parallel_s"]) for m in report["models"]}

    def call_costs() -> dict[str, float]:
        return dict(read(pytester.path / "r.json")["summary"]["call_overhead_s"])

    run(pytester, *args)
    before, costs = estimates(), call_costs()
    assert costs["parallel_fixed_s"] is not None
    run(pytester, "--dlbricks-validate", "--benchmark-min-rounds=1", *args)
    assert estimates() == before, "the validation run composes as plain runs do"
    assert call_costs() == costs
    run(pytester, *args)
    assert estimates() == before and call_costs() == costs
    sequential, critical, parallel = before["models/chain.onnx"]
    assert critical == min(sequential, parallel), "no branches: no shorter path, at the cheaper executor's call"


def test_the_parallel_executor_is_detected_once_per_machine_and_settings(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The detection takes most of a second: kept in the store, made again on --dlbricks-remeasure, and at
    every run without a store."""
    detections = []
    detect = engine.detect_executor

    def counted(settings: Any, pool: bool = True) -> Any:
        detections.append(settings)
        return detect(settings, pool=pool)

    monkeypatch.setattr(engine, "detect_executor", counted)
    models = pytester.path / "models"
    models.mkdir()
    tiny_models.diamond(models)
    args = ("--dlbricks-granularity=1", "--dlbricks-json=r.json", "models", "-v")

    def executor() -> dict[str, Any]:
        return dict(read(pytester.path / "r.json")["executor"])

    run(pytester, *args).stdout.fnmatch_lines(["Parallel, as detected in this run: *"])
    first = executor()
    assert len(detections) == 1 and first["reused"] is False
    (record,) = (pytester.path / STORE).glob("*/executor.json")
    assert read(record)["measured_at"] == first["measured_at"]
    run(pytester, *args).stdout.fnmatch_lines(
        ["Parallel, as detected ????-??-?? ??:?? UTC and kept in the brick store (--dlbricks-remeasure detects it*"]
    )
    again = executor()
    assert len(detections) == 1 and again["reused"] is True
    assert (again["measured_at"], again["detection"]) == (first["measured_at"], first["detection"])
    run(pytester, "--dlbricks-remeasure", *args)
    assert len(detections) == 2 and executor()["reused"] is False
    assert read(record)["detection"]["ratio"] == executor()["detection"]["ratio"], "kept anew"
    for _ in range(2):
        run(pytester, "--dlbricks-store=none", *args)
        assert executor()["reused"] is False
    assert len(detections) == 4


def test_collecting_only_leaves_no_model_in_the_stores_report(
    pytester: pytest.Pytester, sample_models: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Its plans spare the next run a cut, but no model record promises an estimate that no run is making."""
    args = ("--dlbricks-granularity=2", "models/mlp.onnx")
    run(pytester, "--collect-only", *args)
    assert list((pytester.path / STORE).glob("*/plans/*.json"))
    assert not (pytester.path / STORE / "models").exists()
    capsys.readouterr()
    assert main(["report", str(pytester.path / STORE)]) == 0
    assert "mlp.onnx" not in capsys.readouterr().out
    run(pytester, *args).assert_outcomes(passed=3)
    capsys.readouterr()
    assert main(["report", str(pytester.path / STORE)]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("models/mlp.onnx ")]
    assert row.endswith((" us", " ms")), "an estimate (microseconds, or more on a loaded machine)"


def test_remeasure_and_the_age_limit(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    args = ("--dlbricks-granularity=2", "models/mlp.onnx")
    run(pytester, *args).assert_outcomes(passed=3)
    result = run(pytester, "--dlbricks-remeasure", *args)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([f"dlbricks: 3 bricks measured in this run and saved to store {STORE}"])

    old = (datetime.now(UTC) - timedelta(days=40)).isoformat(timespec="seconds")
    first = brick_records(pytester)[0]
    first.write_text(json.dumps({**read(first), "measured_at": old}))
    run(pytester, *args).assert_outcomes(passed=1, deselected=2)  # the default age limit is 30 days
    first.write_text(json.dumps({**read(first), "measured_at": old}))
    run(pytester, "--dlbricks-max-age=none", *args).assert_outcomes(deselected=3)
    run(pytester, "--dlbricks-max-age=1h", *args).assert_outcomes(passed=1, deselected=2)


#: A granularity that makes the sample MLP one brick: the whole model's precision is its brick's (see test_budget).
WHOLE_MLP = "--dlbricks-granularity=6"


def test_times_of_a_looser_precision_are_not_reused(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    args = (WHOLE_MLP, "--benchmark-max-time=0.2", "models/mlp.onnx")
    run(pytester, "--dlbricks-precision=5%", *args).assert_outcomes(passed=1)
    reached = [read(path)["precision"] for path in brick_records(pytester)]
    assert all(
        margin == pytest.approx(margin_of_error(read(path)["stats"]))
        for margin, path in zip(reached, brick_records(pytester))
    )
    # Reused: reached 10%, or ran out of the same time limit short of 5% (it would stop there again).
    timed_out = [read(path)["timed_out_s"] is not None for path in brick_records(pytester)]
    precise = sum(margin <= 0.1 or out for margin, out in zip(reached, timed_out))
    run(pytester, "--dlbricks-precision=10%", *args).assert_outcomes(passed=1 - precise, deselected=precise)
    # A longer limit than any time-out so far: reached or not, 0.1% asks it to be timed again.
    run(
        pytester, "--dlbricks-precision=0.1%", WHOLE_MLP, "--benchmark-max-time=0.4", "models/mlp.onnx"
    ).assert_outcomes(passed=1)
    run(pytester, "--dlbricks-precision=off", *args).assert_outcomes(deselected=1)


def test_a_time_that_ran_out_of_its_time_limit_is_reused_until_the_limit_grows(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """Timed again within the same limit, a brick that fell short of its precision would stop there again."""
    args = (WHOLE_MLP, "--dlbricks-precision=0.01%", "models/mlp.onnx")
    run(pytester, "--benchmark-max-time=0.05", *args).assert_outcomes(passed=1)
    (record,) = [read(path) for path in brick_records(pytester)]
    assert record["precision"] > 0.0001 and record["timed_out_s"] == pytest.approx(0.05), "one brick: all the time"
    run(pytester, "--benchmark-max-time=0.05", *args).assert_outcomes(deselected=1)
    run(pytester, "--benchmark-max-time=0.5", *args).assert_outcomes(passed=1)


def test_the_store_keeps_the_precision_reached_not_the_one_asked(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """A brick timed to a margin above 2% must not be reused by a run asking for 2%, nor a record of an older
    version that kept the precision its run asked for."""
    args = (WHOLE_MLP, "models/mlp.onnx")
    run(pytester, "--dlbricks-precision=off", *args).assert_outcomes(passed=1)
    records = [read(path) for path in brick_records(pytester)]
    assert all(record["precision"] == pytest.approx(margin_of_error(record["stats"])) for record in records)

    def imprecise_but_claiming_two_percent(record: dict[str, Any]) -> None:
        # Two quick rounds of a microsecond model may agree within 2% by chance: widen their spread.
        record["stats"]["stddev"] = record["stats"]["mean"] / 10
        record["precision"] = 0.02

    rewrite_records(pytester, imprecise_but_claiming_two_percent)
    run(pytester, "--dlbricks-precision=2%", *args).assert_outcomes(passed=1)
    records = [read(path) for path in brick_records(pytester)]
    assert all(record["precision"] == pytest.approx(margin_of_error(record["stats"])) for record in records)
    # Reused when precise enough, or when it ran out of the same time limit the next run would give it.
    reusable = sum(record["precision"] <= 0.02 or record["timed_out_s"] is not None for record in records)
    run(pytester, "--dlbricks-precision=2%", *args).assert_outcomes(passed=1 - reusable, deselected=reusable)


def test_a_stored_brick_is_asked_on_reuse_for_the_precision_it_was_asked_when_timed(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its part in the models, which loosens its precision, is sized from its fastest probe call when it is
    timed, its models' other bricks known as far as the run has come; on reuse, from the same time and the
    same bricks known (or all of them, if that asks less). Asked otherwise, a brick that had just met its
    precision fell short of it, and re-runs of the Quick start timed some bricks again: sized from its mean
    (a Gemm of 13.8 us whose fastest call took 11.1 us) every time; from its fastest round (a round averages
    several calls: a Loop+Gemm probed at 24.9 us read 27.5 us) or with every brick known (a model's first
    brick asked 2.09% when timed, 2.00% on reuse) one re-run in three or four."""
    args = ("--dlbricks-granularity=2", "--dlbricks-precision=2%", "models")
    asked: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    sizing = engine.DLBricksRun.brick_precision

    def recorded(
        self: engine.DLBricksRun, signature: str, seconds: float, target: float, *, stored: bool = True
    ) -> float:
        precision = sizing(self, signature, seconds, target, stored=stored)
        asked.setdefault((signature, stored), []).append((seconds, precision))
        return precision

    monkeypatch.setattr(engine.DLBricksRun, "brick_precision", recorded)
    run(pytester, *args)
    when_timed = {signature: calls[-1] for (signature, _), calls in asked.items()}
    records = {read(path)["signature"]: read(path) for path in brick_records(pytester)}
    assert when_timed.keys() == records.keys()
    assert {signature: record["probe_s"] for signature, record in records.items()} == {
        signature: seconds for signature, (seconds, _) in when_timed.items()
    }
    asked.clear()
    run(pytester, *args).assert_outcomes(deselected=len(records))
    assert {signature: calls[-1] for (signature, stored), calls in asked.items() if not stored} == when_timed


def test_a_brick_timed_beside_stored_ones_is_asked_on_reuse_as_with_every_brick_known(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timed again while the store knew every other brick of its model (its record lost), a brick was asked
    with all of them known: the next run asks it so, not as far as that run has come."""
    args = ("--dlbricks-granularity=2", "--dlbricks-precision=2%", "models/tiny_inception.onnx")
    run(pytester, *args)
    sizing = engine.DLBricksRun.brick_precision
    order: list[str] = []

    def ordered(self: engine.DLBricksRun, brick: str, seconds: float, target: float, *, stored: bool = True) -> float:
        order.append(brick)
        return sizing(self, brick, seconds, target, stored=stored)

    # The brick a run comes to first (items keep their collection order): nothing else of its model is known then.
    monkeypatch.setattr(engine.DLBricksRun, "brick_precision", ordered)
    run(pytester, *args).assert_outcomes(deselected=len(brick_records(pytester)))
    signature = order[0]
    (first,) = [path for path in brick_records(pytester) if read(path)["signature"] == signature]
    first.unlink()
    # Its new time changes what the others are asked; one that met its precision by chance in two rounds
    # (so not marked as timed out) could fall short of it and be timed again: the others stay reusable.
    for path in brick_records(pytester):
        record = read(path)
        record["stats"]["stddev"] = 0.0
        path.write_text(json.dumps(record), encoding="utf-8")
    asked: dict[bool, list[float]] = {True: [], False: []}

    def recorded(self: engine.DLBricksRun, brick: str, seconds: float, target: float, *, stored: bool = True) -> float:
        precision = sizing(self, brick, seconds, target, stored=stored)
        if brick == signature:
            asked[stored].append(precision)
        return precision

    monkeypatch.setattr(engine.DLBricksRun, "brick_precision", recorded)
    run(pytester, *args).assert_outcomes(passed=1, deselected=len(brick_records(pytester)) - 1)
    (when_timed,) = asked[True]
    asked[True].clear()
    run(pytester, *args).assert_outcomes(deselected=len(brick_records(pytester)))
    # The models' tallies are sums made in another order then: equal but for their last bits.
    assert asked[True] == [pytest.approx(when_timed, rel=1e-12)]
    assert asked[False] and asked[False][0] != pytest.approx(when_timed, rel=1e-12), (
        "as far as the run had come, it would be asked otherwise"
    )


def test_a_stored_brick_of_an_older_record_is_asked_for_the_precision_of_its_fastest_round(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("--dlbricks-granularity=2", "--dlbricks-precision=5%", "models/mlp.onnx")
    run(pytester, *args)
    fastest = {}
    for path in brick_records(pytester):
        record = read(path)
        del record["probe_s"]
        path.write_text(json.dumps(record), encoding="utf-8")
        fastest[record["signature"]] = record["stats"]["min"]
    sized_from: dict[str, float] = {}

    def any_precision_will_do(
        self: engine.DLBricksRun, signature: str, seconds: float, target: float, *, stored: bool = True
    ) -> float:
        sized_from[signature] = seconds
        return 1.0

    monkeypatch.setattr(engine.DLBricksRun, "brick_precision", any_precision_will_do)
    run(pytester, *args).assert_outcomes(deselected=len(fastest))
    assert sized_from == fastest


def test_a_changed_model_times_only_its_new_bricks(pytester: pytest.Pytester) -> None:
    # Cut as written: which layout changes onnxruntime adds around a convolution depends on the CPU's vector width.
    args = ("--dlbricks-granularity=1", "--dlbricks-cut=original", "models")
    models = pytester.path / "models"
    models.mkdir()
    tiny_models.chain(models, "a.onnx", blocks=2)
    tiny_models.chain(models, "b.onnx", blocks=2, channels=4)
    run(pytester, *args).assert_outcomes(passed=4)
    tiny_models.chain(models, "b.onnx", blocks=2, channels=4, kernel=5)
    result = run(pytester, *args)
    result.assert_outcomes(passed=1, deselected=3)  # b's Conv changed; its Relu and a's bricks did not
    result.stdout.fnmatch_lines(
        [
            "* 4 distinct (50%), 1 measured, 3 reused from the brick store",
            f"dlbricks: 3 brick times reused from store {STORE}, * (their items deselected; *); 1 brick measured*",
        ]
    )


def test_an_interrupted_run_keeps_every_brick_measured(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    stop_at_third_item(pytester, "raise KeyboardInterrupt")
    result = pytester.runpytest(
        *SAMPLE_DIMS, *QUICK_TIMING, "--dlbricks-granularity=1", "models/transformer_block.onnx", no_reraise_ctrlc=True
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert len(brick_records(pytester)) == 2
    (pytester.path / "conftest.py").unlink()
    again = run(pytester, "--dlbricks-granularity=1", "--dlbricks-json=r.json", "models/transformer_block.onnx")
    distinct = read(pytester.path / "r.json")["summary"]["distinct_bricks"]
    again.assert_outcomes(passed=distinct - 2, deselected=2)


def test_a_crashed_run_keeps_every_brick_measured(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    stop_at_third_item(pytester, "os._exit(3)")
    result = pytester.runpytest_subprocess(*SAMPLE_DIMS, *QUICK_TIMING, "--dlbricks-granularity=1", "models/mlp.onnx")
    assert result.ret == 3
    assert len(brick_records(pytester)) == 2
    assert not list((pytester.path / STORE).rglob("*.tmp"))


def test_the_store_can_move_or_be_turned_off(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    run(pytester, "--dlbricks-granularity=2", "--dlbricks-store=none", "models/mlp.onnx").assert_outcomes(passed=3)
    assert not (pytester.path / STORE).exists()
    (pytester.path / "conf").mkdir()
    (pytester.path / "conf" / "pytest.ini").write_text("[pytest]\ndlbricks_store = ../cache/bricks\n")
    args = ("-c", "conf/pytest.ini", "--rootdir", ".", "--dlbricks-granularity=2", "models/mlp.onnx")
    run(pytester, *args).assert_outcomes(passed=3)
    assert len(list((pytester.path / "cache" / "bricks").glob("*/bricks/*.json"))) == 3
    run(pytester, *args).assert_outcomes(deselected=3)
    run(pytester, "--dlbricks-store=elsewhere", *args).assert_outcomes(passed=3)
    assert (pytester.path / "elsewhere").is_dir()


def test_a_store_that_cannot_be_written_does_not_stop_the_run(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    (pytester.path / "blocked").write_text("a file where the store's folder should be")
    result = run(pytester, "--dlbricks-granularity=2", "--dlbricks-store=blocked", "models/mlp.onnx")
    result.assert_outcomes(passed=3)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["models/mlp.onnx * yes", "dlbricks: cannot save brick times in blocked: Not a directory"]
    )


def test_benchmark_disable_neither_reuses_nor_saves(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    run(pytester, "--dlbricks-granularity=2", "models/mlp.onnx").assert_outcomes(passed=3)
    records = {path: path.read_text() for path in brick_records(pytester)}
    run(pytester, "--dlbricks-granularity=2", "--benchmark-disable", "models/mlp.onnx").assert_outcomes(passed=3)
    assert {path: path.read_text() for path in brick_records(pytester)} == records


def test_the_report_command_reads_the_store(
    pytester: pytest.Pytester, sample_models: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(pytester, "--dlbricks-granularity=2", "models/mlp.onnx", "models/tiny_rnn.onnx")
    capsys.readouterr()
    assert main(["report", str(pytester.path / STORE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("models/mlp.onnx ") and line.endswith(" us") for line in lines)
    assert any(line.startswith("models/tiny_rnn.onnx ") for line in lines)


# -- histories -----------------------------------------------------------------------------------


def test_saved_runs_carry_the_estimates(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    args = ("--dlbricks-granularity=2", "--dlbricks-json=r.json", "--benchmark-autosave", "models/mlp.onnx")
    run(pytester, *args)
    (saved,) = saved_runs(pytester)
    data = read(saved)
    report = read(pytester.path / "r.json")
    block = data["dlbricks"]
    assert block["version"] == 1
    assert block["model"] == {
        "granularity": 2,
        "dims": {"batch": 1, "seq": 16},
        "cut": "optimized",
        "cut_method": CUT_METHOD,
        "statistic": "median",
    }
    assert report["settings"]["cut_method"] == CUT_METHOD
    assert block["machine"]["cores"] == data["machine_info"]["cpu"]["count"]
    assert block["timing"]["onnxruntime"] == report["settings"]["onnxruntime"]
    assert block["report"]["models"] == report["models"]
    (estimate,) = [b for b in data["benchmarks"] if b["fullname"].startswith("dlbricks::")]
    assert estimate["fullname"] == "dlbricks::models/mlp.onnx"
    assert estimate["group"] == "dlbricks estimates"
    assert estimate["stats"]["median"] == pytest.approx(report["models"][0]["sequential_s"])
    assert estimate["extra_info"]["bricks"] == report["models"][0]["bricks"]

    result = run(pytester, "--benchmark-compare", "--benchmark-autosave", *args)
    result.stdout.fnmatch_lines(
        [
            "*benchmark 'dlbricks estimates': 2 tests*",
            "dlbricks::models/mlp.onnx (0001_*)*",
            "dlbricks::models/mlp.onnx (NOW)*",
        ]
    )
    second = read(saved_runs(pytester)[1])["benchmarks"]
    (again,) = [b for b in second if b["fullname"] == estimate["fullname"]]
    assert again["stats"]["median"] == estimate["stats"]["median"], "the re-run reused every brick: the same estimate"
    bricks = [b for b in data["benchmarks"] if not b["fullname"].startswith("dlbricks::")]
    reused = [b for b in second if not b["fullname"].startswith("dlbricks::")]
    assert [b["fullname"] for b in reused] == [b["fullname"] for b in bricks], "every brick's history goes on"
    assert all(
        b["extra_info"]["reused"] and b["stats"] == {**b["stats"], **old["stats"]} for b, old in zip(reused, bricks)
    )


# -- comparisons and the gate -------------------------------------------------------------------


def net(pytester: pytest.Pytester, kernel: int) -> None:
    """A Conv big enough to dominate timing noise: 16 channels, 32x32 pixels."""
    tiny_models.chain(pytester.path / "models", "net.onnx", blocks=1, channels=16, size=32, kernel=kernel)


def test_a_regression_introduced_into_a_model_fails_the_session(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    copy_models(SAMPLE_MODELS / "mlp.onnx")
    net(pytester, kernel=1)
    args = ("--dlbricks-granularity=2", "--benchmark-autosave", "--dlbricks-json=r.json", "models")
    first = run(pytester, *args, timing=GATE_TIMING)
    distinct = read(pytester.path / "r.json")["summary"]["distinct_bricks"]
    first.assert_outcomes(passed=distinct)
    net(pytester, kernel=9)
    gate = ("--dlbricks-compare", "--dlbricks-compare-fail=10%")
    result = run(pytester, *gate, *args, timing=GATE_TIMING)
    summary = read(pytester.path / "r.json")["summary"]
    assert summary["reused_bricks"] >= 3, "mlp's bricks, at least, come from the store"
    result.assert_outcomes(
        passed=summary["distinct_bricks"] - summary["reused_bricks"], deselected=summary["reused_bricks"]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*- dlbricks: median estimates compared with *0001_*.json -*",
            "Model * Before * Now * Measured * At baseline speed [[]95%[]] * Verdict",
            "models/mlp.onnx * +0.0% * same bricks * unchanged",
            "models/net.onnx * REGRESSION",
            "dlbricks: performance regression:",
            "  models/net.onnx is *% slower than in *0001_*.json: * -> * at that run's machine speed (95% interval"
            " * re-timed in 15 rounds, drift x*; * as measured), more than 10%; bricks that changed: *Conv* (new)*",
        ]
    )
    comparison = read(pytester.path / "r.json")["comparison"]
    assert comparison["failed"] is True
    assert [m["verdict"] for m in comparison["models"]] == ["unchanged", "REGRESSION"]
    # Saved in the history all the same, but no baseline: run again, as CI retries a job, it fails again.
    assert len(saved_runs(pytester)) == 2
    again = run(pytester, *gate, *args, timing=GATE_TIMING)
    again.assert_outcomes(deselected=summary["distinct_bricks"])
    assert again.ret == pytest.ExitCode.TESTS_FAILED
    again.stdout.fnmatch_lines(
        [
            "dlbricks: passed over as baselines: *0002_*.json (failed the gate)",
            "dlbricks: a run that failed the gate or could not tell is no baseline; to accept its changes, compare"
            " once with it by number (--dlbricks-compare=NUM), in a run of every model",
            "*- dlbricks: median estimates compared with *0001_*.json -*",
            "models/net.onnx * REGRESSION",
        ]
    )
    # Accepted as the message says: compared once with the failed run, it passes and is the baseline after.
    accept = ("--dlbricks-compare=2", "--dlbricks-compare-fail=10%")
    assert run(pytester, *accept, *args, timing=GATE_TIMING).ret == pytest.ExitCode.OK
    after = run(pytester, *gate, *args, timing=GATE_TIMING)
    assert after.ret == pytest.ExitCode.OK
    after.stdout.fnmatch_lines(
        ["*- dlbricks: median estimates compared with *0004_*.json -*", "dlbricks: gate passed*"]
    )


def test_a_run_of_some_models_is_no_baseline_for_the_others(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    """A run of mlp alone (-k), saved, passes the gate; net made slower cannot be told by such a run, whose gate says
    so and does not pass, and is still compared with the run that estimated it."""
    copy_models(SAMPLE_MODELS / "mlp.onnx")
    net(pytester, kernel=1)
    args = ("--dlbricks-granularity=2", "--benchmark-autosave", "--dlbricks-compare", "--dlbricks-compare-fail=10%")
    assert run(pytester, *args, "models", timing=GATE_TIMING).ret == 0
    some = run(pytester, *args, "-k", "mlp", "models", timing=GATE_TIMING)
    assert some.ret == 0
    some.stdout.fnmatch_lines(["models/net.onnx * incomplete"])
    net(pytester, kernel=9)
    unseen = run(pytester, *args, "-k", "mlp", "models", timing=GATE_TIMING)
    assert unseen.ret == INCONCLUSIVE_EXIT
    unseen.stdout.fnmatch_lines(
        [
            "models/net.onnx * NOT TIMED",
            f"dlbricks: cannot tell (exit status {INCONCLUSIVE_EXIT}) whether these models are slower:",
            "  models/net.onnx: changed bricks without a time in this run (deselected, skipped or failed): *",
        ]
    )
    unseen.stdout.no_fnmatch_line("*gate passed*")
    result = run(pytester, *args, "models", timing=GATE_TIMING)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "dlbricks: passed over as baselines: *0002_*.json (no estimate of models/net.onnx)",
            "*- dlbricks: median estimates compared with *0001_*.json -*",
            "models/net.onnx * REGRESSION",
        ]
    )


def test_pytest_benchmarks_spread_checks_pass_over_the_estimates(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """An estimate is one value: pytest-benchmark would fail stddev:5% on it in every run, this one reusing every
    brick (the same estimate) included."""
    args = ("--dlbricks-granularity=2", "--benchmark-autosave", "models/mlp.onnx")
    run(pytester, *args).assert_outcomes(passed=3)
    result = run(pytester, "--benchmark-compare", "--benchmark-compare-fail=stddev:5%", *args)
    result.assert_outcomes(deselected=3)
    result.stdout.fnmatch_lines(
        [
            "dlbricks: --benchmark-compare-fail on stddev passes over the dlbricks:: estimates: one composed value"
            " has no spread; --dlbricks-compare-fail gates them"
        ]
    )
    assert result.ret == 0
    result.stdout.no_fnmatch_line("*Performance has regressed*")


def test_pytest_benchmarks_precision_is_met_at_its_own_confidence(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """Stored margins are at 95%; pytest-benchmark's --benchmark-precision is at --benchmark-confidence (0.99 by
    default): a brick within 1.8% at 95% is within 2.4% at 99%, not within the 2% asked."""
    args = ("--dlbricks-granularity=2", "models/mlp.onnx")
    run(pytester, *args).assert_outcomes(passed=3)

    def within_1_8_percent(record: dict[str, Any]) -> None:
        stats = record["stats"]
        stats["stddev"] = 0.018 * stats["mean"] * math.sqrt(stats["rounds"]) / NormalDist().inv_cdf(0.975)

    rewrite_records(pytester, within_1_8_percent)
    precision = "--benchmark-precision=0.02"
    run(pytester, precision, "--benchmark-confidence=0.95", *args).assert_outcomes(deselected=3)
    run(pytester, precision, *args).assert_outcomes(passed=3)


def test_a_damaged_saved_run_is_passed_over_or_refused_by_name(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    args = ("--dlbricks-granularity=2", "--benchmark-autosave", "models/mlp.onnx")
    run(pytester, *args).assert_outcomes(passed=3)
    run(pytester, *args).assert_outcomes(deselected=3)
    first, second = saved_runs(pytester)
    data = read(second)
    data["dlbricks"]["report"]["models"][0]["sequential_s"] = "fast"
    second.write_text(json.dumps(data))
    result = run(pytester, "--dlbricks-compare", "--dlbricks-json=r.json", *args)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            f"dlbricks: passed over as baselines: */{second.name} (damaged: ValueError: could not convert*)",
            f"*compared with */{first.name} -*",
        ]
    )
    assert read(pytester.path / "r.json")["comparison"]["baseline"].endswith(first.name)
    named = run(pytester, "--dlbricks-compare=2", *args)
    assert named.ret == pytest.ExitCode.USAGE_ERROR
    named.stderr.fnmatch_lines([f"*--dlbricks-compare: */{second.name} is damaged (ValueError: *); name another run"])


def test_a_baseline_damaged_where_only_judging_reads_leaves_the_gate_inconclusive_and_the_report_whole(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]]
) -> None:
    """A brick's rounds are read only to judge a model whose bricks changed."""
    (pytester.path / "models").mkdir()
    net(pytester, kernel=1)
    args = ("--dlbricks-granularity=1", "--benchmark-autosave", "--dlbricks-json=r.json", "models")
    assert run(pytester, *args).ret == 0
    (saved,) = saved_runs(pytester)
    data = read(saved)
    for brick in data["dlbricks"]["report"]["bricks"]:
        brick["stats"]["rounds"] = "x"
    saved.write_text(json.dumps(data))
    net(pytester, kernel=9)
    result = run(pytester, "--dlbricks-compare", "--dlbricks-compare-fail=10%", *args)
    assert result.ret == INCONCLUSIVE_EXIT
    result.stdout.fnmatch_lines([f"dlbricks: cannot compare with */{saved.name}: it is damaged (ValueError: *)"])
    assert read(pytester.path / "r.json")["models"][0]["complete"]


def test_unchanged_bricks_timed_slower_pass_the_gate(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    """Every brick of the model comes back 50% slower, as from a busy machine: the same bricks cannot regress."""
    args = ("--dlbricks-granularity=2", "models/mlp.onnx")
    run(pytester, "--benchmark-autosave", *args).assert_outcomes(passed=3)

    def slower(record: dict[str, Any]) -> None:
        record["stats"] = {name: value * ((name != "rounds" and 1.5) or 1) for name, value in record["stats"].items()}

    rewrite_records(pytester, slower)
    result = run(pytester, "--dlbricks-compare", "--dlbricks-compare-fail=10%", *args)
    result.assert_outcomes(deselected=3)
    result.stdout.fnmatch_lines(
        ["models/mlp.onnx * +*% * same bricks * unchanged", "dlbricks: gate passed: no model's changed bricks *"]
    )
    assert result.ret == 0


def test_a_gate_too_noisy_for_its_threshold_is_inconclusive(
    pytester: pytest.Pytester, copy_models: Callable[..., list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bricks taken to drift apart by a factor of e between runs: no interval can tell 10%."""
    monkeypatch.setattr("pytest_dlbricks.reporting.drift.DEFAULT_DRIFT_SPREAD", 1.0)
    (pytester.path / "models").mkdir()
    net(pytester, kernel=1)
    args = ("--dlbricks-granularity=1", "--benchmark-autosave", "models")
    assert run(pytester, *args).ret == 0
    net(pytester, kernel=9)
    result = run(pytester, "--dlbricks-compare", "--dlbricks-compare-fail=10%", *args)
    assert result.ret == INCONCLUSIVE_EXIT == 6
    result.stdout.fnmatch_lines(
        [
            "models/net.onnx * INCONCLUSIVE",
            "dlbricks: inconclusive (exit status 6): the machine is too noisy for a 10% threshold; *",
            "  models/net.onnx: its changed bricks make it *: the noise is too high to tell whether that exceeds"
            " 10%; bricks that changed: *Conv* (new)*",
        ]
    )


def test_a_run_under_high_noise_is_marked_and_passed_over_as_a_baseline(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("--dlbricks-granularity=2", "--benchmark-autosave", "--dlbricks-json=r.json", "models/mlp.onnx")
    run(pytester, *args).assert_outcomes(passed=3)
    with monkeypatch.context() as patch:
        patch.setattr("pytest_dlbricks.reporting.report.HIGH_NOISE", 0.0)
        noisy = run(pytester, "--dlbricks-remeasure", *args, timing=GATE_TIMING)
    noisy.stdout.fnmatch_lines(
        ["dlbricks: this run measured under high noise (bricks' typical spread *): it is marked*"]
    )
    summary = read(pytester.path / "r.json")["summary"]
    assert summary["high_noise"] is True and summary["noise"] > 0
    first, second = saved_runs(pytester)
    assert read(second)["dlbricks"]["report"]["summary"]["high_noise"] is True
    result = run(pytester, "--dlbricks-compare", *args)
    result.stdout.fnmatch_lines(
        [
            f"dlbricks: passed over as baselines: */{second.name} (measured under high noise)",
            f"*compared with */{first.name} -*",
        ]
    )
    named = run(pytester, f"--dlbricks-compare={second.relative_to(pytester.path)}", *args)
    named.stdout.fnmatch_lines(
        [f"dlbricks: */{second.name} measured under high noise; it is compared with only because*"]
    )


def test_a_run_whose_verdict_does_not_trust_it_is_passed_over_as_a_baseline(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timing thread on its core 40% of the time: the run says it will not serve as a baseline, and does not."""
    from pytest_dlbricks.timing import load

    class Loaded(load.LoadMeter):
        def readings(self) -> load.Readings:
            return load.Readings(1.0, 0.4, None, 2)

    args = ("--dlbricks-granularity=2", "--benchmark-autosave", "models/mlp.onnx")
    run(pytester, *args).assert_outcomes(passed=3)
    with monkeypatch.context() as patch:
        patch.setattr(run_state, "LoadMeter", Loaded)
        loaded = run(pytester, *args)
    loaded.stdout.fnmatch_lines(
        [
            "dlbricks: --dlbricks-compare will not take this run as a baseline: see its verdict",
            "dlbricks verdict: estimates not trusted: the timing thread was on a core 40% of its rounds' time; *",
        ]
    )
    first, second = saved_runs(pytester)
    result = run(pytester, "--dlbricks-compare", *args)
    result.stdout.fnmatch_lines(
        [
            f"dlbricks: passed over as baselines: */{second.name} (ran under a load its verdict does not trust)",
            f"*compared with */{first.name} -*",
        ]
    )


def test_bricks_a_run_did_not_trust_are_timed_again_not_reused(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Times taken while the timing thread was off its core 60% of the time are no better for being stored: the
    next run would reuse them under a verdict that trusts them (and a gate take them as its baseline)."""
    from pytest_dlbricks.timing import load

    class Loaded(load.LoadMeter):
        def readings(self) -> load.Readings:
            return load.Readings(1.0, 0.4, None, 2)

    args = ("--dlbricks-granularity=2", "models/mlp.onnx")
    with monkeypatch.context() as patch:
        patch.setattr(run_state, "LoadMeter", Loaded)
        loaded = run(pytester, *args)
    loaded.assert_outcomes(passed=3)
    loaded.stdout.fnmatch_lines(["dlbricks verdict: estimates not trusted: *"])
    again = run(pytester, *args)
    again.assert_outcomes(passed=3)
    again.stdout.fnmatch_lines(
        [
            "dlbricks: 3 stored brick times not reused: the run that measured them could not be trusted (the timing"
            " thread was on a core 40% of its rounds' time*); timed again",
        ]
    )
    assert "not trusted" not in again.stdout.str().split("dlbricks verdict:")[-1]
    third = run(pytester, *args)
    third.assert_outcomes(deselected=3)
    assert "not reused" not in third.stdout.str()


def test_a_baseline_cut_by_an_older_version_is_not_compared_with(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    """Cut otherwise with the same file and settings, a model's estimate moves with no change of the model:
    a gate would call it a regression of bricks that changed. It says what differs instead."""
    run(pytester, "--dlbricks-granularity=2", "--benchmark-autosave", "models/mlp.onnx")
    (saved,) = saved_runs(pytester)
    data = read(saved)
    del data["dlbricks"]["model"]["cut_method"]  # as saved before the cut method was a condition
    saved.write_text(json.dumps(data))
    refused = run(pytester, "--dlbricks-granularity=2", "models/mlp.onnx", "--dlbricks-compare")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines([f"*it ran under other conditions (cut method 1 then, {CUT_METHOD} now)*"])


def test_incompatible_runs_are_refused_unless_asked(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    run(pytester, "--dlbricks-granularity=2", "--benchmark-autosave", "models/mlp.onnx")
    (saved,) = saved_runs(pytester)
    data = read(saved)
    data["dlbricks"]["timing"]["onnxruntime"] = "0.9.0"
    saved.write_text(json.dumps(data))
    args = ("--dlbricks-granularity=1", "models/mlp.onnx", "--dlbricks-compare")
    refused = run(pytester, *args)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        [
            "ERROR: dlbricks will not compare with *0001_*.json: it ran under other conditions (onnxruntime version"
            " '0.9.0' then, '*' now; granularity 2 then, 1 now). Compare runs of the same machine and settings,"
            " or pass --dlbricks-compare-incompatible."
        ]
    )
    assert not brick_records(pytester)[3:], "refused before benchmarking anything"
    forced = run(pytester, "--dlbricks-compare-incompatible", *args)
    assert forced.ret == 0
    forced.stdout.fnmatch_lines(
        [
            "models/mlp.onnx  *",
            "dlbricks: compared although onnxruntime version '0.9.0' then, *; granularity 2 then, 1 now",
        ]
    )


def test_compare_picks_a_run_by_number_or_file(pytester: pytest.Pytester, sample_models: list[Path]) -> None:
    args = ("--dlbricks-granularity=1", "--benchmark-autosave", "models/mlp.onnx")
    run(pytester, *args)
    run(pytester, "--dlbricks-remeasure", *args)
    first, second = saved_runs(pytester)
    by_number = run(pytester, "--dlbricks-compare=1", "models/mlp.onnx", *args[:1])
    by_number.stdout.fnmatch_lines([f"*compared with */{first.name} -*"])
    by_file = run(pytester, f"--dlbricks-compare={second.relative_to(pytester.path)}", *args[:1], "models")
    by_file.stdout.fnmatch_lines([f"*compared with */{second.name} -*"])
    pytester.makepyfile(test_plain="def test_plain(benchmark):\n    benchmark(sum, [1, 2])\n")
    run(pytester, "--benchmark-autosave", "test_plain.py").assert_outcomes(passed=1)  # a run without estimates
    assert len(saved_runs(pytester)) == 3
    latest = run(pytester, *args[:1], "models/mlp.onnx", "--dlbricks-compare")
    latest.stdout.fnmatch_lines([f"*compared with */{second.name} -*", "models/mlp.onnx * unchanged"])


def test_nothing_to_compare_with_is_a_note_and_a_first_gated_run_the_baseline(
    pytester: pytest.Pytester, sample_models: list[Path]
) -> None:
    result = run(pytester, "--dlbricks-granularity=1", "models/mlp.onnx", "--dlbricks-compare")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["dlbricks: nothing to compare with: no saved run with dlbricks estimates in *"])
    gate = ("--dlbricks-granularity=1", "--dlbricks-compare-fail=5%", "models", "--dlbricks-compare")
    unsaved = run(pytester, *gate)
    assert unsaved.ret == pytest.ExitCode.USAGE_ERROR
    unsaved.stderr.fnmatch_lines(
        [
            "ERROR: --dlbricks-compare-fail cannot gate anything: no saved run with dlbricks estimates in *, and"
            " this run is not saved to become one. Add --benchmark-autosave (or --benchmark-save=NAME)."
        ]
    )
    first = run(pytester, "--benchmark-autosave", *gate)
    assert first.ret == 0
    first.stdout.fnmatch_lines(
        [
            "dlbricks: no baseline yet (no saved run with dlbricks estimates in *): this run is saved as the baseline;"
            " the gate passes"
        ]
    )
    (saved,) = saved_runs(pytester)
    second = run(pytester, "--benchmark-autosave", *gate)
    assert second.ret == 0
    second.stdout.fnmatch_lines([f"*compared with */{saved.name} -*", "dlbricks: gate passed: *"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--dlbricks-compare-fail=10%"],
            "--dlbricks-compare-fail needs --dlbricks-compare, the saved run to compare with",
        ),
        (["--dlbricks-compare-incompatible"], "--dlbricks-compare-incompatible only applies to --dlbricks-compare"),
        (["--dlbricks-store=none", "--dlbricks-remeasure"], "--dlbricks-remeasure needs the brick store, which *"),
        (["--benchmark-disable", "--dlbricks-compare=1"], "--dlbricks-compare needs brick times, which *"),
        (["--benchmark-skip", "--dlbricks-compare=1"], "--dlbricks-compare needs brick times, which --benchmark-skip*"),
        (["--dlbricks-max-age=soon"], "*age must be a number with a unit (s, m, h, d or w) such as 12h or 30d*"),
        (["--dlbricks-compare-fail=much"], "*expected a percentage such as 10%, not 'much'*"),
        (
            ["--dlbricks-compare", "models"],
            "*--dlbricks-compare: 'models' is neither the number of a saved run nor its .json file. A value right"
            " after --dlbricks-compare is taken as the run: write --dlbricks-compare=NUM, or put it after the paths.",
        ),
        (["--dlbricks-compare", "models/mlp.onnx"], "*'models/mlp.onnx' is neither the number of a saved run *"),
    ],
)
def test_bad_tracking_options_are_usage_errors(
    pytester: pytest.Pytester, sample_models: list[Path], args: list[str], message: str
) -> None:
    result = pytester.runpytest("--dlbricks-granularity=1", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}"])
