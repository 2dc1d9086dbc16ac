"""A teardown trusts its watch cache only as far as preconditions hold (against the real kube-apiserver).

The resource manager deletes what the watch cache shows as the owner's without reading it first (a CRD's GET
returned hundreds of KiB), with the uid and resourceVersion it saw as preconditions: an object changed since, say
taken out of the operator's hands a moment ago, is read again and judged on what the server says. In the last wave
the Namespaces go first, so that kube-controller-manager's fixed wait before emptying them passes while the other
deletes are sent.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kfdef_operator.api.names import RECONCILE_ANNOTATION, RECONCILE_DISABLED
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.tracker import Tracker
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.inventory import ObjectRef, ref_of, version_of
from kfdef_operator.ssa.live import LiveObject
from kfdef_operator.ssa.manager import ResourceManager

pytestmark = pytest.mark.cluster


def stack(suffix: str) -> list[dict]:
    namespace = f"td-{suffix}"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace},
         "data": {"a": "1"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"td-{suffix}"},
         "rules": []},
    ]


class Snapshot:
    """The tracker's view, except that the objects in ``frozen`` read as they were when frozen."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.frozen: dict[ObjectRef, LiveObject] = {}

    def get(self, ref: ObjectRef) -> LiveObject | None:
        return self.frozen.get(ref) or self.tracker.get(ref)

    def is_watched(self, group: str, kind: str, namespace: str = "") -> bool:
        return self.tracker.is_watched(group, kind, namespace)

    async def next_event(self, ref: ObjectRef, timeout: float) -> None:
        await self.tracker.next_event(ref, timeout)


Scenario = Callable[[KubeClient, ResourceManager, Snapshot, Owner, list[dict], list[tuple[str, str]]],
                    Awaitable[None]]


def run(control_plane: Any, scenario: Scenario) -> None:
    """``scenario`` with a stack applied by a manager whose live view is the tracker's (through a
    :class:`Snapshot`); requests of the client are recorded as (method, path) from then on."""
    async def main() -> None:
        client = await KubeClient.connect(str(control_plane.kubeconfig))
        tracker = Tracker(client, lambda *_: None)
        discovery = Discovery(client)
        objects = stack(uuid.uuid4().hex[:8])
        owner = Owner("teardown", objects[0]["metadata"]["name"], "")
        try:
            resources = [await discovery.resource(obj["apiVersion"], obj["kind"]) for obj in objects]
            await tracker.watch({(resource, "") for resource in resources})
            view = Snapshot(tracker)
            manager = ResourceManager(client, discovery, view)
            changes = await manager.apply_all(owner, list(zip(objects, resources, strict=True)), [])
            assert {c.action for c in changes} == {Action.CREATED}, changes
            for obj in objects:  # the watch has seen each one
                while tracker.get(ref_of(obj)) is None:
                    await tracker.next_event(ref_of(obj), 1.0)
            sent: list[tuple[str, str]] = []
            request = client.request

            async def recorded(method: str, path: str, **kwargs: Any) -> Any:
                sent.append((method, path))
                return await request(method, path, **kwargs)

            client.request = recorded  # type: ignore[method-assign]
            await scenario(client, manager, view, owner, objects, sent)
        finally:
            await tracker.close()
            for obj in reversed(objects):
                resource = await discovery.resource(obj["apiVersion"], obj["kind"])
                if await client.get(resource.path_of(ref_of(obj))) is not None:
                    await client.request("DELETE", resource.path_of(ref_of(obj)))
            await client.close()

    asyncio.run(main())


def test_teardown_deletes_what_the_watch_cache_shows_without_reading_it_namespaces_first(control_plane):
    async def scenario(client, manager, view, owner, objects, sent) -> None:
        result = await manager.teardown(owner, {ref_of(obj): version_of(obj) for obj in objects})

        assert result.done, result.remaining
        assert {(c.ref.kind, c.action) for c in result.changes} == {
            ("Namespace", Action.DELETED), ("ConfigMap", Action.DELETED), ("ClusterRole", Action.DELETED)}
        deletes = [path for method, path in sent if method == "DELETE"]
        # (The ClusterRoles' listing that finds aggregated roles, deleted one at a time first, is no object read.)
        assert [path for method, path in sent if method == "GET" and path in deletes] == [], \
            f"read before deleting: {sent}"
        assert len(deletes) == 3 and deletes[0].endswith(f"/namespaces/{objects[0]['metadata']['name']}"), deletes

    run(control_plane, scenario)


def test_an_object_changed_since_the_cache_saw_it_is_read_and_judged_again(control_plane):
    async def scenario(client, manager, view, owner, objects, sent) -> None:
        config_map = ref_of(objects[1])
        path = f"/api/v1/namespaces/{config_map.namespace}/configmaps/{config_map.name}"
        view.frozen[config_map] = view.tracker.get(config_map)  # what the cache holds before the change
        await client.request("PATCH", path, content_type="application/merge-patch+json",
                             body={"metadata": {"annotations": {RECONCILE_ANNOTATION: RECONCILE_DISABLED}}})

        changes = await manager.prune(owner, {config_map: "v1"})

        assert [(c.ref, c.action) for c in changes] == [(config_map, Action.RELEASED)], changes
        assert await client.get(path) is not None, "deleted although a person took it over since the cache saw it"
        assert ("GET", path) in sent

    run(control_plane, scenario)
