"""Which waiting job the work pool starts next, so that namespaces share its threads fairly (pure).

Every KfDef's fetches and renders run on the operator's one work pool. Served first come, first served, four slow or
hostile KfDefs of one namespace held every thread until their deadlines, and another namespace's one-ConfigMap KfDef
waited at ``FetchingSources`` for minutes. :class:`FairShare` decides instead, per tenant (a KfDef's namespace):

- a free thread goes to the waiting tenant that runs the fewest jobs (among equals, the one whose next job has waited
  longest); each tenant's own jobs start in the order they came;
- when all ``size`` threads are busy, a tenant running fewer jobs than its share (``size`` divided among the tenants
  with work, at least one) still starts one, beyond ``size``. A running fetch or render cannot be paused, so a tenant
  that took every thread while it was alone keeps them until its jobs end, but no other tenant waits behind it. At
  most ``2 × size`` jobs run at once: beyond ``size``, only tenants under their share, whose shares add up to
  ``size`` at most.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Hashable
from typing import Generic, TypeVar

J = TypeVar("J", bound=Hashable)


class FairShare(Generic[J]):
    """Jobs of tenants waiting for one of ``size`` threads, and the count of those running per tenant."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"the work pool needs at least one thread, not {size}")
        self.size = size
        self._waiting: dict[str, deque[tuple[int, J]]] = {}   # tenant -> (arrival, job), oldest first
        self._running: Counter[str] = Counter()
        self._arrivals = itertools.count()

    @property
    def running(self) -> int:
        return sum(self._running.values())

    @property
    def waiting(self) -> int:
        return sum(len(jobs) for jobs in self._waiting.values())

    def running_of(self, tenant: str) -> int:
        return self._running[tenant]

    def share(self) -> int:
        """Threads each tenant with work (running or waiting) is owed: ``size`` divided among them, at least one."""
        tenants = set(self._waiting) | {tenant for tenant, count in self._running.items() if count}
        return max(1, self.size // max(1, len(tenants)))

    def add(self, tenant: str, job: J) -> None:
        """``job`` of ``tenant`` waits for a thread."""
        self._waiting.setdefault(tenant, deque()).append((next(self._arrivals), job))

    def withdraw(self, tenant: str, job: J) -> bool:
        """Take ``job`` back while it waits (its caller went away); False when it is not waiting (it started)."""
        jobs = self._waiting.get(tenant)
        for entry in jobs or ():
            if entry[1] == job:
                jobs.remove(entry)  # type: ignore[union-attr]  # found in it: not None
                if not jobs:
                    del self._waiting[tenant]
                return True
        return False

    def withdraw_all(self) -> list[J]:
        """Every waiting job, taken back (the pool stops)."""
        jobs = [job for waiting in self._waiting.values() for _, job in waiting]
        self._waiting.clear()
        return jobs

    def take(self) -> tuple[str, J] | None:
        """The job to start now, counted as running from now on; None when none may start."""
        if not self._waiting:
            return None
        tenant = min(self._waiting, key=lambda t: (self._running[t], self._waiting[t][0][0]))
        running = self.running
        if running >= 2 * self.size or (running >= self.size and self._running[tenant] >= self.share()):
            return None
        jobs = self._waiting[tenant]
        _, job = jobs.popleft()
        if not jobs:
            del self._waiting[tenant]
        self._running[tenant] += 1
        return tenant, job

    def finish(self, tenant: str) -> None:
        """A running job of ``tenant`` ended (its thread is free)."""
        self._running[tenant] -= 1
        if self._running[tenant] <= 0:
            del self._running[tenant]
