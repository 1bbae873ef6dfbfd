"""Files written atomically (a temporary file renamed over the target), with the permissions the user's umask
gives, so that a reader, or a run interrupted at any point, never sees half a file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_json(path: Path, data: object) -> None:
    """Write ``data`` as JSON so that readers never see a half-written file (temporary file, then rename); on
    one line, as indenting takes Python's JSON encoder off its fast path (a re-run of 44 models wrote its 3 MB
    report in 0.15 s indented, 0.06 s on one line)."""
    write_text(path, json.dumps(data, allow_nan=False) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write ``text`` so that readers never see a half-written file (temporary file, then rename)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` so that readers never see a half-written file (temporary file, then rename);
    a link at ``path`` is replaced, never written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; a report is not
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
