"""A keyed worker: the items of a :class:`DelayQueue` worked on as they come due, each key in one run at a time.

The reconcile queue (:class:`~kfdef_operator.controller.queue.WorkQueue`: a run per KfDef) and the healer (a worker
per stack: a batch of objects to put back per run) both run their queues here. One dispatcher task waits for the
next key due and hands the due keys that may start to the owner's ``start``, which takes what it works on from the
queue and says what runs for which keys; a key stays busy until its run ends, and what is queued for it meanwhile
waits for that. What a key's item is, and which keys one run takes, are the owner's choice.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Collection, Coroutine, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kfdef_operator.runtime.delay_queue import DelayQueue

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class Run(Generic[K]):
    """Work started for ``keys``, which stay busy until it ends; ``name`` names its task."""

    keys: Collection[K]
    work: Coroutine[Any, Any, None]
    name: str


class KeyedWorker(Generic[K, V]):
    """Starts the runs ``start(due keys)`` returns for the due keys of :attr:`queue` that may start.

    A key may start when no run of it is under way and ``startable`` (if given) accepts it. Keys due together start
    in one call of ``start``, after the event loop's other ready work (a burst of puts lands whole). ``start`` takes
    from the queue what its runs work on; when it starts nothing of what is due, the dispatcher stops until the next
    :meth:`put` or :meth:`wake`. A wait for a key due later lasts at least ``at_least`` seconds (never a spin), and
    ends early when ``gate`` (if given) is set.
    """

    def __init__(self, start: Callable[[list[K]], Iterable[Run[K]]], *, name: str,
                 startable: Callable[[K], bool] | None = None, gate: asyncio.Event | None = None,
                 at_least: float = 0.0) -> None:
        self.queue: DelayQueue[K, V] = DelayQueue()
        self._start = start
        self._name = name
        self._startable = startable
        self._gate = gate
        self._at_least = at_least
        self._dispatcher: asyncio.Task[None] | None = None
        self._runs: dict[K, asyncio.Task[None]] = {}
        self._closed = False

    def put(self, key: K, item: V, due: float) -> None:
        """Queue ``item`` as the key's item, due at monotonic time ``due`` (replacing what the key held)."""
        self.queue.put(key, item, due)
        self.wake()

    def wake(self) -> None:
        """Look at the queue again: a key may start now that could not before (a run ended, the owner's
        ``startable`` or ``start`` would answer otherwise)."""
        if self._closed or not self.queue:
            return
        self.queue.wake()
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.create_task(self._dispatch(), name=self._name)

    def run_of(self, key: K) -> asyncio.Task[None] | None:
        """The run under way for ``key``, if any."""
        return self._runs.get(key)

    def close(self) -> list[asyncio.Task[None]]:
        """Stop for good: cancel the dispatcher and every run, synchronously (none gets past its next ``await``),
        and start nothing from now on; the tasks cancelled, to wait for."""
        self._closed = True
        tasks = [*{*self._runs.values()}, *([self._dispatcher] if self._dispatcher is not None else [])]
        for task in tasks:
            task.cancel()
        return tasks

    async def stop(self) -> None:
        """:meth:`close`, and wait until the cancelled tasks have ended."""
        await asyncio.gather(*self.close(), return_exceptions=True)

    def _may_start(self, key: K) -> bool:
        return key not in self._runs and (self._startable is None or self._startable(key))

    async def _dispatch(self) -> None:
        while self.queue:
            await asyncio.sleep(0)  # let the rest of a burst arrive: keys due together start together
            keys = self.queue.ready(time.monotonic(), self._may_start)
            if keys:
                runs = list(self._start(keys))
                if not runs:
                    return
                for run in runs:
                    task = asyncio.create_task(run.work, name=run.name)
                    self._runs.update(dict.fromkeys(run.keys, task))
                    task.add_done_callback(functools.partial(self._finished, run.keys))
                continue
            wait = self.queue.wait(self._may_start, at_least=self._at_least)
            if self._gate is None or self._gate.is_set():
                await wait
            else:
                await _first(self._gate.wait(), wait)

    def _finished(self, keys: Collection[K], _: asyncio.Task[None]) -> None:
        for key in keys:
            self._runs.pop(key, None)
        self.wake()  # what waited for these keys may start now


async def _first(*waits: Coroutine[Any, Any, object]) -> None:
    """Wait until the first of ``waits`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
