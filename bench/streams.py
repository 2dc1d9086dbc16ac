"""Watch streams that remember when each event arrived, for latency measurements.

A benchmark opens the stream before it acts (delete, create), then waits for
the first event after a mark that satisfies a predicate; the event's arrival
time on this client, not the time the wait returned, ends the measurement.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.client import KubeClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Arrival:
    at: float          # time.monotonic() when the event was read
    type: str          # ADDED, MODIFIED, DELETED
    object: JSON

    @property
    def name(self) -> str:
        return self.object["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.object["metadata"].get("namespace", "")

    @property
    def uid(self) -> str:
        return self.object["metadata"].get("uid", "")


class EventStream:
    """Every event of one collection (optionally label-selected) since :meth:`start`, resumed on timeouts."""

    def __init__(self, kube: KubeClient, path: str, *, label_selector: str | None = None,
                 on_event: Callable[[Arrival], None] | None = None) -> None:
        """``on_event`` is called with each event as soon as it is read, before any waiter wakes."""
        self._kube = kube
        self._path = path
        self._selector = label_selector
        self._on_event = on_event
        self.events: list[Arrival] = []
        self._changed = asyncio.Condition()
        self._task: asyncio.Task | None = None

    async def start(self) -> EventStream:
        """List once (the resourceVersion to watch from), then watch in the background."""
        self._task = asyncio.create_task(self._run(await self._list_version()))
        await asyncio.sleep(0.2)  # let the watch request reach the server before the caller acts
        return self

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def mark(self) -> int:
        """A position: :meth:`wait_for` only considers events after it."""
        return len(self.events)

    async def _list_version(self) -> str:
        listing = await self._kube.request("GET", self._path, params={"labelSelector": self._selector, "limit": "1"})
        return listing["metadata"]["resourceVersion"]

    async def _run(self, resource_version: str) -> None:
        """Watch from ``resource_version``; resume after the server ends the watch, relist after ``410 Gone``."""
        while True:
            try:
                async for event in self._kube.watch(self._path, resource_version=resource_version,
                                                    label_selector=self._selector, timeout_seconds=600):
                    arrived = time.monotonic()
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        log.warning("watch of %s expired (%s); relisting", self._path, obj.get("message"))
                        resource_version = await self._list_version()
                        break
                    resource_version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        arrival = Arrival(arrived, event["type"], obj)
                        if self._on_event is not None:
                            self._on_event(arrival)
                        async with self._changed:
                            self.events.append(arrival)
                            self._changed.notify_all()
            except Exception as error:  # connection trouble: resume where we were
                log.warning("watch of %s interrupted (%s); resuming", self._path, error)
                await asyncio.sleep(0.1)

    async def wait_for(self, predicate: Callable[[Arrival], bool], *, after: int, timeout: float,
                       what: str = "event") -> Arrival:
        """The first event past ``after`` matching ``predicate``; TimeoutError after ``timeout`` seconds."""
        index = after

        def found() -> Arrival | None:
            nonlocal index
            while index < len(self.events):
                arrival = self.events[index]
                index += 1
                if predicate(arrival):
                    return arrival
            return None

        async def wait() -> Arrival:
            async with self._changed:
                while True:
                    hit = found()
                    if hit is not None:
                        return hit
                    await self._changed.wait()

        try:
            return await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise TimeoutError(f"no {what} on {self._path} within {timeout:.0f}s") from None

    def latest(self, predicate: Callable[[Arrival], bool]) -> Arrival | None:
        """The most recent event matching ``predicate`` so far."""
        return next((a for a in reversed(self.events) if predicate(a)), None)
