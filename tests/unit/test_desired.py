"""The desired-state builder: identities settled once (namespaces by scope), duplicates, the operator's scope."""

from __future__ import annotations

from kfdef_operator.controller.desired import build_desired
from kfdef_operator.runtime import conditions as st
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.discovery import Discovery, Resource


def discovery() -> Discovery:
    served = Discovery(kube=None)  # type: ignore[arg-type]  # no I/O: only the cache is read
    served._resources = {
        ("v1", "ConfigMap"): Resource("", "v1", "ConfigMap", "configmaps", True),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"): Resource("rbac.authorization.k8s.io", "v1", "ClusterRole",
                                                                  "clusterroles", False),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): Resource(
            "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False),
    }
    return served


def configmap(name: str, namespace: str | None = None) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def crd(kind: str, scope: str) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{kind.lower()}s.example.io"},
            "spec": {"group": "example.io", "scope": scope, "names": {"kind": kind, "plural": f"{kind.lower()}s"},
                     "versions": [{"name": "v1", "served": True, "storage": True}]}}


def build(objects: list[dict], namespaces: frozenset[str] = frozenset()):
    return build_desired([("app", obj) for obj in objects], discovery(), default_namespace="team-a",
                         namespaces=namespaces)


def test_namespaced_objects_default_to_the_kfdef_namespace_and_cluster_scoped_lose_theirs():
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "r", "namespace": "bogus"}}
    state = build([configmap("plain"), role])
    assert {(r.kind, r.namespace) for r in state.objects} == {("ConfigMap", "team-a"), ("ClusterRole", "")}


def test_a_cluster_scoped_custom_resource_of_a_crd_in_the_stack_loses_the_namespace_kustomize_gave_it():
    # kustomize's namespace transformer gives ClusterIssuer-like resources a namespace; the CRD says Cluster.
    issuer = {"apiVersion": "example.io/v1", "kind": "ClusterIssuer", "metadata": {"name": "ca", "namespace": "kf"}}
    widget = {"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}}
    state = build([crd("ClusterIssuer", "Cluster"), crd("Widget", "Namespaced"), issuer, widget])
    refs = {(r.kind, r.namespace) for r in state.objects}
    assert ("ClusterIssuer", "") in refs and ("Widget", "team-a") in refs
    assert [obj["kind"] for obj in state.not_served_yet] == ["ClusterIssuer", "Widget"]
    assert "namespace" not in state.objects[next(r for r in state.objects if r.kind == "ClusterIssuer")]["metadata"]


def test_a_namespace_scoped_operator_refuses_other_namespaces_and_cluster_scoped_objects():
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "admin-ish"}}
    state = build([configmap("mine"), configmap("theirs", "kube-system"), configmap("sibling", "team-b"), role],
                  namespaces=frozenset({"team-*"}))
    assert {r.name for r in state.objects} == {"mine", "sibling"}
    assert [(c.ref.name, c.action) for c in state.rejected] == [("theirs", Action.FAILED), ("admin-ish", Action.FAILED)]
    assert all("outside this operator's scope" in c.message for c in state.rejected)


def test_a_duplicate_is_reported_and_the_later_one_wins():
    first, second = configmap("dup"), configmap("dup")
    second["data"] = {"later": "yes"}
    state = build([first, configmap("other"), second])
    assert state.duplicates == ["ConfigMap team-a/dup"]
    assert [r.name for r in state.objects] == ["other", "dup"]
    assert state.objects[next(r for r in state.objects if r.name == "dup")]["data"] == {"later": "yes"}


def test_unhealthy_past_the_deadline_is_degraded_with_the_objects_named():
    verdict = st.applied(3, [], [("Deployment a/b", "0/1 replicas available")], [], health_overdue=True)
    assert verdict.degraded[:2] == (True, "HealthCheckTimeout")
    assert "Deployment a/b" in verdict.degraded[2]
    assert verdict.ready[:2] == (False, "HealthCheckTimeout")
    waiting = st.applied(3, [], [("Deployment a/b", "0/1 replicas available")], [])
    assert waiting.degraded[0] is False and waiting.ready[1] == "WaitingForHealth"
