"""The error raised for anything wrong with a user's model, and the one way library errors are quoted in ours."""

from __future__ import annotations

import re
from pathlib import Path

#: Longest error message of onnx or onnxruntime quoted in our own.
MAX_CAUSE_CHARS = 400
#: What onnxruntime puts in its messages for its developers: error codes and status names
#: (``[ONNXRuntimeError] : 1 : FAIL :``), C++ source lines and function signatures
#: (``/src/graph/model.cc:256 onnxruntime::Model::Model(onnx::ModelProto&&, ...)``).
_RUNTIME_NOISE = re.compile(
    r"\[ONNXRuntimeError\] : \d+ : \w+ : |\S*\.(?:cc|cpp|h):\d+ (?:[\w:<>*&, ]*::\w+\([^()]*\)(?: const)? )?"
)


class ModelError(Exception):
    """A model file cannot be loaded, cut or benchmarked; the message names the file and the cause."""

    def __init__(self, path: Path | str, cause: str) -> None:
        super().__init__(f"{path}: {cause}")
        self.path = str(path)
        self.cause = cause


class RuntimeRefusal(ModelError):
    """onnxruntime itself refuses to load or run the model; the cause quotes it."""


def dims_hint(names: list[str], default: int) -> str:
    """What to add to onnxruntime's refusal when symbolic dimensions were left at their default; or nothing."""
    return f" ({', '.join(names)} left at {default}: give them with --dlbricks-dim)" if names else ""


def named_error(error: BaseException) -> str:
    """An error's type and :func:`describe_error` message, for errors no check foresaw: the type says what."""
    return f"{type(error).__name__}: {describe_error(error)}"


def describe_error(error: BaseException) -> str:
    """A library's error message on one line, without onnxruntime's error codes, C++ source locations and
    signatures, cut to :data:`MAX_CAUSE_CHARS`."""
    text = _RUNTIME_NOISE.sub("", " ".join(str(error).split())) or type(error).__name__
    return text if len(text) <= MAX_CAUSE_CHARS else text[: MAX_CAUSE_CHARS - 3] + "..."
