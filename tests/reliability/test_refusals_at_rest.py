"""What the operator reported stays reported, and nothing is written again, until something changes: an object the
API server refuses for its content, and a stack past its health deadline (issue 39, item 8).

The stack holds its Namespace and a ConfigMap, which land, and two Services the API server refuses whatever happens
around them: one with a port out of range (422 Invalid) and one with a port of the wrong type (500, "failed to
create typed patch object"). Once the refusals are reported, neither the operator's retries nor a restart of the
operator over the same state may write anything (the object sent again, status or an Event): kube-apiserver's audit
log, on a control plane of this module's own, says what the operator sent. A new generation sends them again.

A stack whose Deployment never becomes available turns Degraded (HealthCheckTimeout) at its health deadline; an
operator restarted over it keeps that deadline, read from the KfDef's status: Degraded stays, nothing is written.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import KFDEF_API, wait_condition_reason
from tests.kube import Kube, wait_for
from tests.reliability.replicas import REPLICA_USERS, kube, plane, replicas, writes  # noqa: F401 (fixtures)
from tests.stacks import Stack, write_package

pytestmark = pytest.mark.cluster

IDLE_S = 45.0      # longer than the first two retry delays of a failed reconcile (10 s, then 20 s)
SETTLE_S = 5.0     # a status refresh coalesced after the report may still be on its way


def _service(name: str, namespace: str, port: object) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"port": port}]}}


def _failures(kube: Kube, name: str, namespace: str) -> dict[str, str]:
    status = (kube.get(KFDEF_API, "KfDef", name, namespace) or {}).get("status") or {}
    return {f["object"]: f["message"] for f in status.get("failures") or []}


def _reconciled(process) -> bool:
    samples = process.metrics()
    return sum(v for k, v in samples.items() if k.startswith("kfdef_reconcile_duration_seconds_count")) >= 1


def test_a_refused_object_is_reported_once_and_not_sent_again_at_rest(plane, kube, replicas, kfdef_namespace,
                                                                      tmp_path):
    ns = f"{kfdef_namespace}-stack"
    root = tmp_path / "repo"
    write_package(root, "app", [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lands", "namespace": ns}, "data": {"k": "v"}},
        _service("bad-port", ns, 70000),
        _service("bad-type", ns, "eighty"),
    ])
    stack = Stack(root, "", ns, "", [{"name": "app", "kustomizeConfig": {
        "repoRef": {"name": "manifests", "path": "app"}, "parameters": [{"name": "namespace", "value": ns}]}}])
    kfdef = stack.kfdef("refused", kfdef_namespace)
    first = replicas.start(election=False)
    kube.apply(kfdef)

    failures = wait_for(lambda: (lambda f: f if len(f) == 2 else None)(_failures(kube, "refused", kfdef_namespace)),
                        timeout=90, what="both refusals reported")
    assert "70000" in failures[f"Service {ns}/bad-port"], failures
    assert "typed patch" in failures[f"Service {ns}/bad-type"], failures
    assert kube.exists("v1", "ConfigMap", "lands", ns)
    time.sleep(SETTLE_S)

    since = time.time()
    time.sleep(IDLE_S)
    idle = writes(plane, REPLICA_USERS, since=since)
    assert idle == [], f"writes at rest after the refusals were reported: {idle}"

    first.stop()
    since = time.time()
    second = replicas.start(election=False)
    wait_for(lambda: _reconciled(second), timeout=60, what="the restarted operator's first reconcile")
    time.sleep(IDLE_S)
    after_restart = writes(plane, REPLICA_USERS, since=since)
    assert after_restart == [], f"writes after a restart over the same state: {after_restart}"
    assert _failures(kube, "refused", kfdef_namespace) == failures

    # A new generation may change the answer: both refused objects are sent again.
    since = time.time()
    kube.apply({**kfdef, "spec": {**kfdef["spec"], "force": True}})

    def resent() -> bool:
        sent = {w.name for w in writes(plane, REPLICA_USERS, since=since) if w.resource == "services"}
        return sent == {"bad-port", "bad-type"}
    wait_for(resent, timeout=60, what="the refused Services sent again for the new generation")


HEALTH_TIMEOUT_S = 5  # --health-timeout: the default 300 s shortened


def _unschedulable(name: str, namespace: str) -> dict:
    """A Deployment whose pod no node can take: never available, so never healthy."""
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": {"kfdef.example.org/no-such-node": "true"},
                         "containers": [{"name": "app", "image": "registry.example.org/app:1"}]}}}}


def test_a_restart_past_the_health_deadline_keeps_the_stack_degraded_and_writes_nothing(plane, kube, replicas,
                                                                                       kfdef_namespace, tmp_path):
    ns = f"{kfdef_namespace}-stuck"
    root = tmp_path / "repo"
    write_package(root, "app", [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                                _unschedulable("never-ready", ns)])
    stack = Stack(root, "", ns, "", [{"name": "app", "kustomizeConfig": {
        "repoRef": {"name": "manifests", "path": "app"}, "parameters": [{"name": "namespace", "value": ns}]}}])
    operator = replicas.start("--health-timeout", str(HEALTH_TIMEOUT_S), election=False)
    kube.apply(stack.kfdef("stuck", kfdef_namespace))
    obj = wait_condition_reason(kube, "stuck", kfdef_namespace, "Degraded", "True", "HealthCheckTimeout", timeout=90)
    assert f"Deployment.apps {ns}/never-ready (0/1 replicas available)" in kube.condition(obj, "Degraded")["message"]
    time.sleep(SETTLE_S)

    since = time.time()
    operator.restart()
    wait_for(lambda: _reconciled(operator), timeout=60, what="the restarted operator's first reconcile")
    watched_until = time.monotonic() + 3 * HEALTH_TIMEOUT_S
    while time.monotonic() < watched_until:  # long enough for a forgotten deadline to pass again
        degraded = kube.condition(kube.get(KFDEF_API, "KfDef", "stuck", kfdef_namespace), "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "HealthCheckTimeout"), degraded
        time.sleep(0.2)
    after_restart = writes(plane, REPLICA_USERS, since=since)
    assert after_restart == [], f"writes after a restart past the health deadline: {after_restart}"
