"""Model files' digests kept by their status: an unchanged file is not read again, a changed one always is."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import onnx
import pytest
import tiny_models

from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.weightless import graph_digest
from pytest_dlbricks.storage import file_digests
from pytest_dlbricks.storage.file_digests import FileDigest, FileDigests
from pytest_dlbricks.storage.plans import PlanCache


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file counts as long settled, as a model written before the run is."""
    monkeypatch.setattr(file_digests, "SETTLED_NS", -(10**18))


def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files read and hashed from now on."""
    read: list[Path] = []
    original = file_digests._digest_file

    def recording(path: Path, *, mapped: bool) -> FileDigest:
        read.append(path)
        return original(path, mapped=mapped)

    monkeypatch.setattr(file_digests, "_digest_file", recording)
    return read


def test_an_unchanged_file_is_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settled: None) -> None:
    path = tiny_models.chain(tmp_path)
    digests = FileDigests(tmp_path / "files")
    read = reads(monkeypatch)
    first = digests.of(path)
    assert first == FileDigest(hashlib.sha256(path.read_bytes()).hexdigest(), (), graph_digest(onnx.load(path)))
    read.clear()
    assert FileDigests(tmp_path / "files").of(path) == first, "a later run finds the record"
    assert path not in read


def test_a_settled_file_is_mapped_and_one_the_system_does_not_map_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settled: None
) -> None:
    path = tiny_models.chain(tmp_path)
    maps: list[int] = []
    original = file_digests.mmap.mmap

    def mapping(*args: Any, **kwargs: Any) -> Any:
        maps.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(file_digests.mmap, "mmap", mapping)
    read_mapped = FileDigests(None).of(path)
    assert maps, "a file written long before is mapped"

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError(19, "No such device")  # as a file system without memory maps says

    monkeypatch.setattr(file_digests.mmap, "mmap", refused)
    assert (
        FileDigests(None).of(path)
        == read_mapped
        == FileDigest(hashlib.sha256(path.read_bytes()).hexdigest(), (), graph_digest(onnx.load(path)))
    )


def test_a_file_written_just_before_is_read_not_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It may still be being written: a mapped file cut short under the reader would end the process."""
    path = tiny_models.chain(tmp_path)
    monkeypatch.setattr(
        file_digests.mmap, "mmap", lambda *args, **kwargs: pytest.fail("a file just written was mapped")
    )
    assert FileDigests(None).of(path).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_changed_file_is_read_again(tmp_path: Path, settled: None) -> None:
    path = tiny_models.chain(tmp_path)
    digests = FileDigests(tmp_path / "files")
    first = digests.of(path)
    status = path.stat()
    tiny_models.chain(tmp_path, kernel=5)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))  # its times put back: its size and ctime moved
    assert digests.of(path).sha256 == hashlib.sha256(path.read_bytes()).hexdigest() != first.sha256
    assert digests.discarded == 0, "a file changed is no damage"


def test_a_file_just_written_is_not_kept(tmp_path: Path) -> None:
    """Written again within its time stamps' resolution, it could change without its status moving."""
    path = tiny_models.chain(tmp_path)
    FileDigests(tmp_path / "files").of(path)
    assert not (tmp_path / "files").exists()


def test_external_data_names_are_kept(tmp_path: Path, settled: None) -> None:
    path = tiny_models.external_weights(tmp_path)
    (data,) = [file.name for file in tmp_path.iterdir() if file.is_file() and file.suffix != ".onnx"]
    digests = FileDigests(tmp_path / "files")
    assert digests.of(path).external == (data,)
    assert FileDigests(tmp_path / "files").of(path).external == (data,)


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        "[]",
        '{"version": 2}',
        "RECORD_WITH_BAD_DIGEST",
        "RECORD_WITH_BAD_GRAPH",
        "RECORD_WITH_BAD_NAMES",
        "[" * 100_000,
    ],
)
def test_a_damaged_record_is_counted_and_the_file_read_again(tmp_path: Path, settled: None, content: str) -> None:
    path = tiny_models.chain(tmp_path)
    digests = FileDigests(tmp_path / "files")
    expected = digests.of(path)
    (record,) = (tmp_path / "files").iterdir()
    data = json.loads(record.read_text())
    if content == "RECORD_WITH_BAD_DIGEST":
        content = json.dumps({**data, "sha256": "not a digest"})
    elif content == "RECORD_WITH_BAD_GRAPH":
        content = json.dumps({**data, "graph": 1})
    elif content == "RECORD_WITH_BAD_NAMES":
        content = json.dumps({**data, "external": [1]})
    record.write_text(content)
    again = FileDigests(tmp_path / "files")
    assert again.of(path) == expected
    assert again.discarded == 1
    assert again.of(path) == expected and again.discarded == 1, "the record was written anew"


def test_a_record_of_another_version_is_read_again_without_damage(tmp_path: Path, settled: None) -> None:
    path = tiny_models.chain(tmp_path)
    expected = FileDigests(tmp_path / "files").of(path)
    (record,) = (tmp_path / "files").iterdir()
    data = json.loads(record.read_text())
    record.write_text(json.dumps({key: data[key] for key in ("path", "stamp", "sha256", "external")} | {"version": 1}))
    again = FileDigests(tmp_path / "files")
    assert again.of(path) == expected
    assert again.discarded == 0, "a record an earlier version wrote is no damage"
    assert json.loads(record.read_text())["version"] == file_digests.VERSION, "and it is written anew"


def test_a_run_reads_a_file_once_for_its_plan_and_its_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even a file written just before the run, whose digest is not kept, is read and parsed once."""
    path = tiny_models.chain(tmp_path)
    cache = PlanCache(tmp_path / "plans", Settings(granularity=2), FileDigests(tmp_path / "files"))
    read = reads(monkeypatch)
    assert cache.key(path) is not None and cache.graph_key(path) is not None
    assert cache.key(path) is not None, "asked again when the cut is kept"
    assert read.count(path) == 1


def test_a_rewritten_file_is_read_again_in_the_same_run(tmp_path: Path) -> None:
    path = tiny_models.chain(tmp_path)
    digests = FileDigests(None)
    first = digests.of(path)
    tiny_models.chain(tmp_path, kernel=5)
    assert digests.of(path).sha256 != first.sha256
    assert digests.of(path).graph != first.graph


def test_a_record_that_cannot_be_written_is_no_error(tmp_path: Path, settled: None) -> None:
    path = tiny_models.chain(tmp_path)
    (tmp_path / "blocked").write_text("a file where the records' folder should be")
    assert FileDigests(tmp_path / "blocked" / "files").of(path).sha256


def test_the_plan_cache_finds_a_plan_without_reading_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settled: None
) -> None:
    path = tiny_models.chain(tmp_path)
    cache = PlanCache(tmp_path / "plans", Settings(granularity=2), FileDigests(tmp_path / "files"))
    key = cache.key(path)
    read = reads(monkeypatch)
    assert cache.key(path) == key
    assert path not in read
