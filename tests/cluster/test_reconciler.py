"""The KfDef lifecycle against the real control plane, with the operator running as in production."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from kfdef_operator.runtime.inventory import read as read_inventory
from kfdef_operator.runtime.ownership import DIGEST_ANNOTATION, INSTANCE_ANNOTATION, INSTANCE_LABEL
from tests.cluster.conftest import KFDEF_API, restart_writes, wait_condition_reason, wait_ready
from tests.kube import wait_for
from tests.stacks import crd, write_package

pytestmark = pytest.mark.cluster

CRD_API = "apiextensions.k8s.io/v1"
WEBHOOK_API = "admissionregistration.k8s.io/v1"
RBAC_API = "rbac.authorization.k8s.io/v1"


def stack_objects(stack) -> list[tuple[str, str, str, str | None]]:
    """(apiVersion, kind, name, namespace) of everything a generated stack renders."""
    ns = stack.namespace
    return [
        ("v1", "Namespace", ns, None),
        (CRD_API, "CustomResourceDefinition", f"widgets.{stack.group}", None),
        ("v1", "ServiceAccount", "operator", ns),
        (RBAC_API, "ClusterRole", f"widgets-{stack.suffix}", None),
        (RBAC_API, "ClusterRoleBinding", f"widgets-{stack.suffix}", None),
        ("v1", "Service", "operator", ns),
        ("apps/v1", "Deployment", "operator", ns),
        (f"{stack.group}/v1", "Widget", "sample", ns),
        (WEBHOOK_API, "ValidatingWebhookConfiguration", f"widgets-{stack.suffix}", None),
        ("v1", "ConfigMap", "app-parameters", ns),
    ]


def test_create_applies_everything_with_ownership_stamps_and_becomes_ready(operator, kube, kfdef_namespace, new_stack):
    stack = new_stack()
    kube.apply(stack.kfdef("stack", kfdef_namespace))
    kfdef = wait_ready(kube, "stack", kfdef_namespace)
    status = kfdef["status"]
    assert status["observedGeneration"] == kfdef["metadata"]["generation"]
    assert status["summary"]["total"] == status["summary"]["applied"] == status["summary"]["ready"] == 10
    assert {a["name"]: a["total"] for a in status["applications"]} == {"namespace": 1, "crds": 1, "app": 8}
    assert len(read_inventory(status)) == 10
    assert kfdef["metadata"]["finalizers"] == ["kfdef-finalizer.kfdef.apps.kubeflow.org"]

    for api_version, kind, name, namespace in stack_objects(stack):
        obj = kube.get(api_version, kind, name, namespace)
        assert obj is not None, f"{kind} {name} missing"
        meta = obj["metadata"]
        assert meta["annotations"][INSTANCE_ANNOTATION] == f"stack.{kfdef_namespace}"
        assert meta["labels"][INSTANCE_LABEL] == f"{kfdef_namespace}.stack"
        assert re.fullmatch(r"[0-9a-f]{16}", meta["annotations"][DIGEST_ANNOTATION])
        # The objects live in another namespace than the KfDef, or are cluster-scoped:
        # an ownerReference there would be ignored or wrongly collected by the GC.
        assert not meta.get("ownerReferences"), f"{kind} {name} must carry no ownerReference"
    deployment = kube.get("apps/v1", "Deployment", "operator", stack.namespace)
    assert deployment["metadata"]["labels"]["app.kubernetes.io/part-of"] == "stack"  # the overlay was merged


def test_objects_in_the_kfdef_namespace_get_an_owner_reference(operator, kube, kfdef_namespace, new_stack):
    stack = new_stack(namespace=kfdef_namespace)
    # The stack's Namespace object is the KfDef's own namespace: it existed before, so it is adopted.
    kfdef = kube.apply(stack.kfdef("local", kfdef_namespace))
    wait_ready(kube, "local", kfdef_namespace)
    deployment = kube.get("apps/v1", "Deployment", "operator", kfdef_namespace)
    refs = deployment["metadata"]["ownerReferences"]
    assert [(r["kind"], r["name"], r["uid"]) for r in refs] == [("KfDef", "local", kfdef["metadata"]["uid"])]
    crb = kube.get(RBAC_API, "ClusterRoleBinding", f"widgets-{stack.suffix}")
    assert not crb["metadata"].get("ownerReferences")
    namespace = kube.get("v1", "Namespace", kfdef_namespace)
    assert namespace["metadata"]["annotations"]["kfdef.apps.kubeflow.org/adopted"] == "true"


def test_edit_prunes_removed_application_and_updates_parameters(operator, kube, kfdef_namespace, new_stack):
    stack = new_stack()
    kube.apply(stack.kfdef("edit", kfdef_namespace))
    wait_ready(kube, "edit", kfdef_namespace)
    assert kube.get("v1", "ConfigMap", "app-parameters", stack.namespace)["data"]["mode"] == "default"

    applications = copy.deepcopy(stack.applications)
    applications[2]["kustomizeConfig"]["parameters"][0]["value"] = "fast"
    kube.apply(stack.kfdef("edit", kfdef_namespace, applications=applications))
    wait_for(lambda: kube.get("v1", "ConfigMap", "app-parameters", stack.namespace)["data"]["mode"] == "fast",
             what="parameter change applied")

    # Remove the "app" application: everything it rendered is pruned, cluster-scoped objects included.
    kube.apply(stack.kfdef("edit", kfdef_namespace, applications=applications[:2]))
    kube.wait_gone("apps/v1", "Deployment", "operator", stack.namespace, timeout=60)
    for api_version, kind, name, namespace in stack_objects(stack)[2:]:
        kube.wait_gone(api_version, kind, name, namespace, timeout=60)
    status = wait_ready(kube, "edit", kfdef_namespace)["status"]
    assert len(read_inventory(status)) == 2
    assert kube.exists(CRD_API, "CustomResourceDefinition", f"widgets.{stack.group}")
    assert kube.exists("v1", "Namespace", stack.namespace)


def test_two_kfdefs_claiming_one_object_conflict_and_neither_deletes_it(operator, kube, kfdef_namespace, new_stack):
    stack = new_stack()
    kube.apply(stack.kfdef("first", kfdef_namespace))
    wait_ready(kube, "first", kfdef_namespace)
    kube.apply(stack.kfdef("second", kfdef_namespace))
    status = wait_condition_reason(kube, "second", kfdef_namespace, "Degraded", "True", "ApplyFailed")["status"]
    assert any(f"already managed by KfDef {kfdef_namespace}/first" in f["message"] for f in status["failures"])
    # The first one is untouched and still Ready.
    deployment = kube.get("apps/v1", "Deployment", "operator", stack.namespace)
    assert deployment["metadata"]["annotations"][INSTANCE_ANNOTATION] == f"first.{kfdef_namespace}"
    assert kube.condition(kube.get(KFDEF_API, "KfDef", "first", kfdef_namespace), "Ready")["status"] == "True"

    kube.delete(KFDEF_API, "KfDef", "second", kfdef_namespace)
    kube.wait_gone(KFDEF_API, "KfDef", "second", kfdef_namespace, timeout=60)
    assert kube.exists("apps/v1", "Deployment", "operator", stack.namespace)
    assert kube.exists(CRD_API, "CustomResourceDefinition", f"widgets.{stack.group}")


def test_broken_source_is_degraded_while_other_kfdefs_stay_ready(operator, kube, kfdef_namespace, new_stack, tmp_path):
    good = new_stack()
    kube.apply(good.kfdef("good", kfdef_namespace))
    broken = new_stack()
    kube.apply(broken.kfdef("broken", kfdef_namespace, uri=str(tmp_path / "does-not-exist")))
    wait_ready(kube, "good", kfdef_namespace)
    status = wait_condition_reason(kube, "broken", kfdef_namespace, "Degraded", "True", "SourceFailed")["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert "does-not-exist" in ready["message"] and "manifests" in ready["message"]


def test_invalid_kfdef_reports_the_field_path(operator, kube, kfdef_namespace, new_stack):
    stack = new_stack()
    applications = copy.deepcopy(stack.applications)
    applications[1]["kustomizeConfig"]["repoRef"]["name"] = "nope"
    kube.apply(stack.kfdef("invalid", kfdef_namespace, applications=applications))
    status = wait_condition_reason(kube, "invalid", kfdef_namespace, "Degraded", "True", "InvalidSpec")["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert "spec.applications[1].kustomizeConfig.repoRef.name" in degraded["message"]
    assert "nope" in degraded["message"]


def test_delete_removes_everything_it_created_and_keeps_what_existed(operator, kube, kfdef_namespace, new_stack):
    existing = new_stack()
    kube.create_namespace(existing.namespace)  # the user's namespace, created before the KfDef
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "user-data", "namespace": existing.namespace}})
    kube.apply(existing.kfdef("mixed", kfdef_namespace))
    wait_ready(kube, "mixed", kfdef_namespace)

    kube.delete(KFDEF_API, "KfDef", "mixed", kfdef_namespace)
    kube.wait_gone(KFDEF_API, "KfDef", "mixed", kfdef_namespace, timeout=120)
    for api_version, kind, name, namespace in stack_objects(existing):
        if kind == "Namespace":
            continue
        assert not kube.exists(api_version, kind, name, namespace), f"{kind} {name} left behind"
    namespace = kube.get("v1", "Namespace", existing.namespace)
    assert namespace is not None and not namespace["metadata"].get("deletionTimestamp")
    assert INSTANCE_LABEL not in (namespace["metadata"].get("labels") or {})  # released, not deleted
    assert kube.exists("v1", "ConfigMap", "user-data", existing.namespace)
    kube.delete_namespace(existing.namespace)


def test_delete_removes_a_namespace_it_created(operator, kube, kfdef_namespace, new_stack):
    stack = new_stack()
    kube.apply(stack.kfdef("owned-ns", kfdef_namespace))
    wait_ready(kube, "owned-ns", kfdef_namespace)
    kube.delete(KFDEF_API, "KfDef", "owned-ns", kfdef_namespace)
    kube.wait_gone(KFDEF_API, "KfDef", "owned-ns", kfdef_namespace, timeout=120)
    kube.wait_gone("v1", "Namespace", stack.namespace, timeout=60)


def test_operator_restart_mid_apply_converges_and_an_unchanged_kfdef_writes_nothing(operator, kube, kfdef_namespace,
                                                                                    new_stack):
    stack = new_stack()
    kube.apply(stack.kfdef("restart", kfdef_namespace))
    # Kill as soon as the operator has started working on it (the first object is there).
    wait_for(lambda: kube.exists("v1", "Namespace", stack.namespace), timeout=60, what="apply started")
    operator.kill()
    operator.start()
    wait_ready(kube, "restart", kfdef_namespace)

    writes = restart_writes(operator, kube)
    assert writes == {}, f"a restart over unchanged KfDefs must not write: {writes}"


def test_custom_resource_fields_outside_a_strict_schema_are_pruned_not_refused(operator, kube, kfdef_namespace,
                                                                                new_stack):
    """kubectl-era manifests relied on silent pruning; server-side apply would refuse the whole object."""
    stack = new_stack()
    strict = crd(stack.group, "Widget")
    strict["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}
    write_package(stack.root, "crds", [strict])
    widget_file = stack.root / "app" / "base" / "05-widget.yaml"
    widget = yaml.safe_load(widget_file.read_text())
    widget["spec"]["colour"] = "red"  # not declared by the schema
    widget_file.write_text(yaml.safe_dump(widget))

    kube.apply(stack.kfdef("strict", kfdef_namespace))
    status = wait_ready(kube, "strict", kfdef_namespace)["status"]
    assert status["failures"] == []
    assert kube.get(f"{stack.group}/v1", "Widget", "sample", stack.namespace)["spec"] == {"size": 1}
    # Healing uses the same pruning: the Widget comes back, and no fight is reported.
    old_uid = kube.get(f"{stack.group}/v1", "Widget", "sample", stack.namespace)["metadata"]["uid"]
    kube.delete(f"{stack.group}/v1", "Widget", "sample", stack.namespace)
    wait_for(lambda: (kube.get(f"{stack.group}/v1", "Widget", "sample", stack.namespace) or {})
             .get("metadata", {}).get("uid") not in (None, old_uid), timeout=30, what="Widget re-created")
    degraded = kube.condition(kube.get(KFDEF_API, "KfDef", "strict", kfdef_namespace), "Degraded")
    assert degraded["status"] == "False"


def test_a_stack_deployed_again_right_after_its_teardown_is_ready_without_waiting_for_its_kinds(
        operator, kube, kfdef_namespace, new_stack):
    # The teardown deletes the stack's CRD; the operator still knows its kind from before. Deployed again, the
    # kind's watch must not wait for a listing the API server answers 404 until the CRD is back (it used to, for
    # 60 s, and the KfDef turned Degraded with a Timeout: seen with Kubeflow v1.11.0 in the benchmarks).
    stack = new_stack()
    kube.apply(stack.kfdef("first", kfdef_namespace))
    wait_ready(kube, "first", kfdef_namespace)
    kube.delete(KFDEF_API, "KfDef", "first", kfdef_namespace)
    kube.wait_gone(KFDEF_API, "KfDef", "first", kfdef_namespace, timeout=120)
    kube.wait_gone(CRD_API, "CustomResourceDefinition", f"widgets.{stack.group}", timeout=60)

    kube.apply(stack.kfdef("again", kfdef_namespace))
    degraded: list[dict] = []

    def ready() -> bool:
        obj = kube.get(KFDEF_API, "KfDef", "again", kfdef_namespace)
        condition = kube.condition(obj, "Degraded")
        if condition and condition["status"] == "True":
            degraded.append(condition)
        return (kube.condition(obj, "Ready") or {}).get("status") == "True"

    wait_for(ready, timeout=45, what="the stack deployed again to be Ready")
    assert degraded == []
