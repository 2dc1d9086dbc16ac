"""Liveness: proof that the event loop and the threads it depends on still make progress.

Answering ``/healthz`` at all shows that the event loop runs; it does not show that work can proceed. A task
ticks every ``interval`` seconds: it sleeps on the loop (a loop blocked by synchronous code wakes it late, and
cannot answer probes meanwhile), then runs a no-op on the loop's default executor, where asyncio resolves host
names for new connections; when those threads are all stuck, no request can start and nothing reconciles,
although the loop still answers. A tick is recorded once both are done; :meth:`Heartbeat.problem` reports a
last tick older than ``stale_after`` seconds, and the kubelet restarts the operator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kfdef_operator.controller.workpool import WorkPool

log = logging.getLogger(__name__)


def _nothing() -> None:
    pass


class Heartbeat:
    """A ticking task and the age of its last complete tick."""

    def __init__(self, *, interval: float = 5.0, stale_after: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.stale_after = stale_after
        self._clock = clock
        self._last = clock()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._last = self._clock()
        self._task = asyncio.create_task(self._beat())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval)
            await loop.run_in_executor(None, _nothing)
            self._last = self._clock()

    def age(self) -> float:
        """Seconds since the last complete tick."""
        return self._clock() - self._last

    def problem(self) -> str | None:
        """Why the operator is not live, or None."""
        age = self.age()
        if age <= self.stale_after:
            return None
        return (f"no heartbeat for {age:.0f} s (limit {self.stale_after:.0f} s): the event loop or the threads of "
                "its default executor are stuck")


class Liveness:
    """The operator's liveness (``/healthz``): a fresh heartbeat, and a work pool that is not wedged.

    A busy pool is not a failure (every fetch ends at its deadline); a pool whose every thread has held one job
    for ``work_stuck_after`` seconds is, as only a restart frees it.
    """

    def __init__(self, pool: WorkPool, *, heartbeat: Heartbeat | None = None,
                 work_stuck_after: float = 1800.0) -> None:
        self.pool = pool
        self.heartbeat = heartbeat or Heartbeat()
        self.work_stuck_after = work_stuck_after

    def start(self) -> None:
        self.heartbeat.start()

    async def stop(self) -> None:
        await self.heartbeat.stop()

    def problem(self) -> str | None:
        """Why the operator is not live, or None."""
        return self.heartbeat.problem() or self.pool.stuck(self.work_stuck_after)

    def alive(self) -> bool:
        problem = self.problem()
        if problem:
            log.error("liveness fails, so the kubelet restarts the operator: %s", problem)
        return problem is None
