"""Command-line and ini options, and reading them once into :class:`~pytest_dlbricks.core.settings.Settings`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ..core.settings import (
    DEFAULT_GLOBS,
    DEFAULT_MAX_AGE,
    DEFAULT_PRECISION,
    DEFAULT_PROVIDERS,
    DEFAULT_STORE,
    ModelDims,
    Settings,
    parse_age,
    parse_bool,
    parse_dim_entry,
    parse_dtypes,
    parse_granularity,
    parse_percentage,
    parse_precision,
    parse_providers,
    parse_threads,
    resolve_providers,
)
from .distributed import is_distributed
from .option_table import (
    _OPTIONS,
    _check_precision,
    _Option,
    _parse_cost,
    _parse_cut,
    _parse_executor,
    _parse_optimization,
    _parse_statistic,
    _parse_thread_pool,
)

T = TypeVar("T")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("dlbricks", "dlbricks: benchmark ONNX models brick by brick")
    for option in _OPTIONS:
        ini_note = f" Ini: {option.ini}." if option.ini else ""
        help_text = f"{option.help}{ini_note} Default: {option.default}.".replace("%", "%%")  # argparse formats help
        if option.switch:
            group.addoption(option.flag, action="store_const", const=True, default=None, help=help_text)
        else:
            value: dict[str, Any] = {"nargs": "?", "const": option.const} if option.optional_value else {}
            group.addoption(
                option.flag,
                metavar=option.metavar,
                type=option.convert,
                action="append" if option.repeatable else "store",
                default=None,
                help=help_text,
                **value,
            )
        if option.ini and option.repeatable:
            parser.addini(option.ini, f"dlbricks: {option.help}", type="linelist", default=[])
        elif option.ini:
            parser.addini(option.ini, f"dlbricks: {option.help}", type=_ini_type(option), default="")


def _ini_type(option: _Option) -> Any:
    """How pytest reads an ini value, so that pytest 9's native ``[tool.pytest]`` table takes TOML's types.

    A truth value is a boolean in every pytest. A number may be written unquoted from pytest 9.2 on,
    which reads unions of types; before that it is text (native TOML tables only exist from pytest 9.0,
    where the options reference says to quote it). Either way the value reaches the same parser as a flag's text.
    """
    if option.switch:
        return "bool"
    if option.ini_number is None or pytest.version_tuple < (9, 2):
        return "string"
    return option.ini_number | str


def read_settings(config: pytest.Config) -> Settings | None:
    """The run's settings, a flag winning over its ini value; None when dlbricks is not enabled."""
    granularity = _flag_or_ini(config, "dlbricks_granularity", parse_granularity)
    if granularity is None:
        return None
    dims, model_dims, command_line_dims = _dims(config)
    globs = _flag_or_ini_list(config, "dlbricks_glob", "dlbricks_globs", str) or list(DEFAULT_GLOBS)
    export_dir = _resolved(config, config.getoption("dlbricks_export"))
    settings = Settings(
        granularity=granularity,
        dims={name: sizes[0] for name, sizes in dims.items() if len(sizes) == 1},
        model_dims=model_dims,
        command_line_dims=command_line_dims,
        json_path=_report_file(config, "dlbricks_json"),
        html_path=_report_file(config, "dlbricks_html"),
        intra_op_threads=_flag_or_ini(config, "dlbricks_threads", parse_threads) or 0,
        thread_pool=_flag_or_ini(config, "dlbricks_thread_pool", _parse_thread_pool) or "shared",
        optimization=_flag_or_ini(config, "dlbricks_optimization", _parse_optimization) or "all",
        statistic=_flag_or_ini(config, "dlbricks_statistic", _parse_statistic) or "median",
        executor=_flag_or_ini(config, "dlbricks_executor", _parse_executor) or "auto",
        globs=tuple(globs),
        providers=_providers(config),
        cut=_flag_or_ini(config, "dlbricks_cut", _parse_cut) or ("original" if export_dir else "optimized"),
        cost=_flag_or_ini(config, "dlbricks_cost", _parse_cost) or "wall-clock",
        validate=bool(_flag_or_ini(config, "dlbricks_validate", parse_bool)),
        calibrate=bool(_flag_or_ini(config, "dlbricks_calibrate", parse_bool)),
        precision=_precision(config),
        sweep={name: sizes for name, sizes in dims.items() if len(sizes) > 1},
        dtypes=_flag_or_ini(config, "dlbricks_dtype", parse_dtypes) or ("fp32",),
        shard=config.getoption("dlbricks_shard"),
        export_dir=export_dir,
        maps_dir=_maps_dir(config, export_dir),
        export_activations=bool(config.getoption("dlbricks_export_activations")),
        **_tracking(config),
    )
    if settings.export_activations and export_dir is None:
        raise pytest.UsageError("--dlbricks-export-activations needs --dlbricks-export: it says what a suite carries")
    if export_dir is not None:
        from ..reporting.suite import check_export_folder  # here, not at the top: keeps importing the plugin cheap

        problem = check_export_folder(export_dir)
        if problem is not None:
            raise pytest.UsageError(f"--dlbricks-export: {problem}")
    if settings.cost == "simulated":
        from ..simulating.simulation import simulator_problem  # here, not at the top: keeps importing the plugin cheap

        problem = simulator_problem()
        if problem is not None:
            raise pytest.UsageError(f"--dlbricks-cost=simulated: {problem}")
    if settings.calibrate and not settings.validate:
        raise pytest.UsageError(
            "--dlbricks-calibrate needs --dlbricks-validate: calibration learns from models measured whole"
        )
    if settings.calibrate and settings.store is None:
        raise pytest.UsageError(
            "--dlbricks-calibrate needs the brick store, where calibration is kept beside the brick times;"
            " --dlbricks-store=none turns it off"
        )
    if settings.shard and settings.validate:
        raise pytest.UsageError(
            "--dlbricks-shard cannot be combined with --dlbricks-validate: validation times each model beside"
            " its bricks, on one machine"
        )
    return settings


def _dims(config: pytest.Config) -> tuple[dict[str, tuple[int, ...]], tuple[ModelDims, ...], frozenset[str]]:
    """Symbolic dimensions of every model (the ini's, each overridden by a flag of the same name), those of
    some models, in the order they apply (the ini's, then the flags'), and the names flags give every model."""
    ini = [_from_ini("dlbricks_dims", line, parse_dim_entry) for line in config.getini("dlbricks_dims")]
    flags = config.getoption("dlbricks_dim") or []
    dims: dict[str, tuple[int, ...]] = {}
    model_dims = []
    for from_command_line, (pattern, sizes) in [(False, entry) for entry in ini] + [(True, entry) for entry in flags]:
        if pattern is None:
            dims.update(sizes)
        else:
            single = {name: size for name, (size,) in sizes.items()}
            model_dims.append(ModelDims(pattern, single, from_command_line))
    swept = {name for name, sizes in dims.items() if len(sizes) > 1}
    for entry in model_dims:
        for name in sorted(swept & set(entry.dims)):
            raise pytest.UsageError(
                f"--dlbricks-dim: {name!r} is swept for every model and given to {entry.pattern!r} too; a swept"
                " dimension cannot be set per model"
            )
    command_line = frozenset(name for pattern, sizes in flags if pattern is None for name in sizes)
    return dims, tuple(model_dims), command_line


def _providers(config: pytest.Config) -> tuple[str, ...]:
    requested = _flag_or_ini(config, "dlbricks_providers", parse_providers)
    if requested is None:
        return DEFAULT_PROVIDERS
    from ..core.runtime import available_providers  # here, not at the top: keeps importing the plugin cheap

    try:
        return resolve_providers(requested, available_providers())
    except ValueError as error:
        raise pytest.UsageError(f"--dlbricks-providers: {error}") from None


def _maps_dir(config: pytest.Config, export_dir: Path | None) -> Path | None:
    """Where the private maps go: never inside the suite, which is meant to be shared."""
    maps_dir = _resolved(config, config.getoption("dlbricks_export_maps"))
    if export_dir is None:
        if maps_dir is not None:
            raise pytest.UsageError("--dlbricks-export-maps needs --dlbricks-export: maps belong to an exported suite")
        return None
    if maps_dir is None:
        return export_dir.with_name(f"{export_dir.name}-maps")
    if maps_dir.resolve() == export_dir.resolve() or export_dir.resolve() in maps_dir.resolve().parents:
        raise pytest.UsageError(
            f"--dlbricks-export-maps {maps_dir} lies inside the suite {export_dir}; the maps are private and"
            " must stay out of what you share"
        )
    return maps_dir


def _precision(config: pytest.Config) -> float | None:
    text = _flag_or_ini(config, "dlbricks_precision", _check_precision)
    return DEFAULT_PRECISION if text is None else parse_precision(text)


def _tracking(config: pytest.Config) -> dict[str, Any]:
    """The settings of the brick store and of comparisons with saved runs; refuses combinations that make no sense."""
    store = _store(config)
    compare: str | None = config.getoption("dlbricks_compare")
    remeasure = bool(config.getoption("dlbricks_remeasure"))
    incompatible = bool(config.getoption("dlbricks_compare_incompatible"))
    if compare is None and config.getoption("dlbricks_compare_fail") is not None:
        raise pytest.UsageError("--dlbricks-compare-fail needs --dlbricks-compare, the saved run to compare with")
    if compare is None and incompatible:
        raise pytest.UsageError("--dlbricks-compare-incompatible only applies to --dlbricks-compare")
    if remeasure and store is None:
        raise pytest.UsageError("--dlbricks-remeasure needs the brick store, which --dlbricks-store=none turns off")
    if (
        compare is not None
        and config.getoption("benchmark_disable", False)
        and not config.getoption("benchmark_enable", False)
    ):
        raise pytest.UsageError("--dlbricks-compare needs brick times, which --benchmark-disable turns off")
    if compare is not None and config.getoption("benchmark_skip", False):
        raise pytest.UsageError("--dlbricks-compare needs brick times, which --benchmark-skip skips")
    if compare is not None and is_distributed(config):
        raise pytest.UsageError(
            "--dlbricks-compare needs brick times, which pytest-benchmark does not take under pytest-xdist;"
            " run the gate without -n (or with -n 0)"
        )
    max_age = _flag_or_ini(config, "dlbricks_max_age", parse_age)
    return {
        "store": store,
        "max_age_s": parse_age(DEFAULT_MAX_AGE) if max_age is None else max_age,
        "remeasure": remeasure,
        "compare": compare,
        "compare_fail": _flag_or_ini(config, "dlbricks_compare_fail", parse_percentage) if compare else None,
        "compare_incompatible": incompatible,
    }


def _store(config: pytest.Config) -> Path | None:
    """The store folder: a flag is relative to where pytest started, an ini value to the ini file's folder."""
    flag: str | None = config.getoption("dlbricks_store")
    text = flag if flag is not None else str(config.getini("dlbricks_store")).strip()
    if text.lower() == "none":
        return None
    if flag is not None:
        return config.invocation_params.dir / flag
    if text:
        return (config.inipath.parent if config.inipath else config.rootpath) / text
    return config.rootpath / DEFAULT_STORE


def _report_file(config: pytest.Config, name: str) -> Path | None:
    """A report's file, refused before anything is timed where it cannot be written: a folder, or below a file."""
    path = _resolved(config, config.getoption(name))
    if path is None:
        return None
    flag = f"--{name.replace('_', '-')}"
    if path.is_dir():
        raise pytest.UsageError(f"{flag}: {path} is a folder; name the file to write the report to")
    existing = next(folder for folder in path.parents if folder.exists())
    if not existing.is_dir():
        raise pytest.UsageError(f"{flag}: cannot write {path}: {existing} is a file, not a folder")
    return path


def _resolved(config: pytest.Config, path: Path | None) -> Path | None:
    """A path given on the command line, against the directory pytest was started in."""
    return None if path is None else config.invocation_params.dir / path


def _flag_or_ini(config: pytest.Config, name: str, parse: Callable[[str], T]) -> T | None:
    flag = config.getoption(name)
    if flag is not None:
        return flag  # type: ignore[no-any-return]
    text = str(config.getini(name)).strip()  # a native TOML number or boolean is parsed as its text
    return _from_ini(name, text, parse) if text else None


def _flag_or_ini_list(config: pytest.Config, dest: str, ini: str, parse: Callable[[str], T]) -> list[T]:
    flag = config.getoption(dest)
    if flag is not None:
        return list(flag)
    return [_from_ini(ini, line, parse) for line in config.getini(ini)]


def _from_ini(name: str, text: str, parse: Callable[[str], T]) -> T:
    try:
        return parse(text)
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini option {name}: {error}") from None
