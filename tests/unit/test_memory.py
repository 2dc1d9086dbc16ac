"""Freed memory goes back to the system after a run (runtime/memory.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfdef_operator.runtime import memory

pytestmark = pytest.mark.skipif(memory._TRIM is None, reason="no glibc malloc_trim on this system")


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_freed_heap_blocks_are_returned_to_the_system():
    # 100 KiB blocks come from the C heap (below glibc's mmap threshold); a small block kept after each one pins
    # the heap's top, so freeing the large ones leaves holes the allocator keeps until it is asked to trim.
    kept, freed = [], []
    for _ in range(1500):
        freed.append(bytearray(100 * 1024))
        kept.append(bytearray(64))
    del freed
    before = _rss_mib()
    memory.release_free_memory()
    assert before - _rss_mib() > 50, "at least 50 of the ~146 MiB freed go back to the system"
    assert len(kept) == 1500
