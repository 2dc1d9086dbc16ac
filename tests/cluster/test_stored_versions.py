"""A release that drops a CRD version objects are stored at: the objects are migrated, never lost (issue 38, item 1).

Kubeflow v1.2.0's katib CRDs drop v1alpha3, which v1.0.2 stored experiments at; kube-apiserver refuses such a CRD
(``status.storedVersions[0]: ... must remain in spec.versions``). Here a CRD with v1alpha1 as storage holds a user's
objects, then the "new release" with only v1 is applied through the resource manager, with other objects beside it.
Stored at v1 means stored at v1: etcd itself is read. Objects v1 refuses, or whose fields v1's schema would drop,
stop that CRD alone, and are kept as they were.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.apply import ApplyOptions
from kfdef_operator.ssa.changeset import REFUSED_NOTE, Action, ChangeSet
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.manager import ResourceManager
from tests.cluster.conftest import KFDEF_API, kfdef_status, wait_ready
from tests.kube import wait_for
from tests.stacks import Stack, write_package

pytestmark = pytest.mark.cluster

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PRESERVED = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def version(name: str, spec_schema: dict, *, storage: bool = True) -> dict:
    return {"name": name, "served": True, "storage": storage,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}}}


def widget_crd(group: str, *versions: dict) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
                     "versions": list(versions)}}


def widget(group: str, version_name: str, namespace: str, name: str, spec: dict) -> dict:
    return {"apiVersion": f"{group}/{version_name}", "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@dataclass
class Cluster:
    """The manager acting for the stack, the client it uses, and the control plane (for etcd)."""

    client: KubeClient
    manager: ResourceManager
    plane: object
    group: str
    owner: Owner

    def path(self, version_name: str, namespace: str, name: str = "") -> str:
        return f"/apis/{self.group}/{version_name}/namespaces/{namespace}/widgets" + (f"/{name}" if name else "")

    async def crd(self) -> dict:
        return await self.client.get(f"{CRDS}/widgets.{self.group}")

    async def apply(self, objects: list[dict], **options) -> ChangeSet:
        """Apply a set as a reconcile does: objects of kinds not served yet resolved after the CRDs."""
        resolved, later = [], []
        for obj in objects:
            try:
                resolved.append((obj, await self.manager.discovery.resource(obj["apiVersion"], obj["kind"])))
            except LookupError:
                later.append(obj)
        return await self.manager.apply_all(self.owner, resolved, later, ApplyOptions(**options))

    def stored_as(self, namespace: str, name: str) -> str:
        """The apiVersion the object is stored at in etcd (custom resources are stored as JSON)."""
        key = base64.b64encode(f"/registry/{self.group}/widgets/{namespace}/{name}".encode()).decode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.plane.ports['etcd']}/v3/kv/range",
                                         data=json.dumps({"key": key}).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            [kv] = json.load(answer)["kvs"]
        return json.loads(base64.b64decode(kv["value"]))["apiVersion"]


@contextlib.asynccontextmanager
async def cluster_with(control_plane, old_crd: dict, namespace: str, widgets: list[dict]) -> AsyncIterator[Cluster]:
    """The old release's CRD applied by the stack and a user's widgets created at its version; the CRD deleted
    after."""
    client = await KubeClient.connect(str(control_plane.kubeconfig))
    group = old_crd["spec"]["group"]
    cluster = Cluster(client, ResourceManager(client, Discovery(client)), control_plane, group,
                      Owner("release", namespace, ""))
    try:
        [created] = await cluster.apply([old_crd])
        assert created.action is Action.CREATED, created
        await cluster.manager.wait_established(created)  # no object of that set waited for it
        for obj in widgets:  # the user's: not the stack's
            meta = obj["metadata"]
            await client.request("POST", cluster.path(obj["apiVersion"].rpartition("/")[2], meta["namespace"]),
                                 body=obj)
        yield cluster
    finally:
        await client.request("DELETE", f"{CRDS}/widgets.{group}")
        await client.close()


def config_map(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace},
            "data": {"release": "new"}}


def by_kind(changes: ChangeSet) -> dict[str, object]:
    return {change.ref.kind: change for change in changes}


def test_objects_stored_at_a_dropped_version_are_migrated_then_the_crd_applied_as_rendered(control_plane, namespace):
    group = f"mig-{uuid.uuid4().hex[:6]}.example.io"
    old = widget_crd(group, version("v1alpha1", PRESERVED))
    new = widget_crd(group, version("v1", {**PRESERVED, "properties": {"size": {"type": "integer"}}}))
    users = [widget(group, "v1alpha1", namespace, name, {"size": size, "note": f"user data {name}"})
             for name, size in (("a", 1), ("b", 2), ("c", 3))]

    async def scenario() -> None:
        async with cluster_with(control_plane, old, namespace, users) as cluster:
            before = {obj["metadata"]["name"]: obj for obj in
                      (await cluster.client.request("GET", cluster.path("v1alpha1", namespace)))["items"]}
            assert {cluster.stored_as(namespace, name) for name in before} == {f"{group}/v1alpha1"}
            stack = [new, config_map(namespace), widget(group, "v1", namespace, "stack-own", {"size": 9})]

            preview = by_kind(await cluster.apply(stack, dry_run=True))["CustomResourceDefinition"]
            assert preview.action is Action.CONFIGURED and "would migrate the 3 Widget objects stored at v1alpha1 " \
                "to v1" in preview.message, preview
            assert (await cluster.crd())["status"]["storedVersions"] == ["v1alpha1"]

            changes = by_kind(await cluster.apply(stack))
            crd_change = changes["CustomResourceDefinition"]
            assert crd_change.action is Action.CONFIGURED, crd_change
            assert crd_change.message == ("stored versions migrated: 3 Widget objects stored at v1alpha1 rewritten "
                                          "at v1, storedVersions trimmed to v1")
            assert changes["ConfigMap"].action is Action.CREATED and changes["Widget"].action is Action.CREATED

            live = await cluster.crd()
            assert live["status"]["storedVersions"] == ["v1"]
            assert [(v["name"], v["served"], v["storage"]) for v in live["spec"]["versions"]] == [("v1", True, True)]
            for name, obj in before.items():
                now = await cluster.client.get(cluster.path("v1", namespace, name))
                assert now["metadata"]["uid"] == obj["metadata"]["uid"] and now["spec"] == obj["spec"]
                assert cluster.stored_as(namespace, name) == f"{group}/v1"

            again = by_kind(await cluster.apply(stack))
            assert {kind: change.action for kind, change in again.items()} == {
                "CustomResourceDefinition": Action.UNCHANGED, "ConfigMap": Action.UNCHANGED,
                "Widget": Action.UNCHANGED}

    asyncio.run(scenario())


def test_after_the_migration_every_manager_of_the_dropped_version_can_still_write(control_plane, namespace):
    """kube-apiserver reads each managedFields entry at the version it was recorded at: an object the stack applied,
    or a user created, at a dropped version could not be written again by anyone (``500: request to convert CR to
    an invalid group/version``: Kubeflow v1.2.0's cert-manager objects, on the way to v1.11.0). The migration moves
    those entries to the storage version."""
    group = f"mig-{uuid.uuid4().hex[:6]}.example.io"
    old = widget_crd(group, version("v1alpha1", PRESERVED))
    new = widget_crd(group, version("v1", {**PRESERVED, "properties": {"size": {"type": "integer"}}}))
    users = [widget(group, "v1alpha1", namespace, "a", {"size": 1})]

    async def scenario() -> None:
        async with cluster_with(control_plane, old, namespace, users) as cluster:
            [stacks] = await cluster.apply([widget(group, "v1alpha1", namespace, "stack-own", {"size": 9})])
            assert stacks.action is Action.CREATED, stacks
            changes = by_kind(await cluster.apply([new, widget(group, "v1", namespace, "stack-own", {"size": 10})]))
            assert changes["CustomResourceDefinition"].message.startswith("stored versions migrated: 2 Widget"), \
                changes["CustomResourceDefinition"]
            assert changes["Widget"].action is Action.CONFIGURED, changes["Widget"]
            await cluster.client.request("PATCH", cluster.path("v1", namespace, "a"), body={"spec": {"size": 2}},
                                         content_type="application/merge-patch+json")
            for name in ("a", "stack-own"):
                live = await cluster.client.get(cluster.path("v1", namespace, name))
                assert {entry["apiVersion"] for entry in live["metadata"]["managedFields"]} == {f"{group}/v1"}

    asyncio.run(scenario())


def test_an_object_the_new_version_refuses_stops_that_crd_alone_and_is_kept(control_plane, namespace):
    """v1 requires ``size`` under a node that keeps unknown fields (as the operator's v1beta1 -> v1 CRD conversion
    writes Kubeflow's): kube-apiserver refuses the rewrite of the object without it (most other invalid values it
    lets through unchanged). The CRD keeps serving v1alpha1 beside v1, nothing is deleted, the rest is applied;
    once the user gives the object a size, the next apply completes the migration."""
    group = f"mig-{uuid.uuid4().hex[:6]}.example.io"
    old = widget_crd(group, version("v1alpha1", PRESERVED))
    new = widget_crd(group, version("v1", {**PRESERVED, "required": ["size"],
                                           "properties": {"size": {"type": "integer"}}}))
    users = [widget(group, "v1alpha1", namespace, "a", {"size": 1}),
             widget(group, "v1alpha1", namespace, "b", {"colour": "red"}),
             widget(group, "v1alpha1", namespace, "c", {"size": 3})]

    async def scenario() -> None:
        async with cluster_with(control_plane, old, namespace, users) as cluster:
            stack = [new, config_map(namespace), widget(group, "v1", namespace, "stack-own", {"size": 9})]
            changes = by_kind(await cluster.apply(stack))
            crd_change = changes["CustomResourceDefinition"]
            assert crd_change.action is Action.FAILED and crd_change.message.startswith(REFUSED_NOTE), crd_change
            assert (f"stored versions not migrated: 1 of 3 Widget objects refused by v1 (first: {namespace}/b: 422 "
                    "Invalid") in crd_change.message
            assert "spec.size: Required value" in crd_change.message
            assert "custom resources are never deleted" in crd_change.message
            assert crd_change.live is not None  # the CRD stays in the stack
            assert changes["ConfigMap"].action is Action.CREATED and changes["Widget"].action is Action.CREATED

            live = await cluster.crd()
            assert {(v["name"], v["served"], v["storage"]) for v in live["spec"]["versions"]} == {
                ("v1", True, True), ("v1alpha1", True, False)}
            assert "v1alpha1" in live["status"]["storedVersions"]
            kept = await cluster.client.get(cluster.path("v1alpha1", namespace, "b"))
            assert kept["spec"] == {"colour": "red"}
            assert cluster.stored_as(namespace, "b") == f"{group}/v1alpha1"
            names = {obj["metadata"]["name"] for obj in
                     (await cluster.client.request("GET", cluster.path("v1", namespace)))["items"]}
            assert names == {"a", "b", "c", "stack-own"}

            await cluster.client.request("PATCH", cluster.path("v1alpha1", namespace, "b"),
                                         content_type="application/merge-patch+json", body={"spec": {"size": 2}})
            fixed = by_kind(await cluster.apply(stack))["CustomResourceDefinition"]
            assert fixed.action is Action.CONFIGURED and fixed.message.startswith("stored versions migrated: 4 "), \
                fixed
            live = await cluster.crd()
            assert live["status"]["storedVersions"] == ["v1"]
            assert [v["name"] for v in live["spec"]["versions"]] == ["v1"]
            assert {cluster.stored_as(namespace, name) for name in names} == {f"{group}/v1"}

    asyncio.run(scenario())


def test_an_object_whose_fields_the_new_schema_would_drop_is_not_rewritten(control_plane, namespace):
    """kube-apiserver prunes, without a word, the fields the storage version's schema does not declare when it
    rewrites an object (read at v1, ``legacy`` is already gone): such an object is reported, not rewritten."""
    group = f"mig-{uuid.uuid4().hex[:6]}.example.io"
    declared = {"size": {"type": "integer"}}
    old = widget_crd(group, version("v1alpha1", {"type": "object",
                                                 "properties": {**declared, "legacy": {"type": "string"}}}))
    new = widget_crd(group, version("v1", {"type": "object", "properties": declared}))
    users = [widget(group, "v1alpha1", namespace, "plain", {"size": 1}),
             widget(group, "v1alpha1", namespace, "old-style", {"size": 2, "legacy": "only here"})]

    async def scenario() -> None:
        async with cluster_with(control_plane, old, namespace, users) as cluster:
            crd_change = by_kind(await cluster.apply([new]))["CustomResourceDefinition"]
            assert crd_change.action is Action.FAILED and crd_change.message.startswith(REFUSED_NOTE), crd_change
            assert (f"1 of 2 Widget objects refused by v1 (first: {namespace}/old-style: v1's schema does not "
                    "declare .spec.legacy, which rewriting it would drop)") in crd_change.message
            kept = await cluster.client.get(cluster.path("v1alpha1", namespace, "old-style"))
            assert kept["spec"] == {"size": 2, "legacy": "only here"}
            assert cluster.stored_as(namespace, "old-style") == f"{group}/v1alpha1"

    asyncio.run(scenario())


def test_the_kfdef_reports_the_crd_its_objects_stop(operator, kube, kfdef_namespace, tmp_path):
    """Through the operator: a KfDef's new generation drops v1alpha1; a user's object v1 refuses is named in
    status.failures with the count, the rest of the new generation is applied, and no object is lost."""
    ns = kfdef_namespace
    group = f"mig-{uuid.uuid4().hex[:6]}.example.io"
    write_package(tmp_path, "old", [widget_crd(group, version("v1alpha1", PRESERVED))])
    write_package(tmp_path, "new", [widget_crd(group, version("v1", {**PRESERVED, "required": ["size"]})),
                                    config_map(ns)])

    def release(path: str) -> dict:
        return Stack(tmp_path, "", ns, "", [{"name": "widgets", "kustomizeConfig": {
            "repoRef": {"name": "manifests", "path": path}}}]).kfdef("widgets", ns)

    kube.apply(release("old"))
    wait_ready(kube, "widgets", ns)
    for name, spec in (("sized", {"size": 1}), ("unsized", {"colour": "red"})):
        kube.apply(widget(group, "v1alpha1", ns, name, spec), manager="a-user")
    kube.apply(release("new"))

    def reported() -> str | None:
        return next((failure["message"] for failure in kfdef_status(kube, "widgets", ns).get("failures") or []
                     if f"widgets.{group}" in failure["object"]), None)
    message = wait_for(reported, timeout=90, what="the CRD named in status.failures")
    assert message.startswith(REFUSED_NOTE), message
    assert f"stored versions not migrated: 1 of 2 Widget objects refused by v1 (first: {ns}/unsized: 422" in message
    assert kube.get("v1", "ConfigMap", "settings", ns)["data"] == {"release": "new"}
    assert kube.get(f"{group}/v1alpha1", "Widget", "unsized", ns)["spec"] == {"colour": "red"}
    assert kube.get(f"{group}/v1", "Widget", "sized", ns)["spec"] == {"size": 1}


def test_the_stacks_objects_of_a_crd_moved_to_another_version_are_seen_at_it(operator, kube, kfdef_namespace,
                                                                            tmp_path):
    """A release moves its CRD from v1alpha1 to v1 and ships objects at v1, one of them new: the operator's watch of
    the kind, started at v1alpha1, reads it at v1 from then on (v1alpha1 is no longer served, and a watch of it
    fails for ever), so the new object is seen and the stack is Ready. It once stayed 'missing' until the health
    deadline: Kubeflow v1.11.0's new cert-manager Certificates and Issuers, on the way from v1.2.0."""
    ns = kfdef_namespace
    group = f"mig-{uuid.uuid4().hex[:6]}.example.io"
    write_package(tmp_path, "old", [widget_crd(group, version("v1alpha1", PRESERVED)),
                                    widget(group, "v1alpha1", ns, "kept", {"size": 1})])
    write_package(tmp_path, "new", [widget_crd(group, version("v1", PRESERVED)),
                                    widget(group, "v1", ns, "kept", {"size": 1}),
                                    widget(group, "v1", ns, "added", {"size": 2})])

    def release(path: str) -> dict:
        return Stack(tmp_path, "", ns, "", [{"name": "widgets", "kustomizeConfig": {
            "repoRef": {"name": "manifests", "path": path}}}]).kfdef("moved", ns)

    kube.apply(release("old"))
    wait_ready(kube, "moved", ns)
    kube.apply(release("new"))
    try:
        status = wait_for(lambda: (lambda s: s if s.get("observedGeneration") == 2 and any(
            c["type"] == "Ready" and c["status"] == "True" for c in s.get("conditions") or []) else None)(
            kfdef_status(kube, "moved", ns)), timeout=60, what="Ready at v1")
    finally:
        kube.delete(KFDEF_API, "KfDef", "moved", ns)
        kube.wait_gone(KFDEF_API, "KfDef", "moved", ns, timeout=60)
    assert status["summary"]["ready"] == status["summary"]["total"] == 3
