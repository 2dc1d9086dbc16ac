"""The operator's threads for blocking work, fetching sources and rendering, shared fairly between namespaces.

Fetch and render block (sockets, subprocesses, disk). Run on the event loop's default executor, as
``asyncio.to_thread`` does, they shared its few threads (``min(32, CPUs + 4)``) with the loop's own DNS lookups and
every other library's blocking helpers: six slow downloads filled it and no KfDef reconciled. Here they get threads of
their own, ``size`` of them, handed out by :class:`~kfdef_operator.controller.fairshare.FairShare`: one namespace's
slow or hostile KfDefs delay another namespace's by nothing.

A job whose caller is cancelled (its KfDef was deleted or changed, the replica stopped leading) is taken back while it
waits, and interrupted while it runs (:class:`~kfdef_operator.source.interrupt.Interrupt`: the fetch's deadline fires,
the render's process is killed), so its thread is free at once. Threads are daemons: a job blocked in a system call
that nothing interrupts cannot keep the process alive after SIGTERM.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kfdef_operator.controller.fairshare import FairShare
from kfdef_operator.source.interrupt import Interrupt

T = TypeVar("T")

#: The tenant of the operator's own jobs (housekeeping): no namespace is named "".
OPERATOR_TENANT = ""
#: Why a running job is interrupted when its caller went away.
NOT_WANTED = "its result is no longer wanted (the KfDef was deleted or changed, or this replica stopped leading)"


@dataclass(eq=False)
class _Job:
    """One call of a tenant, waiting for a thread or running on one (what ``run_in_executor`` hands to
    :meth:`WorkPool.submit`); ``future`` is its thread's side."""

    tenant: str
    call: Callable[[], Any]
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    started: float = 0.0

    def __call__(self) -> Any:
        return self.call()


class WorkPool(concurrent.futures.Executor):
    """``size`` threads for blocking jobs of tenants, awaited from the event loop with :meth:`run`.

    It is the executor of its own jobs (:meth:`submit` takes only what :meth:`run` hands it), so that the event loop
    awaits them as any executor's work, with asyncio's own thread-safe hand-over of results.
    """

    def __init__(self, size: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._share: FairShare[_Job] = FairShare(size)
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._running: set[_Job] = set()
        self._closed = False

    async def run(self, tenant: str, job: Callable[[Interrupt], T]) -> T:
        """``job(interrupt)`` on a pool thread, with the caller's context variables (as ``asyncio.to_thread``);
        ``tenant`` (the KfDef's namespace) is whose share it counts against. Cancelled, the caller leaves at once:
        the job is taken back while it waits, and its ``interrupt`` set while it runs."""
        interrupt = Interrupt()
        entry = _Job(tenant, functools.partial(contextvars.copy_context().run, job, interrupt))
        try:
            result: T = await asyncio.get_running_loop().run_in_executor(self, entry)
        except asyncio.CancelledError:
            with self._lock:
                waiting = self._share.withdraw(tenant, entry)
            if not waiting:
                interrupt.interrupt(NOT_WANTED)
            raise
        return result

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        """Queue a job :meth:`run` made (the executor protocol, for ``run_in_executor``)."""
        if not isinstance(fn, _Job) or args or kwargs:
            raise TypeError("WorkPool runs only the jobs of WorkPool.run")
        with self._lock:
            if self._closed:
                raise RuntimeError("the work pool is shut down")
            self._share.add(fn.tenant, fn)
            self._start_due()
        return fn.future

    def _start_due(self) -> None:
        """Start every job :class:`FairShare` lets start now (the lock held)."""
        while (taken := self._share.take()) is not None:
            entry = taken[1]
            entry.started = self._clock()
            self._running.add(entry)
            threading.Thread(target=self._execute, args=(entry,), name=f"work {entry.tenant}", daemon=True).start()

    def _execute(self, entry: _Job) -> None:
        result: Any = None
        error: BaseException | None = None
        wanted = entry.future.set_running_or_notify_cancel()  # False: its caller left before it started
        if wanted:
            try:
                result = entry()
            except BaseException as raised:  # noqa: BLE001 (handed to the caller, whatever it is)
                error = raised
        with self._lock:  # the thread is free before its caller hears of the result
            self._running.discard(entry)
            self._share.finish(entry.tenant)
            if not self._closed:
                self._start_due()
        if not wanted:
            return
        if error is not None:
            entry.future.set_exception(error)
        else:
            entry.future.set_result(result)

    @property
    def running(self) -> int:
        return self._share.running

    @property
    def waiting(self) -> int:
        return self._share.waiting

    def stuck(self, after: float) -> str | None:
        """Why the pool cannot make progress, or None: ``size`` jobs have each run for over ``after`` seconds."""
        now = self._clock()
        with self._lock:
            ages = sorted((now - entry.started for entry in self._running), reverse=True)
        if len(ages) < self.size or ages[self.size - 1] <= after:
            return None
        return (f"all {self.size} work threads have run the same fetch or render for over {after:.0f} s "
                f"(the shortest for {ages[self.size - 1]:.0f} s)")

    def shutdown(self, wait: bool = False, *, cancel_futures: bool = True) -> None:
        """Stop taking jobs and cancel the waiting ones; running ones finish on their own (fetches and renders at
        once: the operator stopping expires every deadline and kills every render). Never waits for them."""
        with self._lock:
            self._closed = True
            waiting = self._share.withdraw_all()
        for entry in waiting:
            entry.future.cancel()
