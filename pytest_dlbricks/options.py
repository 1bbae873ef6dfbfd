"""Command-line and ini options, and reading them once into :class:`~pytest_dlbricks.settings.Settings`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from .settings import (
    DEFAULT_GLOBS,
    OPTIMIZATION_LEVELS,
    STATISTICS,
    Settings,
    parse_choice,
    parse_dim,
    parse_granularity,
    parse_threads,
)

T = TypeVar("T")

_parse_optimization = parse_choice(OPTIMIZATION_LEVELS, "optimization level")
_parse_statistic = parse_choice(STATISTICS, "statistic")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("dlbricks", "dlbricks: benchmark ONNX models brick by brick")
    group.addoption(
        "--dlbricks-granularity",
        metavar="G",
        type=parse_granularity,
        default=None,
        help="Enable dlbricks: collect ONNX models and cut them into bricks of at most G layers."
        " Also ini dlbricks_granularity. Default: %(default)r (off)",
    )
    group.addoption(
        "--dlbricks-dim",
        metavar="NAME=VALUE",
        type=parse_dim,
        action="append",
        default=None,
        help="Value of a symbolic input dimension such as batch or sequence length; repeatable."
        " Dimensions not given are 1, with a warning. Also ini dlbricks_dims. Default: %(default)r",
    )
    group.addoption(
        "--dlbricks-json",
        metavar="PATH",
        type=Path,
        default=None,
        help="Write the per-model estimates and per-brick times as JSON to PATH. Default: %(default)r",
    )
    group.addoption(
        "--dlbricks-threads",
        metavar="N",
        type=parse_threads,
        default=None,
        help="onnxruntime intra-op threads; 0 keeps onnxruntime's default. Also ini dlbricks_threads. Default: %(default)r",
    )
    group.addoption(
        "--dlbricks-optimization",
        metavar="LEVEL",
        type=_parse_optimization,
        default=None,
        help=f"onnxruntime graph optimization level, one of {', '.join(OPTIMIZATION_LEVELS)}; 'all' is"
        " onnxruntime's default. Also ini dlbricks_optimization. Default: %(default)r",
    )
    group.addoption(
        "--dlbricks-statistic",
        metavar="STAT",
        type=_parse_statistic,
        default=None,
        help=f"Brick time statistic the estimates add up, one of {', '.join(STATISTICS)} (median when"
        " unset). Also ini dlbricks_statistic. Default: %(default)r",
    )
    group.addoption(
        "--dlbricks-glob",
        metavar="PATTERN",
        action="append",
        default=None,
        help="File name pattern of the models to collect; repeatable (*.onnx when unset)."
        " Also ini dlbricks_globs. Default: %(default)r",
    )
    parser.addini("dlbricks_granularity", "dlbricks: layers per brick; setting it enables dlbricks", default="")
    parser.addini("dlbricks_dims", "dlbricks: NAME=VALUE symbolic dimensions, one a line", type="linelist", default=[])
    parser.addini("dlbricks_threads", "dlbricks: onnxruntime intra-op threads (0: its default)", default="0")
    parser.addini("dlbricks_optimization", "dlbricks: onnxruntime graph optimization level", default="all")
    parser.addini("dlbricks_statistic", "dlbricks: brick time statistic for the estimates", default="median")
    parser.addini("dlbricks_globs", "dlbricks: file name patterns of the models to collect", type="linelist", default=list(DEFAULT_GLOBS))


def read_settings(config: pytest.Config) -> Settings | None:
    """The run's settings, a flag winning over its ini value; None when dlbricks is not enabled."""
    granularity = _flag_or_ini(config, "dlbricks_granularity", parse_granularity)
    if granularity is None:
        return None
    dims_flag = config.getoption("dlbricks_dim")
    dims = dims_flag if dims_flag is not None else [_from_ini("dlbricks_dims", line, parse_dim) for line in config.getini("dlbricks_dims")]
    globs = config.getoption("dlbricks_glob") or config.getini("dlbricks_globs")
    return Settings(
        granularity=granularity,
        dims=dict(dims),
        json_path=config.getoption("dlbricks_json"),
        intra_op_threads=_flag_or_ini(config, "dlbricks_threads", parse_threads) or 0,
        optimization=_flag_or_ini(config, "dlbricks_optimization", _parse_optimization) or "all",
        statistic=_flag_or_ini(config, "dlbricks_statistic", _parse_statistic) or "median",
        globs=tuple(globs),
    )


def _flag_or_ini(config: pytest.Config, name: str, parse: Callable[[str], T]) -> T | None:
    flag = config.getoption(name)
    if flag is not None:
        return flag  # type: ignore[no-any-return]
    text = str(config.getini(name)).strip()
    return _from_ini(name, text, parse) if text else None


def _from_ini(name: str, text: str, parse: Callable[[str], T]) -> T:
    try:
        return parse(text)
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini option {name}: {error}") from None
