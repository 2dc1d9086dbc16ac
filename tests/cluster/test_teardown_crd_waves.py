"""Which CRDs a teardown deletes before the stack's Namespaces, decided per CRD (against the real kube-apiserver).

A CRD none of whose custom resources carries a finalizer any more needs no controller: it goes with the Namespaces,
so that kube-apiserver's cleanup of it overlaps with the grace period kube-controller-manager waits before emptying
a deleted namespace. A CRD with a custom resource that a controller still has to finalize (here one the stack did
not list, as a controller would have made it) is deleted before the Namespaces, which hold the controllers, and
the Namespaces wait until it is gone.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.access import MERGE_PATCH
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.inventory import ref_of, version_of
from kfdef_operator.ssa.manager import ResourceManager
from tests.stacks import crd

pytestmark = pytest.mark.cluster

FINALIZER = "example.com/cleanup"
#: How long the simulated controller takes to finalize its custom resource once it is being deleted.
FINALIZE_S = 3.0
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class Seen:
    """When each watched path was first seen deleting (a deletionTimestamp) and gone, polled every 20 ms."""

    def __init__(self, client: KubeClient, paths: list[str]) -> None:
        self.client = client
        self.deleting: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.task = asyncio.create_task(self._poll(paths))

    async def _poll(self, paths: list[str]) -> None:
        while len(self.gone) < len(paths):
            for path, live in zip(paths, await asyncio.gather(*(self.client.get(p) for p in paths)), strict=True):
                now = time.monotonic()
                if live is None:
                    self.gone.setdefault(path, now)
                    self.deleting.setdefault(path, now)
                elif (live.get("metadata") or {}).get("deletionTimestamp"):
                    self.deleting.setdefault(path, now)
            await asyncio.sleep(0.02)


def test_a_crd_that_needs_no_controller_goes_with_the_namespaces_one_that_does_before_them(control_plane):
    suffix = uuid.uuid4().hex[:8]
    namespace = f"tdc-{suffix}"
    free_group, held_group = f"free-{suffix}.example.org", f"held-{suffix}.example.org"
    free_crd, held_crd = crd(free_group, "Pipe"), crd(held_group, "Valve")
    stack_resource = {"apiVersion": f"{free_group}/v1", "kind": "Pipe",
                      "metadata": {"name": "listed", "namespace": namespace}}
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace},
                "data": {"a": "1"}},
               free_crd, held_crd]
    namespace_path = f"/api/v1/namespaces/{namespace}"
    free_path, held_path = (f"{CRD_PATH}/{c['metadata']['name']}" for c in (free_crd, held_crd))
    made_path = f"/apis/{held_group}/v1/namespaces/{namespace}/valves/made"

    async def main() -> dict[str, Any]:
        client = await KubeClient.connect(str(control_plane.kubeconfig))
        discovery = Discovery(client)
        owner = Owner("teardown", namespace, "")
        manager = ResourceManager(client, discovery)
        try:
            resources = [await discovery.resource(obj["apiVersion"], obj["kind"]) for obj in objects]
            await manager.apply_all(owner, list(zip(objects, resources, strict=True)), [stack_resource])
            # Made by the Valves' controller, not listed by the stack: only that controller removes its finalizer.
            await client.request("POST", made_path.rpartition("/")[0], body={
                "apiVersion": f"{held_group}/v1", "kind": "Valve",
                "metadata": {"name": "made", "namespace": namespace, "finalizers": [FINALIZER]}})
            inventory = {ref_of(obj): version_of(obj) for obj in [*objects, stack_resource]}
            seen = Seen(client, [namespace_path, free_path, held_path, made_path])

            async def controller() -> float:
                while made_path not in seen.deleting:
                    await asyncio.sleep(0.02)
                await asyncio.sleep(FINALIZE_S)
                await client.request("PATCH", made_path, body={"metadata": {"finalizers": None}},
                                     content_type=MERGE_PATCH)
                return time.monotonic()

            finalizing = asyncio.create_task(controller())
            result = await manager.teardown(owner, inventory, wave_timeout=60)
            finalized = await asyncio.wait_for(finalizing, 10)
            await asyncio.wait_for(seen.task, 60)
            return {"result": result, "finalized": finalized, "deleting": seen.deleting, "gone": seen.gone}
        finally:
            for path in (made_path, free_path, held_path, namespace_path):
                live = await client.get(path)
                if live is not None and path == made_path:
                    await client.request("PATCH", path, body={"metadata": {"finalizers": None}},
                                         content_type=MERGE_PATCH)
                elif live is not None:
                    await client.request("DELETE", path)
            await client.close()

    observed = asyncio.run(main())
    result, finalized, deleting, gone = (observed[key] for key in ("result", "finalized", "deleting", "gone"))
    assert result.done, result.remaining
    assert deleting[held_path] < deleting[namespace_path], "the CRD that needs its controller goes first"
    assert deleting[namespace_path] >= finalized, "the Namespaces wait until the controller has finalized"
    assert deleting[free_path] >= finalized, (
        "the CRD with no custom resource left that needs a controller goes in the Namespaces' wave, "
        f"not before it: {deleting}")
    assert gone[free_path] < gone[namespace_path], (
        f"its cleanup overlaps with the Namespace's grace period: gone {gone}")
