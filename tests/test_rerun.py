"""A re-run with nothing changed, end to end through ``pytester``: it reads, runs and measures nothing it need not.

Every brick time and every cut model comes from the store; the machine info from the store too (see
:mod:`pytest_dlbricks.storage.machine_info`); onnxruntime is not asked for a session, nor for its thread pool.
What is left is composing the stored figures and saying, in the verdict, which of the run's own readings
it did not take.
"""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest
import pytest_benchmark.plugin

from conftest import run_dlbricks
from pytest_dlbricks.core import runtime
from pytest_dlbricks.storage import file_digests, machine_info
from pytest_dlbricks.timing import probes, speed_trace
from pytest_dlbricks.wiring import engine

ARGS = ("--dlbricks-granularity=2", "--dlbricks-precision=off", "--dlbricks-json=r.json", "models/mlp.onnx")


def never(what: str) -> Any:
    def fail(*_: object, **__: object) -> None:
        raise AssertionError(f"a re-run with nothing changed {what}")

    return fail


def test_a_rerun_with_nothing_changed_reads_runs_and_measures_nothing_it_need_not(
    pytester: pytest.Pytester, sample_models: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    boot = pytester.path / "boot_id"
    boot.write_text("this boot\n")
    monkeypatch.setattr(machine_info, "BOOT_ID", boot)
    monkeypatch.setattr(file_digests, "SETTLED_NS", -(10**18))  # the models were written long before the run
    first = run_dlbricks(pytester, *ARGS)
    first.assert_outcomes(passed=3)
    measured = (pytester.path / "r.json").read_text()

    read: list[str] = []
    original_open, original_read_bytes = builtins.open, Path.read_bytes

    def recording_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(str(file))
        return original_open(file, *args, **kwargs)

    def recording_read_bytes(path: Path) -> bytes:
        read.append(str(path))
        return original_read_bytes(path)

    monkeypatch.setattr(builtins, "open", recording_open)
    monkeypatch.setattr(Path, "read_bytes", recording_read_bytes)
    monkeypatch.setattr(file_digests, "_digest_file", never("hashed a model file"))
    monkeypatch.setattr(pytest_benchmark.plugin, "get_cpu_info", never("described the machine with py-cpuinfo"))
    monkeypatch.setattr(engine, "load_model", never("loaded a model"))
    monkeypatch.setattr(engine, "measure_call_overhead", never("measured the call overhead"))
    monkeypatch.setattr(engine, "measure_run", never("measured the machine's peak"))
    monkeypatch.setattr(engine, "detect_executor", never("detected the parallel executor"))
    monkeypatch.setattr(probes, "detect_executor", never("detected the parallel executor"))
    monkeypatch.setattr(speed_trace.SpeedTrace, "sample_if_due", never("traced the machine's speed"))
    monkeypatch.setattr(runtime.ort, "InferenceSession", never("created an onnxruntime session"))
    monkeypatch.setattr(runtime._pybind_state, "set_global_thread_pool_sizes", never("set up onnxruntime's pool"))
    monkeypatch.setattr(runtime, "_shared_threads", None)  # as in a process of its own
    monkeypatch.setattr(runtime, "_asked", None)

    again = run_dlbricks(pytester, *ARGS)
    again.assert_outcomes(deselected=3)
    assert again.ret == pytest.ExitCode.OK
    assert not [path for path in read if path.endswith(".onnx")], "no model file is read again"
    # The estimates come from the stored figures, and the verdict says which readings of its own it lacks: the
    # speed part is the measuring run's (its bricks timed again), named so, its load unknown (its rounds too short).
    again.stdout.fnmatch_lines(
        ["*models/mlp.onnx * yes", "dlbricks verdict: *speed and bricks timed again in the runs that timed the*"]
    )
    assert "not measured: load" in " ".join(again.stdout.str().split()), "the line is wrapped to the terminal"
    assert '"sequential_s"' in measured
