"""A keyed delay queue: one item per key, each due at a monotonic time, and a wait for the next one due (asyncio).

The reconcile queue (:class:`~kfdef_operator.controller.queue.WorkQueue`: a key per KfDef) and the healer (a queue
per stack: a key per object to put back) both hold their work here, and both run it with the same
:class:`~kfdef_operator.runtime.keyed_worker.KeyedWorker`. A key has one due time; what a new request does to it
(keep the first, keep the earliest) is the caller's choice, made before :meth:`DelayQueue.put`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class DelayQueue(Mapping[K, V]):
    """The queued items by key (a read-only mapping), each with its due time; one consumer waits in :meth:`wait`.

    A consumer takes what is due (:meth:`ready`, :meth:`pop`, :meth:`take_ready`) and then waits; :meth:`put` and
    :meth:`wake` end a wait early, so work queued meanwhile is never slept through.
    """

    def __init__(self) -> None:
        self._items: dict[K, V] = {}
        self._due: dict[K, float] = {}
        self._changed = asyncio.Event()

    def __getitem__(self, key: K) -> V:
        return self._items[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: K, item: V, due: float) -> None:
        """Queue ``item`` as the key's item, due at monotonic time ``due`` (replacing what the key held)."""
        self._items[key] = item
        self._due[key] = due
        self._changed.set()

    def due(self, key: K) -> float | None:
        """The monotonic time ``key`` is due (None: not queued)."""
        return self._due.get(key)

    def pop(self, key: K) -> V:
        """Remove ``key`` and return its item."""
        del self._due[key]
        return self._items.pop(key)

    def wake(self) -> None:
        """End the consumer's wait: something it waits for besides the due times changed (a run ended)."""
        self._changed.set()

    def ready(self, now: float, where: Callable[[K], bool] | None = None) -> list[K]:
        """The keys due by ``now`` (of those ``where`` accepts), in the order they were first queued."""
        return [key for key, due in self._due.items() if due <= now and (where is None or where(key))]

    def take_ready(self, now: float) -> dict[K, V]:
        """Remove the keys due by ``now`` and return their items."""
        return {key: self.pop(key) for key in self.ready(now)}

    async def wait(self, where: Callable[[K], bool] | None = None, *, at_least: float = 0.0) -> None:
        """Until the earliest key ``where`` accepts is due (at once if one is), or until :meth:`put` or :meth:`wake`.

        ``at_least`` is the shortest sleep when a key is due later, so that a consumer never spins.
        """
        self._changed.clear()
        dues = [due for key, due in self._due.items() if where is None or where(key)]
        timeout = None if not dues else min(dues) - time.monotonic()
        if timeout is not None and timeout <= 0:
            return
        try:
            async with asyncio.timeout(None if timeout is None else max(timeout, at_least)):
                await self._changed.wait()
        except TimeoutError:
            pass
