"""pytest-benchmark's machine info kept for the machine's boot: a re-run does not run py-cpuinfo again."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_benchmark.plugin

from conftest import run_dlbricks
from pytest_dlbricks.storage import machine_info
from pytest_dlbricks.storage.machine_info import MachineInfoCache

#: What the stubbed py-cpuinfo says of the processor.
CPU = {"brand_raw": "Stub CPU", "count": 2}


@pytest.fixture
def boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A boot id file of our own, as Linux keeps one: rewrite it to restart the machine."""
    path = tmp_path / "boot_id"
    path.write_text("first boot\n")
    monkeypatch.setattr(machine_info, "BOOT_ID", path)
    return path


@pytest.fixture
def cpuinfo_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """py-cpuinfo stubbed by pytest-benchmark's own hook: each call is counted."""
    calls: list[int] = []

    def get_cpu_info() -> dict[str, object]:
        calls.append(1)
        return dict(CPU)

    monkeypatch.setattr(pytest_benchmark.plugin, "get_cpu_info", get_cpu_info)
    return calls


def test_the_machine_info_is_kept_for_the_boot(tmp_path: Path, boot: Path) -> None:
    record = tmp_path / "machine-info.json"
    cache = MachineInfoCache(record)
    assert cache.get() is None
    cache.put({"cpu": CPU, "node": "here"})
    assert MachineInfoCache(record).get() == {"cpu": CPU, "node": "here"}
    boot.write_text("second boot\n")
    later = MachineInfoCache(record)
    assert later.get() is None, "the machine restarted: described again"
    assert later.discarded == 0, "another boot's record is no damage"
    later.put({"cpu": CPU, "node": "there"})
    assert MachineInfoCache(record).get() == {"cpu": CPU, "node": "there"}, "one record, the last boot's"


def test_nothing_is_kept_where_the_boot_cannot_be_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine_info, "BOOT_ID", tmp_path / "absent")
    cache = MachineInfoCache(tmp_path / "machine-info.json")
    cache.put({"cpu": CPU})
    assert cache.get() is None
    assert not (tmp_path / "machine-info.json").exists()


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"version": 1, "machine_info": []}', b"\xff", b'{"version": 1}'])
def test_a_damaged_record_is_a_miss_counted(tmp_path: Path, boot: Path, content: bytes) -> None:
    record = tmp_path / "machine-info.json"
    MachineInfoCache(record).put({"cpu": CPU})
    record.write_bytes(content)
    again = MachineInfoCache(record)
    assert again.get() is None
    assert again.discarded == 1


def test_a_machine_info_changed_in_its_record_is_damage(tmp_path: Path, boot: Path) -> None:
    """Read as it stands, it would file brick times on another machine's shelf until the machine restarts."""
    record = tmp_path / "machine-info.json"
    MachineInfoCache(record).put({"cpu": CPU})
    record.write_text(record.read_text().replace('"count": 2', '"count": 3'))
    again = MachineInfoCache(record)
    assert again.get() is None
    assert again.discarded == 1


def test_a_rerun_does_not_describe_the_machine_again(
    pytester: pytest.Pytester, sample_models: list[Path], boot: Path, cpuinfo_calls: list[int]
) -> None:
    args = ("--dlbricks-granularity=2", "--dlbricks-precision=off", "models/mlp.onnx")
    run_dlbricks(pytester, *args).assert_outcomes(passed=3)
    assert len(cpuinfo_calls) == 1
    again = run_dlbricks(pytester, *args)
    again.assert_outcomes(deselected=3)
    assert len(cpuinfo_calls) == 1, "the same boot: the machine info kept in the store"
    boot.write_text("second boot\n")
    run_dlbricks(pytester, *args).assert_outcomes(deselected=3)
    assert len(cpuinfo_calls) == 2, "a new boot: the machine described again, and found the same"


def test_machine_info_a_conftest_makes_is_not_kept(
    pytester: pytest.Pytester, sample_models: list[Path], boot: Path, cpuinfo_calls: list[int]
) -> None:
    pytester.makeconftest(
        """
        calls = []

        def pytest_benchmark_generate_machine_info():
            calls.append(1)
            return {"cpu": {"brand_raw": "Conftest CPU", "count": 2}, "node": f"run {len(calls)}"}
        """
    )
    args = ("--dlbricks-granularity=2", "--dlbricks-precision=off", "models/mlp.onnx")
    run_dlbricks(pytester, *args).assert_outcomes(passed=3)
    run_dlbricks(pytester, *args).assert_outcomes(deselected=3)
    assert not (pytester.path / ".benchmarks" / "dlbricks" / machine_info.FILE).exists()
    assert cpuinfo_calls == []
