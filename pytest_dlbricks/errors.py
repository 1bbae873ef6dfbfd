"""The error raised for anything wrong with a user's model, so that callers can report it cleanly."""

from __future__ import annotations

from pathlib import Path


class ModelError(Exception):
    """A model file cannot be loaded, cut or benchmarked; the message names the file and the cause."""

    def __init__(self, path: Path | str, cause: str) -> None:
        super().__init__(f"{path}: {cause}")
        self.path = str(path)
        self.cause = cause
