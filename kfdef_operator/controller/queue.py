"""Work per KfDef: one run at a time per KfDef, many KfDefs at once, and the next run always up to date.

kopf's own handler machinery keeps a failing handler's progress and retries it
after its delay, even when the KfDef was fixed meanwhile. Here each KfDef has
one *due time*: a request moves it earlier, never later, so a new generation
preempts a pending retry backoff or resync at once; the run's result sets
the next due time (a retry backoff, the resync interval, or none).

A key's failures are counted here too, as controller-runtime's rate-limiting
queue counts them: :meth:`WorkQueue.retry_delay` is the delay after one more
failure of the key (doubling from a base, up to a cap), :meth:`WorkQueue.forget`
starts the key's count afresh (a success, a new generation, a KfDef let go).

A ``gate`` holds all work (a standby replica); meanwhile a due key gets the
``standby`` work instead, once per request (a standby keeps its caches warm
with it), and the real work runs the moment the gate opens. :meth:`interrupt`
cancels work in progress (the replica stopped leading); the interrupted keys
stay due.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable

from kfdef_operator.backoff import exponential
from kfdef_operator.runtime.keyed_worker import KeyedWorker, Run

log = logging.getLogger(__name__)

Work = Callable[[Hashable], Awaitable["float | None"]]
StandbyWork = Callable[[Hashable], Awaitable[None]]

#: Delay after a run that raised (the work is meant to turn every error into a result; this is a last resort).
CRASH_DELAY_S = 30.0


class WorkQueue:
    """Runs ``work(key)`` when a key is due; ``work`` returns seconds until the key's next run, or None.

    ``gate`` (when given) must be set for any work to start: a standby
    replica queues everything and runs only ``standby(key)`` (if given) until it leads.
    The keys run on a :class:`KeyedWorker`, each due key's run a task of its own; a key requested while it runs
    stays due.
    """

    def __init__(self, work: Work, *, gate: asyncio.Event | None = None, standby: StandbyWork | None = None) -> None:
        self._work = work
        self._gate = gate
        self._standby = standby
        self._worker: KeyedWorker[Hashable, None] = KeyedWorker(self._start, name="work queue",
                                                                 startable=self._startable, gate=gate)
        self._running: set[Hashable] = set()
        self._prepared: dict[Hashable, float] = {}   # key -> the due time its standby work ran for
        self._interrupted: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}  # key -> failures since its count was last forgotten

    def request(self, key: Hashable, delay: float = 0.0) -> None:
        """Run ``key`` within ``delay`` seconds (sooner if it is due sooner already).

        While the gate is closed, a request for a key whose standby work already ran runs that work again.
        """
        due = time.monotonic() + max(delay, 0.0)
        current = self._worker.queue.due(key)
        if current is not None and current <= due and self._prepared.get(key) != current:
            return
        self._worker.put(key, None, due)

    def due_in(self, key: Hashable) -> float | None:
        """Seconds until the key's next run (None: nothing scheduled)."""
        due = self._worker.queue.due(key)
        return None if due is None else max(due - time.monotonic(), 0.0)

    def retry_delay(self, key: Hashable, *, base: float, cap: float = 600.0) -> float:
        """Seconds before the key's next run after one more failure: ``base`` doubling with each failure counted
        since :meth:`forget`, up to ``cap``."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return exponential(failures, base=base, cap=cap)

    def forget(self, key: Hashable | None = None) -> None:
        """The key's next failure (every key's, when None) backs off from the start again."""
        if key is None:
            self._failures.clear()
        else:
            self._failures.pop(key, None)

    def busy(self) -> bool:
        """Whether any work is running right now."""
        return bool(self._running)

    def interrupt(self, key: Hashable | None = None) -> None:
        """Cancel the run in progress of ``key`` (of every key when None); interrupted keys stay due.

        Synchronous on purpose: once it returns, no interrupted run gets past its next ``await``.
        """
        for running in [key] if key is not None else list(self._running):
            task = self._worker.run_of(running)
            if running in self._running and task is not None and not task.done():
                self._interrupted.add(running)
                task.cancel()

    async def stop(self) -> None:
        await self._worker.stop()

    def _startable(self, key: Hashable) -> bool:
        """Whether a due key may start (none of its runs being in progress): the gate is open, or the standby work
        has not run for this due time yet."""
        if self._gate is None or self._gate.is_set():
            return True
        return self._standby is not None and self._prepared.get(key) != self._worker.queue.due(key)

    def _start(self, keys: list[Hashable]) -> list[Run[Hashable]]:
        return [self._start_one(key) for key in keys]

    def _start_one(self, key: Hashable) -> Run[Hashable]:
        if self._gate is not None and not self._gate.is_set() and self._standby is not None:
            due = self._worker.queue.due(key)
            assert due is not None  # only due keys start
            self._prepared[key] = due  # the key stays due: its real work runs once the gate opens
            return Run([key], self._prepare(key, self._standby), f"prepare {key}")
        self._worker.queue.pop(key)
        self._prepared.pop(key, None)
        return Run([key], self._reconcile(key), f"reconcile {key}")

    async def _reconcile(self, key: Hashable) -> None:
        next_run = await self._run(key, self._work)
        if next_run is not None:
            self.request(key, next_run)

    async def _prepare(self, key: Hashable, standby: StandbyWork) -> None:
        await self._run(key, standby)

    async def _run(self, key: Hashable, work: Work | StandbyWork) -> float | None:
        """One run of ``work``; an interrupted run leaves the key due again."""
        self._running.add(key)
        try:
            return await work(key)
        except asyncio.CancelledError:
            if key not in self._interrupted:
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            log.info("work on %s interrupted", key)
            if key not in self._worker.queue:
                self._worker.put(key, None, time.monotonic())
            return None
        except Exception:
            log.exception("work on %s failed unexpectedly; retrying in %.0fs", key, CRASH_DELAY_S)
            return CRASH_DELAY_S
        finally:
            self._interrupted.discard(key)
            self._running.discard(key)
