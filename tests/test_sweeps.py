"""Unit tests of sweep points and of the parsers of sweeps, numeric types and providers."""

from __future__ import annotations

import argparse

import pytest

from pytest_dlbricks.core.settings import parse_dim_values, parse_dtypes, parse_providers, resolve_providers
from pytest_dlbricks.core.sweeps import SweepPoint, sweep_points


def test_nothing_swept_is_one_point_without_a_label() -> None:
    (point,) = sweep_points({"batch": 1}, {}, ["fp32"])
    assert point == SweepPoint({"batch": 1}, "fp32", "")
    assert point.suffix == ""
    assert point.describe() == {"batch": 1, "dtype": "fp32"}


def test_points_combine_swept_sizes_then_numeric_types() -> None:
    points = sweep_points({"seq": 16}, {"batch": (1, 4), "heads": (2, 8)}, ["fp32", "int8"])
    assert [point.label for point in points] == [
        "batch=1,heads=2,fp32",
        "batch=1,heads=2,int8",
        "batch=1,heads=8,fp32",
        "batch=1,heads=8,int8",
        "batch=4,heads=2,fp32",
        "batch=4,heads=2,int8",
        "batch=4,heads=8,fp32",
        "batch=4,heads=8,int8",
    ]
    assert points[-1].dims == {"seq": 16, "batch": 4, "heads": 8}
    assert points[-1].suffix == "[batch=4,heads=8,int8]"


def test_a_numeric_type_other_than_the_model_as_written_is_named() -> None:
    (point,) = sweep_points({}, {}, ["int8"])
    assert point.label == "int8"
    assert [point.label for point in sweep_points({}, {"batch": (1, 2)}, ["fp32"])] == ["batch=1", "batch=2"]


@pytest.mark.parametrize(
    ("text", "value"),
    [("batch=8", ("batch", (8,))), ("batch=1,4,16", ("batch", (1, 4, 16))), (" seq = 2, 3", ("seq", (2, 3)))],
)
def test_dim_values_accept_one_or_several_sizes(text: str, value: tuple[str, tuple[int, ...]]) -> None:
    assert parse_dim_values(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("batch", "expected NAME=VALUE such as batch=8, not 'batch'"),
        ("=1,2", "expected NAME=VALUE such as batch=8, not '=1'"),
        ("batch=1,,4", "dimension 'batch' must be a whole number, not ''"),
        ("batch=1,0", "dimension 'batch' must be at least 1, not 0"),
        ("batch=4,1,4", "dimension 'batch' lists 4 more than once"),
    ],
)
def test_dim_values_reject_with_a_message(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_dim_values(text)
    assert str(caught.value) == message


def test_dtypes_parse_in_order_and_any_case() -> None:
    assert parse_dtypes("fp32, INT8,fp16") == ("fp32", "int8", "fp16")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fp32,int4", "numeric type must be one of fp32, int8, fp16 (comma-separated), not 'int4'"),
        ("int8,int8", "each numeric type may be given once, not 'int8,int8'"),
    ],
)
def test_dtypes_reject_with_a_message(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_dtypes(text)
    assert str(caught.value) == message


def test_providers_parse_and_resolve_in_order() -> None:
    available = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert parse_providers("cuda, cpu") == ("cuda", "cpu")
    assert resolve_providers(("cpu", "CUDAExecutionProvider"), available) == (
        "CPUExecutionProvider",
        "CUDAExecutionProvider",
    )
    with pytest.raises(argparse.ArgumentTypeError, match="expected provider names separated by commas"):
        parse_providers("cpu,,cuda")


@pytest.mark.parametrize(
    ("requested", "message"),
    [
        (("TensorrtExecutionProvider",), "execution provider 'TensorrtExecutionProvider' is not available here"),
        (("cpu", "CPUExecutionProvider"), "execution provider CPUExecutionProvider is given more than once"),
    ],
)
def test_providers_that_cannot_be_used_are_named(requested: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_providers(requested, ["CPUExecutionProvider"])
