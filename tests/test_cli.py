"""Unit tests of ``python -m pytest_dlbricks report``: estimates of every model on every machine of a store."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pytest_dlbricks.core.identity import Identity
from pytest_dlbricks.core.wording import counted
from pytest_dlbricks.reporting.machines import store_report
from pytest_dlbricks.storage.store import BrickStore
from pytest_dlbricks.storage.store_records import ModelManifest, StoredBrick
from pytest_dlbricks.timing.overhead import CallOverhead
from pytest_dlbricks.wiring.cli import main

WHEN = datetime(2025, 3, 1, tzinfo=UTC)
TIMING = {"onnxruntime": "1.31.1", "providers": ["CPUExecutionProvider"], "intra_op_threads": 0, "optimization": "all"}
FAST = Identity({"cpu": "Fast CPU", "cores": 16, "arch": "x86_64", "system": "Linux", "python": "CPython 3.11"}, TIMING)
SLOW = Identity({"cpu": "Slow CPU", "cores": 2, "arch": "aarch64", "system": "Linux", "python": "CPython 3.11"}, TIMING)
SINGLE = Identity(
    {"cpu": "Lone CPU", "cores": 1, "arch": "x86_64", "system": "Linux", "python": "CPython 3.11"},
    {**TIMING, "intra_op_threads": 1},
)


def put(store: BrickStore, identity: Identity, times_us: dict[str, float]) -> None:
    shelf = store.shelf(identity)
    for signature, microseconds in times_us.items():
        stats = {"median": microseconds * 1e-6, "min": microseconds * 0.5e-6}
        shelf.put(StoredBrick(signature, f"Op-{signature[:8]}", stats, "CPUExecutionProvider", WHEN))


@pytest.fixture
def store(tmp_path: Path) -> BrickStore:
    """Two machines; a diamond model measured on both, a chain only fully measured on the fast one."""
    store = BrickStore(tmp_path / "store")
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    diamond = tuple((signature, 1, 1) for signature in (a, b, b, a))
    store.save_model(ModelManifest("models/diamond.onnx", 1, {}, 4, diamond, ((0, 1), (0, 2), (1, 3), (2, 3))))
    store.save_model(ModelManifest("models/chain.onnx", 2, {"batch": 4}, 4, ((c, 1, 1),) * 2, ((0, 1),)))
    put(store, FAST, {a: 10.0, b: 20.0, c: 5.0})
    put(store, SLOW, {a: 30.0, b: 50.0})
    return store


def test_estimates_take_off_each_shelf_s_call_overhead(store: BrickStore) -> None:
    """Each brick paid one call when timed; the model pays one: 4 bricks less 3 calls of 2 us on the fast shelf."""
    store.shelf(FAST).put_overhead(CallOverhead(fixed_s=2e-6))
    diamond = next(line for line in store_report(store).splitlines() if line.startswith("models/diamond.onnx"))
    assert diamond.split()[3:] == ["54.0", "us", "160.0", "us", "2.96"]


def test_each_brick_of_a_shelf_pays_its_call_cost_at_the_speed_it_was_timed_at(store: BrickStore) -> None:
    """Brick a was timed while the reference took twice as long as beside the call cost: it paid 4 us, and
    the model's own call, at the speed of the only brick with a reference, counts 4 us too."""
    shelf = store.shelf(FAST)
    shelf.put_overhead(CallOverhead(fixed_s=2e-6, reference_s=1e-5))
    stored = shelf.get("a" * 64)
    assert stored is not None
    shelf.put(dataclasses.replace(stored, reference_s=2e-5))
    diamond = next(line for line in store_report(store).splitlines() if line.startswith("models/diamond.onnx"))
    assert diamond.split()[3:5] == ["52.0", "us"], "60 us less 2 x 4 us (a) and 2 x 2 us (b), plus 4 us"


def test_a_call_cost_stored_before_the_reference_was_timed_beside_it_still_counts(store: BrickStore) -> None:
    store.shelf(FAST).put_overhead(CallOverhead(fixed_s=2e-6))
    path = store.shelf(FAST).path / "overhead.json"
    record = json.loads(path.read_text())
    del record["overhead"]["reference_s"]
    path.write_text(json.dumps(record))
    diamond = next(line for line in store_report(store).splitlines() if line.startswith("models/diamond.onnx"))
    assert diamond.split()[3:5] == ["54.0", "us"]


def test_report_puts_machines_side_by_side(store: BrickStore) -> None:
    text = store_report(store)
    lines = text.splitlines()
    assert lines[0] == (
        f"Brick store {store.root}: 2 models, sequential estimates from median brick times,"
        " from 2 combinations of machine and settings:"
    )
    assert lines[1] == (
        "[1] Fast CPU, 16 cores, x86_64 Linux, CPython 3.11; onnxruntime 1.31.1 CPUExecutionProvider,"
        " default threads, optimization all; 3 bricks"
    )
    assert lines[2].startswith("[2] Slow CPU, 2 cores, aarch64 Linux") and lines[2].endswith("; 2 bricks")
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == ["Model", "G", "Dims", "[1]", "[2]", "[2]/[1]"]
    assert table[2].split() == ["models/chain.onnx", "2", "batch=4", "10.0", "us", "-", "-"]
    assert table[3].split() == ["models/diamond.onnx", "1", "-", "60.0", "us", "160.0", "us", "2.67"]
    assert text.endswith("-: the machine has not measured every brick of the model")


def test_report_of_critical_paths_and_another_statistic(store: BrickStore) -> None:
    table = store_report(store, statistic="min", critical_path=True).splitlines()
    assert "critical-path estimates from min brick times" in table[0]
    diamond = next(line for line in table if line.startswith("models/diamond.onnx"))
    assert diamond.split()[3:] == ["20.0", "us", "55.0", "us", "2.75"]


def test_an_empty_store_says_so(tmp_path: Path) -> None:
    assert store_report(BrickStore(tmp_path)).splitlines() == [
        f"Brick store {tmp_path}: 0 models, sequential estimates from median brick times,"
        " from 0 combinations of machine and settings:"
    ]


def test_counts_of_one_read_in_the_singular(tmp_path: Path) -> None:
    store = BrickStore(tmp_path)
    store.save_model(ModelManifest("models/chain.onnx", 2, {}, 2, (("c" * 64, 1, 1),)))
    put(store, SINGLE, {"c" * 64: 5.0})
    lines = store_report(store).splitlines()
    assert lines[0] == (
        f"Brick store {tmp_path}: 1 model, sequential estimates from median brick times,"
        " from 1 combination of machine and settings:"
    )
    assert lines[1] == (
        "[1] Lone CPU, 1 core, x86_64 Linux, CPython 3.11; onnxruntime 1.31.1 CPUExecutionProvider, 1 thread,"
        " optimization all; 1 brick"
    )
    assert [counted(1, "shelves"), counted(1, "brick times"), counted(2, "shelves")] == [
        "1 shelf",
        "1 brick time",
        "2 shelves",
    ], "counts kept under plural keys (damaged records by kind)"


def test_main_refuses_a_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nowhere")]) == 1
    assert "report: error: no brick store at" in capsys.readouterr().err


def test_python_dash_m_runs_the_report(store: BrickStore) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest_dlbricks", "report", str(store.root)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "models/diamond.onnx" in result.stdout


def test_help_is_plain_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "``" not in text and ":func:" not in text, "no reStructuredText markup"
    assert "merge the reports of shards, and report a brick store's models on every machine in it." in text
    for command in ("compose", "merge", "report"):
        assert f" {command} " in text


def test_a_model_with_windows_no_provider_runs_reads_unsupported_not_unmeasured(store: BrickStore) -> None:
    """A window without a brick (its provider refused it when the model was cut, as fp16 bricks on a CPU)."""
    a = "a" * 64
    store.save_model(ModelManifest("models/half.onnx", 1, {}, 2, ((a, 1, 1), None), ((0, 1),)))
    text = store_report(store)
    half = next(line for line in text.splitlines() if line.startswith("models/half.onnx"))
    assert half.split()[3:] == ["unsupported", "unsupported", "-"]
    assert text.endswith(
        "-: the machine has not measured every brick of the model\n"
        "unsupported: some layers have no brick the provider runs at the model's types"
    )
