"""limit_malloc_arenas: glibc's mallopt(M_ARENA_MAX, n) where there is one, nothing elsewhere."""

from __future__ import annotations

import pytest

from kfdef_operator.runtime import memory


def test_the_arena_limit_is_set_through_mallopt(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(memory, "_MALLOPT", lambda parameter, value: calls.append((parameter, value)))
    memory.limit_malloc_arenas()
    assert calls == [(-8, memory.MALLOC_ARENAS)]  # M_ARENA_MAX in malloc.h


def test_without_glibc_nothing_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_MALLOPT", None)
    memory.limit_malloc_arenas()  # no error
