"""What makes two brick times comparable: the machine they were measured on and the settings that change them.

A brick's time depends on its signature (operators, attributes, shapes), on the machine, and on how
it runs: onnxruntime's version, execution provider, threads and graph optimization level, the timer,
and the way pytest-dlbricks builds and times a brick. It does not depend on the granularity (a brick
is the same brick whichever window size found it) nor on the statistic (every statistic is kept).
The store keys brick times by all of this; comparisons of two runs also need the same granularity,
dimensions, cut (which graph bricks come from) and statistic, because those change the estimates.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .settings import Settings
from .wording import plural

#: Bump whenever building or timing a brick changes (synthetic values, session options, timing loop):
#: times measured the old way then stop being reused or compared without notice. 3: each synthetic weight of a
#: brick has memory of its own, and ZipMap's maps are bound.
BRICK_METHOD = 3
#: Bump whenever the graph a model is cut from changes for the same file and settings: its estimates
#: then change with no change of the model, so runs of the two ways are not compared. 2: a file with
#: symbolic sizes is cut from the graph onnxruntime runs for it as it declares them, where that graph
#: holds more nodes (see :func:`.loading._declared_if_it_runs_more`).
CUT_METHOD = 2

#: Conditions that older versions did not record, as they were: a saved run or report without them ran so.
_UNRECORDED = {("model", "cut_method"): 1}

#: Readable names of the fields that must match for two runs to be compared.
_FIELDS = {
    ("machine", "cpu"): "CPU model",
    ("machine", "cores"): "CPU cores",
    ("machine", "arch"): "architecture",
    ("machine", "system"): "operating system",
    ("machine", "python"): "Python",
    ("timing", "onnxruntime"): "onnxruntime version",
    ("timing", "providers"): "execution providers",
    ("timing", "intra_op_threads"): "intra-op threads",
    ("timing", "thread_pool"): "thread pool",
    ("timing", "optimization"): "optimization level",
    ("timing", "timer"): "timer",
    ("timing", "method"): "brick method",
    ("timing", "cost"): "cost",
    ("timing", "simulator"): "simulator",
    ("model", "granularity"): "granularity",
    ("model", "dims"): "symbolic dimensions",
    ("model", "cut"): "cut",
    ("model", "cut_method"): "cut method",
    ("model", "statistic"): "statistic",
}


@dataclass(frozen=True)
class Identity:
    """The machine and the timing settings that brick times are only valid for."""

    machine: Mapping[str, Any]
    timing: Mapping[str, Any]

    @property
    def key(self) -> str:
        """Short stable digest of the identity, to name folders."""
        return digest({"machine": self.machine, "timing": self.timing})[:12]

    def conditions(self, settings: Settings) -> dict[str, Any]:
        """Everything two runs must share to be compared: this identity, and what changes the estimates:
        granularity, dimensions, the graph cut (and this version's way of cutting) and the statistic."""
        return {
            "machine": dict(self.machine),
            "timing": dict(self.timing),
            "model": {
                "granularity": settings.granularity,
                "dims": dict(sorted(settings.dims.items())),
                "cut": settings.cut,
                "cut_method": CUT_METHOD,
                "statistic": settings.statistic,
            },
        }


def identify(machine_info: Mapping[str, Any], settings: Settings, timer: str, valgrind: str | None = None) -> Identity:
    """The identity of this run, from pytest-benchmark's ``machine_info`` (py-cpuinfo under ``cpu``); a
    simulated run's (see :data:`.settings.COST_MODES`) also holds the version of ``valgrind`` that counted."""
    cpu = machine_info.get("cpu") or {}
    machine = {
        "cpu": cpu.get("brand_raw") or machine_info.get("processor") or "unknown",
        "cores": cpu.get("count"),
        "arch": machine_info.get("machine"),
        "system": machine_info.get("system"),
        "python": f"{machine_info.get('python_implementation')} {_major_minor(machine_info.get('python_version'))}",
    }
    described = settings.describe()
    timing = {
        "onnxruntime": described["onnxruntime"],
        "providers": list(settings.providers),
        "intra_op_threads": settings.intra_op_threads,
        "thread_pool": settings.thread_pool,
        "optimization": settings.optimization,
        "timer": timer,
        "method": BRICK_METHOD,
    }
    if settings.cost != "wall-clock":  # wall-clock records keep the identity they always had
        timing["cost"] = settings.cost
        timing["simulator"] = simulator(valgrind, cpu.get("flags") or [])
    return Identity(machine, timing)


#: Where Linux describes the processor.
CPUINFO = Path("/proc/cpuinfo")


def cpuinfo_field(name: str) -> str | None:
    """The value Linux gives ``name`` (``model name``, ``flags``) for the first processor; None where it gives none."""
    try:
        with CPUINFO.open(encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.partition(":")[0].strip() == name:
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


#: The CPU features that decide which kernels onnxruntime's MLAS picks under valgrind (which hides AVX-512).
SIMULATED_FEATURES = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni")


def simulator(valgrind: str | None, flags: Sequence[str]) -> str:
    """What simulated costs depend on besides onnxruntime: valgrind's version and the CPU features it passes on."""
    features = "+".join(flag for flag in SIMULATED_FEATURES if flag in flags) or "none"
    return f"valgrind {valgrind or '?'}, {features}"


def differences(now: Mapping[str, Any], then: Mapping[str, Any]) -> list[str]:
    """What differs between two runs' conditions (see :meth:`Identity.conditions`), one readable phrase each."""
    found = []
    for (part, name), label in _FIELDS.items():
        current, before = (_recorded(conditions, part, name) for conditions in (now, then))
        if current != before:
            found.append(f"{label} {_show(before)} then, {_show(current)} now")
    return found


def _recorded(conditions: Mapping[str, Any], part: str, name: str) -> Any:
    value = (conditions.get(part) or {}).get(name)
    return _UNRECORDED.get((part, name)) if value is None else value


def describe_machine(machine: Mapping[str, Any]) -> str:
    cores = machine.get("cores")
    return (
        f"{machine.get('cpu')}, {'? cores' if cores is None else plural(cores, 'core')},"
        f" {machine.get('arch')} {machine.get('system')}, {machine.get('python')}"
    )


def describe_timing(timing: Mapping[str, Any]) -> str:
    threads = timing.get("intra_op_threads")
    return (
        f"onnxruntime {timing.get('onnxruntime')} {'+'.join(timing.get('providers') or [])},"
        f" {plural(threads, 'thread') if threads else 'default threads'}, optimization {timing.get('optimization')}"
    )


def digest(data: object) -> str:
    """SHA-256 of a canonical JSON form of ``data``."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _major_minor(version: object) -> str:
    return ".".join(str(version).split(".")[:2])


def _show(value: object) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return "+".join(map(str, value))
    return repr(value) if isinstance(value, str) else str(value)
