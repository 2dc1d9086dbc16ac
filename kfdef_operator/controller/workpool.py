"""A bounded thread pool for the operator's blocking work: fetching sources and rendering.

Fetch and render block (sockets, subprocesses, disk). Run on the event loop's default executor, as
``asyncio.to_thread`` does, they shared its few threads (``min(32, CPUs + 4)``) with the loop's own DNS
lookups and every other library's blocking helpers: six slow downloads filled it and no KfDef reconciled.
Here they get threads of their own: at most ``size`` jobs run at once, the rest wait their turn in order.
Every job ends (a fetch at its deadline), so a full pool only delays reconciles.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class WorkPool:
    """``size`` threads for blocking jobs, awaited from the event loop with :meth:`run`."""

    def __init__(self, size: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if size < 1:
            raise ValueError(f"the work pool needs at least one thread, not {size}")
        self.size = size
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="work")
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._started: dict[int, float] = {}  # running job -> when it started
        self._queued: set[int] = set()

    async def run(self, function: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``function(*args, **kwargs)`` on a pool thread, with the caller's context variables (as
        ``asyncio.to_thread``)."""
        job = next(self._ids)
        call = functools.partial(contextvars.copy_context().run, self._tracked, job,
                                 functools.partial(function, *args, **kwargs))
        with self._lock:
            self._queued.add(job)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        finally:
            with self._lock:
                self._queued.discard(job)  # cancelled before it started

    def _tracked(self, job: int, function: Callable[[], T]) -> T:
        with self._lock:
            self._queued.discard(job)
            self._started[job] = self._clock()
        try:
            return function()
        finally:
            with self._lock:
                del self._started[job]

    @property
    def running(self) -> int:
        return len(self._started)

    @property
    def waiting(self) -> int:
        return len(self._queued)

    def stuck(self, after: float) -> str | None:
        """Why the pool cannot make progress, or None: every thread has run one job for over ``after`` seconds."""
        now = self._clock()
        with self._lock:
            ages = sorted(now - started for started in self._started.values())
        if len(ages) < self.size or ages[0] <= after:
            return None
        return (f"all {self.size} work threads have run the same fetch or render for over {after:.0f} s "
                f"(the shortest for {ages[0]:.0f} s)")

    def shutdown(self) -> None:
        """Stop taking jobs; running ones finish on their own (fetches at their deadline)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
