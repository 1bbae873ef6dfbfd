"""The run's settings, read once from flags and ini values, and the parsers both share."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: onnxruntime graph optimization levels by the names users pass; "all" is onnxruntime's default.
OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "layout", "all")
#: Brick time statistics composition can use (pytest-benchmark's names).
STATISTICS = ("median", "mean", "min")
#: What bricks are cut from: the graph onnxruntime runs (accurate, specific to the runtime and
#: machine) or the model as written (portable signatures, for suites run elsewhere).
CUT_MODES = ("optimized", "original")
DEFAULT_GLOBS = ("*.onnx",)
#: Relative margin of error (95% confidence) each brick is timed to, unless the user says otherwise.
DEFAULT_PRECISION = 0.02
#: Size given to a symbolic dimension the user did not set.
DEFAULT_DIM = 1


@dataclass(frozen=True)
class Settings:
    """Everything that decides what is cut and how it is timed; recorded in every report."""

    granularity: int
    dims: Mapping[str, int] = field(default_factory=dict)
    json_path: Path | None = None
    html_path: Path | None = None
    #: Threads onnxruntime uses inside an operator; 0 leaves onnxruntime's default.
    intra_op_threads: int = 0
    optimization: str = "all"
    statistic: str = "median"
    globs: tuple[str, ...] = DEFAULT_GLOBS
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    cut: str = "optimized"
    #: Time each model end to end too, interleaved with its bricks, and report the estimates' accuracy.
    validate: bool = False
    #: Relative margin of error each brick is timed to; None leaves pytest-benchmark's time per item.
    precision: float | None = DEFAULT_PRECISION

    def describe(self) -> dict[str, object]:
        """The settings as they appear in the JSON report."""
        import onnxruntime

        return {
            "granularity": self.granularity,
            "dims": dict(self.dims),
            "intra_op_threads": self.intra_op_threads,
            "optimization": self.optimization,
            "statistic": self.statistic,
            "providers": list(self.providers),
            "cut": self.cut,
            "precision": self.precision,
            "validate": self.validate,
            "onnxruntime": onnxruntime.__version__,
        }


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
    return value


def parse_precision(text: str) -> float | None:
    """A relative precision such as ``2%`` or ``0.02``; ``off`` for pytest-benchmark's own rounds."""
    value = text.strip().lower()
    if value in ("off", "none", "0", "0%"):
        return None
    try:
        precision = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"precision must look like 2% or 0.02, or be off, not {text!r}") from None
    if not 0 < precision < 1:
        raise argparse.ArgumentTypeError(f"precision must lie between 0% and 100%, not {text!r}")
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
