"""A damaged brick store is never a crash and never changes results silently.

The fuzzer fills a store with one run, damages every file of it (brick times, call overhead,
executor detection, identity, cut plans, models), each with one of the mutations (every mutation is used in every case,
dealt out in a seeded order), runs again and checks that the run completes, that every model gets a
finite estimate, that the report's summary counts what was discarded or repaired, and that the run
after it finds the store whole again. ``DLBRICKS_STORE_FUZZ_CASES=50 pytest tests/test_store_damage.py``
runs more cases.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tiny_models
from test_plugin import run

from pytest_dlbricks.storage import file_digests
from pytest_dlbricks.storage.store import BrickStore
from pytest_dlbricks.wiring.cli import main

SEEDS = range(int(os.environ.get("DLBRICKS_STORE_FUZZ_CASES", "3")))
#: Quick timing reaches no precision, and a brick is reused only by runs asking no more than it reached: none.
STORE = (
    "--dlbricks-store=store",
    "--dlbricks-precision=off",
    "--dlbricks-granularity=2",
    "--dlbricks-json=r.json",
    "models",
)
#: Values of every JSON type, to put where another type belongs.
OTHER_TYPES: tuple[Any, ...] = (None, True, 7, 2.5, "text", [], {}, [1, "a"], {"x": None})


def strict_json(path: Path) -> Any:
    """The JSON at ``path``, refusing NaN and infinities as strict parsers do."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def _places(document: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a JSON document, depth first."""
    found = []
    stack = [document]
    while stack:
        node = stack.pop()
        keys = list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
        for key in keys:
            found.append((node, key))
            stack.append(node[key])
    return found


def _edit(change: Callable[[random.Random, list[tuple[Any, Any]]], None]) -> Callable[[random.Random, bytes], bytes]:
    """A change to the JSON of a record; of a plan's, under its header line, which is kept."""

    def mutate(rng: random.Random, data: bytes) -> bytes:
        try:
            header, document = b"", json.loads(data)
        except ValueError:
            header, body = data.split(b"\n", 1)
            header, document = header + b"\n", json.loads(body)
        change(rng, _places(document))
        return header + json.dumps(document).encode()

    return mutate


def _wrong_type(rng: random.Random, places: list[tuple[Any, Any]]) -> None:
    container, key = rng.choice(places)
    container[key] = rng.choice([value for value in OTHER_TYPES if type(value) is not type(container[key])])


def _numbers(places: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    numbers = [(c, k) for c, k in places if isinstance(c[k], (int, float)) and not isinstance(c[k], bool)]
    return numbers or places


def _nan(rng: random.Random, places: list[tuple[Any, Any]]) -> None:
    container, key = rng.choice(_numbers(places))
    container[key] = rng.choice([math.nan, math.inf, -math.inf])


def _negative(rng: random.Random, places: list[tuple[Any, Any]]) -> None:
    container, key = rng.choice(_numbers(places))
    value = container[key]
    container[key] = -abs(value) - 1 if isinstance(value, (int, float)) and not isinstance(value, bool) else -1


def _missing_key(rng: random.Random, places: list[tuple[Any, Any]]) -> None:
    keyed = [(c, k) for c, k in places if isinstance(c, dict)]
    container, key = rng.choice(keyed)
    del container[key]


MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "truncate": lambda rng, data: data[: rng.randrange(len(data))],
    "random_bytes": lambda rng, data: rng.randbytes(len(data)),
    "wrong_type": _edit(_wrong_type),
    "nan": _edit(_nan),
    "negative": _edit(_negative),
    "missing_key": _edit(_missing_key),
    # Valid JSON nested deeper than Python's parser goes (it raises RecursionError, no ValueError).
    "nested_too_deep": lambda rng, data: b"[" * 100_000 + b"]" * 100_000,
}


def store_files(store: Path) -> list[Path]:
    """Every record of the store, of every kind."""
    files = sorted(path for path in store.rglob("*.json") if not path.name.startswith("."))
    folders = ("bricks", "plans", "graphs", "files", "models")
    kinds = {path.parent.name if path.parent.name in folders else path.name for path in files}
    records = {"identity.json", "overhead.json", "executor.json", "peak.json", "runs.json", "machine-info.json"}
    assert kinds == {*folders, *records}, kinds
    return files


@pytest.fixture
def filled(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store filled by one run of two tiny models, whose files count as long settled: their digests are kept."""
    monkeypatch.setattr(file_digests, "SETTLED_NS", -(10**18))
    (pytester.path / "models").mkdir()
    tiny_models.chain(pytester.path / "models")
    tiny_models.diamond(pytester.path / "models")
    assert run(pytester, *STORE).ret == pytest.ExitCode.OK
    return pytester.path / "store"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_run_over_a_damaged_store_completes_counts_and_repairs(
    pytester: pytest.Pytester, filled: Path, seed: int
) -> None:
    rng = random.Random(seed)
    files = store_files(filled)
    assert len(files) >= len(MUTATIONS)
    kinds = sorted(MUTATIONS) + rng.choices(sorted(MUTATIONS), k=len(files) - len(MUTATIONS))
    rng.shuffle(kinds)
    for path, kind in zip(files, kinds):
        path.write_bytes(MUTATIONS[kind](rng, path.read_bytes()))

    result = run(pytester, *STORE)

    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    report = strict_json(pytester.path / "r.json")
    assert len(report["models"]) == 2
    for model in report["models"]:
        assert model["complete"], model["path"]
        assert math.isfinite(model["sequential_s"]) and model["sequential_s"] > 0
    damage = report["summary"]["store_damage"]
    counted = sum(damage["discarded"].values()) + sum(damage["repaired"].values())
    assert 0 < counted <= len(files) + 1, damage  # + 1: a lost call overhead is also measured again
    result.stdout.fnmatch_lines(["dlbricks: store store: *damaged record*"])

    again = run(pytester, *STORE)
    assert again.ret == pytest.ExitCode.OK
    assert strict_json(pytester.path / "r.json")["summary"]["store_damage"] == {"discarded": {}, "repaired": {}}
    assert "damaged record" not in again.stdout.str()


def test_the_report_command_counts_what_it_skips(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(5)
    for path in store_files(filled):
        path.write_bytes(MUTATIONS["random_bytes"](rng, path.read_bytes()))
    assert main(["report", str(filled)]) == 0
    out = capsys.readouterr().out
    assert "0 models" in out and "from 0 combinations of machine and settings" in out
    assert "Skipped 3 damaged records (2 models, 1 shelf); a run on their machine repairs them." in out


def test_a_string_in_the_call_overhead_is_discarded_and_measured_again(pytester: pytest.Pytester, filled: Path) -> None:
    (overhead,) = filled.glob("*/overhead.json")
    data = json.loads(overhead.read_text())
    data["overhead"]["fixed_s"] = "fast"
    overhead.write_text(json.dumps(data))
    result = run(pytester, *STORE)
    assert result.ret == pytest.ExitCode.OK
    summary = strict_json(pytester.path / "r.json")["summary"]
    assert summary["store_damage"] == {"discarded": {"call overhead": 1}, "repaired": {"call overhead": 1}}
    assert summary["reused_bricks"] == summary["distinct_bricks"]
    assert summary["call_overhead_s"]["fixed_s"] > 0
    assert BrickStore(filled).shelves()[0].get_overhead() is not None


def test_a_detection_made_another_way_is_made_again_without_a_word_of_damage(
    pytester: pytest.Pytester, filled: Path
) -> None:
    """A new detection method (or thread count) is no damage: every user would be warned after an upgrade."""
    (stored,) = filled.glob("*/executor.json")
    record = json.loads(stored.read_text())
    record["conditions"]["method"] -= 1
    stored.write_text(json.dumps(record))
    result = run(pytester, *STORE)
    assert result.ret == pytest.ExitCode.OK
    report = strict_json(pytester.path / "r.json")
    assert report["summary"]["store_damage"] == {"discarded": {}, "repaired": {}}
    assert report["executor"]["reused"] is False and report["summary"]["reused_bricks"] > 0
    assert "executor detection" not in result.stdout.str()
    assert json.loads(stored.read_text())["measured_at"] == report["executor"]["measured_at"], "kept again"


def test_a_damaged_executor_detection_is_reported_and_made_again(pytester: pytest.Pytester, filled: Path) -> None:
    (stored,) = filled.glob("*/executor.json")
    record = json.loads(stored.read_text())
    record["detection"].update(ratio="slow")
    stored.write_text(json.dumps(record))
    result = run(pytester, *STORE)
    assert result.ret == pytest.ExitCode.OK
    report = strict_json(pytester.path / "r.json")
    assert report["summary"]["store_damage"] == {"discarded": {"executor detection": 1}, "repaired": {}}
    assert report["executor"]["reused"] is False and report["summary"]["reused_bricks"] > 0
    result.stdout.fnmatch_lines(["dlbricks: store store: *(1 executor detection)*"])
    assert json.loads(stored.read_text())["measured_at"] == report["executor"]["measured_at"], "kept again"
    run(pytester, *STORE)
    assert strict_json(pytester.path / "r.json")["executor"]["reused"] is True


@pytest.mark.parametrize("damage", ["a negative peak", "an infinity in how it was measured"])
def test_a_damaged_machine_peak_is_reported_and_measured_again(
    pytester: pytest.Pytester, filled: Path, damage: str
) -> None:
    """Even by a run that times nothing: else every re-run would report the same damage. A number no JSON holds,
    anywhere in the record, is damage too: the report carries the method whole, and could not be written."""
    (stored,) = filled.glob("*/peak.json")
    record = json.loads(stored.read_text())
    if damage == "a negative peak":
        record["peak"].update(flops_per_s=-1.0)
    else:
        record["peak"]["method"]["gemm_runs"] = math.inf
    stored.write_text(json.dumps(record))
    result = run(pytester, *STORE)
    assert result.ret == pytest.ExitCode.OK
    report = strict_json(pytester.path / "r.json")
    assert report["summary"]["store_damage"] == {"discarded": {"machine peak": 1}, "repaired": {}}
    assert report["summary"]["reused_bricks"] == report["summary"]["distinct_bricks"]
    assert report["peak"]["flops_per_s"] > 0 and "measured_at" not in report["peak"]
    assert json.loads(stored.read_text())["peak"]["flops_per_s"] == report["peak"]["flops_per_s"], "kept again"
    run(pytester, *STORE)
    again = strict_json(pytester.path / "r.json")
    assert again["summary"]["store_damage"] == {"discarded": {}, "repaired": {}}


def test_a_brick_time_without_the_statistic_in_use_is_measured_again(pytester: pytest.Pytester, filled: Path) -> None:
    first = sorted(filled.glob("*/bricks/*.json"))[0]
    data = json.loads(first.read_text())
    del data["stats"]["mean"]
    first.write_text(json.dumps(data))
    result = run(pytester, *STORE, "--dlbricks-statistic=mean")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    summary = strict_json(pytester.path / "r.json")["summary"]
    assert summary["store_damage"]["discarded"] == {"brick times": 1}
    assert summary["reused_bricks"] == summary["distinct_bricks"] - 1
