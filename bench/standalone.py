"""One bench part run alone (``python -m bench.ha``, ``python -m bench.profile_apply``): its own control plane,
archive server and KfDef stream, and an operator process that is never started (the part brings its own)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from kfdef_dev.process import LocalSourcesOperator
from kfdef_operator.ssa.client import KubeClient

from .archive_server import ArchiveServer
from .cluster import start_control_plane
from .context import KFDEFS_PATH, Bench
from .streams import EventStream

T = TypeVar("T")


async def run_alone(work_dir: Path, part: Callable[[Bench], Awaitable[T]]) -> T:
    """``part(bench)`` on a control plane started for it and stopped after it."""
    control_plane = await asyncio.to_thread(start_control_plane)
    kube = await KubeClient.connect(str(control_plane.kubeconfig))
    try:
        (work_dir / "archives").mkdir(parents=True, exist_ok=True)
        with ArchiveServer(work_dir / "archives") as archives:
            kfdefs = await EventStream(kube, KFDEFS_PATH).start()
            unused = LocalSourcesOperator(control_plane.kubeconfig, work_dir / "operator")
            try:
                return await part(Bench(control_plane, kube, archives, work_dir, unused, kfdefs))
            finally:
                await kfdefs.close()
    finally:
        await kube.close()
        await asyncio.to_thread(control_plane.stop)
