"""Unit tests of comparisons between two runs and the gate's decision, on synthetic brick statistics and rounds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from pytest_dlbricks.reporting.comparing import (
    FASTER,
    GONE,
    INCOMPLETE,
    INCONCLUSIVE,
    INCONCLUSIVE_EXIT,
    NEW,
    NOT_TIMED,
    REGRESSION,
    SLOWER,
    UNCHANGED,
    WITHIN_NOISE,
    compare,
    exit_status,
    make_block,
    render_comparison,
    render_inconclusive,
    render_not_timed,
    render_regressions,
    suspects,
)

US = 1e-6


def stats(median_us: float, iqr_us: float = 2.0, rounds: int = 100) -> dict[str, float]:
    """Brick statistics in microseconds, quartiles half a range around the median."""
    median = median_us * US
    return {
        "min": median * 0.9,
        "median": median,
        "mean": median * 1.02,
        "stddev": iqr_us * US,
        "iqr": iqr_us * US,
        "q1": median - iqr_us / 2 * US,
        "q3": median + iqr_us / 2 * US,
        "rounds": rounds,
    }


def block(
    models: Mapping[str, Mapping[str, int]],
    bricks: Mapping[str, Any],
    incomplete: tuple[str, ...] = (),
    noise: float | None = None,
    simulated: bool = False,
) -> Any:
    """A dlbricks block: models as {path: {signature: count}}, bricks as {signature: stats or None}; ``noise``
    the run's noise figure; ``simulated`` a run of simulated cost."""

    def estimate(uses: Mapping[str, int]) -> float | None:
        if any(bricks[signature] is None for signature in uses):
            return None
        return sum(count * bricks[signature]["median"] for signature, count in uses.items())

    report = {
        "summary": {} if noise is None else {"noise": noise},
        "models": [
            {"path": path, "complete": path not in incomplete, "sequential_s": estimate(uses)}
            for path, uses in models.items()
        ],
        "bricks": [
            {
                "signature": signature,
                "label": f"Op{signature[0].upper()}-{signature * 4}",
                "stats": brick_stats,
                "models": {path: uses[signature] for path, uses in models.items() if signature in uses},
            }
            for signature, brick_stats in bricks.items()
        ],
        **({"simulation": {"cost": "simulated"}} if simulated else {}),
    }
    return make_block(report, {"machine": {}, "timing": {}, "model": {}})


def one(now: Any, before: Any, threshold: float | None = 0.1, retimed: Any = None) -> Any:
    comparison = compare(
        now, before, baseline="0001_base.json", statistic="median", threshold=threshold, retimed=retimed
    )
    (delta,) = comparison.models
    return delta


#: A model of four unchanged reference bricks r, s, t, u and one brick a, which a change replaces by c.
BEFORE_MODEL = {"m.onnx": {"r": 2, "s": 1, "t": 1, "u": 1, "a": 1}}
NOW_MODEL = {"m.onnx": {"r": 2, "s": 1, "t": 1, "u": 1, "c": 1}}
REFERENCES = {"r": 100.0, "s": 80.0, "t": 60.0, "u": 40.0}
BEFORE = block(BEFORE_MODEL, {**{k: stats(v) for k, v in REFERENCES.items()}, "a": stats(100)})  # 480 us


def now_block(speed: float, c_us: float, iqr_us: float = 2.0, scatter: Mapping[str, float] | None = None) -> Any:
    """The changed model measured on a machine ``speed`` times slower, c taking ``c_us`` at the baseline's speed."""
    scatter = scatter or {}
    bricks = {k: stats(v * speed * scatter.get(k, 1.0), iqr_us) for k, v in REFERENCES.items()}
    return block(NOW_MODEL, {**bricks, "c": stats(c_us * speed, iqr_us)})


def test_a_model_of_the_same_bricks_is_unchanged_however_its_times_moved() -> None:
    """Fresh timings on a machine 40% slower: the same bricks are the same computation."""
    slower = block(BEFORE_MODEL, {**{k: stats(v * 1.4) for k, v in REFERENCES.items()}, "a": stats(140)})
    delta = one(slower, BEFORE, threshold=0.0)
    assert delta.verdict == UNCHANGED and delta.judged is None and delta.moves == ()
    assert delta.change == pytest.approx(0.4)


def test_a_changed_brick_is_judged_at_the_baselines_machine_speed() -> None:
    """c costs 72 us more than a (+15% of 480 us); the machine ran 30% slower, which the references show."""
    delta = one(now_block(1.3, 172), BEFORE)
    assert delta.judged.drift == pytest.approx(1.3)
    assert delta.judged.change == pytest.approx(0.15)
    assert delta.verdict == REGRESSION
    assert delta.change == pytest.approx((1.3 * 552) / 480 - 1), "as measured, the change is +49%"
    assert delta.changed == ("c",)
    assert [(m.label, m.count_before, m.count_now) for m in delta.moves] == [("OpC-cccc", 0, 1), ("OpA-aaaa", 1, 0)]


def test_a_slower_machine_alone_does_not_fail_a_changed_model() -> None:
    """c replaces a at the same cost; measured on a machine 60% slower, the raw estimate is +60%."""
    delta = one(now_block(1.6, 100), BEFORE)
    assert delta.judged.change == pytest.approx(0.0, abs=1e-9)
    assert delta.verdict == WITHIN_NOISE


def test_simulated_costs_are_judged_as_counted_however_few_the_references() -> None:
    """Counts have no spread and no machine speed: a change just over the threshold fails, where the same
    figures as times, with one reference brick, are too uncertain to tell."""
    exact = {"r": stats(100, iqr_us=0.0, rounds=1), "a": stats(100, iqr_us=0.0, rounds=1)}
    changed = {"r": stats(100.1, iqr_us=0.0, rounds=1), "c": stats(103, iqr_us=0.0, rounds=1)}

    def comparison(simulated: bool) -> Any:
        now = block({"m.onnx": {"r": 1, "c": 1}}, changed, simulated=simulated)
        before = block({"m.onnx": {"r": 1, "a": 1}}, exact, simulated=simulated)
        return compare(now, before, baseline="0001_base.json", statistic="median", threshold=0.01)

    counted = comparison(simulated=True)
    (delta,) = counted.models
    assert delta.verdict == REGRESSION
    assert delta.judged.change == delta.judged.low == delta.judged.high == pytest.approx(0.015)
    assert delta.judged.drift == 1.0, "an unchanged brick counted 0.1% apart is no machine speed"
    assert "simulated cost, counted: no interval" in render_regressions(counted)
    assert comparison(simulated=False).models[0].verdict == INCONCLUSIVE


def test_bricks_drifting_apart_widen_the_interval_until_the_gate_cannot_tell() -> None:
    """The references slowed by 1.0x to 1.9x: single bricks drift too unevenly to tell +15% from +10%."""
    delta = one(now_block(1.3, 172, scatter={"r": 0.75, "s": 1.0, "t": 1.25, "u": 1.45}), BEFORE)
    assert delta.judged.low < 0.1 < delta.judged.high
    assert delta.verdict == INCONCLUSIVE
    assert one(now_block(1.3, 172, scatter={"r": 0.75, "s": 1.0, "t": 1.25, "u": 1.45}), BEFORE, None).verdict in (
        SLOWER,
        WITHIN_NOISE,
    )


def test_wide_brick_statistics_make_a_suspect_the_session_times_again() -> None:
    comparison = compare(now_block(1.0, 172, iqr_us=150.0), BEFORE, baseline="b", statistic="median", threshold=0.1)
    (delta,) = comparison.models
    assert delta.verdict == INCONCLUSIVE
    assert suspects(comparison) == [delta]
    assert set(delta.references) == set(REFERENCES), "every unchanged brick, fewer than the most re-timed"


def rounds(speeds: np.ndarray, c_us: float, noise: float = 0.0, seed: int = 1) -> dict[str, list[float]]:
    """Interleaved rounds: every brick of a round runs at that round's speed, times its own noise."""
    rng = np.random.default_rng(seed)
    times = {**REFERENCES, "c": c_us}
    return {
        signature: list(us * US * speeds * (1 + noise * rng.standard_normal(len(speeds))))
        for signature, us in times.items()
    }


def test_re_timed_rounds_cancel_a_machine_whose_speed_swings_from_round_to_round() -> None:
    """The machine's speed swings between 0.8x and 2.4x from round to round; every round still shows +15%."""
    speeds = np.random.default_rng(0).uniform(0.8, 2.4, 15)
    delta = one(now_block(1.0, 172, iqr_us=150.0), BEFORE, retimed={"m.onnx": rounds(speeds, 172)})
    assert delta.judged.method == "re-timed" and delta.judged.rounds == 15
    assert delta.judged.change == pytest.approx(0.15)
    assert 0.1 < delta.judged.low < 0.15 < delta.judged.high < 0.2
    assert delta.verdict == REGRESSION
    unchanged_cost = one(now_block(1.0, 172, iqr_us=150.0), BEFORE, retimed={"m.onnx": rounds(speeds, 100)})
    assert unchanged_cost.verdict == WITHIN_NOISE


def test_microsecond_references_scattering_far_do_not_widen_a_convolutions_interval() -> None:
    """Four microsecond references re-time at 0.7x to 1.4x their baseline times (timer and call costs weigh
    on them); the four references close in time to the changed brick agree, and they alone say how far it
    may drift apart."""
    tiny = {"v": 5.0, "w": 3.5, "x": 4.0, "y": 6.0}
    before = block(
        {"m.onnx": {**BEFORE_MODEL["m.onnx"], **dict.fromkeys(tiny, 1)}},
        {**{k: stats(v) for k, v in {**REFERENCES, **tiny}.items()}, "a": stats(100)},
    )
    now = block(
        {"m.onnx": {**NOW_MODEL["m.onnx"], **dict.fromkeys(tiny, 1)}},
        {**{k: stats(v, 150.0) for k, v in {**REFERENCES, **tiny}.items()}, "c": stats(172, 150.0)},
    )
    scatter = {"v": 0.7, "w": 1.4, "x": 0.75, "y": 1.35}
    retimed = {**rounds(np.ones(15), 172, noise=0.01), **{k: [tiny[k] * f * US] * 15 for k, f in scatter.items()}}
    delta = one(now, before, retimed={"m.onnx": retimed})
    assert delta.judged.method == "re-timed"
    assert delta.judged.change == pytest.approx(72 / 498, rel=0.05)
    assert delta.verdict == REGRESSION
    drifting = {"r": 0.75, "s": 1.0, "t": 1.25, "u": 1.45}
    scattered = {**retimed, **{k: [REFERENCES[k] * f * US] * 15 for k, f in drifting.items()}}
    assert one(now, before, retimed={"m.onnx": scattered}).verdict == INCONCLUSIVE, "alike bricks drift apart"


def test_re_timed_rounds_too_noisy_for_the_threshold_are_inconclusive() -> None:
    speeds = np.ones(15)
    delta = one(now_block(1.0, 172), BEFORE, retimed={"m.onnx": rounds(speeds, 172, noise=0.3)})
    assert delta.judged.low < 0.1 < delta.judged.high
    assert delta.verdict == INCONCLUSIVE


def test_runs_noisier_than_the_threshold_cannot_clear_a_changed_model() -> None:
    """At 12% noise a 10% gate cannot trust bricks to move as the model does: a changed model that is not
    clearly a regression is inconclusive, saying why; unchanged models and clear regressions are judged."""
    before = block(
        {**BEFORE_MODEL, "same.onnx": {"r": 1}},
        {**{k: stats(v) for k, v in REFERENCES.items()}, "a": stats(100)},
        noise=0.04,
    )
    speeds = np.ones(15)

    def compared(c_us: float, noise: float) -> Any:
        now = block(
            {**NOW_MODEL, "same.onnx": {"r": 1}},
            {**{k: stats(v) for k, v in REFERENCES.items()}, "c": stats(c_us)},
            noise=noise,
        )
        return compare(
            now, before, baseline="b", statistic="median", threshold=0.1, retimed={"m.onnx": rounds(speeds, c_us)}
        )

    quiet, noisy = compared(130, noise=0.04), compared(130, noise=0.12)
    assert [m.verdict for m in quiet.models] == [SLOWER, UNCHANGED]
    assert [m.verdict for m in noisy.models] == [INCONCLUSIVE, UNCHANGED]
    assert noisy.too_noisy and not quiet.too_noisy and noisy.as_dict()["noise"] == 0.12
    assert "noise (12.0%, their bricks' median spread) is above 10%" in render_inconclusive(noisy)
    assert compared(200, noise=0.12).models[0].verdict == REGRESSION
    assert (
        compare(
            block(NOW_MODEL, {**{k: stats(v) for k, v in REFERENCES.items()}, "c": stats(130)}),
            before,
            baseline="b",
            statistic="median",
            threshold=0.1,
        ).noise
        is None
    ), "a run without its noise"


def test_a_run_whose_verdict_does_not_trust_it_cannot_clear_a_changed_model() -> None:
    """A run whose threads lost their cores (its verdict says so) is as a noisy one: a changed model that is not
    clearly a regression is inconclusive, saying why; a clear regression is still one."""
    before = block({**BEFORE_MODEL}, {**{k: stats(v) for k, v in REFERENCES.items()}, "a": stats(100)}, noise=0.04)
    speeds = np.ones(15)

    def compared(c_us: float, trusted: bool) -> Any:
        now = block(NOW_MODEL, {**{k: stats(v) for k, v in REFERENCES.items()}, "c": stats(c_us)}, noise=0.04)
        now["report"]["verdict"] = {"trusted": trusted, "reason": "the timing thread was on a core 40% of the time"}
        return compare(
            now, before, baseline="b", statistic="median", threshold=0.1, retimed={"m.onnx": rounds(speeds, c_us)}
        )

    trusted, loaded = compared(130, trusted=True), compared(130, trusted=False)
    assert trusted.models[0].verdict == SLOWER and loaded.models[0].verdict == INCONCLUSIVE
    assert loaded.too_noisy and not trusted.too_noisy
    assert (
        loaded.as_dict()["untrusted"] == "this run cannot be trusted (the timing thread was on a core 40% of the time)"
    )
    assert "this run cannot be trusted (the timing thread was on a core 40%" in render_inconclusive(loaded)
    assert compared(200, trusted=False).models[0].verdict == REGRESSION


def test_a_count_change_is_a_changed_brick() -> None:
    """One use of r more: r's 100 us at the baseline's speed, +20.8%."""
    now = block(
        {"m.onnx": {"r": 3, "s": 1, "t": 1, "u": 1, "a": 1}},
        {**{k: stats(v) for k, v in REFERENCES.items()}, "a": stats(100)},
    )
    delta = one(now, BEFORE)
    assert delta.judged.change == pytest.approx(100 / 480)
    assert delta.verdict == REGRESSION and [m.label for m in delta.moves] == ["OpR-rrrr"]


def test_faster_and_slower_below_the_threshold() -> None:
    assert one(now_block(1.0, 50), BEFORE).verdict == FASTER
    assert one(now_block(1.0, 130), BEFORE, threshold=0.2).verdict == SLOWER
    assert one(now_block(1.0, 130), BEFORE, threshold=None).verdict == SLOWER


def test_new_gone_and_incomplete_models_never_fail() -> None:
    """half.onnx lacks the time of a brick the baseline had: nothing of it changed, so nothing can fail."""
    before = block(
        {"kept.onnx": {"a": 1}, "gone.onnx": {"b": 1}, "half.onnx": {"a": 1, "e": 1}},
        {"a": stats(10), "b": stats(20), "e": stats(5)},
    )
    now = block(
        {"kept.onnx": {"a": 1}, "new.onnx": {"c": 1}, "half.onnx": {"a": 1, "e": 1}},
        {"a": stats(90), "c": stats(30), "e": None},
        incomplete=("half.onnx",),
    )
    comparison = compare(now, before, baseline="b", statistic="median", threshold=0.0)
    verdicts = {model.path: model.verdict for model in comparison.models}
    assert verdicts == {"kept.onnx": UNCHANGED, "new.onnx": NEW, "half.onnx": INCOMPLETE, "gone.onnx": GONE}
    assert comparison.regressions == [] and not comparison.cannot_tell
    assert exit_status(comparison) == 0
    new = next(model for model in comparison.models if model.path == "new.onnx")
    assert (new.before_s, new.now_s) == (None, pytest.approx(30 * US))


def test_a_changed_model_whose_new_bricks_have_no_time_cannot_be_told() -> None:
    """A run of some bricks (-k) must not pass a model it could not judge: the gate cannot tell, and names the
    bricks it lacks."""
    before = block({"m.onnx": {"a": 1}}, {"a": stats(10)})
    now = block({"m.onnx": {"a": 1, "d": 1}}, {"a": stats(10), "d": None}, incomplete=("m.onnx",))
    comparison = compare(now, before, baseline="b", statistic="median", threshold=0.1)
    (model,) = comparison.models
    assert (model.verdict, model.untimed) == (NOT_TIMED, ("OpD-dddd",))
    assert comparison.cannot_tell and comparison.regressions == []
    assert exit_status(comparison) == INCONCLUSIVE_EXIT
    assert comparison.as_dict()["inconclusive"] is True
    assert render_not_timed(comparison) == (
        "m.onnx: changed bricks without a time in this run (deselected, skipped or failed): OpD-dddd;"
        " time them to judge the change"
    )
    assert "NOT TIMED" in render_comparison(comparison)
    assert one(now, before, threshold=None).verdict == INCOMPLETE, "without a gate nothing is judged"
    # A new brick the providers cannot run is timed by no run: the model is incomplete, as before.
    now["report"]["bricks"][1]["unsupported"] = "no float16 kernel for Gemm"
    assert one(now, before).verdict == INCOMPLETE


def test_the_table_and_the_messages_show_the_estimates_the_change_follows_from() -> None:
    """+15% at the baseline's speed: 480 us -> 552 us, though measured 717.6 us on a machine 30% slower; the
    bricks shown are at the baseline's speed too, and add up to the change: +172 us - 100 us = +72 us."""
    comparison = compare(now_block(1.3, 172), BEFORE, baseline="0001_base.json", statistic="median", threshold=0.1)
    lines = render_comparison(comparison).splitlines()
    assert lines[0].split() == ["Model", "Before", "Now", "Measured", "At", "baseline", "speed", "[95%]", "Verdict"]
    assert lines[2].split()[:9] == ["m.onnx", "480.0", "us", "717.6", "us", "+49.5%", "552.0", "us", "+15.0%"]
    assert lines[2].split()[-1] == REGRESSION
    message = render_regressions(comparison)
    assert message.startswith(
        "m.onnx is 15.0% slower than in 0001_base.json: 480.0 us -> 552.0 us at that run's machine speed"
        " (95% interval +"
    )
    assert "from the brick statistics, drift x1.30; 717.6 us as measured), more than 10%" in message
    assert message.endswith("bricks that changed: OpC-cccc +172.0 us (new), OpA-aaaa -100.0 us (gone)")
    data = comparison.as_dict()
    json.dumps(data)
    assert (data["failed"], data["inconclusive"], data["threshold"]) == (True, False, 0.1)
    judged = data["models"][0]["judged"]
    assert (judged["change"], judged["now_s"]) == (pytest.approx(0.15), pytest.approx(552 * US))
    assert [(b["brick"], b["now_s"] - b["before_s"]) for b in data["models"][0]["moved_bricks"]] == [
        ("OpC-cccc", pytest.approx(172 * US)),
        ("OpA-aaaa", pytest.approx(-100 * US)),
    ]
    unsure = compare(now_block(1.0, 172, 150.0), BEFORE, baseline="b", statistic="median", threshold=0.1)
    assert render_inconclusive(unsure).startswith("m.onnx: its changed bricks make it 15.0% slower than in b: 480.0 us")
    assert unsure.as_dict()["inconclusive"] is True


#: Two new bricks c and d replace a, and one of r's two uses.
SPLIT_MODEL = {"m.onnx": {"r": 1, "s": 1, "t": 1, "u": 1, "c": 1, "d": 1}}


@pytest.mark.parametrize("count", [15, 14])
def test_the_moves_add_up_to_the_judged_change_and_the_estimate_beside_it(count: int) -> None:
    """Whatever the rounds did (an even number of them too: their median is a mean of two), the moves of the
    bricks shown are the terms of the judged change."""
    now = block(SPLIT_MODEL, {**{k: stats(v * 1.2) for k, v in REFERENCES.items()}, "c": stats(90), "d": stats(150)})
    speeds = np.random.default_rng(3).uniform(0.9, 1.6, count)
    noise = np.random.default_rng(4)
    retimed = {
        signature: list(us * US * speeds * (1 + 0.05 * noise.standard_normal(count)))
        for signature, us in {**REFERENCES, "c": 90.0, "d": 150.0}.items()
    }
    for judged in (one(now, BEFORE).judged, one(now, BEFORE, retimed={"m.onnx": retimed}).judged):
        total = sum(move.delta_s for move in judged.moves)
        assert total == pytest.approx(judged.change * 480 * US)
        settled = {m.label: (m.count_before, m.count_now, m.delta_s) for m in judged.moves[-2:]}
        assert settled == {"OpA-aaaa": (1, 0, 100 * -US), "OpR-rrrr": (2, 1, 100 * -US)}
    assert judged.rounds == count


def test_a_brick_used_less_often_takes_away_its_baseline_time_per_use_whatever_its_time_did() -> None:
    """c replaces one of r's two uses and costs 72 us more than r (+15%). r alone came back 30% faster (a brick's
    time can jump between runs on a busy machine, the other bricks' did not): r is the same computation in both
    runs, so the model loses one use of it, 100 us, not 2 x 100 us - 70 us."""
    before = block(BEFORE_MODEL, {**{k: stats(v) for k, v in REFERENCES.items()}, "a": stats(100)})
    now = block(
        {"m.onnx": {"r": 1, "s": 1, "t": 1, "u": 1, "a": 1, "c": 1}},
        {**{k: stats(v, 2.1) for k, v in REFERENCES.items()}, "r": stats(70), "a": stats(100, 2.1), "c": stats(172)},
    )
    delta = one(now, before)
    assert delta.judged.change == pytest.approx(72 / 480, rel=0.02)
    assert delta.verdict == REGRESSION
    retimed = rounds(np.ones(15), 172)
    retimed["r"] = [70 * US] * 15
    retimed["a"] = [100 * US] * 15
    again = one(now, before, retimed={"m.onnx": retimed})
    assert again.judged.change == pytest.approx(72 / 480, rel=0.05)
    assert again.verdict == REGRESSION


def test_every_changed_model_is_timed_again_when_gating_even_one_its_statistics_pass() -> None:
    """Statistics of bricks timed minutes apart cannot clear a model: c measured at a moment the machine ran
    fast would hide a regression."""
    comparison = compare(now_block(1.0, 110), BEFORE, baseline="b", statistic="median", threshold=0.1)
    (delta,) = comparison.models
    assert delta.judged is not None and delta.judged.high < 0.1 and delta.verdict in (SLOWER, WITHIN_NOISE)
    assert suspects(comparison) == [delta]
    assert suspects(compare(now_block(1.0, 110), BEFORE, baseline="b", statistic="median", threshold=None)) == []
    assert suspects(compare(BEFORE, BEFORE, baseline="b", statistic="median", threshold=0.1)) == []
