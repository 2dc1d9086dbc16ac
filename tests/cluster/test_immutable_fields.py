"""Every immutable-field refusal of the built-in kinds recognised, from kube-apiserver's own answers (issue 38, item 2).

Each case creates an object, sends a change of a field the API server allows to be set only once, and checks that
the answer is recognised (ssa/immutable.py); the answers are printed (``-s``) and recorded in that module's
docstring. Kubeflow v1.2.0's StatefulSets were refused with an answer the old check did not recognise, so not even
``spec.force`` re-created them. Then what the resource manager does with them by default: a StatefulSet whose claims
are retained is re-created and its new pods use the same claims; one whose claims would go with it is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.apply import ApplyOptions
from kfdef_operator.ssa.changeset import REFUSED_NOTE, Action
from kfdef_operator.ssa.client import KubeApiError, KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.immutable import is_immutable_error
from kfdef_operator.ssa.inventory import ref_of
from kfdef_operator.ssa.manager import ResourceManager
from tests.kube import wait_until

pytestmark = pytest.mark.cluster

#: Cluster-scoped objects get this suffix: the session's control plane is shared by the whole run.
SUFFIX = uuid.uuid4().hex[:6]


def pod_spec(env: str = "a") -> dict:
    return {"containers": [{"name": "c", "image": "busybox", "env": [{"name": "X", "value": env}]}]}


def workload(kind: str, ns: str, app: str, **spec) -> dict:
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": kind.lower(), "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}}, "spec": pod_spec()}, **spec}}


def statefulset(ns: str, name: str = "web", service: str = "web", policy: dict | None = None) -> dict:
    obj = workload("StatefulSet", ns, name, serviceName=service, replicas=1, volumeClaimTemplates=[{
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}])
    obj["metadata"]["name"] = name
    if policy is not None:
        obj["spec"]["persistentVolumeClaimRetentionPolicy"] = policy
    return obj


def job(ns: str, name: str, env: str = "a", **spec) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {**pod_spec(env), "restartPolicy": "Never"}}, **spec}}


def selected_job(ns: str, app: str) -> dict:
    obj = job(ns, "selected", manualSelector=True, selector={"matchLabels": {"app": app}})
    obj["spec"]["template"]["metadata"] = {"labels": {"app": app}}
    return obj


def service(ns: str, name: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}, **spec}}


def claim(ns: str, storage_class: str = "slow", modes: tuple[str, ...] = ("ReadWriteOnce",)) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "claim", "namespace": ns},
            "spec": {"accessModes": list(modes), "storageClassName": storage_class,
                     "resources": {"requests": {"storage": "1Gi"}}}}


def volume(path: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"volume-{SUFFIX}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": path}}}


def config(kind: str, ns: str, value: str, *, immutable: bool = True, type_: str | None = None) -> dict:
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "settings", "namespace": ns},
           "data" if kind == "ConfigMap" else "stringData": {"key": value}, "immutable": immutable}
    if type_:
        obj["type"] = type_
    return obj


def binding(kind: str, ns: str, role: str) -> dict:
    meta = {"name": "readers", "namespace": ns} if kind == "RoleBinding" else {"name": f"readers-{SUFFIX}"}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]}


def cluster_object(api_version: str, kind: str, **fields) -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": f"{kind.lower()}-{SUFFIX}"}, **fields}


def storage_class(**fields) -> dict:
    return cluster_object("storage.k8s.io/v1", "StorageClass", **{
        "provisioner": "example.com/disk", "parameters": {"tier": "1"}, "volumeBindingMode": "Immediate", **fields})


def pod(ns: str, env: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "single", "namespace": ns}, "spec": pod_spec(env)}


def resource_claim(ns: str, device_class: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "gpu", "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "one", "exactly": {"deviceClassName": device_class}}]}}}


Change = Callable[[str], tuple[dict, dict]]
#: (what changes, a function of the namespace giving the object before and after the change).
CHANGES: list[tuple[str, Change]] = [
    ("StatefulSet serviceName", lambda ns: (statefulset(ns), statefulset(ns, service="web-2"))),
    ("StatefulSet volumeClaimTemplates", lambda ns: (statefulset(ns), _bigger_claims(statefulset(ns)))),
    ("StatefulSet selector", lambda ns: (statefulset(ns, "cache"), _relabelled(statefulset(ns, "cache")))),
    ("Deployment selector", lambda ns: (workload("Deployment", ns, "a"), workload("Deployment", ns, "b"))),
    ("ReplicaSet selector", lambda ns: (workload("ReplicaSet", ns, "a"), workload("ReplicaSet", ns, "b"))),
    ("DaemonSet selector", lambda ns: (workload("DaemonSet", ns, "a"), workload("DaemonSet", ns, "b"))),
    ("Job template", lambda ns: (job(ns, "run"), job(ns, "run", env="b"))),
    ("Job selector", lambda ns: (selected_job(ns, "a"), selected_job(ns, "b"))),
    ("Job completionMode", lambda ns: (job(ns, "mode", completionMode="NonIndexed"),
                                       job(ns, "mode", completionMode="Indexed"))),
    ("Service clusterIP", lambda ns: (service(ns, "fixed", clusterIP="10.0.3.10"),
                                      service(ns, "fixed", clusterIP="10.0.3.11"))),
    ("Service ClusterIP to headless", lambda ns: (service(ns, "web"), service(ns, "web", clusterIP="None"))),
    ("Service headless to ClusterIP", lambda ns: (service(ns, "peers", clusterIP="None"),
                                                  service(ns, "peers", clusterIP="10.0.3.12"))),
    ("Service loadBalancerClass", lambda ns: (
        service(ns, "edge", type="LoadBalancer", loadBalancerClass="example.com/a"),
        service(ns, "edge", type="LoadBalancer", loadBalancerClass="example.com/b"))),
    ("PersistentVolumeClaim storageClassName", lambda ns: (claim(ns), claim(ns, "fast"))),
    ("PersistentVolumeClaim accessModes", lambda ns: (claim(ns), claim(ns, modes=("ReadWriteMany",)))),
    ("PersistentVolume source", lambda ns: (volume("/a"), volume("/b"))),
    ("ConfigMap immutable", lambda ns: (config("ConfigMap", ns, "1"), config("ConfigMap", ns, "2"))),
    ("Secret immutable", lambda ns: (config("Secret", ns, "1"), config("Secret", ns, "2"))),
    ("Secret type", lambda ns: (config("Secret", ns, "1", immutable=False, type_="Opaque"),
                                config("Secret", ns, "1", immutable=False, type_="example.com/token"))),
    ("RoleBinding roleRef", lambda ns: (binding("RoleBinding", ns, "view"), binding("RoleBinding", ns, "edit"))),
    ("ClusterRoleBinding roleRef", lambda ns: (binding("ClusterRoleBinding", ns, "view"),
                                               binding("ClusterRoleBinding", ns, "edit"))),
    ("StorageClass provisioner", lambda ns: (storage_class(), storage_class(provisioner="example.com/other"))),
    ("StorageClass parameters", lambda ns: (storage_class(), storage_class(parameters={"tier": "2"}))),
    ("PriorityClass value", lambda ns: (cluster_object("scheduling.k8s.io/v1", "PriorityClass", value=100),
                                        cluster_object("scheduling.k8s.io/v1", "PriorityClass", value=200))),
    ("VolumeAttributesClass parameters", lambda ns: (
        cluster_object("storage.k8s.io/v1", "VolumeAttributesClass", driverName="example.com/disk",
                       parameters={"iops": "1"}),
        cluster_object("storage.k8s.io/v1", "VolumeAttributesClass", driverName="example.com/disk",
                       parameters={"iops": "2"}))),
    ("IngressClass controller", lambda ns: (
        cluster_object("networking.k8s.io/v1", "IngressClass", spec={"controller": "example.com/a"}),
        cluster_object("networking.k8s.io/v1", "IngressClass", spec={"controller": "example.com/b"}))),
    ("RuntimeClass handler", lambda ns: (cluster_object("node.k8s.io/v1", "RuntimeClass", handler="a"),
                                         cluster_object("node.k8s.io/v1", "RuntimeClass", handler="b"))),
    ("CSIDriver attachRequired", lambda ns: (
        cluster_object("storage.k8s.io/v1", "CSIDriver", spec={"attachRequired": True}),
        cluster_object("storage.k8s.io/v1", "CSIDriver", spec={"attachRequired": False}))),
    ("Pod spec", lambda ns: (pod(ns, "a"), pod(ns, "b"))),
    ("EndpointSlice addressType", lambda ns: tuple(  # type: ignore[return-value]
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "peers", "namespace": ns},
         "addressType": address_type, "endpoints": []} for address_type in ("IPv4", "FQDN"))),
    ("ResourceQuota scopes", lambda ns: tuple(  # type: ignore[return-value]
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "quota", "namespace": ns},
         "spec": {"hard": {"pods": "10"}, "scopes": [scope]}} for scope in ("BestEffort", "NotBestEffort"))),
    ("ResourceClaim spec", lambda ns: (resource_claim(ns, "a"), resource_claim(ns, "b"))),
]


def _bigger_claims(obj: dict) -> dict:
    obj["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "2Gi"
    return obj


def _relabelled(obj: dict) -> dict:
    obj["spec"]["selector"]["matchLabels"]["app"] = obj["spec"]["template"]["metadata"]["labels"]["app"] = "other"
    return obj


@contextlib.asynccontextmanager
async def connected(control_plane) -> AsyncIterator[tuple[KubeClient, Discovery]]:
    client = await KubeClient.connect(str(control_plane.kubeconfig))
    try:
        yield client, Discovery(client)
    finally:
        await client.close()


async def answer_to(control_plane, before: dict, after: dict) -> KubeApiError | None:
    """Create ``before``, then apply ``after`` over it: the API server's refusal, or None if it accepted the change.
    A cluster-scoped object is deleted after."""
    async with connected(control_plane) as (client, discovery):
        resource = await discovery.resource(before["apiVersion"], before["kind"])
        path = resource.path_of(ref_of(before))
        await client.apply(path, before, field_manager="tests")
        try:
            await client.apply(path, after, field_manager="tests")
            return None
        except KubeApiError as error:
            return error
        finally:
            if not resource.namespaced:
                await client.request("DELETE", path)


@pytest.mark.parametrize(("change", "objects"), CHANGES, ids=[change for change, _ in CHANGES])
def test_the_answer_to_every_immutable_field_change_is_recognised(control_plane, namespace, change, objects):
    answer = asyncio.run(answer_to(control_plane, *objects(namespace)))
    assert answer is not None, f"{change}: the API server accepted the change"
    print(f"{change}: {answer.status} {answer.reason}: {answer.message.splitlines()[0][:300]}")
    assert is_immutable_error(answer), f"{change}: not recognised: {answer.status} {answer.message}"


@pytest.mark.parametrize(("change", "before", "after"), [
    # The manifest's own value says "field is immutable": the old substring check took this for an immutable field
    # and deleted the Deployment, whose re-create was then refused for the same label.
    ("label value", {"l": "x"}, {"l": "field is immutable"}),
    ("mixed causes", {"replicas": 1}, {"replicas": -1, "app": "b"}),
], ids=["value-says-immutable", "immutable-and-invalid"])
def test_other_refusals_are_not_taken_for_immutable_fields(control_plane, namespace, change, before, after):
    def deployment(labels: dict | None = None, replicas: int = 1, app: str = "a") -> dict:
        obj = workload("Deployment", namespace, app, replicas=replicas)
        obj["metadata"]["labels"] = labels or {}
        return obj
    answer = asyncio.run(answer_to(control_plane, deployment(before.get("l") and {"l": before["l"]},
                                                             before.get("replicas", 1)),
                                   deployment(after.get("l") and {"l": after["l"]}, after.get("replicas", 1),
                                              after.get("app", "a"))))
    assert answer is not None and answer.status == 422
    assert not is_immutable_error(answer), f"{change}: taken for an immutable field: {answer.message}"


OWNER = Owner("immutable", "owners", "")


async def apply_as_owner(manager: ResourceManager, obj: dict, **options) -> object:
    resource = await manager.discovery.resource(obj["apiVersion"], obj["kind"])
    [change] = await manager.apply_stage(OWNER, [(obj, resource)], options=ApplyOptions(**options))
    return change


def test_a_statefulset_whose_claims_are_retained_is_recreated_on_the_same_claims(control_plane, kube, namespace):
    """serviceName changed (as between Kubeflow v1.0.2 and v1.2.0): re-created without spec.force; the claim its
    pod used is the very same object, and the new StatefulSet's pod mounts it."""
    async def scenario() -> None:
        async with connected(control_plane) as (client, discovery):
            manager = ResourceManager(client, discovery)
            created = await apply_as_owner(manager, statefulset(namespace))
            assert created.action is Action.CREATED, created
            old_uid = created.live["metadata"]["uid"]
            claim_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data-web-0"
            kept = await wait_until("the StatefulSet's claim exists", lambda: client.get(claim_path))
            assert not kept["metadata"].get("ownerReferences"), "a retained claim has no owner"

            change = await apply_as_owner(manager, statefulset(namespace, service="web-2"))
            assert change.action is Action.CREATED and change.message == "re-created: an immutable field changed", \
                change
            assert change.live["metadata"]["uid"] != old_uid
            after = await client.get(claim_path)
            assert after is not None and after["metadata"]["uid"] == kept["metadata"]["uid"]

            async def new_pod() -> dict | None:
                live = await client.get(f"/api/v1/namespaces/{namespace}/pods/web-0")
                owners = (live or {}).get("metadata", {}).get("ownerReferences") or []
                return live if any(owner["uid"] == change.live["metadata"]["uid"] for owner in owners) else None
            pod_now = await wait_until("the new StatefulSet's pod exists", new_pod, timeout=60)
            claims = [volume["persistentVolumeClaim"]["claimName"] for volume in pod_now["spec"]["volumes"]
                      if "persistentVolumeClaim" in volume]
            assert claims == ["data-web-0"]

    asyncio.run(scenario())


def test_a_statefulset_whose_claims_would_go_with_it_is_reported(control_plane, namespace):
    """whenDeleted: Delete: deleting the StatefulSet deletes its claims, so it is re-created only with spec.force."""
    policy = {"whenDeleted": "Delete", "whenScaled": "Retain"}

    async def scenario() -> None:
        async with connected(control_plane) as (client, discovery):
            manager = ResourceManager(client, discovery)
            created = await apply_as_owner(manager, statefulset(namespace, policy=policy))
            change = await apply_as_owner(manager, statefulset(namespace, service="web-2", policy=policy))
            assert change.action is Action.FAILED and change.message.startswith(REFUSED_NOTE), change
            assert "claims would be deleted with it" in change.message
            assert "spec.force: true" in change.message
            live = await client.get(f"/apis/apps/v1/namespaces/{namespace}/statefulsets/web")
            assert live["metadata"]["uid"] == created.live["metadata"]["uid"]

    asyncio.run(scenario())

