"""Desired-state building of the reconciler: namespace defaulting and the namespace-scoped mode."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kfdef_operator.runtime import conditions as st
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.api.kfdef import parse_kfdef
from kfdef_operator.controller.reconciler import Operator, Stack
from kfdef_operator.runtime.ownership import Owner

KFDEF = {"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
         "metadata": {"name": "kf", "namespace": "team-a", "uid": "u1", "generation": 1},
         "spec": {"applications": [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "x"}}}],
                  "repos": [{"name": "manifests", "uri": "/tmp/x"}]}}


def operator(namespaces: tuple[str, ...] = ()) -> Operator:
    op = Operator(kube=None, work_dir=Path("/nonexistent"), namespaces=namespaces)  # no I/O before start()
    op.discovery._resources = {
        ("v1", "ConfigMap"): Resource("", "v1", "ConfigMap", "configmaps", True),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"): Resource("rbac.authorization.k8s.io", "v1", "ClusterRole",
                                                                  "clusterroles", False),
    }
    return op


def desired(op: Operator, objects: list[dict]) -> Stack:
    stack = Stack(owner=Owner("kf", "team-a", "u1"), generation=1)
    asyncio.run(op._desired(stack, parse_kfdef(KFDEF), [("app", obj) for obj in objects]))
    return stack


def configmap(name: str, namespace: str | None = None) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def test_namespaced_objects_default_to_the_kfdef_namespace_and_cluster_scoped_lose_theirs():
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "r", "namespace": "bogus"}}
    stack = desired(operator(), [configmap("plain"), role])
    assert {(r.kind, r.namespace) for r in stack.desired} == {("ConfigMap", "team-a"), ("ClusterRole", "")}


def test_a_namespace_scoped_operator_refuses_objects_in_other_namespaces():
    stack = desired(operator(namespaces=("team-*",)), [configmap("mine"), configmap("theirs", "kube-system"),
                                                       configmap("sibling", "team-b")])
    assert {r.name for r in stack.desired} == {"mine", "sibling"}
    assert [(o.ref.name, o.action) for o in stack.rejected] == [("theirs", "failed")]
    assert "outside this operator's scope" in stack.rejected[0].message


def test_unhealthy_past_the_deadline_is_degraded_with_the_objects_named():
    verdict = st.applied(3, [], [("Deployment a/b", "0/1 replicas available")], [], health_overdue=True)
    assert verdict.degraded[:2] == (True, "HealthCheckTimeout")
    assert "Deployment a/b" in verdict.degraded[2]
    assert verdict.ready[:2] == (False, "HealthCheckTimeout")
    waiting = st.applied(3, [], [("Deployment a/b", "0/1 replicas available")], [])
    assert waiting.degraded[0] is False and waiting.ready[1] == "WaitingForHealth"
