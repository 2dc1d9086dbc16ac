"""Adopting an object another writer created: the fields it keeps that the stack does not render are named, and
``spec.force`` replaces them with exactly what the stack renders (issue 39, item 6)."""

from __future__ import annotations

import copy

import pytest
import yaml

from kfdef_operator.runtime.ownership import ADOPTED_ANNOTATION, DIGEST_ANNOTATION, INSTANCE_ANNOTATION, INSTANCE_LABEL
from tests.cluster.conftest import KFDEF_API, kfdef_status, restart_writes, wait_ready
from tests.commands import kfdef_operator, kubectl
from tests.kube import wait_for
from tests.stacks import deployment, write_package

pytestmark = pytest.mark.cluster

POLICY_API = "networking.k8s.io/v1"
#: What the platform's stack renders: a policy that denies every connection of the namespace's pods.
DENY_ALL = {"apiVersion": POLICY_API, "kind": "NetworkPolicy", "metadata": {"name": "platform-deny-all"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}


@pytest.fixture
def platform(kube, kfdef_namespace, tmp_path):
    """A stack rendering :data:`DENY_ALL` and a Deployment into the KfDef's namespace, where a tenant created
    both before it: the policy with rules that allow everything, and a label; the Deployment as the stack renders
    it (``kubectl create`` style: the server's defaults count as the tenant's fields)."""
    write_package(tmp_path / "repo", "platform", [DENY_ALL, deployment("tool")])
    allow_all = copy.deepcopy(DENY_ALL)
    allow_all["metadata"]["labels"] = {"owner": "tenant"}
    allow_all["spec"].update(ingress=[{}], egress=[{}])
    kube.resource(POLICY_API, "NetworkPolicy").create(body=allow_all, namespace=kfdef_namespace,
                                                      field_manager="tenant")
    kube.resource("apps/v1", "Deployment").create(body=deployment("tool"), namespace=kfdef_namespace,
                                                  field_manager="tenant")

    def kfdef(*, force: bool = False) -> dict:
        return {"apiVersion": KFDEF_API, "kind": "KfDef",
                "metadata": {"name": "platform", "namespace": kfdef_namespace},
                "spec": {"repos": [{"name": "manifests", "uri": str(tmp_path / "repo")}],
                         "applications": [{"name": "platform", "kustomizeConfig": {
                             "repoRef": {"name": "manifests", "path": "platform"}}}],
                         **({"force": True} if force else {})}}
    return kfdef


def _policy(kube, namespace: str) -> dict:
    return kube.get(POLICY_API, "NetworkPolicy", "platform-deny-all", namespace)


def _adoption_notes(status: dict) -> list[str]:
    return [note for note in status.get("warnings") or [] if "was adopted" in note]


def test_an_adopted_object_keeping_another_writers_fields_is_named_until_they_are_gone(
        operator, kube, kfdef_namespace, platform):
    kube.apply(platform())
    status = wait_ready(kube, "platform", kfdef_namespace)["status"]
    # One note, the policy's: the Deployment's extra fields are the server's defaults, which the tenant "set" too.
    assert _adoption_notes(status) == [
        f"NetworkPolicy.networking.k8s.io {kfdef_namespace}/platform-deny-all was adopted and keeps fields the "
        "stack does not render, set by other field managers: tenant: metadata.labels.owner, spec.egress, "
        "spec.ingress. Remove those fields from the object, or set spec.force: true on the KfDef to replace its "
        "content with exactly what the stack renders (force also lets an immutable-field change re-create objects "
        "that may hold data)."]
    policy = _policy(kube, kfdef_namespace)
    assert policy["spec"]["ingress"] == [{}]  # named, not removed: the KfDef did not ask for that
    assert policy["metadata"]["annotations"][ADOPTED_ANNOTATION] == "true"

    # A restart judges the same fields again: the same note, and no write at all.
    version = kube.get(KFDEF_API, "KfDef", "platform", kfdef_namespace)["metadata"]["resourceVersion"]
    assert restart_writes(operator, kube) == {}
    assert kube.get(KFDEF_API, "KfDef", "platform", kfdef_namespace)["metadata"]["resourceVersion"] == version

    # The tenant removes what the note names: the note shrinks, then goes.
    policies = kube.resource(POLICY_API, "NetworkPolicy")
    policies.patch(name="platform-deny-all", namespace=kfdef_namespace, content_type="application/json-patch+json",
                   body=[{"op": "remove", "path": "/spec/ingress"}, {"op": "remove", "path": "/spec/egress"}])
    wait_for(lambda: [note for note in _adoption_notes(kfdef_status(kube, "platform", kfdef_namespace))
                      if "tenant: metadata.labels.owner. Remove" in note], timeout=30,
             what="the note naming the label only")
    policies.patch(name="platform-deny-all", namespace=kfdef_namespace, content_type="application/json-patch+json",
                   body=[{"op": "remove", "path": "/metadata/labels/owner"}])
    wait_for(lambda: not _adoption_notes(kfdef_status(kube, "platform", kfdef_namespace)), timeout=30,
             what="the note gone")


def test_force_replaces_an_adopted_objects_content_with_exactly_what_the_stack_renders(
        operator, kube, kfdef_namespace, platform):
    kube.apply(platform())
    wait_for(lambda: _adoption_notes(kfdef_status(kube, "platform", kfdef_namespace)), timeout=60,
             what="the adopted policy named")
    tool = kube.get("apps/v1", "Deployment", "tool", kfdef_namespace)

    kube.apply(platform(force=True))
    wait_for(lambda: "ingress" not in _policy(kube, kfdef_namespace)["spec"], timeout=60, what="the rules removed")
    status = wait_ready(kube, "platform", kfdef_namespace)["status"]
    assert _adoption_notes(status) == []
    policy = _policy(kube, kfdef_namespace)
    assert policy["spec"] == DENY_ALL["spec"]
    assert set(policy["metadata"]["labels"]) == {INSTANCE_LABEL}
    assert set(policy["metadata"]["annotations"]) == {INSTANCE_ANNOTATION, DIGEST_ANNOTATION, ADOPTED_ANNOTATION}
    assert [entry["manager"] for entry in policy["metadata"]["managedFields"]] == ["kfdef-operator"]
    # The Deployment held only defaults of the tenant's: left as it was.
    assert kube.get("apps/v1", "Deployment", "tool", kfdef_namespace)["metadata"]["uid"] == tool["metadata"]["uid"]
    assert "tenant" in [e["manager"] for e in kube.get("apps/v1", "Deployment", "tool", kfdef_namespace)
                        ["metadata"]["managedFields"]]


def test_a_stack_installed_by_hand_before_is_adopted_without_a_note(operator, kube, control_plane, kfdef_namespace,
                                                                   new_stack, tmp_path):
    """kubectl's client-side apply holds every field of what it created, the server's defaults included (some 15
    per Deployment), and kube-controller-manager writes the rules of an aggregated ClusterRole: none of that is
    another writer's content."""
    stack = new_stack()
    label = f"s{stack.suffix}.example.org/aggregate-to-view"
    write_package(stack.root, "roles", [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"view-{stack.suffix}"}, "rules": [],
         "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"widgets-view-{stack.suffix}", "labels": {label: "true"}},
         "rules": [{"apiGroups": [stack.group], "resources": ["widgets"], "verbs": ["get"]}]}])
    applications = [*stack.applications, {"name": "roles", "kustomizeConfig": {
        "repoRef": {"name": "manifests", "path": "roles"}}}]
    kfdef = stack.kfdef("by-hand", kfdef_namespace, applications=applications)
    (tmp_path / "kfdef.yaml").write_text(yaml.safe_dump(kfdef))
    built = kfdef_operator("build", str(tmp_path / "kfdef.yaml"), "-o", str(tmp_path / "built.yaml"),
                           "--cache-dir", str(tmp_path / "cache"))
    assert built.returncode == 0, built.stderr
    # Twice: the custom resource only once its CRD is served.
    kubectl(control_plane.bin_dir, control_plane.kubeconfig, "apply", "-f", str(tmp_path / "built.yaml"), check=False)
    kube.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"widgets.{stack.group}", "Established")
    kubectl(control_plane.bin_dir, control_plane.kubeconfig, "apply", "-f", str(tmp_path / "built.yaml"))
    wait_for(lambda: (kube.get("rbac.authorization.k8s.io/v1", "ClusterRole", f"view-{stack.suffix}") or {})
             .get("rules"), what="the aggregated role's rules written by kube-controller-manager")

    kube.apply(kfdef)
    status = wait_ready(kube, "by-hand", kfdef_namespace)["status"]
    assert status["summary"]["applied"] == 12
    deployment_ = kube.get("apps/v1", "Deployment", "operator", stack.namespace)
    assert deployment_["metadata"]["annotations"][ADOPTED_ANNOTATION] == "true"
    assert _adoption_notes(status) == []
