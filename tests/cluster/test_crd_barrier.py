"""Custom resources wait for their own CRD only, not for every CRD of the set (against the real kube-apiserver).

A release's CRDs become Established one by one over seconds (Kubeflow v1.11.0: 70 of them, about 8 s); holding
every custom resource until the last one is, delays the whole stack by that much. Here the manager applies two
CRDs and one object of each through a live view that withholds the second CRD's Established condition: the first
CRD's object must land while the second is still held.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.tracker import Tracker
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Discovery, Resource
from kfdef_operator.ssa.health import Health, State
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveObject
from kfdef_operator.ssa.manager import ResourceManager

pytestmark = pytest.mark.cluster


def crd(group: str, kind: str) -> dict:
    plural = f"{kind.lower()}s"
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


class WithheldEstablishment:
    """The tracker's view, except that one CRD reads as not Established until ``release`` is set."""

    def __init__(self, tracker: Tracker, held: ObjectRef) -> None:
        self.tracker, self.held, self.release = tracker, held, asyncio.Event()

    def get(self, ref: ObjectRef) -> LiveObject | None:
        live = self.tracker.get(ref)
        if live is None or ref != self.held or self.release.is_set():
            return live
        return LiveObject(live.ref, live.version, live.uid, live.resource_version, live.meta,
                          Health(State.PROGRESSING, "held back by the test"))

    def is_watched(self, group: str, kind: str, namespace: str = "") -> bool:
        return self.tracker.is_watched(group, kind, namespace)

    async def next_event(self, ref: ObjectRef, timeout: float) -> None:
        if ref == self.held and not self.release.is_set():
            try:
                await asyncio.wait_for(self.release.wait(), timeout)
            except TimeoutError:
                pass
            return
        await self.tracker.next_event(ref, timeout)


@dataclass
class Barrier:
    """A client, a manager whose view withholds one CRD's Established, that view, and the CRDs to apply."""

    client: KubeClient
    manager: ResourceManager
    view: WithheldEstablishment
    crds: list[tuple[dict, Resource]]


@contextlib.asynccontextmanager
async def manager_withholding(control_plane, held: dict, crds: list[dict]) -> AsyncIterator[Barrier]:
    """A resource manager on the real cluster whose live view withholds ``held``'s Established condition; every
    CRD of ``crds`` is deleted after."""
    client = await KubeClient.connect(str(control_plane.kubeconfig))
    tracker = Tracker(client, lambda *_: None)
    discovery = Discovery(client)
    try:
        crd_resource = await discovery.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        await tracker.watch([(crd_resource, "")])
        view = WithheldEstablishment(tracker, ObjectRef("apiextensions.k8s.io", "CustomResourceDefinition", "",
                                                        held["metadata"]["name"]))
        yield Barrier(client, ResourceManager(client, discovery, view), view,
                      [(definition, crd_resource) for definition in crds])
    finally:
        await tracker.close()
        for definition in crds:
            await client.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                           f"{definition['metadata']['name']}")
        await client.close()


def test_a_custom_resource_waits_only_for_its_own_crd(control_plane, kube, namespace):
    group = f"barrier-{uuid.uuid4().hex[:6]}.example.io"
    quick, slow = crd(group, "Quick"), crd(group, "Slow")
    objects = [{"apiVersion": f"{group}/v1", "kind": kind, "metadata": {"name": "one", "namespace": namespace},
                "spec": {"size": 1}} for kind in ("Quick", "Slow")]

    async def scenario() -> None:
        async with manager_withholding(control_plane, slow, [quick, slow]) as barrier:
            client = barrier.client
            apply = asyncio.create_task(barrier.manager.apply_all(Owner("barrier", namespace, ""), barrier.crds,
                                                                  objects))
            deadline = time.monotonic() + 60
            while await client.get(f"/apis/{group}/v1/namespaces/{namespace}/quicks/one") is None:
                assert not apply.done(), f"the apply ended without the Quick object: {apply.result()}"
                assert time.monotonic() < deadline, \
                    "the Quick object was not applied while another CRD of the set was not Established yet"
                await asyncio.sleep(0.05)
            assert await client.get(f"/apis/{group}/v1/namespaces/{namespace}/slows/one") is None
            assert not apply.done()

            barrier.view.release.set()
            changes = await asyncio.wait_for(apply, 60)
            assert {(c.ref.kind, c.action) for c in changes} == {
                ("CustomResourceDefinition", Action.CREATED), ("Quick", Action.CREATED), ("Slow", Action.CREATED)}
            assert await client.get(f"/apis/{group}/v1/namespaces/{namespace}/slows/one") is not None

    asyncio.run(scenario())


def test_a_crd_no_object_of_the_set_needs_does_not_hold_the_apply(control_plane, kube, namespace):
    """A CRD of the set whose kind has no object in it is applied and not waited for: the apply ends while that CRD
    is still not Established (its Established is the KfDef's readiness); the CRD that is needed still is waited for."""
    group = f"unneeded-{uuid.uuid4().hex[:6]}.example.io"
    used, unused = crd(group, "Used"), crd(group, "Unused")
    obj = {"apiVersion": f"{group}/v1", "kind": "Used", "metadata": {"name": "one", "namespace": namespace},
           "spec": {"size": 1}}

    async def scenario() -> None:
        async with manager_withholding(control_plane, unused, [unused, used]) as barrier:
            # Before, the apply waited for the held CRD until its 120 s timeout and marked it failed.
            changes = await asyncio.wait_for(
                barrier.manager.apply_all(Owner("unneeded", namespace, ""), barrier.crds, [obj]), 60)
            assert not barrier.view.release.is_set()
            assert {(c.ref.kind, c.ref.name, c.action) for c in changes} == {
                ("CustomResourceDefinition", used["metadata"]["name"], Action.CREATED),
                ("CustomResourceDefinition", unused["metadata"]["name"], Action.CREATED),
                ("Used", "one", Action.CREATED)}
            assert await barrier.client.get(f"/apis/{group}/v1/namespaces/{namespace}/useds/one") is not None

    asyncio.run(scenario())
