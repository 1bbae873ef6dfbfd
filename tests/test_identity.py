"""Unit tests of run identities: what keys the store and what two compared runs must share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnxruntime
import pytest

from pytest_dlbricks.core import identity
from pytest_dlbricks.core.identity import BRICK_METHOD, describe_machine, describe_timing, differences, identify
from pytest_dlbricks.core.settings import Settings

#: pytest-benchmark's machine_info, trimmed, with py-cpuinfo's answer under "cpu".
MACHINE_INFO: dict[str, Any] = {
    "node": "ci-runner-17",
    "processor": "x86_64",
    "machine": "x86_64",
    "python_implementation": "CPython",
    "python_version": "3.11.7",
    "system": "Linux",
    "release": "6.1.0",
    "cpu": {"brand_raw": "AMD EPYC 7B13", "count": 8, "hz_actual": [2450000000, 0], "flags": ["avx2"]},
}


def test_identity_keeps_what_changes_a_brick_time() -> None:
    identity = identify(MACHINE_INFO, Settings(granularity=2, intra_op_threads=4), "time.perf_counter")
    assert identity.machine == {
        "cpu": "AMD EPYC 7B13",
        "cores": 8,
        "arch": "x86_64",
        "system": "Linux",
        "python": "CPython 3.11",
    }
    assert identity.timing == {
        "onnxruntime": onnxruntime.__version__,
        "providers": ["CPUExecutionProvider"],
        "intra_op_threads": 4,
        "thread_pool": "shared",
        "optimization": "all",
        "timer": "time.perf_counter",
        "method": BRICK_METHOD,
    }


def test_granularity_statistic_and_host_name_do_not_change_the_key() -> None:
    base = identify(MACHINE_INFO, Settings(granularity=1), "time.perf_counter")
    same = [
        identify(MACHINE_INFO, Settings(granularity=5, statistic="min", dims={"batch": 2}), "time.perf_counter"),
        identify(
            {**MACHINE_INFO, "node": "ci-runner-3", "release": "6.2"}, Settings(granularity=1), "time.perf_counter"
        ),
        identify(
            {**MACHINE_INFO, "cpu": {**MACHINE_INFO["cpu"], "hz_actual": [1, 0]}},
            Settings(granularity=1),
            "time.perf_counter",
        ),
    ]
    assert all(identity.key == base.key for identity in same)
    other = [
        identify(MACHINE_INFO, Settings(granularity=1, optimization="basic"), "time.perf_counter"),
        identify(MACHINE_INFO, Settings(granularity=1), "time.process_time"),
        identify({**MACHINE_INFO, "cpu": {"brand_raw": "AMD EPYC 7B13", "count": 4}}, Settings(1), "time.perf_counter"),
        identify({**MACHINE_INFO, "python_version": "3.12.1"}, Settings(granularity=1), "time.perf_counter"),
    ]
    assert len({identity.key for identity in [base, *other]}) == 5
    assert len(base.key) == 12


def test_a_machine_without_cpu_details_still_has_an_identity() -> None:
    identity = identify({}, Settings(granularity=1), "t")
    assert identity.machine["cpu"] == "unknown" and identity.machine["cores"] is None
    assert "unknown, ? cores" in describe_machine(identity.machine)


def test_differences_name_every_mismatch_readably() -> None:
    now = identify(MACHINE_INFO, Settings(granularity=2, dims={"batch": 1}), "time.perf_counter")
    then = identify(
        {**MACHINE_INFO, "cpu": {"brand_raw": "Intel Xeon", "count": 2}},
        Settings(granularity=3, intra_op_threads=1, dims={"batch": 8}),
        "time.perf_counter",
    )
    found = differences(
        now.conditions(Settings(granularity=2, dims={"batch": 1})),
        then.conditions(Settings(granularity=3, dims={"batch": 8}, cut="original", statistic="min")),
    )
    assert found == [
        "CPU model 'Intel Xeon' then, 'AMD EPYC 7B13' now",
        "CPU cores 2 then, 8 now",
        "intra-op threads 1 then, 0 now",
        "granularity 3 then, 2 now",
        "symbolic dimensions batch=8 then, batch=1 now",
        "cut 'original' then, 'optimized' now",
        "statistic 'min' then, 'median' now",
    ]
    assert differences(now.conditions(Settings(granularity=2)), now.conditions(Settings(granularity=2))) == []


def test_descriptions_for_people() -> None:
    identity = identify(MACHINE_INFO, Settings(granularity=1), "time.perf_counter")
    assert describe_machine(identity.machine) == "AMD EPYC 7B13, 8 cores, x86_64 Linux, CPython 3.11"
    assert describe_timing(identity.timing) == (
        f"onnxruntime {onnxruntime.__version__} CPUExecutionProvider, default threads, optimization all"
    )


def test_cpuinfo_fields_are_read_from_the_first_processor_and_absent_ones_are_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 avx512f\n\nprocessor\t: 1\n")
    monkeypatch.setattr(identity, "CPUINFO", info)
    assert identity.cpuinfo_field("model name") == "Some CPU"
    assert identity.cpuinfo_field("flags") == "fpu avx2 avx512f"
    assert identity.cpuinfo_field("microcode") is None
    monkeypatch.setattr(identity, "CPUINFO", tmp_path / "absent")
    assert identity.cpuinfo_field("flags") is None, "not Linux: no such file"
