"""Unit tests of the settings parsers shared by flags and ini values, and of the recorded settings."""

from __future__ import annotations

import argparse
import fnmatch
import math
import re
from pathlib import Path

import onnxruntime
import pytest

from pytest_dlbricks.core.settings import (
    DEFAULT_MAX_AGE,
    OPTIMIZATION_LEVELS,
    STATISTICS,
    ModelDims,
    Settings,
    parse_age,
    parse_bool,
    parse_choice,
    parse_dim,
    parse_dim_entry,
    parse_granularity,
    parse_percentage,
    parse_precision,
    parse_threads,
)


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("3", 3), (" 10 ", 10)])
def test_granularity_accepts_positive_whole_numbers(text: str, value: int) -> None:
    assert parse_granularity(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "granularity must be at least 1, not 0"),
        ("-2", "granularity must be at least 1, not -2"),
        ("two", "granularity must be a whole number, not 'two'"),
        ("1.5", "granularity must be a whole number, not '1.5'"),
        ("", "granularity must be a whole number, not ''"),
    ],
)
def test_granularity_rejects_with_a_message(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_granularity(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "value"), [("batch=8", ("batch", 8)), (" seq = 128", ("seq", 128)), ("x[0]=2", ("x[0]", 2))]
)
def test_dim_accepts_name_equals_value(text: str, value: tuple[str, int]) -> None:
    assert parse_dim(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("batch", "expected NAME=VALUE such as batch=8, not 'batch'"),
        ("=8", "expected NAME=VALUE such as batch=8, not '=8'"),
        ("  =8", "expected NAME=VALUE such as batch=8, not '  =8'"),
        ("batch=eight", "dimension 'batch' must be a whole number, not 'eight'"),
        ("batch=", "dimension 'batch' must be a whole number, not ''"),
        ("batch=0", "dimension 'batch' must be at least 1, not 0"),
        ("batch=-4", "dimension 'batch' must be at least 1, not -4"),
    ],
)
def test_dim_rejects_with_a_message(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_dim(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("1", 1), ("16", 16)])
def test_threads_accept_zero_and_more(text: str, value: int) -> None:
    assert parse_threads(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("-1", "thread count must be at least 0, not -1"), ("many", "thread count must be a whole number, not 'many'")],
)
def test_threads_reject_with_a_message(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_threads(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(("text", "value"), [("all", "all"), ("DISABLE", "disable"), (" Basic ", "basic")])
def test_choice_accepts_any_case(text: str, value: str) -> None:
    assert parse_choice(OPTIMIZATION_LEVELS, "optimization level")(text) == value


def test_choice_rejects_naming_what_and_the_choices() -> None:
    convert = parse_choice(STATISTICS, "statistic")
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        convert("average")
    assert str(caught.value) == "statistic must be one of median, mean, min, not 'average'"
    assert convert.__name__ == "statistic"


def test_choice_errors_read_well_through_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="prog")
    parser.add_argument("--level", type=parse_choice(OPTIMIZATION_LEVELS, "optimization level"))
    with pytest.raises(SystemExit):
        parser.parse_args(["--level", "fast"])
    assert (
        "optimization level must be one of disable, basic, extended, layout, all, not 'fast'" in capsys.readouterr().err
    )


def test_settings_describe_what_the_report_records() -> None:
    settings = Settings(
        granularity=3,
        dims={"batch": 4},
        model_dims=(ModelDims("ocr/*.onnx", {"width": 320}),),
        json_path=Path("out.json"),
        intra_op_threads=2,
        optimization="basic",
        statistic="mean",
    )
    assert settings.describe() == {
        "granularity": 3,
        "dims": {"batch": 4},
        "model_dims": [["ocr/*.onnx", {"width": 320}]],
        "intra_op_threads": 2,
        "thread_pool": "shared",
        "optimization": "basic",
        "statistic": "mean",
        "executor": "auto",
        "providers": ["CPUExecutionProvider"],
        "cut": "optimized",
        "cost": "wall-clock",
        "precision": 0.02,
        "validate": False,
        "calibrate": False,
        "onnxruntime": onnxruntime.__version__,
        "sweep": {},
        "dtypes": ["fp32"],
        "shard": None,
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2%", 0.02),
        ("0.5%", 0.005),
        ("0.1", 0.1),
        ("off", None),
        ("OFF", None),
        ("0", None),
        ("0.0", None),
        ("0%", None),
    ],
)
def test_parse_precision_accepts(text: str, expected: float | None) -> None:
    assert parse_precision(text) == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("two", "precision must look like 2% or 0.02, or be off, not 'two'"),
        ("150%", "between 0% and 100%, not '150%'"),
        ("5", "precision must lie between 0% and 100%, not '5': write 5% for 5 percent"),
        ("150", "between 0% and 100%, not '150'"),
        ("-1%", "between 0% and 100%, not '-1%'"),
    ],
)
def test_parse_precision_rejects(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message) + "$"):
        parse_precision(text)


@pytest.mark.parametrize(
    ("text", "expected"), [("true", True), ("Yes", True), ("1", True), ("false", False), ("", False)]
)
def test_parse_bool(text: str, expected: bool) -> None:
    assert parse_bool(text) is expected


def test_parse_bool_rejects() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected true or false, not 'maybe'"):
        parse_bool("maybe")


def test_settings_defaults() -> None:
    settings = Settings(granularity=1)
    assert (settings.optimization, settings.statistic, settings.intra_op_threads) == ("all", "median", 0)
    assert settings.globs == ("*.onnx",)
    assert settings.json_path is None
    with pytest.raises(AttributeError):
        settings.granularity = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("45m", 2700), ("12h", 43200), ("30d", 2592000), ("2w", 1209600), (" 1.5 h ", 5400), ("0s", 0)],
)
def test_age_takes_a_unit(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["none", "NEVER"])
def test_age_none_keeps_for_ever(text: str) -> None:
    assert parse_age(text) == math.inf


@pytest.mark.parametrize("text", ["30", "d", "-3d", "3 days", ""])
def test_age_rejects_with_a_message(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_age(text)
    assert str(caught.value) == (
        f"age must be a number with a unit (s, m, h, d or w) such as 12h or 30d, or none, not {text!r}"
    )


def test_default_age_is_the_settings_default() -> None:
    assert parse_age(DEFAULT_MAX_AGE) == Settings(granularity=1).max_age_s


@pytest.mark.parametrize(
    ("text", "fraction"),
    [("10%", 0.1), ("2.5", 0.025), (" 0 % ", 0.0), ("150%", 1.5), ("0.5%", 0.005), ("1", 0.01)],
)
def test_percentage_is_a_fraction(text: str, fraction: float) -> None:
    assert parse_percentage(text) == pytest.approx(fraction)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ten", "expected a percentage such as 10%, not 'ten'"),
        ("-5%", "percentage must be zero or more, not '-5%'"),
        ("nan", "percentage must be zero or more, not 'nan'"),
        ("0.1", "is 0.1 a fraction or a percentage? write 10% or 0.1%"),
    ],
)
def test_percentage_rejects_with_a_message(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_percentage(text)
    assert str(caught.value) == message


def test_tracking_defaults() -> None:
    settings = Settings(granularity=1)
    assert settings.store is None and not settings.remeasure
    assert settings.compare is None and settings.compare_fail is None and not settings.compare_incompatible


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("batch=8", (None, {"batch": (8,)})),
        ("batch=1,4", (None, {"batch": (1, 4)})),
        ("x[2]=48", (None, {"x[2]": (48,)})),
        ("input:0[1]=3", (None, {"input:0[1]": (3,)})),
        ("ocr/*.onnx: image_width=256", ("ocr/*.onnx", {"image_width": (256,)})),
        ("ocr/*.onnx:height=48 width=320", ("ocr/*.onnx", {"height": (48,), "width": (320,)})),
        ("det.onnx: x[2]=640", ("det.onnx", {"x[2]": (640,)})),
        ("batch=1 seq=16", (None, {"batch": (1,), "seq": (16,)})),
    ],
)
def test_dimension_entries_give_sizes_to_every_model_or_to_a_pattern(text: str, expected: tuple) -> None:
    assert parse_dim_entry(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ocr/*.onnx: batch=1,4", "dimension 'batch' of 'ocr/*.onnx' takes one size; sweeps (batch=1,4,16)*"),
        ("ocr/*.onnx:", "expected NAME=VALUE such as batch=8*"),
        ("batch=1 batch=2", "dimension 'batch' is given twice in 'batch=1 batch=2'"),
        ("ocr/*.onnx: width", "expected NAME=VALUE such as batch=8, not 'width'"),
    ],
)
def test_bad_dimension_entries_say_why(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_dim_entry(text)
    assert fnmatch.fnmatchcase(str(caught.value), message), str(caught.value)


def test_a_models_sizes_are_every_models_then_its_patterns_in_order() -> None:
    settings = Settings(
        granularity=1,
        model_dims=(
            ModelDims("ocr/*.onnx", {"height": 32, "width": 320}),
            ModelDims("models/ocr/rec.onnx", {"height": 48}),
            ModelDims("*.onnx", {"batch": 2}),
        ),
    )
    assert settings.dims_for("models/ocr/rec.onnx", {"batch": 1, "height": 8}) == {
        "batch": 2,
        "height": 48,
        "width": 320,
    }
    assert settings.dims_for("models/ocr/det.onnx", {"batch": 1}) == {"batch": 2, "height": 32, "width": 320}
    assert settings.dims_for("models/ocr/sub/x.onnx", {}) == {"batch": 2}, "* does not cross a /"
    assert settings.dims_for("other.txt", {"batch": 1}) == {"batch": 1}
