"""Self-healing against the real control plane: deleted or changed objects come back, and only those."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from kfdef_operator.runtime.ownership import FIELD_MANAGER, RECONCILE_ANNOTATION
from tests.cluster.conftest import KFDEF_API, wait_condition_reason, wait_ready
from tests.kube import wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
RBAC_API = "rbac.authorization.k8s.io/v1"
WEBHOOK_API = "admissionregistration.k8s.io/v1"


@pytest.fixture
def deployed(operator, kube, kfdef_namespace, new_stack):
    stack = new_stack()
    kube.apply(stack.kfdef("heal", kfdef_namespace))
    wait_ready(kube, "heal", kfdef_namespace)
    return stack


def _uid(kube, api_version, kind, name, namespace=None) -> str | None:
    obj = kube.get(api_version, kind, name, namespace)
    return obj["metadata"]["uid"] if obj else None


def wait_recreated(kube, api_version, kind, name, namespace=None, *, old_uid: str, timeout: float = 30) -> dict:
    """Wait until the object exists again as a new object (another uid)."""
    def check():
        obj = kube.get(api_version, kind, name, namespace)
        return obj if obj and obj["metadata"]["uid"] != old_uid else None
    return wait_for(check, timeout=timeout, what=f"{kind} {name} re-created")


def test_the_demo_stack_heals_a_deleted_tf_job_operator(operator, kube):
    """The classic demo: delete the tf-job-operator Deployment in kubeflow and watch it come back Available."""
    kfdef = yaml.safe_load((ROOT / "kfdefs/demo/kfdef.yaml").read_text())
    kfdef["spec"]["repos"][0]["uri"] = str(ROOT / "kfdefs/demo/manifests")
    kube.create_namespace("kubeflow")  # as the original's docs: the KfDef lives in kubeflow, its stack too
    try:
        kube.apply(kfdef)
        wait_ready(kube, "demo", "kubeflow")
        old = _uid(kube, "apps/v1", "Deployment", "tf-job-operator", "kubeflow")
        assert old is not None
        kube.delete("apps/v1", "Deployment", "tf-job-operator", "kubeflow")
        wait_recreated(kube, "apps/v1", "Deployment", "tf-job-operator", "kubeflow", old_uid=old, timeout=10)

        def recorded_as_applied() -> bool:  # the create's Update entry turned into an Apply one, status writes aside
            obj = kube.get("apps/v1", "Deployment", "tf-job-operator", "kubeflow") or {}
            return [e["operation"] for e in obj["metadata"]["managedFields"]
                    if e["manager"] == FIELD_MANAGER and not e.get("subresource")] == ["Apply"]
        wait_for(recorded_as_applied, timeout=10, what="the re-created Deployment's fields recorded as applied")
        kube.wait_condition("apps/v1", "Deployment", "tf-job-operator", "Available", namespace="kubeflow", timeout=60)
        # The Event is posted beside the heal, not before it: it may land after the Deployment is Available.
        def healed_event() -> bool:
            events = kube.core.list_namespaced_event("kubeflow", field_selector="involvedObject.name=demo").items
            return any(e.reason == "Healed" and "tf-job-operator" in e.message for e in events)
        wait_for(healed_event, timeout=10, what="the Healed event")
        assert operator.metrics().get('kfdef_heals_total{cause="deleted"}', 0) >= 1
    finally:
        kube.delete(KFDEF_API, "KfDef", "demo", "kubeflow")
        kube.wait_gone(KFDEF_API, "KfDef", "demo", "kubeflow", timeout=120)
        kube.delete_namespace("kubeflow")
        kube.wait_gone("v1", "Namespace", "kubeflow", timeout=60)


def test_cluster_scoped_objects_are_recreated(deployed, kube):
    stack = deployed
    role_uid = _uid(kube, RBAC_API, "ClusterRole", f"widgets-{stack.suffix}")
    hook_uid = _uid(kube, WEBHOOK_API, "ValidatingWebhookConfiguration", f"widgets-{stack.suffix}")
    kube.delete(RBAC_API, "ClusterRole", f"widgets-{stack.suffix}")
    kube.delete(WEBHOOK_API, "ValidatingWebhookConfiguration", f"widgets-{stack.suffix}")
    wait_recreated(kube, RBAC_API, "ClusterRole", f"widgets-{stack.suffix}", old_uid=role_uid)
    wait_recreated(kube, WEBHOOK_API, "ValidatingWebhookConfiguration", f"widgets-{stack.suffix}", old_uid=hook_uid)


def test_many_deletes_at_once_are_all_healed(deployed, kube):
    ns = deployed.namespace
    targets = [("v1", "Service", "operator"), ("v1", "ServiceAccount", "operator"),
               ("v1", "ConfigMap", "app-parameters"),
               ("apps/v1", "Deployment", "operator"), (f"{deployed.group}/v1", "Widget", "sample")]
    uids = {t: _uid(kube, t[0], t[1], t[2], ns) for t in targets}
    for api_version, kind, name in targets:
        kube.delete(api_version, kind, name, ns)
    for target in targets:
        wait_recreated(kube, target[0], target[1], target[2], ns, old_uid=uids[target])


def test_a_deleted_namespace_comes_back_with_its_contents(deployed, kube):
    ns = deployed.namespace
    old = _uid(kube, "v1", "Namespace", ns)
    deployment_uid = _uid(kube, "apps/v1", "Deployment", "operator", ns)
    kube.delete_namespace(ns)
    wait_recreated(kube, "v1", "Namespace", ns, old_uid=old, timeout=90)
    wait_recreated(kube, "apps/v1", "Deployment", "operator", ns, old_uid=deployment_uid, timeout=30)
    for kind, name in (("Service", "operator"), ("ServiceAccount", "operator"), ("ConfigMap", "app-parameters")):
        wait_for(lambda: kube.exists("v1", kind, name, ns), timeout=30, what=f"{kind} {name} back in {ns}")
    wait_for(lambda: kube.exists(f"{deployed.group}/v1", "Widget", "sample", ns), timeout=30, what="Widget back")


def test_a_deleted_crd_comes_back_established_with_its_custom_resources(deployed, kube):
    name = f"widgets.{deployed.group}"
    old = _uid(kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
    kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
    wait_recreated(kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition", name, old_uid=old, timeout=60)
    kube.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", name, "Established", timeout=30)
    wait_for(lambda: kube.exists(f"{deployed.group}/v1", "Widget", "sample", deployed.namespace), timeout=30,
             what="custom resource re-created")


def test_drift_is_corrected_and_a_users_extra_label_survives(deployed, kube):
    ns = deployed.namespace
    kube.apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": "operator", "namespace": ns, "labels": {"team": "ml-platform"}},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "example.invalid/hacked:2"}]}}}},
        manager="someone", force=True)

    def corrected():
        obj = kube.get("apps/v1", "Deployment", "operator", ns)
        return obj if obj["spec"]["template"]["spec"]["containers"][0]["image"] == "example.invalid/app:1" else None

    deployment = wait_for(corrected, timeout=30, what="image drift corrected")
    assert deployment["metadata"]["labels"]["team"] == "ml-platform"


def test_opt_out_annotation_leaves_the_object_alone(deployed, kube):
    ns = deployed.namespace
    kube.apply({"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "operator", "namespace": ns, "annotations": {RECONCILE_ANNOTATION: "disabled"}}},
        manager="on-call", force=False)
    # The opted-out Service is deleted together with an object that is still healed; once the latter is
    # back, the operator has processed both events.
    configmap_uid = _uid(kube, "v1", "ConfigMap", "app-parameters", ns)
    kube.delete("v1", "Service", "operator", ns)
    kube.delete("v1", "ConfigMap", "app-parameters", ns)
    wait_recreated(kube, "v1", "ConfigMap", "app-parameters", ns, old_uid=configmap_uid)
    assert not kube.exists("v1", "Service", "operator", ns)


def test_a_fight_backs_off_and_is_named_in_degraded(deployed, kube, kfdef_namespace):
    ns = deployed.namespace
    for _ in range(5):
        old = _uid(kube, "v1", "ConfigMap", "app-parameters", ns)
        kube.delete("v1", "ConfigMap", "app-parameters", ns)
        wait_recreated(kube, "v1", "ConfigMap", "app-parameters", ns, old_uid=old, timeout=30)
    status = wait_condition_reason(kube, "heal", kfdef_namespace, "Degraded", "True", "Attention", timeout=30)["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert "ConfigMap" in degraded["message"] and "app-parameters" in degraded["message"]
    assert "backing off" in degraded["message"]


def test_objects_deleted_while_the_operator_was_down_come_back_on_restart(deployed, kube, operator):
    ns = deployed.namespace
    operator.stop()
    try:
        kube.delete("apps/v1", "Deployment", "operator", ns)
        kube.delete(RBAC_API, "ClusterRoleBinding", f"widgets-{deployed.suffix}")
        kube.wait_gone("apps/v1", "Deployment", "operator", ns)
    finally:
        operator.start()
    wait_for(lambda: kube.exists("apps/v1", "Deployment", "operator", ns), timeout=60, what="Deployment back")
    wait_for(lambda: kube.exists(RBAC_API, "ClusterRoleBinding", f"widgets-{deployed.suffix}"), timeout=60,
             what="ClusterRoleBinding back")


def test_edits_while_the_operator_was_down_are_reverted_on_restart(deployed, kube, operator):
    ns = deployed.namespace
    operator.stop()
    try:
        live = kube.get("v1", "ConfigMap", "app-parameters", ns)
        patched = copy.deepcopy({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "app-parameters", "namespace": ns},
                                 "data": {**live["data"], "mode": "tampered"}})
        kube.apply(patched, manager="someone", force=True)
    finally:
        operator.start()
    wait_for(lambda: kube.get("v1", "ConfigMap", "app-parameters", ns)["data"]["mode"] == "default", timeout=60,
             what="tampered value reverted")
