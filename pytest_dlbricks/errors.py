"""The error raised for anything wrong with a user's model, so that callers can report it cleanly."""

from __future__ import annotations

import re
from pathlib import Path

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


def runtime_cause(error: BaseException) -> str:
    """onnxruntime's error message on one line, without error codes, C++ source locations and signatures."""
    text = " ".join(str(error).split()) or type(error).__name__
    return _RUNTIME_NOISE.sub("", text)
