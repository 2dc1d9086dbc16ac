"""A release that adds a version to a CRD the cluster has, and ships objects at that version (Kubeflow v1.11.0's
Istio CRDs gain v1 and its Gateways are v1): Established is True all along, but kube-apiserver answers ``404 page
not found`` for the new version for a moment after the update. The objects at the new version wait until it is
served, as those of a new CRD wait until it is Established."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.apply import ApplyOptions
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.manager import ResourceManager
from tests.cluster.test_stored_versions import PRESERVED, version, widget, widget_crd

pytestmark = pytest.mark.cluster
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: CRDs updated at once: the 404 lasts milliseconds, so one alone may miss it.
COUNT = 12


def test_objects_at_a_version_the_apply_adds_to_a_crd_wait_until_it_is_served(control_plane, namespace):
    groups = [f"nv{uuid.uuid4().hex[:6]}.example.io" for _ in range(COUNT)]

    async def scenario() -> None:
        client = await KubeClient.connect(str(control_plane.kubeconfig))
        manager = ResourceManager(client, Discovery(client))
        owner = Owner("release", namespace, "")

        async def apply(objects: list[dict]) -> list:
            resolved, later = [], []
            for obj in objects:
                try:
                    resolved.append((obj, await manager.discovery.resource(obj["apiVersion"], obj["kind"])))
                except LookupError:
                    later.append(obj)
            return list(await manager.apply_all(owner, resolved, later, ApplyOptions()))

        try:
            old = [widget_crd(group, version("v1", PRESERVED)) for group in groups]
            created = await apply(old)
            for change in created:
                await manager.wait_established(change)
            new = [widget_crd(group, version("v1", PRESERVED, storage=False), version("v2", PRESERVED))
                   for group in groups]
            changes = await apply([*new, *(widget(group, "v2", namespace, "w", {"size": 1}) for group in groups)])
            widgets = {str(c.ref): (c.action, c.message) for c in changes if c.ref.kind == "Widget"}
            assert len(widgets) == COUNT and all(action is Action.CREATED for action, _ in widgets.values()), widgets
        finally:
            for group in groups:
                await client.request("DELETE", f"{CRDS}/widgets.{group}")
            await client.close()

    asyncio.run(scenario())
