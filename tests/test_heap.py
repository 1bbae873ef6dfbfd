"""Python's cyclic garbage collector is paused while collection builds, kept off what it built from the end of
collection to the end of the run, and handed it back then, for a process that goes on (as this one does)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator

import pytest
from _pytest import unraisableexception
from tiny_models import UNBLOCKED_CHANNELS, chain

from conftest import run_dlbricks

#: A conftest that writes down, as each brick's item starts, how many objects are frozen.
RECORDING_CONFTEST = """
import gc, json, pathlib

def pytest_runtest_setup(item):
    with pathlib.Path("frozen.jsonl").open("a") as out:
        out.write(json.dumps(gc.get_freeze_count()) + "\\n")
"""


@pytest.fixture
def nothing_frozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def frozen_during_items(pytester: pytest.Pytester) -> list[int]:
    return [json.loads(line) for line in (pytester.path / "frozen.jsonl").read_text().splitlines()]


def frozen_during_a_run_on_a_chain(pytester: pytest.Pytester) -> int:
    """How many objects were frozen as the one brick of a chain of Conv+Relu blocks was timed."""
    pytester.makeconftest(RECORDING_CONFTEST)
    (pytester.path / "models").mkdir()
    chain(pytester.path / "models", channels=UNBLOCKED_CHANNELS)
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", "--dlbricks-store=none", "models", dims=())
    result.assert_outcomes(passed=1)
    (count,) = frozen_during_items(pytester)
    return count


def test_what_collection_built_is_frozen_through_the_items_and_thawed_at_the_end(
    pytester: pytest.Pytester, nothing_frozen: None
) -> None:
    assert frozen_during_a_run_on_a_chain(pytester) > 1000  # the run's modules, plans and items
    assert gc.get_freeze_count() == 0


def test_pytests_last_collections_of_unraisable_exceptions_skip_what_collection_built(
    pytester: pytest.Pytester, nothing_frozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest collects garbage at the run's end, at unconfigure and in a cleanup, to report unraisable exceptions:
    the objects stay frozen through both, so neither walks them, and are thawed after."""
    frozen_at_collections: list[int] = []
    collect = getattr(unraisableexception, "gc_collect_harder", None)
    if collect is None:
        pytest.skip("this pytest collects unraisable exceptions otherwise")

    def recording(iterations: int) -> None:
        frozen_at_collections.append(gc.get_freeze_count())
        collect(iterations)

    monkeypatch.setattr(unraisableexception, "gc_collect_harder", recording)
    frozen_during_a_run_on_a_chain(pytester)
    if not frozen_at_collections:
        pytest.skip("this pytest collects no garbage at the run's end")
    assert min(frozen_at_collections) > 1000
    assert gc.get_freeze_count() == 0


def test_objects_someone_else_froze_are_left_frozen_and_nothing_more_is(
    pytester: pytest.Pytester, nothing_frozen: None
) -> None:
    gc.freeze()
    before = gc.get_freeze_count()
    # Frozen objects are still freed when nothing refers to them: the count may only fall.
    assert frozen_during_a_run_on_a_chain(pytester) <= before
    assert 0 < gc.get_freeze_count() <= before


def test_a_run_without_dlbricks_freezes_nothing(pytester: pytest.Pytester, nothing_frozen: None) -> None:
    pytester.makeconftest(RECORDING_CONFTEST)
    pytester.makepyfile("def test_one(): pass")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert frozen_during_items(pytester) == [0]


#: A conftest that writes down whether the cyclic collector runs as a model file is collected, as the items are
#: modified, and as each brick's item starts.
PAUSE_CONFTEST = """
import gc, json, pathlib

def record(when):
    with pathlib.Path("enabled.jsonl").open("a") as out:
        out.write(json.dumps([when, gc.isenabled()]) + "\\n")

def pytest_collectstart(collector):
    record("collecting " + type(collector).__name__)

def pytest_collection_modifyitems(items):
    record("modifying items")

def pytest_runtest_setup(item):
    record("item")
"""


def collector_running(pytester: pytest.Pytester) -> list[list[object]]:
    """Whether the cyclic collector ran at each moment :data:`PAUSE_CONFTEST` records, in a run on a chain."""
    pytester.makeconftest(PAUSE_CONFTEST)
    (pytester.path / "models").mkdir()
    chain(pytester.path / "models", channels=UNBLOCKED_CHANNELS)
    result = run_dlbricks(pytester, "--dlbricks-granularity=2", "--dlbricks-store=none", "models", dims=())
    result.assert_outcomes(passed=1)
    return [json.loads(line) for line in (pytester.path / "enabled.jsonl").read_text().splitlines()]


def test_the_collector_is_paused_while_collecting_and_runs_again_for_the_items(pytester: pytest.Pytester) -> None:
    assert gc.isenabled()
    moments = collector_running(pytester)
    assert ["collecting ModelFile", False] in moments
    assert ["modifying items", False] in moments
    assert moments[-1] == ["item", True]
    assert all(running is False for when, running in moments if when != "item")
    assert gc.isenabled()


def test_a_collector_someone_else_paused_stays_paused(pytester: pytest.Pytester) -> None:
    gc.disable()
    try:
        assert collector_running(pytester)[-1] == ["item", False]
        assert not gc.isenabled()
    finally:
        gc.enable()
