"""pytest-benchmark's machine info, kept for as long as the machine runs: the store's shelf is found by it.

pytest-benchmark describes the processor with py-cpuinfo, which runs cpuid, ``lscpu`` and ``dmesg`` in
processes of their own: 0.4 s to 0.6 s of every run on a 2-core machine, a fifth of a re-run whose brick
times all come from the store. The processor does not change while the machine runs, so the description
is kept in the store (``machine-info.json``) with a stamp of what could change it: the boot (Linux's boot
id), the host name, the Python that runs, and the source files of pytest-benchmark's hooks and of
py-cpuinfo (an upgrade changes them). One record
only, the last: a store that CI carries from job to job, each on a fresh machine, does not grow with
them. Where no boot id can be read, nothing is kept. A record that cannot be read, or is not one, is a
miss counted in :attr:`MachineInfoCache.discarded`; one of another boot is a miss, no damage.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import sys
from functools import cached_property
from pathlib import Path
from typing import Any

from ..core.identity import digest
from .store import write_json

VERSION = 1
#: Where Linux says which boot this is: a new random id each time the machine starts.
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
#: The file of the store that keeps the record.
FILE = "machine-info.json"
#: The modules that describe the machine: a new version of either may describe it otherwise.
DESCRIBED_BY = ("pytest_benchmark.plugin", "cpuinfo")
#: What reading a damaged record may raise.
_DAMAGE = (ValueError, KeyError, TypeError, RecursionError)


class MachineInfoCache:
    """The machine info of this boot of this machine, a small JSON record at ``path`` (the store's
    ``machine-info.json``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: Records found damaged (and the machine described again).
        self.discarded = 0

    def get(self) -> dict[str, Any] | None:
        """The machine info kept for this boot, or None."""
        if self._stamp is None:
            return None
        try:
            content = self.path.read_bytes()
        except OSError:  # absent, or no folder to hold it: a miss, no damage
            return None
        try:
            data = json.loads(content.decode("utf-8"))
            if data["version"] != VERSION or not isinstance(data["machine_info"], dict):
                raise ValueError("not a record of this version")
            if data["digest"] != digest(data["machine_info"]):  # the shelf would be another machine's
                raise ValueError("the machine info is not the one kept")
            return dict(data["machine_info"]) if data["stamp"] == self._stamp else None
        except _DAMAGE:
            self.discarded += 1
            return None

    def put(self, machine_info: dict[str, Any]) -> None:
        """Keep the machine info for the rest of this boot; one that cannot be kept costs the next run its time."""
        if self._stamp is not None:
            with contextlib.suppress(OSError, TypeError, ValueError):
                record = {"stamp": self._stamp, "digest": digest(machine_info), "machine_info": machine_info}
                write_json(self.path, {"version": VERSION, **record})

    @cached_property
    def _stamp(self) -> dict[str, Any] | None:
        return boot_stamp()


def boot_stamp() -> dict[str, Any] | None:
    """What the machine info of this run depends on, or None where the boot cannot be told apart."""
    try:
        boot = BOOT_ID.read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return None
    if not boot:
        return None
    return {
        "boot": boot,
        "node": platform.node(),
        "cores": os.cpu_count(),
        "python": [sys.executable, sys.version],
        "describers": [_source_stamp(name) for name in DESCRIBED_BY],
    }


def _source_stamp(module: str) -> list[object] | None:
    """Where a module's source is, its size and modification time: an upgrade changes them. Found without
    importing it (py-cpuinfo is imported only to describe the machine)."""
    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        status = os.stat(origin) if origin else None
    except (ImportError, ValueError, OSError):
        return None
    return None if status is None else [origin, status.st_size, status.st_mtime_ns]
