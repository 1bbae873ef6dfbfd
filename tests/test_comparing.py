"""Unit tests of comparisons between two runs: estimates, noise bands, verdicts, messages."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from pytest_dlbricks.comparing import (
    FASTER,
    GONE,
    INCOMPLETE,
    NEW,
    REGRESSION,
    SLOWER,
    UNCHANGED,
    WITHIN_NOISE,
    compare,
    make_block,
    render_comparison,
    render_regressions,
)

US = 1e-6


def stats(median_us: float, iqr_us: float = 2.0, *, low_us: float | None = None) -> dict[str, float]:
    """Brick statistics in microseconds; quartiles half a range around the median unless ``low_us`` sets q1."""
    median = median_us * US
    q1 = median - iqr_us / 2 * US if low_us is None else low_us * US
    q3 = q1 + iqr_us * US
    return {"min": median * 0.9, "median": median, "mean": median * 1.05, "iqr": q3 - q1, "q1": q1, "q3": q3}


def block(
    models: Mapping[str, Mapping[str, int]],
    bricks: Mapping[str, Any],
    incomplete: tuple[str, ...] = (),
    *,
    correction_us: float = 0.0,
    overhead: Mapping[str, float] | None = None,
) -> Any:
    """A dlbricks block: models as {path: {signature: count}}, bricks as {signature: stats or None}.

    A model's estimate is the sum of its bricks' medians plus ``correction_us``, what composition adds
    for the call overhead ``overhead`` (the report's ``call_overhead_s``).
    """

    def estimate(uses: Mapping[str, int]) -> float | None:
        if any(bricks[signature] is None for signature in uses):
            return None
        return sum(count * bricks[signature]["median"] for signature, count in uses.items()) + correction_us * US

    report = {
        "summary": {"call_overhead_s": overhead},
        "models": [
            {"path": path, "complete": path not in incomplete, "sequential_s": estimate(uses)}
            for path, uses in models.items()
        ],
        "bricks": [
            {
                "signature": signature * 64,
                "label": f"Op{signature.upper()}-{signature * 8}",
                "stats": brick_stats,
                "models": {path: uses[signature] for path, uses in models.items() if signature in uses},
            }
            for signature, brick_stats in bricks.items()
        ],
    }
    return make_block(report, {"machine": {}, "timing": {}, "model": {}})


def one(now: Any, before: Any, threshold: float | None = 0.1, statistic: str = "median") -> Any:
    (delta,) = compare(now, before, baseline="0001_base.json", statistic=statistic, threshold=threshold).models
    return delta


MODEL = {"m.onnx": {"a": 2, "b": 1}}
BEFORE = block(MODEL, {"a": stats(100, 10), "b": stats(50, 4)})


def test_a_model_whose_brick_times_all_came_from_the_store_is_unchanged() -> None:
    delta = one(block(MODEL, {"a": stats(100, 10), "b": stats(50, 4)}), BEFORE)
    assert (delta.verdict, delta.band_s, delta.change) == (UNCHANGED, 0.0, 0.0)
    assert delta.before_s == delta.now_s == pytest.approx(250 * US)
    assert delta.moves == ()


def test_a_remeasured_brick_within_its_spread_is_noise() -> None:
    # b moves 50 -> 53 us; the band is half of b's range on each side: (4 + 4) / 2 = 4 us.
    delta = one(block(MODEL, {"a": stats(100, 10), "b": stats(53, 4)}), BEFORE)
    assert delta.verdict == WITHIN_NOISE
    assert delta.band_s == pytest.approx(4 * US)
    assert delta.change == pytest.approx(3 / 250)


def test_slower_beyond_threshold_and_noise_is_a_regression() -> None:
    # a (used twice) moves 100 -> 130 us: +60 us, 24%; band (2 * 10 + 2 * 10) / 2 = 20 us.
    delta = one(block(MODEL, {"a": stats(130, 10), "b": stats(50, 4)}), BEFORE)
    assert delta.verdict == REGRESSION
    assert delta.band_s == pytest.approx(20 * US)
    assert delta.change == pytest.approx(0.24)
    (move,) = delta.moves
    assert (move.label, move.count_before, move.count_now) == ("OpA-aaaaaaaa", 2, 2)
    assert (move.before_s, move.now_s) == (pytest.approx(200 * US), pytest.approx(260 * US))


def test_slower_beyond_noise_but_within_threshold_only_reports() -> None:
    now = block(MODEL, {"a": stats(130, 10), "b": stats(50, 4)})
    assert one(now, BEFORE, threshold=0.3).verdict == SLOWER
    assert one(now, BEFORE, threshold=None).verdict == SLOWER


def test_a_noisy_run_widens_the_band_instead_of_failing() -> None:
    # The same +24% as a regression, but measured on a busy machine: a's range is 100 us wide now.
    delta = one(block(MODEL, {"a": stats(130, 100), "b": stats(50, 4)}), BEFORE)
    assert delta.verdict == WITHIN_NOISE
    assert delta.band_s == pytest.approx((2 * 50 + 2 * 5) * US)


def test_slow_rounds_of_a_busy_machine_do_not_hide_a_real_slowdown() -> None:
    """Stalls stretch a's upper quartile to 400 us, but its median and lower quartile moved up together."""
    delta = one(block(MODEL, {"a": stats(130, 280, low_us=120), "b": stats(50, 4)}), BEFORE)
    # Toward the old estimate, a may only come down to its first quartile: 2 * (130 - 120) + 2 * (105 - 100).
    assert delta.band_s == pytest.approx(30 * US)
    assert delta.verdict == REGRESSION


def test_a_measurement_spread_below_its_median_is_noise() -> None:
    delta = one(block(MODEL, {"a": stats(130, 100, low_us=95), "b": stats(50, 4)}), BEFORE)
    assert delta.band_s == pytest.approx((2 * 35 + 2 * 5) * US)
    assert delta.verdict == WITHIN_NOISE


def test_faster_beyond_noise() -> None:
    assert one(block(MODEL, {"a": stats(60, 10), "b": stats(50, 4)}), BEFORE).verdict == FASTER


def test_a_changed_model_counts_only_what_changed() -> None:
    """One of a's two uses became a new brick c: a's stored time is shared, only its count moved."""
    now = block({"m.onnx": {"a": 1, "b": 1, "c": 1}}, {"a": stats(100, 10), "b": stats(50, 4), "c": stats(400, 6)})
    delta = one(now, BEFORE)
    assert delta.now_s == pytest.approx(550 * US)
    # a: one use less of the same measurement adds 10 / 2; c is new: 6 / 2.
    assert delta.band_s == pytest.approx(8 * US)
    assert delta.verdict == REGRESSION
    assert [(m.label, m.count_before, m.count_now) for m in delta.moves] == [
        ("OpC-cccccccc", 0, 1),
        ("OpA-aaaaaaaa", 2, 1),
    ]


def test_estimates_are_the_reports_own() -> None:
    """Composition took the call overhead off: the comparison uses the estimates the reports show."""
    overhead = {"fixed_s": 2 * US}
    before = block(MODEL, {"a": stats(100, 10), "b": stats(50, 4)}, correction_us=-4, overhead=overhead)
    now = block(MODEL, {"a": stats(130, 10), "b": stats(50, 4)}, correction_us=-4, overhead=overhead)
    delta = one(now, before)
    assert (delta.before_s, delta.now_s) == (pytest.approx(246 * US), pytest.approx(306 * US))
    assert delta.band_s == pytest.approx(20 * US)


def test_a_call_overhead_measured_again_counts_as_noise() -> None:
    """The same brick times, but the overhead measured again took 2 us more off the model."""
    bricks = {"a": stats(100, 10), "b": stats(50, 4)}
    before = block(MODEL, bricks, correction_us=-4, overhead={"fixed_s": 2 * US})
    now = block(MODEL, bricks, correction_us=-6, overhead={"fixed_s": 3 * US})
    delta = one(now, before)
    assert delta.band_s == pytest.approx(2 * US)
    assert delta.verdict == WITHIN_NOISE
    steady = block(MODEL, bricks, correction_us=-6, overhead={"fixed_s": 2 * US})
    assert one(steady, before).verdict == FASTER, "with the same overhead, the same shift is not noise"


def test_new_gone_and_incomplete_models_never_fail() -> None:
    before = block({"kept.onnx": {"a": 1}, "gone.onnx": {"b": 1}}, {"a": stats(10), "b": stats(20)})
    now = block(
        {"kept.onnx": {"a": 1}, "new.onnx": {"c": 1}, "half.onnx": {"a": 1, "d": 1}},
        {"a": stats(90), "c": stats(30), "d": None},
        incomplete=("half.onnx",),
    )
    before["report"]["models"].append({"path": "half.onnx", "complete": True, "sequential_s": 10 * US})
    before["report"]["bricks"][0]["models"]["half.onnx"] = 1
    comparison = compare(now, before, baseline="b", statistic="median", threshold=0.0)
    verdicts = {model.path: model.verdict for model in comparison.models}
    assert verdicts == {"kept.onnx": REGRESSION, "new.onnx": NEW, "half.onnx": INCOMPLETE, "gone.onnx": GONE}
    assert [model.path for model in comparison.regressions] == ["kept.onnx"]
    new = next(model for model in comparison.models if model.path == "new.onnx")
    assert (new.before_s, new.now_s) == (None, pytest.approx(30 * US))


def test_the_table_and_the_failure_message() -> None:
    now = block(MODEL, {"a": stats(130, 10), "b": stats(49, 4)})
    comparison = compare(now, BEFORE, baseline="0001_base.json", statistic="median", threshold=0.1)
    lines = render_comparison(comparison).splitlines()
    assert lines[0].split() == ["Model", "Before", "Now", "Change", "Noise", "band", "Verdict"]
    assert lines[2].split() == ["m.onnx", "250.0", "us", "309.0", "us", "+23.6%", "24.0", "us", "REGRESSION"]
    assert render_regressions(comparison) == (
        "m.onnx is 23.6% slower than in 0001_base.json (250.0 us -> 309.0 us), more than 10% and more than its"
        " noise band of 24.0 us; bricks that moved most: OpA-aaaaaaaa x2 +60.0 us (200.0 us -> 260.0 us)"
    )
    data = comparison.as_dict()
    json.dumps(data)
    assert data["failed"] is True and data["threshold"] == 0.1
    assert data["models"][0]["verdict"] == REGRESSION
    assert [brick["brick"] for brick in data["models"][0]["moved_bricks"]] == ["OpA-aaaaaaaa", "OpB-bbbbbbbb"]
