"""The run's verdict from plain numbers: its margin, where it comes from, what to do about it."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pytest_dlbricks.core.verdict import (
    Verdict,
    judge,
    judge_report,
    load_margin,
    memory_margin,
    own_parts,
    verdict_line,
    widest_drift,
)

QUIET = {"core_share": 0.98, "loaded": False, "trusted": True, "load_average": 0.3, "cpus": 2}


def test_sources_add_in_quadrature_and_a_tight_margin_needs_nothing() -> None:
    verdict = judge(precisions=[0.03, 0.01], noise=0.2, speed_spread=0.03, load=QUIET, threads=0)
    assert verdict.margin == pytest.approx(math.hypot(0.03, 0.03))
    assert verdict.sources == {"bricks": 0.03, "speed": 0.03, "load": 0.0}
    assert verdict.trusted and verdict.advice == [] and verdict.unmeasured == {}
    line = verdict_line(verdict.as_json())
    assert line == "dlbricks verdict: estimates hold within +-4% (bricks' spread +-3%, machine speed +-3%)"


def test_a_moving_machine_asks_for_one_thread_and_another_run() -> None:
    verdict = judge(precisions=[0.02], noise=None, speed_spread=0.2, load=QUIET, threads=0)
    assert verdict.margin == pytest.approx(math.hypot(0.02, 0.2))
    assert verdict.advice == ["one intra-op thread (--dlbricks-threads=1)", "run again"]
    # Already on one thread: nothing to ask there.
    assert judge(precisions=[0.02], noise=None, speed_spread=0.2, load=QUIET, threads=1).advice == ["run again"]


def test_imprecise_bricks_ask_for_a_tighter_precision() -> None:
    verdict = judge(precisions=[0.12, None], noise=None, speed_spread=0.01, load=QUIET, threads=1)
    assert verdict.sources["bricks"] == 0.12
    assert verdict.advice == ["a tighter --dlbricks-precision", "run again"]


def test_without_estimate_margins_the_bricks_part_is_half_the_noise() -> None:
    verdict = judge(precisions=[None], noise=0.1, speed_spread=None, load=None, threads=1)
    assert verdict.sources == {"bricks": pytest.approx(0.05)}
    assert set(verdict.unmeasured) == {"speed", "load"}
    line = verdict_line(verdict.as_json())
    assert line.startswith("dlbricks verdict: estimates hold within +-5% at the least (bricks' spread +-5%)")
    assert line.endswith("not measured: machine speed, load")


def test_a_loaded_run_on_one_thread_widens_its_margin_by_the_time_its_thread_lost() -> None:
    load = {"core_share": 0.8, "loaded": True, "trusted": True, "load_average": 2.7, "cpus": 2}
    verdict = judge(precisions=[0.01], noise=None, speed_spread=0.01, load=load, threads=1)
    assert verdict.sources["load"] == pytest.approx(0.25)
    assert verdict.margin == pytest.approx(math.sqrt(0.01**2 + 0.01**2 + 0.25**2))
    assert verdict.advice == ["a quieter machine", "run again"]
    assert verdict.reason == "the timing thread was on a core 80% of its rounds' time (load average 2.7 on 2 cores)"


@pytest.mark.parametrize(("threads", "cpus", "pool"), [(0, 2, 2), (4, 2, 4), (0, None, 2)])
def test_a_loaded_run_on_a_pool_of_threads_is_not_trusted(threads: int, cpus: int | None, pool: int) -> None:
    # A pool thread off its core holds up every parallel layer: the time the timing thread lost bounds nothing.
    load = {"core_share": 0.8, "loaded": True, "trusted": True, "load_average": 2.7, "cpus": cpus}
    verdict = judge(precisions=[0.01], noise=None, speed_spread=0.01, load=load, threads=threads)
    assert verdict.margin is None and not verdict.trusted
    assert verdict.reason is not None and verdict.reason.endswith(
        f"with {pool} intra-op threads, whose layers wait for any of them that lost its core"
    )
    # Asked for more threads than cores, the run loaded the machine itself: no quieter machine mends that.
    first = (
        "a quieter machine" if not cpus or threads <= cpus else "no more intra-op threads than the machine's 2 cores"
    )
    assert verdict.advice[0].startswith(first) and verdict.advice[1] == "one intra-op thread (--dlbricks-threads=1)"


def test_more_threads_than_cores_is_named_before_the_machine() -> None:
    load = {"core_share": 0.16, "loaded": True, "trusted": False, "load_average": 8.5, "cpus": 2}
    verdict = judge(precisions=[0.01], noise=None, speed_spread=0.01, load=load, threads=8)
    assert verdict.advice[0] == "no more intra-op threads than the machine's 2 cores (--dlbricks-threads=2)"
    assert "a quieter machine" not in verdict.advice


def test_an_unloaded_run_on_a_pool_of_threads_and_a_loaded_one_on_one_core_keep_their_margin() -> None:
    assert judge(precisions=[0.01], noise=None, speed_spread=0.01, load=QUIET, threads=0).trusted
    one_core = {"core_share": 0.8, "loaded": True, "trusted": True, "load_average": 1.5, "cpus": 1}
    verdict = judge(precisions=[0.01], noise=None, speed_spread=0.01, load=one_core, threads=0)
    assert verdict.trusted and verdict.margin == pytest.approx(math.sqrt(0.01**2 + 0.01**2 + 0.25**2))


def test_a_run_whose_thread_lost_its_core_most_of_the_time_is_not_trusted() -> None:
    load = {"core_share": 0.45, "loaded": True, "trusted": False, "load_average": None, "cpus": 2}
    verdict = judge(precisions=[0.01], noise=None, speed_spread=0.01, load=load, threads=2)
    assert verdict.margin is None and not verdict.trusted
    line = verdict_line(verdict.as_json())
    assert line.startswith("dlbricks verdict: estimates not trusted: the timing thread was on a core 45%")
    assert "a quieter machine" in line


def test_validated_models_are_counted_against_the_margin() -> None:
    ratios = {"a.onnx": 1.02, "b.onnx": 0.9, "c.onnx": 1.2}
    verdict = judge(precisions=[0.05], noise=None, speed_spread=None, load=None, threads=1, ratios=ratios)
    assert verdict.validated_within == (1, 3)
    assert "1/3 validated within it" in verdict_line(verdict.as_json())


def validated(ratios: dict[str, float], precisions: dict[str, float]) -> Verdict:
    """The verdict of a quiet run on one thread whose models' estimates have these margins and validated ratios."""
    return judge(
        precisions=list(precisions.values()),
        noise=None,
        speed_spread=None,
        load=None,
        threads=1,
        ratios=ratios,
        precisions_by_path=precisions,
    )


def test_validated_models_are_counted_against_their_own_margins_and_the_furthest_out_named() -> None:
    """The table's Within column gives each model a margin of its own: validation says which it held."""
    verdict = validated(
        {"small.onnx": 0.8, "cnn.onnx": 1.25, "mlp.onnx": 1.03}, {"small.onnx": 0.3, "cnn.onnx": 0.05, "mlp.onnx": 0.05}
    )
    assert verdict.validated_within == (3, 3), "all within the run's +-30%"
    assert verdict.own_within == (2, 3)
    assert verdict.widest_miss == ("cnn.onnx", 1.25, pytest.approx(0.05))
    assert verdict.as_json()["own_within"] == [2, 3]
    assert "; 3/3 validated within it, 2/3 within their own (furthest out: cnn.onnx, 1.25x against +-5%)" in (
        verdict_line(verdict.as_json())
    )
    held = validated({"a.onnx": 1.01}, {"a.onnx": 0.05})
    assert held.own_within == (1, 1) and held.widest_miss is None
    assert verdict_line(held.as_json()).endswith("1/1 validated within it, 1/1 within their own")


def test_parallel_estimates_are_said_to_lie_outside_the_margin() -> None:
    """The margin covers the sequential estimates; the parallel ones carry the pool's slowdown measured on MatMuls,
    so the line says so, and how many validated models' parallel executors fell within it anyway."""
    models: list[dict[str, Any]] = [
        {"path": "a.onnx", "complete": True, "precision": 0.05, "parallel_s": 2e-4},
        {"path": "b.onnx", "complete": True, "precision": 0.05, "parallel_s": 5e-4},
        {"path": "c.onnx", "complete": False, "parallel_s": 9e-4, "parallel_ratio": 3.0},  # incomplete: not judged
    ]
    report: dict[str, Any] = {"settings": {"intra_op_threads": 1}, "summary": {}, "models": models}
    verdict = judge_report(report)
    assert verdict is not None and verdict.as_json()["parallel"] == {"covered": False, "validated_within": None}
    assert verdict_line(verdict.as_json()).endswith("; Parallel not covered (--dlbricks-validate measures it)")
    models[0]["parallel_ratio"], models[1]["parallel_ratio"] = 1.03, 1.83
    validated = judge_report(report)
    assert validated is not None and validated.parallel_within == (1, 2)
    assert validated.validated_within is None, "the sequential estimates were not validated"
    assert verdict_line(validated.as_json()).endswith("; Parallel not covered (1/2 validated within it)")
    for model in models:
        del model["parallel_s"]
    sequential_only = judge_report(report)
    assert sequential_only is not None and "parallel" not in sequential_only.as_json()
    assert "Parallel" not in verdict_line(sequential_only.as_json())


def test_a_report_s_validated_models_are_held_to_their_own_margins() -> None:
    models = [
        {"path": "tiny_resnet.onnx", "complete": True, "precision": 0.06, "ratio": 1.36},
        {"path": "mlp.onnx", "complete": True, "precision": 0.39, "ratio": 0.78},
    ]
    verdict = judge_report({"settings": {"intra_op_threads": 1}, "summary": {}, "models": models})
    assert verdict is not None and verdict.validated_within == (2, 2)
    assert verdict.own_within == (1, 2) and verdict.widest_miss == ("tiny_resnet.onnx", 1.36, pytest.approx(0.06))
    assert "2/2 validated within it, 1/2 within their own (furthest out: tiny_resnet.onnx, 1.36x against +-6%)" in (
        verdict_line(verdict.as_json())
    )


def test_nothing_measured_gives_no_margin() -> None:
    verdict = judge(precisions=[], noise=None, speed_spread=None, load=None, threads=0)
    assert verdict.margin is None and verdict.trusted
    assert verdict_line(verdict.as_json()).startswith("dlbricks verdict: no margin")


def test_load_margin() -> None:
    assert load_margin(None) is None
    assert load_margin(1.0) == 0.0
    assert load_margin(0.5) == pytest.approx(1.0)
    assert load_margin(0.0) == math.inf


def test_a_report_s_verdict_reads_its_complete_models_and_summary() -> None:
    report: dict[str, Any] = {
        "settings": {"intra_op_threads": 1},
        "summary": {"noise": 0.1, "speed": {"spread": 0.04}, "load": {"core_share": 0.95, "loaded": False}},
        "models": [
            {"path": "a.onnx", "complete": True, "precision": 0.03, "ratio": 1.01},
            {"path": "b.onnx", "complete": False, "precision": 0.5, "ratio": 3.0},  # incomplete: not judged
            {"path": "c.onnx", "error": "cannot be read"},
        ],
    }
    verdict = judge_report(report)
    assert verdict is not None
    assert verdict.sources == {"bricks": 0.03, "speed": 0.04, "load": 0.0}, "a report written before the swing"
    assert verdict.validated_within == (1, 1)
    report["summary"]["speed"]["swing"] = 0.3
    swung = judge_report(report)
    assert swung is not None and swung.sources["speed"] == 0.3, "how far apart the machine's states lay"


def test_memory_s_speed_counts_for_the_part_of_a_model_that_waits_on_it() -> None:
    """Bricks timed with their weights out of the caches move with memory's speed, which the reference call
    does not see: the swing of the run's reads of memory, times the largest part such bricks make of a model."""
    report: dict[str, Any] = {
        "settings": {"intra_op_threads": 1},
        "summary": {"speed": {"swing": 0.05}, "memory": {"swing": 0.2, "share": 0.5}},
        "models": [{"path": "a.onnx", "complete": True, "precision": 0.01, "ratio": 1.1}],
    }
    verdict = judge_report(report)
    assert verdict is not None and verdict.sources["memory"] == pytest.approx(0.1)
    assert verdict.margin == pytest.approx(math.sqrt(0.01**2 + 0.05**2 + 0.1**2))
    assert "memory speed +-10%" in verdict_line(verdict.as_json())
    damaged_entries: list[object] = [
        {"swing": -0.1, "share": 0.5},
        {"swing": 0.2, "share": 1.5},
        {"swing": "x", "share": 0.5},
        [],
    ]
    for damaged in damaged_entries:
        report["summary"]["memory"] = damaged
        judged = judge_report(report)
        assert judged is not None and "memory" not in judged.sources and "memory" not in judged.unmeasured
    assert memory_margin(None) is None, "no brick read memory so"


def test_a_damaged_report_s_figures_count_as_unmeasured() -> None:
    report = {
        "settings": {},
        "summary": {"noise": "high", "speed": {"spread": float("nan")}, "load": {"core_share": None}},
        "models": [{"path": "a.onnx", "complete": True, "precision": True, "ratio": "1.0"}],
    }
    verdict = judge_report(report)
    assert verdict is not None and verdict.margin is None
    assert set(verdict.unmeasured) == {"bricks", "speed", "drift", "load"}, "its model has no drift either"
    assert judge_report({"models": [{"path": "a.onnx", "error": "cannot be read"}]}) is None


def test_a_run_that_timed_bricks_and_timed_no_model_again_says_so() -> None:
    """The budget for timing the bricks again at the run's end may reach no whole model (a tenth of a short run,
    spent on the bricks of the smallest model): the run's verdict then lacks that part, and says so. A run that
    timed nothing (every brick reused) had nothing to time again."""
    model = {"path": "a.onnx", "complete": True, "precision": 0.02}
    summary = {"speed": {"swing": 0.05}, "load": {"core_share": 0.99, "trusted": True}}
    report = {"settings": {"intra_op_threads": 1}, "summary": summary, "models": [model]}
    verdict = judge_report(report)
    assert verdict is not None and verdict.unmeasured == {"drift": "no model had all its bricks timed again"}
    assert "at the least" in verdict_line(verdict.as_json()) and "not measured: bricks timed again" in verdict_line(
        verdict.as_json()
    )
    report["models"] = [{**model, "estimate_drift": 1.04}]
    timed_again = judge_report(report)
    assert (
        timed_again is not None and timed_again.unmeasured == {} and timed_again.sources["drift"] == pytest.approx(0.04)
    )
    reused = judge_report({"settings": {}, "summary": {}, "models": [model]})
    assert reused is not None and "drift" not in reused.unmeasured


def test_reused_bricks_bring_the_speed_and_load_their_runs_found() -> None:
    earlier = {"bricks": 4, "known": 4, "speed": 0.2, "load": 0.1}
    verdict = judge(precisions=[0.02], noise=None, speed_spread=None, load=None, threads=0, earlier=earlier)
    assert verdict.sources == {"bricks": 0.02, "speed": 0.2, "load": 0.1} and verdict.unmeasured == {}
    # The larger of the run's own and its reused bricks' counts.
    mixed = judge(precisions=[0.02], noise=None, speed_spread=0.05, load=QUIET, threads=0, earlier=earlier)
    assert mixed.sources == {"bricks": 0.02, "speed": 0.2, "load": 0.1}
    # A re-run's speed part is that of the runs that timed its bricks, which holds their moves when timed again:
    # the line says whose it is, not "machine speed", which this run did not trace.
    assert verdict.speed_earlier and mixed.speed_earlier
    line = verdict_line(verdict.as_json())
    assert "speed and bricks timed again in the runs that timed the reused bricks +-20%" in line
    assert "machine speed" not in line
    own = judge(precisions=[0.02], noise=None, speed_spread=0.3, load=QUIET, threads=0, earlier=earlier)
    assert not own.speed_earlier and "speed_from" not in own.as_json()
    assert "machine speed +-30%" in verdict_line(own.as_json())
    unknown = {"bricks": 4, "known": 0, "speed": None, "load": None}
    assert set(
        judge(precisions=[0.02], noise=None, speed_spread=None, load=None, threads=0, earlier=unknown).unmeasured
    ) == {
        "speed",
        "load",
    }


def test_a_simulated_run_s_verdict_is_its_counts_repeat_and_what_its_times_are() -> None:
    """Counts have no noise, speed or load to weigh: the verdict gives how far one job's counts lay apart
    between worker processes, says what simulated times are, and claims nothing it did not measure."""
    report: dict[str, Any] = {
        "settings": {},
        "summary": {"noise": 0.3, "speed": {"swing": 0.4}},  # figures of timing, which counts do not have
        "models": [{"path": "a.onnx", "complete": True, "ratio": 1.3}],
        "simulation": {"repeat": {"job": "call", "simulated_s": [2.0e-5, 2.0001e-5], "spread": 5e-5}},
    }
    verdict = judge_report(report)
    assert verdict is not None and verdict.trusted
    assert verdict.margin == 5e-5 and verdict.sources == {"repeat": 5e-5} and verdict.validated_within is None
    line = verdict_line(verdict.as_json())
    assert line.startswith("dlbricks verdict: simulated cost: counts repeated within 0.01% (one job counted in 2 ")
    assert "AVX2 machine's under the cycle model" in line and "not wall-clock time" in line
    report["simulation"]["repeat"]["spread"] = 0.0
    exact = judge_report(report)
    assert exact is not None and "counts repeated exactly" in verdict_line(exact.as_json())
    report["simulation"]["repeat"] = None  # one worker ran, or every brick came from the store
    unmeasured = judge_report(report)
    assert unmeasured is not None and unmeasured.margin is None and set(unmeasured.unmeasured) == {"repeat"}
    assert "counts' repeat not measured" in verdict_line(unmeasured.as_json())


def test_bricks_timed_again_in_validation_count_as_far_as_their_estimate_moved() -> None:
    """A short run's trace may take too few samples to say how the machine's speed moved; validation times the
    same bricks again beside each model, and the estimate moving between the two moments measures it."""
    verdict = judge(
        precisions=[0.01],
        noise=None,
        speed_spread=None,
        load=QUIET,
        threads=0,
        ratios={"a.onnx": 1.1},
        drifts={"a.onnx": 1.1, "b.onnx": 0.8, "c.onnx": None},
    )
    assert verdict.sources["drift"] == pytest.approx(0.25), "the larger over the smaller: 0.8 is as far as 1.25"
    assert verdict.widest_drift == ("b.onnx", 0.8) and verdict.as_json()["widest_drift"] == ["b.onnx", 0.8]
    assert verdict.margin == pytest.approx(math.hypot(0.01, 0.25)) and verdict.validated_within == (1, 1)
    assert verdict.advice == ["one intra-op thread (--dlbricks-threads=1)", "run again"]
    assert verdict_line(verdict.as_json()) == (
        "dlbricks verdict: estimates hold within +-25% at the least (bricks' spread +-1%, bricks timed again +-25%);"
        " not measured: machine speed; widest move when timed again: b.onnx (0.80x); 1/1 validated within it; to"
        " tighten: one intra-op thread (--dlbricks-threads=1), run again"
    )
    assert "drift" not in judge(precisions=[0.01], noise=None, speed_spread=None, load=None, threads=1).sources


def test_a_report_s_drifts_count_and_go_to_the_store_as_its_speed() -> None:
    report: dict[str, Any] = {
        "settings": {"intra_op_threads": 1},
        "summary": {"speed": {"swing": 0.05}, "load": {"core_share": 0.95, "loaded": False}},
        "models": [
            {"path": "a.onnx", "complete": True, "precision": 0.01, "ratio": 1.0, "estimate_drift": 1.2},
            {"path": "b.onnx", "complete": True, "precision": 0.01, "ratio": 1.0, "estimate_drift": "x"},
            {"path": "c.onnx", "complete": False, "precision": 0.5, "ratio": 3.0, "estimate_drift": 3.0},
        ],
    }
    verdict = judge_report(report)
    assert verdict is not None and verdict.sources["drift"] == pytest.approx(0.2), "incomplete and damaged: not read"
    assert verdict.widest_drift == ("a.onnx", 1.2)
    assert own_parts(report) == (pytest.approx(0.2), 0.0, None), "a run reusing these bricks may be off as far"
    report["summary"]["speed"]["swing"] = 0.3
    assert own_parts(report)[0] == 0.3, "the larger of the trace's swing and the drift"
    del report["models"][0]["estimate_drift"]
    assert own_parts(report)[0] == 0.3 and "drift" not in (judge_report(report) or verdict).sources
    assert widest_drift({"a": None, "b": float("nan"), "c": -1.0, "d": 0.0}) is None


def test_each_model_gets_its_own_margin_from_its_own_bricks_and_its_own_move() -> None:
    """The run's line takes the widest move of any model; a model's own margin takes its own, with the parts that
    hold for every model (speed, memory, load), and the run's widest where its own move was not measured."""
    verdict = judge(
        precisions=[0.02, 0.01, None],
        precisions_by_path={"cnn.onnx": 0.02, "mlp.onnx": 0.01, "big.onnx": None},
        noise=0.06,
        speed_spread=0.03,
        load={"core_share": 1.0, "loaded": False, "trusted": True},
        threads=1,
        drifts={"cnn.onnx": 1.04, "mlp.onnx": 0.5},
        memory=0.04,
    )
    assert verdict.margin == pytest.approx(math.sqrt(0.02**2 + 0.03**2 + 1.0**2 + 0.04**2))
    own = verdict.models
    assert own["cnn.onnx"] == pytest.approx(math.sqrt(0.02**2 + 0.03**2 + 0.04**2 + 0.04**2))
    assert own["mlp.onnx"] == pytest.approx(math.sqrt(0.01**2 + 0.03**2 + 0.04**2 + 1.0**2)), "0.5x: moved 100%"
    # No margin of its own bricks (half the run's noise), no move of its own (the run's widest).
    assert own["big.onnx"] == pytest.approx(math.sqrt(0.03**2 + 0.03**2 + 0.04**2 + 1.0**2))
    assert verdict.as_json()["models"] == own


def test_a_run_without_a_margin_gives_no_model_one() -> None:
    untrusted = judge(
        precisions=[0.02],
        precisions_by_path={"cnn.onnx": 0.02},
        noise=None,
        speed_spread=0.03,
        load={"core_share": 0.5, "loaded": True, "trusted": False, "cpus": 2},
        threads=1,
    )
    assert untrusted.margin is None and untrusted.models == {} and "models" not in untrusted.as_json()


@pytest.mark.parametrize(
    ("speed", "part"),
    [
        ({"swing": 0.08, "above_known": 0.59}, 0.59),
        ({"swing": 0.3, "above_known": 0.0}, 0.3),
        ({"swing": 0.08, "above_known": None}, 0.08),
        ({"swing": 0.08, "above_known": "far"}, 0.08),
        ({"spread": 0.1, "above_known": 0.4}, 0.4),
        ({"above_known": 0.4}, None),
    ],
    ids=["never met", "met", "too few moments", "damaged", "older trace", "no trace"],
)
def test_a_run_slow_throughout_counts_how_far_above_the_known_fast_state_it_stayed(
    speed: dict[str, Any], part: float | None
) -> None:
    """Its swing alone is narrow: its bricks agree with each other, and another run may meet the fast state."""
    report: dict[str, Any] = {
        "settings": {"intra_op_threads": 1},
        "summary": {"speed": speed, "load": {"core_share": 0.99, "loaded": False}},
        "models": [{"path": "a.onnx", "complete": True, "precision": 0.01, "ratio": 1.0}],
    }
    verdict = judge_report(report)
    assert verdict is not None and verdict.sources.get("speed") == (None if part is None else pytest.approx(part))
    if part is not None:
        assert verdict.models["a.onnx"] >= part, "every model's own margin holds it"


def test_a_model_whose_bricks_were_timed_in_the_slow_state_widens_its_own_margin_and_the_run_s() -> None:
    """A run that waited out its budget timed some models' bricks slow: their own speed part is how far above the
    fast state they were timed; a model timed fast keeps the trace's."""
    report: dict[str, Any] = {
        "settings": {"intra_op_threads": 1},
        "summary": {"speed": {"swing": 0.1}, "load": {"core_share": 0.99, "loaded": False}},
        "models": [
            {"path": "slow.onnx", "complete": True, "precision": 0.01, "ratio": 1.0, "timed_above_fast": 0.7},
            {"path": "fast.onnx", "complete": True, "precision": 0.01, "ratio": 1.0, "timed_above_fast": 0.0},
            {"path": "odd.onnx", "complete": True, "precision": 0.01, "ratio": 1.0, "timed_above_fast": "x"},
        ],
    }
    verdict = judge_report(report)
    assert verdict is not None and verdict.sources["speed"] == pytest.approx(0.7)
    assert verdict.models["slow.onnx"] == pytest.approx(math.hypot(0.7, 0.01))
    assert verdict.models["fast.onnx"] == verdict.models["odd.onnx"] == pytest.approx(math.hypot(0.1, 0.01))
    assert not verdict.speed_earlier
    assert own_parts(report)[0] == pytest.approx(0.7), "a run reusing these bricks reads them as slow as they were"
    assert verdict.widest_slow == ("slow.onnx", 0.7), "the line says where the speed part came from"
    line = verdict_line(verdict.as_json())
    assert "machine speed +-70%" in line and "; timed furthest above the machine's fast state: slow.onnx (+70%)" in line
    report["models"][0]["timed_above_fast"] = 0.05
    within_trace = judge_report(report)
    assert within_trace is not None and within_trace.widest_slow is None and "widest_slow" not in within_trace.as_json()
    assert "timed furthest" not in verdict_line({**verdict.as_json(), "widest_slow": ["slow.onnx", "far"]})
