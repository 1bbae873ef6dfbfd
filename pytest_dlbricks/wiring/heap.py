"""Keep Python's cyclic garbage collector off the objects collection built.

Collection builds hundreds of thousands of objects that live to the end of the run: cut models, plans
read from the store, brick records, pytest's items.

- While they are built, the cyclic collector runs every few hundred allocations, walking the young ones
  again and again and now and then all of them: 0.19-0.27 s of a 2.3 s re-run of 44 models with nothing
  changed. It is paused until collection ends: a first run's time and peak memory stayed the same (the onnx
  wheel's CNNs, 1.09-1.11 GB either way; the zoo's 44 models, 1.75 GB).
- Every later full pass walks them all and frees none: on a re-run of 44 models with nothing changed, such
  passes took about 0.4 s of 2.2 s, and during timing one lands in a brick's round as a pause of tens of
  milliseconds. Frozen (see
:func:`gc.freeze`), they are left out of those passes; they are still freed as usual when nothing refers
to them, and are handed back to the collector when the run ends, for a process that goes on (pytester,
``pytest.main``).
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Generator

import pytest


class FrozenCollection:
    """Registered as a plugin by ``pytest_configure`` when dlbricks is enabled: pauses the collector while
    pytest collects (the garbage it would have found there waits for its next pass), freezes what exists once
    collection ends, unless something else froze objects already (theirs would be thawed with ours), and
    thaws what it froze in :meth:`thaw`, which ``pytest_configure`` hands to pytest as a cleanup: pytest calls
    cleanups last registered first, so it comes after the cleanup pytest's own collection of unraisable
    exceptions registers later in its ``pytest_configure``, and that collection walks none of them (a re-run of 44
    models with nothing changed: 1.72-1.77 s against 1.79-1.82 s thawed before it, whole process)."""

    def __init__(self) -> None:
        self.froze = False

    @pytest.hookimpl(wrapper=True)
    def pytest_collection(self) -> Generator[None, object, object]:
        running = gc.isenabled()
        gc.disable()
        try:
            return (yield)
        finally:
            if running:
                gc.enable()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self) -> None:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            self.froze = True
            # Nor need the process's end walk what the run leaves: objects are not freed one by one at exit.
            atexit.unregister(gc.freeze)
            atexit.register(gc.freeze)

    def thaw(self) -> None:
        if self.froze:
            gc.unfreeze()
            self.froze = False
