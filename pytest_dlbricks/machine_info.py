"""pytest-benchmark's machine info, kept for as long as the machine runs: the store's shelf is found by it.

pytest-benchmark describes the processor with py-cpuinfo, which runs cpuid, ``lscpu`` and ``dmesg`` in
processes of their own: about 0.4 s of every run, more than the rest of a re-run whose brick times all
come from the store. The processor does not change while the machine runs, so the description is kept
in the store (``machine-info/<key>.json``) under a key over what could change it: the boot (Linux's boot
id), the host name, the Python that runs, and the versions of pytest-benchmark and py-cpuinfo. Where no
boot id can be read, nothing is kept. A record that cannot be read, or is not one, is a miss counted in
:attr:`MachineInfoCache.discarded`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

from .identity import digest
from .store import write_json

VERSION = 1
#: Where Linux says which boot this is: a new random id each time the machine starts.
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
#: The sub-folder of the store that keeps the records.
FOLDER = "machine-info"
#: The distributions whose versions decide how the machine is described (py-cpuinfo goes by both names).
DESCRIBED_BY = ("pytest-benchmark", "py-cpuinfo", "py-cpuinfo2")
#: What reading a damaged record may raise.
_DAMAGE = (ValueError, KeyError, TypeError, RecursionError)


class MachineInfoCache:
    """The machine info of this boot of this machine, one small JSON record in ``folder`` (the store's
    ``machine-info/``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        #: Records found damaged (and the machine described again).
        self.discarded = 0

    def get(self) -> dict[str, Any] | None:
        """The machine info kept for this boot, or None."""
        record = self._record
        if record is None:
            return None
        try:
            content = record.read_bytes()
        except OSError:  # absent, or no folder to hold it: a miss, no damage
            return None
        try:
            data = json.loads(content.decode("utf-8"))
            if data["version"] != VERSION or not isinstance(data["machine_info"], dict):
                raise ValueError("not a record of this version")
            return dict(data["machine_info"])
        except _DAMAGE:
            self.discarded += 1
            return None

    def put(self, machine_info: dict[str, Any]) -> None:
        """Keep the machine info for the rest of this boot; one that cannot be kept costs the next run its time."""
        record = self._record
        if record is not None:
            with contextlib.suppress(OSError, TypeError, ValueError):
                write_json(record, {"version": VERSION, "machine_info": machine_info})

    @cached_property
    def _record(self) -> Path | None:
        stamp = boot_stamp()
        return None if stamp is None else self.folder / f"{digest(stamp)[:32]}.json"


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
        "versions": [_version(name) for name in DESCRIBED_BY],
    }


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
