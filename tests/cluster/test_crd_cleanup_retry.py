"""A CRD whose cleanup kube-apiserver failed and left alone is made to retry (against the real kube-apiserver).

kube-apiserver's CRD finalizer retries a failed cleanup at once, but that retry can read a cached copy one version
behind, take the conflict for someone else's change and drop the CRD; the change it then sees differs only in the
Terminating condition, which it ignores, so the CRD stays until its informer resyncs five minutes later (seen in the
benchmarks: a CRD deleted seconds after its creation, "could not list instances: storage is (re)initializing", gone
after 4.5 minutes). That race cannot be provoked on demand, so this test sets up the state it leaves: a CRD being
deleted whose Terminating condition says the cleanup failed (written through its status, the CRD held by a finalizer
of the test). The teardown must touch such a CRD (any change but the condition queues it again in kube-apiserver),
and leave alone one that is being deleted normally.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kfdef_operator.api.names import TOUCHED_ANNOTATION
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.tracker import Tracker
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.inventory import ref_of
from kfdef_operator.ssa.manager import ResourceManager
from tests.kube import wait_until

pytestmark = pytest.mark.cluster

HOLD = "test.kfdef.apps.kubeflow.org/hold"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def crd(group: str) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"things.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": "Thing", "plural": "things", "singular": "thing", "listKind": "ThingList"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


def terminating(live: dict) -> dict:
    return next((c for c in (live.get("status") or {}).get("conditions") or [] if c["type"] == "Terminating"), {})


def test_a_crd_whose_cleanup_failed_is_touched_and_one_being_deleted_normally_is_not(control_plane):
    definition = crd(f"cleanup-{uuid.uuid4().hex[:6]}.example.io")
    path = f"{CRDS}/{definition['metadata']['name']}"

    async def scenario() -> None:
        client = await KubeClient.connect(str(control_plane.kubeconfig))
        tracker = Tracker(client, lambda *_: None)
        discovery = Discovery(client)
        owner = Owner("cleanup", "default", "")
        teardown: asyncio.Task | None = None
        try:
            resource = await discovery.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            await tracker.watch([(resource, "")])
            manager = ResourceManager(client, discovery, tracker)
            changes = await manager.apply_all(owner, [(definition, resource)], [])
            assert [c.action for c in changes] == [Action.CREATED], changes
            # No object of the set needs this CRD, so the apply did not wait for it; deleted while its storage is
            # still initialising, kube-apiserver's cleanup can fail and stay failed (the race above).
            await wait_until("the CRD is Established", lambda: _established(client, path))
            await client.request("PATCH", path, content_type="application/merge-patch+json",
                                 body={"metadata": {"finalizers": [HOLD]}})
            await client.request("DELETE", path)
            # kube-apiserver's cleanup ran (nothing to delete); the test's finalizer holds the CRD.
            live = await wait_until("kube-apiserver's cleanup is done", lambda: _completed(client, path))

            teardown = asyncio.create_task(manager.teardown(owner, {ref_of(definition): "v1"}, wave_timeout=60))
            await asyncio.sleep(3.0)  # longer than the operator leaves a failed cleanup to kube-apiserver
            live = await client.get(path)
            assert TOUCHED_ANNOTATION not in live["metadata"].get("annotations", {}), \
                "touched a CRD whose cleanup did not fail"

            failed = {**terminating(live), "status": "True", "reason": "InstanceDeletionFailed",
                      "message": "could not list instances: storage is (re)initializing"}
            live["status"]["conditions"] = [c for c in live["status"]["conditions"] if c["type"] != "Terminating"]
            live["status"]["conditions"].append(failed)
            await client.request("PUT", f"{path}/status", body=live)
            touched = await wait_until("the teardown touches the CRD", lambda: _touched(client, path), timeout=15)
            assert touched["metadata"]["finalizers"] == [HOLD]  # nothing else changed
            assert terminating(touched)["reason"] == "InstanceDeletionFailed"

            await client.request("PATCH", path, content_type="application/merge-patch+json",
                                 body={"metadata": {"finalizers": None}})
            result = await asyncio.wait_for(teardown, 30)
            assert result.done, result.remaining
            assert [(c.ref, c.action) for c in result.changes] == [(ref_of(definition), Action.DELETED)]
        finally:
            if teardown is not None and not teardown.done():
                teardown.cancel()
            if await client.get(path) is not None:
                await client.request("PATCH", path, content_type="application/merge-patch+json",
                                     body={"metadata": {"finalizers": None}})
                await client.request("DELETE", path)
            await tracker.close()
            await client.close()

    asyncio.run(scenario())


async def _completed(client: KubeClient, path: str) -> dict | None:
    live = await client.get(path)
    done = live is not None and terminating(live).get("reason") == "InstanceDeletionCompleted" \
        and live["metadata"].get("finalizers") == [HOLD]
    return live if done else None


async def _established(client: KubeClient, path: str) -> dict | None:
    live = await client.get(path)
    conditions = (live or {}).get("status", {}).get("conditions") or []
    return live if any(c["type"] == "Established" and c["status"] == "True" for c in conditions) else None


async def _touched(client: KubeClient, path: str) -> dict | None:
    live = await client.get(path)
    return live if live is not None and TOUCHED_ANNOTATION in live["metadata"].get("annotations", {}) else None
