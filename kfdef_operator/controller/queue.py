"""Work per KfDef: one run at a time per KfDef, many KfDefs at once, and the next run always up to date.

kopf's own handler machinery keeps a failing handler's progress and retries it
after its delay, even when the KfDef was fixed meanwhile. Here each KfDef has
one *due time*: a request moves it earlier, never later, so a new generation
preempts a pending retry backoff or resync at once; the run's result sets
the next due time (a retry backoff, the resync interval, or none).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Hashable

log = logging.getLogger(__name__)

Work = Callable[[Hashable], Awaitable["float | None"]]

#: Delay after a run that raised (the work is meant to turn every error into a result; this is a last resort).
CRASH_DELAY_S = 30.0


class WorkQueue:
    """Runs ``work(key)`` when a key is due; ``work`` returns seconds until the key's next run, or None.

    ``gate`` (when given) must be set for any work to start: a standby
    replica queues everything and runs nothing until it leads.
    """

    def __init__(self, work: Work, *, gate: asyncio.Event | None = None) -> None:
        self._work = work
        self._gate = gate
        self._due: dict[Hashable, float] = {}
        self._wake: dict[Hashable, asyncio.Event] = {}
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}
        self._running: set[Hashable] = set()

    def request(self, key: Hashable, delay: float = 0.0) -> None:
        """Run ``key`` within ``delay`` seconds (sooner if it is due sooner already)."""
        due = time.monotonic() + max(delay, 0.0)
        if key in self._due and self._due[key] <= due:
            return
        self._due[key] = due
        self._wake.setdefault(key, asyncio.Event()).set()
        task = self._tasks.get(key)
        if task is None or task.done():
            self._tasks[key] = asyncio.create_task(self._loop(key), name=f"reconcile {key}")

    def due_in(self, key: Hashable) -> float | None:
        """Seconds until the key's next run (None: nothing scheduled)."""
        due = self._due.get(key)
        return None if due is None else max(due - time.monotonic(), 0.0)

    def busy(self) -> bool:
        """Whether any work is running right now."""
        return bool(self._running)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self, key: Hashable) -> None:
        wake = self._wake.setdefault(key, asyncio.Event())
        while True:
            due = self._due.get(key)
            if due is None:
                self._tasks.pop(key, None)
                self._wake.pop(key, None)
                return
            wait = due - time.monotonic()
            if wait > 0:
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                continue
            if self._gate is not None and not self._gate.is_set():
                await self._gate.wait()
                continue
            del self._due[key]
            self._running.add(key)
            try:
                next_run = await self._work(key)
            except Exception:
                log.exception("work on %s failed unexpectedly; retrying in %.0fs", key, CRASH_DELAY_S)
                next_run = CRASH_DELAY_S
            finally:
                self._running.discard(key)
            if next_run is not None:
                self.request(key, next_run)
