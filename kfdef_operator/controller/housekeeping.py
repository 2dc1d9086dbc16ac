"""Keeping the operator's work directory within its volume (``docs/sources.md#budgets``).

When a KfDef is deleted, its render directory and cached render are removed and its sources are released
(:meth:`Housekeeper.forget`); every ``interval`` the source cache is collected and the build leftovers of
KfDefs deleted while the operator was not running are removed (:meth:`Housekeeper.collect`). The disk work
runs on the work pool, off the event loop. A fetch that needs room collects the source cache by itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from pathlib import Path

from kfdef_operator.build import workspace
from kfdef_operator.build.cache import RenderCache
from kfdef_operator.controller.workpool import OPERATOR_TENANT, WorkPool
from kfdef_operator.source.cache import SourceCache

log = logging.getLogger(__name__)


def source_user(namespace: str, name: str) -> str:
    """How the source cache knows KfDef ``namespace/name`` as a user of its entries."""
    return f"{namespace}/{name}"


class Housekeeper:
    """Garbage collection of the work directory for the KfDefs ``live()`` names (``(namespace, name)``)."""

    def __init__(self, work_dir: Path, sources: SourceCache, renders: RenderCache, pool: WorkPool, *,
                 live: Callable[[], Collection[tuple[str, str]]], interval: float = 300.0,
                 grace: float = 600.0) -> None:
        self.work_dir = work_dir
        self.sources = sources
        self.renders = renders
        self.pool = pool
        self.live = live
        self.interval = interval
        self.grace = grace  #: build leftovers younger than this are kept (a KfDef may not be resumed yet)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._periodic())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def forget(self, namespace: str, name: str) -> None:
        """KfDef ``namespace/name`` is gone: remove its build directories, release its sources, collect."""
        await self.pool.run(namespace, lambda _: self._forget(namespace, name))

    def _forget(self, namespace: str, name: str) -> None:
        workspace.forget(self.work_dir, self.renders, namespace, name)
        self.sources.release(source_user(namespace, name))
        self.sources.collect()

    async def collect(self) -> None:
        """Collect the source cache and the build leftovers of KfDefs no longer live."""
        live = set(self.live())
        await self.pool.run(OPERATOR_TENANT, lambda _: self._collect(live))

    def _collect(self, live: set[tuple[str, str]]) -> None:
        self.sources.collect()
        removed = workspace.collect(self.work_dir, self.renders, live, grace=self.grace)
        if removed:
            log.info("removed the render directories and cached renders of %d deleted KfDef(s)", len(removed))

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.collect()
            except Exception:  # the next round tries again; a full disk shows up as fetch errors
                log.exception("collecting the work directory %s failed", self.work_dir)
