"""The run's settings, read once from flags and ini values, and the parsers both share."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

#: onnxruntime graph optimization levels by the names users pass; "all" is onnxruntime's default.
OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "layout", "all")
#: Brick time statistics composition can use (pytest-benchmark's names).
STATISTICS = ("median", "mean", "min")
#: What bricks are cut from: the graph onnxruntime runs (accurate, specific to the runtime and
#: machine) or the model as written (portable signatures, for suites run elsewhere).
CUT_MODES = ("optimized", "original")
#: How onnxruntime sessions get threads: one pool for all (each brick runs on threads as its layers do
#: in the model) or a pool each (onnxruntime's own default, for processes that need it).
THREAD_POOLS = ("shared", "per-session")
#: Which onnxruntime executors the models are estimated for: the sequential one (onnxruntime's default)
#: always; the parallel one (``ExecutionMode.ORT_PARALLEL``) with "parallel", or with "auto" where the
#: installed onnxruntime runs independent nodes at once (on CPU it runs one at a time since 1.14, and
#: its estimate would only be the sequential one at another call cost).
EXECUTORS = ("auto", "sequential", "parallel")
#: What a brick costs: its time on this machine (pytest-benchmark), or its work counted under valgrind's
#: callgrind, which no load or speed of the machine changes (see :mod:`.simulated`).
COST_MODES = ("wall-clock", "simulated")
DEFAULT_GLOBS = ("*.onnx",)
#: Relative margin of error (95% confidence) each brick is timed to, unless the user says otherwise.
DEFAULT_PRECISION = 0.02
#: Size given to a symbolic dimension the user did not set.
DEFAULT_DIM = 1
#: Numeric types a model can be benchmarked in: as written, dynamically quantized to int8, or float16.
DTYPES = ("fp32", "int8", "fp16")
DEFAULT_PROVIDERS = ("CPUExecutionProvider",)
#: Where the brick result store lives, under pytest's rootdir, unless told otherwise.
DEFAULT_STORE = ".benchmarks/dlbricks"
#: Age after which a stored brick time is measured again, as users write it and in seconds.
DEFAULT_MAX_AGE = "30d"
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class ModelDims:
    """Dimension sizes given to the models whose path matches ``pattern``, matched as
    :meth:`pathlib.PurePath.match` does: from the right, so ``det.onnx``, ``*.onnx`` and ``ocr/*.onnx``
    all match ``models/ocr/det.onnx``; ``*`` never crosses a ``/``."""

    pattern: str
    dims: Mapping[str, int]
    #: Given on the command line (not in the ini): checked against the models collected.
    from_command_line: bool = False

    def matches(self, path: str) -> bool:
        return PurePosixPath(path).match(self.pattern)


@dataclass(frozen=True)
class Settings:
    """Everything that decides what is cut and how it is timed; recorded in every report."""

    granularity: int
    dims: Mapping[str, int] = field(default_factory=dict)
    #: Sizes given to some models only, in the order they apply (a later entry wins): the ini's, then
    #: the command line's; they win over :attr:`dims`.
    model_dims: tuple[ModelDims, ...] = ()
    #: Names given to every model on the command line: a warning says which no collected model has.
    command_line_dims: frozenset[str] = frozenset()
    json_path: Path | None = None
    html_path: Path | None = None
    #: Threads onnxruntime uses inside an operator; 0 leaves onnxruntime's default.
    intra_op_threads: int = 0
    #: One onnxruntime thread pool for all sessions, or one per session (see :data:`THREAD_POOLS`).
    thread_pool: str = "shared"
    optimization: str = "all"
    statistic: str = "median"
    #: Which executors the models are estimated for (see :data:`EXECUTORS`).
    executor: str = "auto"
    globs: tuple[str, ...] = DEFAULT_GLOBS
    #: onnxruntime execution providers, in order of preference.
    providers: tuple[str, ...] = DEFAULT_PROVIDERS
    cut: str = "optimized"
    #: What a brick costs (see :data:`COST_MODES`).
    cost: str = "wall-clock"
    #: Time each model end to end too, interleaved with its bricks, and report the estimates' accuracy.
    validate: bool = False
    #: The validated models calibrate the machine: kept in the store, they correct every later estimate.
    calibrate: bool = False
    #: Relative margin of error each brick is timed to; None leaves pytest-benchmark's time per item.
    precision: float | None = DEFAULT_PRECISION
    #: Symbolic dimensions given several sizes: the suite is run at each (with ``dims`` fixed).
    sweep: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: Numeric types each model is benchmarked in (see :data:`DTYPES`).
    dtypes: tuple[str, ...] = ("fp32",)
    #: This run's share of the distinct bricks, ``(K, N)``: shard K of N; None runs them all.
    shard: tuple[int, int] | None = None
    #: Folder to write the brick suite to, and folder for the models' private maps.
    export_dir: Path | None = None
    maps_dir: Path | None = None
    #: Write kept activations (real data near data-dependent operators) into the suite too.
    export_activations: bool = False
    #: Folder of the brick result store; None turns the store off.
    store: Path | None = None
    #: Stored brick times older than this are measured again; infinity keeps them for ever.
    max_age_s: float = 30 * 86400
    #: Time every brick and detect the parallel executor even when the store has them.
    remeasure: bool = False
    #: Saved run to compare estimates with: "latest", a run number or a file; None compares with nothing.
    compare: str | None = None
    #: Growth of a model's estimate, as a fraction, beyond which a comparison fails the session.
    compare_fail: float | None = None
    #: Compare with a run made on another machine or with other settings instead of refusing.
    compare_incompatible: bool = False

    @property
    def parallel_asked(self) -> bool:
        """Whether the user asked for the parallel executor's estimate whatever it does here."""
        return self.executor == "parallel"

    @property
    def parallel_possible(self) -> bool:
        """Whether the models may get a parallel estimate: asked for, or left to what the executor does."""
        return self.executor != "sequential"

    def dims_for(self, path: str, dims: Mapping[str, int]) -> dict[str, int]:
        """The sizes the model at ``path`` (as pytest shows it) is given: ``dims`` (those of every model at
        the sweep point), then those of each entry of :attr:`model_dims` that matches it."""
        sizes = dict(dims)
        for entry in self.model_dims:
            if entry.matches(path):
                sizes.update(entry.dims)
        return sizes

    def describe(self) -> dict[str, object]:
        """The settings as they appear in the JSON report."""
        import onnxruntime  # for its version only; here, not at the top: keeps importing the plugin cheap

        return {
            "granularity": self.granularity,
            "dims": dict(self.dims),
            "model_dims": [[entry.pattern, dict(entry.dims)] for entry in self.model_dims],
            "intra_op_threads": self.intra_op_threads,
            "thread_pool": self.thread_pool,
            "optimization": self.optimization,
            "statistic": self.statistic,
            "executor": self.executor,
            "providers": list(self.providers),
            "cut": self.cut,
            "cost": self.cost,
            "precision": self.precision,
            "validate": self.validate,
            "calibrate": self.calibrate,
            "onnxruntime": onnxruntime.__version__,
            "sweep": {name: list(values) for name, values in self.sweep.items()},
            "dtypes": list(self.dtypes),
            "shard": f"{self.shard[0]}/{self.shard[1]}" if self.shard else None,
        }


#: The largest size an ONNX model can hold (a signed 64-bit integer).
LARGEST_NUMBER = 2**63 - 1


def parse_granularity(text: str) -> int:
    """A positive number of layers per brick."""
    return _whole_number(text, "granularity", minimum=1)


def parse_dim(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` for a symbolic dimension such as ``batch=8``."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE such as batch=8, not {text!r}")
    return name, _whole_number(value, f"dimension {name!r}", minimum=1)


def parse_dim_entry(text: str) -> tuple[str | None, dict[str, tuple[int, ...]]]:
    """``[PATTERN:] NAME=VALUE[,VALUE...] [NAME=VALUE...]``: sizes for every model, or, after a pattern of
    model paths (one with a ``/`` or a wildcard, or ending in ``.onnx``), for those models only
    (``ocr/*.onnx: height=48 width=320``). A NAME is a symbolic dimension (``batch``) or an input's axis
    (``x[2]``). A pattern's sizes are single: sweeps apply to every model."""
    pattern, assignments = _split_pattern(text)
    dims: dict[str, tuple[int, ...]] = {}
    for part in assignments.split() or [assignments]:
        name, sizes = parse_dim_values(part)
        if name in dims:
            raise argparse.ArgumentTypeError(f"dimension {name!r} is given twice in {text!r}")
        if pattern is not None and len(sizes) > 1:
            raise argparse.ArgumentTypeError(
                f"dimension {name!r} of {pattern!r} takes one size; sweeps ({name}=1,4,16) apply to every model"
            )
        dims[name] = sizes
    return pattern, dims


def _split_pattern(text: str) -> tuple[str | None, str]:
    head, colon, tail = text.partition(":")
    pattern = head.strip()
    is_pattern = any(mark in pattern for mark in "*?[/") or pattern.endswith(".onnx")
    if not colon or "=" in head or not is_pattern:
        return None, text  # no pattern: a colon belongs to a name (TensorFlow's ``input:0``)
    return pattern, tail


def parse_dim_values(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=VALUE[,VALUE...]``: one size, or several to sweep the suite over (``batch=1,4,16``)."""
    name, sep, values = text.partition("=")
    sizes = [parse_dim(f"{name}={value}")[1] for value in values.split(",")] if sep else []
    if not sizes:
        parse_dim(text)  # raises the message for a malformed NAME=VALUE
    repeated = sorted({size for size in sizes if sizes.count(size) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"dimension {name.strip()!r} lists {repeated[0]} more than once")
    return name.strip(), tuple(sizes)


def parse_dtypes(text: str) -> tuple[str, ...]:
    """A comma-separated list of numeric types from :data:`DTYPES`, such as ``fp32,int8``."""
    names = [name.strip().lower() for name in text.split(",")]
    for name in names:
        if name not in DTYPES:
            raise argparse.ArgumentTypeError(
                f"numeric type must be one of {', '.join(DTYPES)} (comma-separated), not {name!r}"
            )
    if len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"each numeric type may be given once, not {text!r}")
    return tuple(names)


def parse_providers(text: str) -> tuple[str, ...]:
    """A comma-separated list of onnxruntime execution providers; ``cpu`` is short for ``CPUExecutionProvider``."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected provider names separated by commas, not {text!r}")
    return tuple(names)


def resolve_providers(requested: tuple[str, ...], available: list[str]) -> tuple[str, ...]:
    """The providers' full names, in the order given; raises ``ValueError`` naming one that is missing.

    Names match case-insensitively, with or without the ``ExecutionProvider`` suffix.
    """
    by_key = {name.lower().removesuffix("executionprovider"): name for name in available}
    resolved = []
    for name in requested:
        full = by_key.get(name.lower().removesuffix("executionprovider"))
        if full is None:
            raise ValueError(f"execution provider {name!r} is not available here (available: {', '.join(available)})")
        if full in resolved:
            raise ValueError(f"execution provider {full} is given more than once")
        resolved.append(full)
    return tuple(resolved)


def parse_threads(text: str) -> int:
    """A thread count; 0 means onnxruntime's default."""
    return _whole_number(text, "thread count", minimum=0)


def _whole_number(text: str, what: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be a whole number, not {text.strip()!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, not {value}")
    if value > LARGEST_NUMBER:
        raise argparse.ArgumentTypeError(f"{what} must be at most {LARGEST_NUMBER} (an ONNX size), not {value}")
    return value


def parse_precision(text: str) -> float | None:
    """A relative precision such as ``2%`` or ``0.02``; ``off`` (or any zero: no precision is asked) for
    pytest-benchmark's own rounds."""
    value = text.strip().lower()
    if value in ("off", "none"):
        return None
    try:
        precision = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"precision must look like 2% or 0.02, or be off, not {text!r}") from None
    if precision == 0:
        return None
    if not 0 < precision < 1:
        hint = f": write {value}% for {value} percent" if not value.endswith("%") and 1 <= precision < 100 else ""
        raise argparse.ArgumentTypeError(f"precision must lie between 0% and 100%, not {text!r}{hint}")
    return precision


def parse_bool(text: str) -> bool:
    """An ini truth value."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")


def parse_choice(choices: tuple[str, ...], what: str) -> Callable[[str], str]:
    """A converter accepting one of ``choices`` (case-insensitive) with a message naming ``what``."""

    def convert(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise argparse.ArgumentTypeError(f"{what} must be one of {', '.join(choices)}, not {text!r}")
        return value

    convert.__name__ = what
    return convert


def parse_age(text: str) -> float:
    """An age such as ``90m``, ``12h``, ``30d`` or ``2w``, in seconds; ``none`` is no limit (infinity)."""
    value = text.strip().lower()
    if value in ("none", "never"):
        return math.inf
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", value)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"age must be a number with a unit (s, m, h, d or w) such as 12h or 30d, or none, not {text!r}"
        )
    return float(match.group(1)) * _AGE_UNITS[match.group(2)]


def parse_percentage(text: str) -> float:
    """A percentage such as ``10%`` (the sign may be left out from 1 up), as a fraction. Without its sign,
    a number under 1 is refused: a precision reads 0.1 as a tenth, and a gate at 0.1% fails on noise."""
    value = text.strip().removesuffix("%").strip()
    try:
        percent = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 10%, not {text!r}") from None
    if not math.isfinite(percent) or percent < 0:
        raise argparse.ArgumentTypeError(f"percentage must be zero or more, not {text!r}")
    if 0 < percent < 1 and not text.strip().endswith("%"):
        raise argparse.ArgumentTypeError(
            f"is {text.strip()} a fraction or a percentage? write {percent * 100:g}% or {percent:g}%"
        )
    return percent / 100
