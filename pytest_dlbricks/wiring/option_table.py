"""Every command-line option and its ini twin, declared once: name, converter, default and help, in the order
pytest --help lists them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.settings import (
    COST_MODES,
    CUT_MODES,
    DEFAULT_DIM,
    DEFAULT_GLOBS,
    DEFAULT_MAX_AGE,
    DEFAULT_PRECISION,
    DEFAULT_PROVIDERS,
    DEFAULT_STORE,
    DTYPES,
    EXECUTORS,
    OPTIMIZATION_LEVELS,
    STATISTICS,
    THREAD_POOLS,
    parse_age,
    parse_choice,
    parse_dim_entry,
    parse_dtypes,
    parse_granularity,
    parse_percentage,
    parse_precision,
    parse_providers,
    parse_threads,
)
from ..timing.sharding import parse_shard

_parse_optimization = parse_choice(OPTIMIZATION_LEVELS, "optimization level")
_parse_statistic = parse_choice(STATISTICS, "statistic")
_parse_cut = parse_choice(CUT_MODES, "cut")
_parse_cost = parse_choice(COST_MODES, "cost")
_parse_thread_pool = parse_choice(THREAD_POOLS, "thread pool")
_parse_executor = parse_choice(EXECUTORS, "executor")


def _check_precision(text: str) -> str:
    """Validate a precision on the command line; the text is kept so that "off" differs from unset."""
    parse_precision(text)
    return text


@dataclass(frozen=True)
class _Option:
    """One setting: a ``--dlbricks-*`` flag and, where it belongs in a config file, an ini value."""

    flag: str
    metavar: str
    help: str
    default: str
    convert: Callable[[str], Any] | None = None
    repeatable: bool = False
    #: A flag without a value that turns something on (its ini value is a truth value).
    switch: bool = False
    #: Name of the ini value, None for a flag only.
    ini: str | None = None
    #: A flag whose value may be left out, standing for ``const``.
    optional_value: bool = False
    const: str | None = None
    #: What a native TOML value may be besides text: ``int`` or ``float`` (see :func:`_ini_type`).
    ini_number: type | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


_OPTIONS = (
    _Option(
        "--dlbricks-granularity",
        "G",
        "Collect ONNX models and cut them into bricks of at most G layers; setting it enables dlbricks.",
        "off",
        parse_granularity,
        ini="dlbricks_granularity",
        ini_number=int,
    ),
    _Option(
        "--dlbricks-dim",
        "NAME=VALUE",
        "Size of a symbolic input dimension such as batch or seq, or of an input's axis (x[2]=48);"
        " repeatable. A pattern first gives sizes to some models only (ocr/*.onnx:height=48 width=320),"
        " winning over sizes for all. A dimension not given is what the model's metadata says, else"
        f" {DEFAULT_DIM}, with a warning. Several sizes (batch=1,4,16) run the whole suite at each.",
        "none given",
        parse_dim_entry,
        repeatable=True,
        ini="dlbricks_dims",
    ),
    _Option("--dlbricks-json", "PATH", "Write per-model estimates and per-brick times as JSON.", "no file", Path),
    _Option(
        "--dlbricks-html", "PATH", "Write the report as one self-contained HTML page with charts.", "no file", Path
    ),
    _Option(
        "--dlbricks-threads",
        "N",
        "onnxruntime intra-op threads; 0 is onnxruntime's own choice.",
        "0",
        parse_threads,
        ini="dlbricks_threads",
        ini_number=int,
    ),
    _Option(
        "--dlbricks-thread-pool",
        "POOL",
        "shared: all onnxruntime sessions of the run use one thread pool, so each brick runs on threads as"
        " its layers do inside the model; every onnxruntime session created in the process after it must"
        " then set use_per_session_threads = False. per-session: a pool per session (less accurate: idle"
        " pools spin and slow the next brick).",
        "shared",
        _parse_thread_pool,
        ini="dlbricks_thread_pool",
    ),
    _Option(
        "--dlbricks-optimization",
        "LEVEL",
        f"onnxruntime graph optimization level: {', '.join(OPTIMIZATION_LEVELS)}.",
        "all (onnxruntime's default)",
        _parse_optimization,
        ini="dlbricks_optimization",
    ),
    _Option(
        "--dlbricks-statistic",
        "STAT",
        f"Brick time statistic the estimates add up: {', '.join(STATISTICS)}.",
        "median",
        _parse_statistic,
        ini="dlbricks_statistic",
    ),
    _Option(
        "--dlbricks-executor",
        "EXECUTOR",
        "Which onnxruntime executors to estimate: sequential (onnxruntime's default) only; parallel: also"
        " ExecutionMode.ORT_PARALLEL (a Parallel column, its executor validated too); auto: the parallel one"
        " only where the installed onnxruntime runs independent nodes at once (checked on a small graph),"
        " which on CPU it does not since onnxruntime 1.14.",
        "auto",
        _parse_executor,
        ini="dlbricks_executor",
    ),
    _Option(
        "--dlbricks-glob",
        "PATTERN",
        "File name pattern of the model files to collect; repeatable.",
        " ".join(DEFAULT_GLOBS),
        repeatable=True,
        ini="dlbricks_globs",
    ),
    _Option(
        "--dlbricks-cut",
        "GRAPH",
        "Cut the graph onnxruntime runs for this provider, optimization level and machine (optimized:"
        " fusions and layout included, accurate) or the model as written (original: portable bricks).",
        "optimized; original with --dlbricks-export",
        _parse_cut,
        ini="dlbricks_cut",
    ),
    _Option(
        "--dlbricks-cost",
        "MODE",
        "What a brick costs: its time on this machine (wall-clock), or its instructions and cache misses"
        " counted under valgrind's callgrind and a cycle model's time (simulated: the same on any load).",
        "wall-clock",
        _parse_cost,
        ini="dlbricks_cost",
    ),
    _Option(
        "--dlbricks-precision",
        "PCT",
        "Time each brick until the margin of error of its mean is this small (95% confidence), so the"
        " estimates are that precise; off (or 0) keeps pytest-benchmark's time per item.",
        f"{DEFAULT_PRECISION:.0%}",
        _check_precision,
        ini="dlbricks_precision",
        ini_number=float,
    ),
    _Option(
        "--dlbricks-validate",
        "",
        "Also time every model end to end, interleaved with its bricks, and report how close the"
        " estimates come (items <model>::e2e[<file name>] and, with --dlbricks-executor=parallel,"
        " ::e2e-parallel[<file name>] too).",
        "off",
        switch=True,
        ini="dlbricks_validate",
    ),
    _Option(
        "--dlbricks-calibrate",
        "",
        "The models validated in this run calibrate this machine: their measured and composed times are"
        " kept in the brick store, and every estimate is then also given calibrated (learned from the"
        " calibration models kept there, never from the model itself). Calibrate on public models of your"
        " choice, such as the onnx wheel's light CNNs; needs --dlbricks-validate.",
        "off",
        switch=True,
        ini="dlbricks_calibrate",
    ),
    _Option(
        "--dlbricks-dtype",
        "TYPES",
        f"Numeric types to benchmark every model in, comma-separated: {', '.join(DTYPES)}. fp32 is the model"
        " as written, int8 its dynamic quantization, fp16 its float16 conversion (onnxruntime's tools).",
        "fp32",
        parse_dtypes,
        ini="dlbricks_dtype",
    ),
    _Option(
        "--dlbricks-providers",
        "NAMES",
        "onnxruntime execution providers in order of preference, comma-separated (cpu is short for"
        " CPUExecutionProvider); the provider that ran each brick is recorded.",
        ",".join(DEFAULT_PROVIDERS),
        parse_providers,
        ini="dlbricks_providers",
    ),
    _Option(
        "--dlbricks-export",
        "DIR",
        "Write every distinct brick to DIR as a standalone .onnx model with a manifest.json: a suite"
        " that runs with pytest anywhere and reveals neither weights nor models.",
        "no export",
        Path,
    ),
    _Option(
        "--dlbricks-export-maps",
        "DIR",
        "Where --dlbricks-export writes each model's private map (its bricks and their graph), for"
        " python -m pytest_dlbricks compose.",
        "DIR-maps beside the suite",
        Path,
    ),
    _Option(
        "--dlbricks-export-activations",
        "",
        "With --dlbricks-export, also write the activations kept where an operator's work depends on its"
        " data (NonZero, If...), computed from the models' sample inputs; without it the suite carries only"
        " the steering values (shapes, indices, conditions) that its manifest lists.",
        "off",
        switch=True,
    ),
    _Option(
        "--dlbricks-shard",
        "K/N",
        "Benchmark only shard K of N of the distinct bricks (the same split on every machine, balanced"
        " by expected cost); combine the reports with python -m pytest_dlbricks merge.",
        "all bricks",
        parse_shard,
    ),
    _Option(
        "--dlbricks-store",
        "DIR",
        "Folder where every measured brick time is saved, by machine and settings, for later runs to reuse;"
        " none turns the store off.",
        f"{DEFAULT_STORE} under the rootdir",
        ini="dlbricks_store",
    ),
    _Option(
        "--dlbricks-max-age",
        "AGE",
        "Measure again stored brick times older than AGE, such as 12h, 30d or none.",
        DEFAULT_MAX_AGE,
        parse_age,
        ini="dlbricks_max_age",
    ),
    _Option(
        "--dlbricks-remeasure",
        "",
        "Time every brick and detect the parallel executor even if the store has them, and save the new figures.",
        "off",
        switch=True,
    ),
    _Option(
        "--dlbricks-compare",
        "NUM|PATH",
        "Compare per-model estimates with a run saved by --benchmark-save or --benchmark-autosave:"
        " its number, its file, or the latest when no value is given.",
        "no comparison",
        optional_value=True,
        const="latest",
    ),
    _Option(
        "--dlbricks-compare-fail",
        "PCT",
        "With --dlbricks-compare, fail the session when a model's estimate is slower by more than PCT"
        " (such as 10%) and by more than the noise band of the brick times.",
        "never fail",
        parse_percentage,
        ini="dlbricks_compare_fail",
        ini_number=float,
    ),
    _Option(
        "--dlbricks-compare-incompatible",
        "",
        "Compare with a run made on another machine or with other settings instead of refusing.",
        "refuse",
        switch=True,
    ),
)
