"""Status refreshes between runs: a KfDef's status re-evaluated after watch events and at its health deadline.

:class:`StatusRefresher` coalesces a burst of events into one status write per KfDef, and holds one timer per
apply instead of polling, so that objects still unhealthy past the health deadline turn into Degraded. It writes
only while this replica leads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kfdef_operator.controller.registry import Key, StackRegistry
from kfdef_operator.runtime.stack import Stack

#: How long a stack's status refresh waits after the first event asking for it: a burst of events (a heal's
#: DELETED, ADDED and its Deployment's status updates) makes one status write.
COALESCE_S = 0.2


class StatusRefresher:
    """Writes the status of the registry's stacks soon after they were asked for; ``leading`` gates it."""

    def __init__(self, registry: StackRegistry, leading: Callable[[], bool]) -> None:
        self._registry = registry
        self._leading = leading
        self._pending: set[Key] = set()
        self._task: asyncio.Task[None] | None = None
        self._timers: set[asyncio.TimerHandle] = set()

    def refresh(self, stack: Stack) -> None:
        """Re-evaluate a stack's status soon (coalesced: one write for a burst of events); only while leading."""
        if not self._leading():
            return
        self._pending.add(stack.key)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop())

    def refresh_after(self, seconds: float, key: Key) -> None:
        """One timer instead of polling: past the health deadline, unhealthy objects turn into Degraded."""
        def fire() -> None:
            self._timers.discard(timer)
            stack = self._registry.stacks.get(key)
            if stack is not None:
                self.refresh(stack)
        timer = asyncio.get_running_loop().call_later(seconds, fire)
        self._timers.add(timer)

    def halt(self) -> None:
        """Cancel every pending refresh and timer."""
        if self._task is not None:
            self._task.cancel()
        self._pending.clear()
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    async def _loop(self) -> None:
        while self._pending:
            await asyncio.sleep(COALESCE_S)
            pending, self._pending = self._pending, set()
            for key in pending if self._leading() else ():
                writer = self._registry.writers.get(key)
                if writer is not None:
                    await writer.update()
