"""kube-apiserver restarts under a watching operator; etcd compaction expires its watches (410 Gone).

After each disruption two things must work again, proving that no watch is silently stuck: a deleted Deployment is
healed (the tracker's watch of Deployments) and an edit of the KfDef is reconciled (kopf's watch of KfDefs).
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request

import pytest

from tests.kube import wait_for
from tests.reliability.support import LogWindow, retry_api, wait_ready

pytestmark = pytest.mark.cluster

HEAL_DEADLINE_S = 45  # the tracker reconnects with jittered backoff capped at 15 s; a heal takes milliseconds


@pytest.fixture
def deployed(operator, kube, kfdef_namespace, new_stack):
    # The stack lives in the KfDef's own namespace (adopted, so released and not deleted at teardown): after an
    # API server restart, kube-controller-manager's namespace controller can take minutes to finish a deletion.
    stack = new_stack(namespace=kfdef_namespace, with_webhook=False)
    kube.apply(stack.kfdef("watched", kfdef_namespace))
    wait_ready(kube, "watched", kfdef_namespace)
    return stack


def _etcd(control_plane, method: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{control_plane.ports['etcd']}/v3/kv/{method}",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _heal_and_edit_work(kube, stack, namespace: str, mode: str) -> tuple[float, float]:
    """Delete the Deployment and edit a parameter; return (heal seconds, edit seconds). Fails if either is stuck."""
    old = retry_api(lambda: kube.get("apps/v1", "Deployment", "operator", stack.namespace))["metadata"]["uid"]
    started = time.monotonic()
    retry_api(lambda: kube.delete("apps/v1", "Deployment", "operator", stack.namespace))
    wait_for(lambda: (kube.get("apps/v1", "Deployment", "operator", stack.namespace) or {"metadata": {"uid": old}})
             ["metadata"]["uid"] != old, timeout=HEAL_DEADLINE_S, what="the deleted Deployment healed")
    healed = time.monotonic() - started
    applications = copy.deepcopy(stack.applications)
    applications[2]["kustomizeConfig"]["parameters"][0]["value"] = mode
    started = time.monotonic()
    retry_api(lambda: kube.apply(stack.kfdef("watched", namespace, applications=applications)))
    wait_for(lambda: (kube.get("v1", "ConfigMap", "app-parameters", stack.namespace) or {}).get("data", {})
             .get("mode") == mode, timeout=HEAL_DEADLINE_S, what=f"the KfDef edit (mode={mode}) reconciled")
    edited = time.monotonic() - started
    # The healed Deployment Available again: the controller manager, scheduler and kwok have recovered too, so
    # the next test starts on a working control plane.
    try:
        wait_ready(kube, "watched", namespace, timeout=180)
    except AssertionError as error:  # whose view lags: the operator's, or the components' that make it Available
        live = kube.get("apps/v1", "Deployment", "operator", stack.namespace) or {}
        pods = [(p.metadata.name, p.status.phase) for p in kube.core.list_namespaced_pod(stack.namespace).items]
        raise AssertionError(f"{error}\nthe Deployment's live status: {json.dumps(live.get('status'))}\n"
                             f"pods of {stack.namespace}: {pods}") from None
    return healed, edited


def test_apiserver_restart_keeps_heals_and_edits_working(operator, control_plane, kube, kfdef_namespace, deployed,
                                                         reliability):
    """kube-apiserver restarted (SIGTERM, same flags) while the operator watches"""
    log = LogWindow(operator.log_path)
    apiserver = control_plane.pid("kube-apiserver")
    started = time.monotonic()
    control_plane.restart_apiserver()  # returns once /readyz answers
    restart = time.monotonic() - started
    assert control_plane.pid("kube-apiserver") != apiserver
    assert operator.popen.poll() is None, f"the operator died with the API server:\n{operator.log_tail(80)}"
    heal, edit = _heal_and_edit_work(kube, deployed, kfdef_namespace, "after-restart")
    assert "Traceback" not in log.text(), log.text()[-5000:]
    reliability.figure("s the API server was away (stop to /readyz)", round(restart, 1))
    reliability.figure("s to heal after /readyz", round(heal, 2))
    reliability.figure("s to reconcile an edit", round(edit, 2))


def test_compacted_etcd_expires_watches_and_they_relist(operator, control_plane, kube, kfdef_namespace, deployed,
                                                       reliability):
    """etcd compacted past every watch's resourceVersion, then kube-apiserver restarted (410 Gone)"""
    log = LogWindow(operator.log_path)
    # A write the operator does not watch moves etcd's revision past the last one its watches saw.
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bump", "namespace": kfdef_namespace}})
    revision = int(_etcd(control_plane, "range", {"key": "AA=="})["header"]["revision"])
    _etcd(control_plane, "compaction", {"revision": revision, "physical": True})
    control_plane.restart_apiserver()
    assert operator.popen.poll() is None
    heal, edit = _heal_and_edit_work(kube, deployed, kfdef_namespace, "after-compaction")
    text = log.text()
    expired = text.count(" expired (") + text.count(": 410 ")
    assert expired >= 1, \
        f"no watch of the operator saw 410 Gone after compaction at revision {revision}:\n{text[-3000:]}"
    assert "Traceback" not in text, text[-5000:]
    reliability.figure("watches that got 410 Gone and relisted", expired)
    reliability.figure("s to heal", round(heal, 2))
    reliability.figure("s to reconcile an edit", round(edit, 2))
