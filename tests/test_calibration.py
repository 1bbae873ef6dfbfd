"""Per-machine calibration: the fit, its records in the store, its place in the report, and a user's runs."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import run_dlbricks
from pytest_dlbricks.core.identity import Identity
from pytest_dlbricks.estimating.calibration import (
    MIN_MODELS,
    NOTICEABLE,
    Calibration,
    CalibrationRecord,
    fit,
    record_of,
)
from pytest_dlbricks.estimating.composition import model_costs
from pytest_dlbricks.reporting.recomposition import brick_references, calls_of, overhead_of
from pytest_dlbricks.storage.store import BrickStore
from pytest_dlbricks.timing.overhead import REFERENCE_SIZE, CallOverhead

US = 1e-6


def record(
    name: str,
    work_us: float,
    mb: float,
    *,
    factor: float = 1.2,
    us_per_mb: float = 2.0,
    layers: int | None = 10,
    us_per_layer: float = 0.0,
) -> CalibrationRecord:
    """A model measured as a machine with this work factor, cost per MB moved and cost per layer would
    measure it (call: 5 us)."""
    measured = factor * work_us + us_per_mb * mb + us_per_layer * (layers or 0) + 5.0
    return CalibrationRecord(name, f"key-{name}", 2, work_us * US, round(mb * 1e6), 5 * US, measured * US, layers)


def test_fit_recovers_the_work_factor_and_cost_per_byte_of_the_machine() -> None:
    records = [record("a", 1000, 20), record("b", 200, 150), record("c", 5000, 60), record("d", 50, 10)]
    calibration = fit(records, 2)
    assert calibration is not None
    assert calibration.work_factor == pytest.approx(1.2, rel=1e-4)
    assert calibration.per_byte_s == pytest.approx(2.0 * US / 1e6, rel=1e-4)
    expected = (1.2 * 300 + 2.0 * 40 + 5) * US
    assert calibration.apply(300 * US, 40_000_000, 10, 5 * US) == pytest.approx(expected, rel=1e-4)


#: Models of tens of microseconds with tens to hundreds of layers (a transformer block, a scikit-learn
#: pipeline), where a cost per layer of a microsecond is a good share of the time.
SMALL = [("s1", 40, 0.5, 60), ("s2", 15, 0.1, 30), ("s3", 90, 2.0, 200), ("s4", 25, 0.3, 120)]
#: CNNs of milliseconds and few layers, where it is lost.
LARGE = [("c1", 30_000, 200, 20), ("c2", 8_000, 40, 60), ("c3", 60_000, 700, 550), ("c4", 5_000, 80, 180)]


def test_fit_recovers_a_cost_per_layer_the_models_can_show() -> None:
    records = [record(*model[:3], layers=model[3], us_per_layer=0.6) for model in SMALL + LARGE]
    calibration = fit(records, 2, layer_bound_s=1 * US)
    assert calibration is not None and calibration.per_layer_missing is None
    assert calibration.per_layer_s == pytest.approx(0.6 * US, rel=1e-3)
    assert calibration.work_factor == pytest.approx(1.2, rel=1e-3)
    assert calibration.per_byte_s == pytest.approx(2.0 * US / 1e6, rel=1e-2)
    assert calibration.apply(20 * US, 0, 100, 5 * US) == pytest.approx((1.2 * 20 + 0.6 * 100 + 5) * US, rel=1e-3)
    assert calibration.per_layer_bound_s == 1 * US


@pytest.mark.parametrize(("small", "fitted"), [(3, True), (2, False)])
def test_a_cost_per_layer_takes_three_models_that_could_show_it(small: int, fitted: bool) -> None:
    """Three models of microseconds beside the CNNs are enough; two are not, however many CNNs."""
    records = [record(*model[:3], layers=model[3], us_per_layer=0.6) for model in SMALL[:small] + LARGE]
    calibration = fit(records, 2, layer_bound_s=1 * US)
    assert calibration is not None
    assert (calibration.per_layer_missing is None) is fitted
    if not fitted:
        assert calibration.per_layer_s == 0.0
        assert calibration.per_layer_missing == (
            "fewer than 3 of its models could spend 5% of their time on their layers at 1.00 us each"
        )


def test_no_cost_per_layer_from_models_that_cannot_show_it() -> None:
    """Calibrated on CNNs of milliseconds, a cost per layer would be a fraction of their noise and could
    come out anything; a model of microseconds then keeps the calibration without it."""
    cnns = [record(*model[:3], layers=model[3], us_per_layer=0.6) for model in LARGE]
    assert all(r.layers * 1 * US < NOTICEABLE * r.measured_s for r in cnns if r.layers)
    calibration = fit(cnns, 2, layer_bound_s=1 * US)
    assert calibration is not None
    assert calibration.per_layer_s == 0.0 and calibration.per_layer_missing
    assert calibration.work_factor == pytest.approx(1.2, rel=0.02)  # with what the layers cost folded in


def test_no_cost_per_layer_without_the_machine_s_bound_or_with_a_record_without_layers() -> None:
    records = [record(*model[:3], layers=model[3], us_per_layer=0.6) for model in SMALL + LARGE]
    without_bound = fit(records, 2)
    assert without_bound is not None
    assert without_bound.per_layer_missing == "what running a layer costs on this machine is not known"
    with_older = fit([*records, record("old", 300, 5, layers=None)], 2, layer_bound_s=1 * US)
    assert with_older is not None and with_older.per_layer_s == 0.0
    assert with_older.per_layer_missing == (
        "old was calibrated by an older version, without its layer count: calibrate it again"
    )
    four = [record(*model[:3], layers=model[3], us_per_layer=0.6) for model in SMALL]
    assert (fitted := fit(four, 2, layer_bound_s=1 * US)) is not None
    assert fitted.per_layer_missing == (
        "4 models: each left out, the others would fit three coefficients exactly, noise and all"
    )


def test_the_cost_per_layer_stays_within_what_running_a_layer_costs() -> None:
    """Models that take 3 us a layer more than their bricks show (something else the layers do not
    explain) get no more than the machine's cost of running a layer, and none less than nothing."""
    dear = [record(*model[:3], layers=model[3], us_per_layer=3.0) for model in SMALL + LARGE]
    bounded = fit(dear, 2, layer_bound_s=1 * US)
    assert bounded is not None and bounded.per_layer_s == pytest.approx(1 * US)
    cheap = [record(*model[:3], layers=model[3], us_per_layer=-0.2) for model in SMALL + LARGE]
    floored = fit(cheap, 2, layer_bound_s=1 * US)
    assert floored is not None and floored.per_layer_missing is None and floored.per_layer_s == 0.0


def test_a_coefficient_held_at_its_limit_leaves_no_share_to_the_cost_per_layer() -> None:
    """Where a model's bytes grow with its layers, noise can drive the cost per byte below nothing: held
    at nothing, the work and the layers are fitted again without it, instead of the cost per layer
    keeping what it took from a negative cost per byte and the work factor paying for it. 50 sets of 6
    models (work factor 1, nothing per byte, 0.3 us per layer, +-5% noise): the work factor stays near
    1 and every set's models near their times (fitting the cost per layer before holding the cost per
    byte left 12 of them off by more than 0.25, one set's models 19% off on average)."""
    for index in range(50):
        draw = random.Random(index).random
        records = []
        for name in "abcdef":
            work, layers = 10 + 90 * draw(), int(30 + 270 * draw())
            mb = layers / 100 * (0.7 + 0.6 * draw())
            measured = (work + 0.3 * layers + 5) * (0.95 + 0.1 * draw())
            records.append(CalibrationRecord(name, name, 2, work * US, round(mb * 1e6), 5 * US, measured * US, layers))
        calibration = fit(records, 2, layer_bound_s=1 * US)
        assert calibration is not None and calibration.per_layer_missing is None
        assert calibration.work_factor == pytest.approx(1.0, abs=0.25)
        errors = [
            abs(calibration.apply(r.work_s, r.bytes, r.layers or 0, r.call_s) / r.measured_s - 1) for r in records
        ]
        assert statistics.fmean(errors) < 0.05


def test_the_machine_s_cost_of_running_a_layer_is_read_from_the_reference_chain() -> None:
    chain = CallOverhead(fixed_s=5 * US, reference_s=(5 + REFERENCE_SIZE * 0.5) * US)
    assert chain.trivial_layer_s == pytest.approx(0.5 * US)
    assert CallOverhead(fixed_s=5 * US).trivial_layer_s is None
    assert CallOverhead(fixed_s=5 * US, reference_s=4 * US).trivial_layer_s is None  # no more than the call


#: Models a machine with a work factor of 1.2 and 2 us per MB moved measured exactly.
CONSISTENT = [record("a", 1000, 20), record("b", 200, 150), record("c", 5000, 60), record("d", 50, 10)]


def test_a_model_never_calibrates_its_own_estimate() -> None:
    """Left out, a model is not among those the fit names, and the fit is the others' alone."""
    records = [*CONSISTENT, record("odd", 50, 10, factor=1.5)]
    without = fit(records, 2, leave_out="key-odd")
    assert without is not None
    assert without.models == ("a", "b", "c", "d")
    assert without.work_factor == pytest.approx(1.2, rel=1e-4)


def test_a_model_cut_otherwise_since_never_calibrates_its_own_estimate_with_its_older_record() -> None:
    """A new version, or a changed file, cuts a model into other bricks (another key): the record it left
    at its path before is its own all the same."""
    records = [*CONSISTENT, record("odd", 50, 10, factor=1.5)]
    without = fit(records, 2, leave_out="key-odd-cut-otherwise", leave_out_path="odd")
    assert without is not None and without.models == ("a", "b", "c", "d")


def test_one_model_far_off_does_not_pull_the_others() -> None:
    """The fit minimises absolute relative errors: a model measured 3x slower than the rest suggest is
    left with its error instead of shifting everyone's estimate."""
    calibration = fit([*CONSISTENT, record("odd", 1000, 20, factor=3.6)], 2)
    assert calibration is not None
    assert calibration.work_factor == pytest.approx(1.2, rel=0.02)


def test_a_fit_that_does_not_beat_the_raw_estimates_of_its_own_models_leaves_estimates_raw() -> None:
    """Models whose bricks already add up to their times, measured with +-3% of noise: coefficients fitted
    on them follow the noise, and each model, estimated from the others, comes out worse than raw."""
    noise = [1.03, 0.97, 1.02, 0.98, 1.03]
    records = [
        record(name, work, mb, factor=1.0, us_per_mb=0.0)
        for name, work, mb in [("a", 300, 50), ("b", 80, 2), ("c", 1000, 10), ("d", 40, 30), ("e", 500, 80)]
    ]
    noisy = [replace(r, measured_s=r.measured_s * n) for r, n in zip(records, noise)]
    calibration = fit(noisy, 2)
    assert calibration is not None and calibration.declined is not None
    assert calibration.declined.startswith("each estimated from the others, they scored ")
    assert calibration.declined.endswith("% raw") and ", no better than " in calibration.declined
    assert calibration.models == ("a", "b", "c", "d", "e")
    assert calibration.apply(200 * US, 40_000_000, 30, 5 * US) == pytest.approx(205 * US)
    assert calibration.as_json()["declined"] == calibration.declined
    correcting = fit(CONSISTENT, 2)  # a work factor of 1.2 and 2 us per MB, measured exactly
    assert correcting is not None and correcting.declined is None


def test_no_fit_from_too_few_models_or_another_granularity() -> None:
    records = [record(name, 100 * (i + 1), 10 * (i + 1)) for i, name in enumerate("abcd")]
    assert fit(records[: MIN_MODELS - 1], 2) is None
    assert fit(records[:MIN_MODELS], 2, leave_out=records[0].key) is None
    assert fit(records, 1) is None


def test_coefficients_the_data_would_make_negative_stay_neutral() -> None:
    """Models measured faster than their bricks per byte: no negative cost per byte; the work factor alone."""
    records = [
        record(name, work, mb, factor=1.1, us_per_mb=-0.5)
        for name, work, mb in [("a", 1000, 20), ("b", 2000, 150), ("c", 5000, 60), ("d", 3000, 100)]
    ]
    calibration = fit(records, 2)
    assert calibration is not None
    assert calibration.per_byte_s == 0.0
    assert 1.0 < calibration.work_factor < 1.1


def test_record_of_takes_the_call_off_the_composed_estimate() -> None:
    made = record_of(
        "m.onnx",
        "k",
        2,
        sequential_s=105 * US,
        moved=7000,
        call_s=5 * US,
        measured_s=130 * US,
        layers=12,
        statistic="min",
    )
    assert made.work_s == pytest.approx(100 * US) and made.statistic == "min"
    assert (made.path, made.key, made.granularity, made.bytes, made.layers) == ("m.onnx", "k", 2, 7000, 12)
    assert (made.call_s, made.measured_s) == (5 * US, 130 * US)


def test_store_keeps_calibration_records_and_counts_damaged_ones_as_absent(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(Identity({"cpu": "test"}, {"onnxruntime": "x"}))
    first, second = record("a", 100, 10), record("b", 200, 20)
    shelf.put_calibration(first)
    shelf.put_calibration(second)
    again = record("a", 100, 10, factor=2.0)
    shelf.put_calibration(again)  # the same model measured again: replaces its first record
    assert sorted(shelf.calibration(), key=lambda r: r.path) == [again, second]
    damaged = next((shelf.path / "calibration").glob("*.json"))
    data = json.loads(damaged.read_text())
    damaged.write_text(json.dumps({**data, "measured_s": -1}))
    assert len(shelf.calibration()) == 1
    assert shelf.discarded["calibration model"] == 1
    for count, layers in enumerate((-3, 2.5, True, "12"), start=2):
        damaged.write_text(json.dumps({**data, "layers": layers}))
        assert len(shelf.calibration()) == 1
        assert shelf.discarded["calibration model"] == count


def test_a_calibration_record_kept_before_layers_were_is_read_without_them(tmp_path: Path) -> None:
    shelf = BrickStore(tmp_path).shelf(Identity({"cpu": "test"}, {"onnxruntime": "x"}))
    shelf.put_calibration(record("a", 100, 10))
    (kept,) = (shelf.path / "calibration").glob("*.json")
    data = json.loads(kept.read_text())
    assert data["layers"] == 10
    del data["layers"]
    kept.write_text(json.dumps(data))
    (read,) = shelf.calibration()
    assert read == record("a", 100, 10, layers=None)
    assert not shelf.discarded["calibration model"]


def test_a_model_cut_otherwise_replaces_the_record_it_left_at_its_path(tmp_path: Path) -> None:
    """Its older record would count it twice in every other model's calibration; one at another
    granularity or of another model stays, and a damaged one is still counted once when read."""
    shelf = BrickStore(tmp_path).shelf(Identity({"cpu": "test"}, {"onnxruntime": "x"}))
    older, other, coarser = record("a", 100, 10), record("b", 200, 20), record("a", 100, 10)
    coarser = CalibrationRecord(**{**coarser.__dict__, "granularity": 5})
    for made in (older, other, coarser):
        shelf.put_calibration(made)
    (shelf.path / "calibration" / "damaged.json").write_text("{", encoding="utf-8")
    recut = CalibrationRecord(**{**older.__dict__, "key": "key-a-cut-otherwise", "measured_s": 2 * older.measured_s})
    shelf.put_calibration(recut)
    assert sorted(shelf.calibration(), key=lambda r: (r.path, r.granularity)) == [recut, coarser, other]
    assert shelf.discarded["calibration model"] == 1


def test_records_of_each_statistic_are_kept_apart(tmp_path: Path) -> None:
    """A calibration made on the fastest times corrects no estimate of median times: both are kept, apart, and a
    record kept before records said their statistic reads as the default's."""
    shelf = BrickStore(tmp_path).shelf(Identity({"cpu": "test"}, {"onnxruntime": "x"}))
    median, fastest = record("a", 100, 10), CalibrationRecord(**{**record("a", 90, 10).__dict__, "statistic": "min"})
    shelf.put_calibration(median)
    shelf.put_calibration(fastest)
    assert sorted(shelf.calibration(), key=lambda r: r.statistic) == [median, fastest]
    older = json.loads((shelf.path / "calibration" / f"{median.key}-g{median.granularity}.json").read_text())
    del older["statistic"]
    (shelf.path / "calibration" / f"{median.key}-g{median.granularity}.json").write_text(json.dumps(older))
    assert sorted(shelf.calibration(), key=lambda r: r.statistic) == [median, fastest]


def test_calibration_as_json_names_its_models() -> None:
    assert Calibration(1.1, 2e-12, ("a", "b"), 4e-7, None, 6e-7).as_json() == {
        "work_factor": 1.1,
        "per_byte_s": 2e-12,
        "per_layer_s": 4e-7,
        "per_layer_missing": None,
        "per_layer_bound_s": 6e-7,
        "declined": None,
        "models": ["a", "b"],
    }


def _chains(folder: Path, count: int) -> None:
    """Calibration models whose bricks' work is tens of microseconds: a fit takes only models whose work
    exceeds their call cost, and a Conv of 4 channels on 6x6 pixels read no more than its call in a slow
    stretch of a shared machine, leaving a fit of the fewest models one model short."""
    import tiny_models

    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        tiny_models.chain(folder, f"c{index}.onnx", blocks=index + 1, channels=8 + 2 * index, size=16, seed=index)


def test_calibrating_needs_validation(pytester: pytest.Pytester) -> None:
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", "--dlbricks-calibrate", dims=())
    result.stderr.fnmatch_lines(["*--dlbricks-calibrate needs --dlbricks-validate*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_a_calibration_run_corrects_later_estimates_beside_the_raw_ones(pytester: pytest.Pytester) -> None:
    """Calibration models validated once, then a model never calibrated on gets raw and calibrated
    estimates side by side; the calibration models each get one learned from the others."""
    import tiny_models

    _chains(pytester.path / "calibration", MIN_MODELS + 1)
    (pytester.path / "mine").mkdir()
    tiny_models.chain(pytester.path / "mine", "mine.onnx", blocks=2, channels=5, seed=9)
    calibrating = run_dlbricks(
        pytester,
        "--dlbricks-granularity=2",
        "--dlbricks-validate",
        "--dlbricks-calibrate",
        "--dlbricks-json=calibration.json",
        "calibration",
        dims=(),
    )
    assert calibrating.ret == pytest.ExitCode.OK, calibrating.stdout.str()
    report = json.loads((pytester.path / "calibration.json").read_text())
    assert sorted(report["calibration"]["models"]) == [f"calibration/c{i}.onnx" for i in range(MIN_MODELS + 1)]
    for model in report["models"]:
        assert model["calibrated_s"] > 0
        assert model["calibrated_ratio"] == pytest.approx(model["calibrated_s"] / model["measured_s"])
    calibrating.stdout.fnmatch_lines(
        ["*Calibrated*Calibrated ratio*", f"calibrat* on {MIN_MODELS + 1} models (calibration/c0.onnx*"]
    )

    plain = run_dlbricks(pytester, "--dlbricks-granularity=2", "--dlbricks-json=mine.json", "mine", dims=())
    assert plain.ret == pytest.ExitCode.OK, plain.stdout.str()
    mine = json.loads((pytester.path / "mine.json").read_text())
    (model,) = mine["models"]
    fitted = mine["calibration"]
    # The model's own call, at the speed its bricks were timed at, as its estimate counts it.
    costs = model_costs(calls_of(model["composition"]), overhead_of(mine["summary"]), brick_references(mine["bricks"]))
    call = costs.of(*model["composition"]["io"])
    work = model["sequential_s"] - call
    assert fitted["per_layer_bound_s"] > 0  # the machine's cost of a trivial layer, measured in this run
    layers = fitted["per_layer_s"] * model["layers"]
    expected = fitted["work_factor"] * work + fitted["per_byte_s"] * model["bytes"] + layers + call
    assert model["calibrated_s"] == pytest.approx(expected)
    if fitted["declined"]:  # the fit did not beat the raw estimates of its models: this one is left raw too
        assert model["calibrated_s"] == pytest.approx(model["sequential_s"])
    plain.stdout.fnmatch_lines(["*Sequential*Calibrated*"])


def test_a_model_cut_otherwise_since_its_calibration_is_calibrated_by_the_others_alone(
    pytester: pytest.Pytester,
) -> None:
    """A calibration model's record made when it was cut into other bricks (an older version) is still its
    own: with only the fewest models a fit takes, the others are too few to calibrate it."""
    _chains(pytester.path / "calibration", MIN_MODELS)
    args = ("--dlbricks-granularity=2", "--dlbricks-validate", "--dlbricks-calibrate", "calibration")
    assert run_dlbricks(pytester, *args, dims=()).ret == pytest.ExitCode.OK
    stored = list(pytester.path.glob(".benchmarks/dlbricks/*/calibration/*.json"))
    (stale,) = [p for p in stored if json.loads(p.read_text())["path"] == "calibration/c0.onnx"]
    stale.write_text(json.dumps({**json.loads(stale.read_text()), "key": "cut-otherwise"}))
    plain = run_dlbricks(
        pytester, "--dlbricks-granularity=2", "--dlbricks-json=c0.json", "calibration/c0.onnx", dims=()
    )
    assert plain.ret == pytest.ExitCode.OK, plain.stdout.str()
    (model,) = json.loads((pytester.path / "c0.json").read_text())["models"]
    assert model["sequential_s"] and model["calibrated_s"] is None
    again = run_dlbricks(pytester, *args, "--dlbricks-json=again.json", dims=())
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    calibrated_on = json.loads((pytester.path / "again.json").read_text())["calibration"]["models"]
    assert sorted(calibrated_on) == [f"calibration/c{i}.onnx" for i in range(MIN_MODELS)], "measured again: replaced"
    assert len(list(pytester.path.glob(".benchmarks/dlbricks/*/calibration/*.json"))) == MIN_MODELS
