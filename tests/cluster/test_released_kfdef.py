"""A KfDef that stops being served here (deleted, or moved to another shard) gets no write from this instance.

The reconciler runs in-process against the real API server, so that the test can hand it, in one step, the two
watch events whose order decided a flaky HA run: the KfDef leaving this shard, then one of its objects deleted.
The new shard heals that object; the old one must not heal it too.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kfdef_operator.api.names import kfdef_path
from kfdef_operator.controller.reconciler import Reconciler
from kfdef_operator.controller.settings import Settings
from kfdef_operator.controller.wiring import assemble
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.inventory import ObjectRef

pytestmark = pytest.mark.cluster


async def until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


def test_a_kfdef_no_longer_served_here_is_not_healed_here(control_plane, kube, kfdef_crd, no_other_operator,
                                                          kfdef_namespace, new_stack, tmp_path: Path):
    stack = new_stack()
    body = kube.apply(stack.kfdef("moving", kfdef_namespace))
    key = (kfdef_namespace, "moving")
    path = kfdef_path(*key)
    deployment = ObjectRef("apps", "Deployment", stack.namespace, "operator")

    async def scenario() -> None:
        client = await KubeClient.connect(str(control_plane.kubeconfig))
        settings = Settings(work_dir=tmp_path / "operator", fetch_options=FetchOptions(local_roots=(tmp_path,)))
        reconciler = Reconciler(assemble(client, settings))
        await reconciler.start()
        try:
            reconciler.observe("ADDED", body)
            await until(lambda: _ready(client, path), 120, "the KfDef Ready")
            live = reconciler.parts.tracker.get(deployment)
            assert live is not None and key in reconciler.stacks

            # What a watch says when the KfDef's shard label changes, then its Deployment's deletion.
            reconciler.observe("DELETED", body)
            reconciler.parts.on_object_event("DELETED", deployment, live, None)

            assert key not in reconciler.stacks and key not in reconciler.writers
            healer = reconciler.parts.healer
            assert key not in healer._workers, \
                "a heal was scheduled for a KfDef this instance no longer serves"  # noqa: SLF001
        finally:
            # The KfDef comes back here and is deleted: this instance tears it down (no other operator runs).
            await client.request("DELETE", path)
            reconciler.observe("MODIFIED", await client.request("GET", path))
            await until(lambda: _gone(client, path), 120, "the teardown")
            await reconciler.stop()
            await client.close()

    asyncio.run(scenario())


async def _ready(client: KubeClient, path: str) -> bool:
    conditions = ((await client.get(path) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def _gone(client: KubeClient, path: str) -> bool:
    return await client.get(path) is None
