"""Never destroy what the stack did not create (issue 12, items 6 and 9).

- Immutable-field changes: an object the stack did not create is neither deleted nor re-created, whatever the
  manifest's annotations or the KfDef's ``spec.force`` say; one it created that may hold data (a PVC) is
  re-created only when the KfDef sets ``spec.force: true``.
- Heals: an object someone else creates in the window between the heal's check and its write is left alone and
  reported, and teardown keeps it. The window is opened on purpose by a validating webhook (a real HTTPS server
  on 127.0.0.1) that, when the operator's create of the object reaches admission, first creates a rival object
  of the same name as the administrator.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from kfdef_operator.api.names import FIELD_MANAGER, RECREATE_ANNOTATION
from kfdef_operator.runtime.ownership import INSTANCE_LABEL
from tests.cluster.conftest import KFDEF_API, kfdef_status
from tests.kube import Kube, wait_for
from tests.reliability.support import (
    AdmissionServer,
    ca_bundle_b64,
    instance_label,
    self_signed_cert,
    wait_converged,
    wait_ready,
)
from tests.stacks import Stack, write_package

pytestmark = pytest.mark.cluster


def configmap(name: str, namespace: str, data: dict, **extra) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": data, **extra}


def pvc(name: str, namespace: str, storage_class: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                     "resources": {"requests": {"storage": "1Gi"}}}}


def annotated(obj: dict, **annotations: str) -> dict:
    obj["metadata"]["annotations"] = annotations
    return obj


def uid(kube: Kube, api_version: str, kind: str, name: str, namespace: str) -> str | None:
    return ((kube.get(api_version, kind, name, namespace) or {}).get("metadata") or {}).get("uid")


def failures(kube: Kube, name: str, namespace: str) -> dict[str, str]:
    return {f["object"]: f["message"] for f in kfdef_status(kube, name, namespace).get("failures") or []}


def kfdef(root: Path, name: str, namespace: str, path: str, *, force: bool | None = None) -> dict:
    body = Stack(root, "", namespace, "", [{"name": "app", "kustomizeConfig": {
        "repoRef": {"name": "manifests", "path": path}}}]).kfdef(name, namespace)
    if force is not None:
        body["spec"]["force"] = force
    return body


def test_objects_the_stack_did_not_create_are_never_deleted_or_recreated(operator, kube, kfdef_namespace, tmp_path,
                                                                         reliability):
    """An immutable ConfigMap and a PVC that existed before: not deleted, not re-created, reported"""
    ns = kfdef_namespace
    kube.apply(configmap("settings", ns, {"owner": "admin"}, immutable=True))
    kube.apply(pvc("data", ns, "slow"))
    before = {kind: uid(kube, "v1", kind, name, ns) for kind, name in (("ConfigMap", "settings"),
                                                                       ("PersistentVolumeClaim", "data"))}
    # The manifest asks for re-creation twice over: the annotation older versions honoured, and spec.force.
    write_package(tmp_path, "app", [
        annotated(configmap("settings", ns, {"owner": "tenant"}, immutable=True), **{RECREATE_ANNOTATION: "true"}),
        annotated(pvc("data", ns, "fast"), **{RECREATE_ANNOTATION: "true"})])
    kube.apply(kfdef(tmp_path, "foreign", ns, "app", force=True))

    def outcome() -> tuple[str, object] | None:
        now = {kind: uid(kube, "v1", kind, name, ns) for kind, name in (("ConfigMap", "settings"),
                                                                        ("PersistentVolumeClaim", "data"))}
        if now != before:
            return "deleted or re-created", now
        found = failures(kube, "foreign", ns)
        return ("reported", found) if len(found) == 2 else None
    verdict, found = wait_for(outcome, timeout=90, what="both objects kept or re-created")
    assert verdict == "reported", f"objects the stack did not create were {verdict}: uids {before} -> {found}"
    for message in found.values():
        assert "an immutable field changed" in message and "existed before this stack" in message, message
    assert kube.get("v1", "ConfigMap", "settings", ns)["data"] == {"owner": "admin"}
    assert kube.get("v1", "PersistentVolumeClaim", "data", ns)["spec"]["storageClassName"] == "slow"
    kube.delete(KFDEF_API, "KfDef", "foreign", ns)
    kube.wait_gone(KFDEF_API, "KfDef", "foreign", ns, timeout=60)
    assert {kind: uid(kube, "v1", kind, name, ns) for kind, name in (("ConfigMap", "settings"),
                                                                     ("PersistentVolumeClaim", "data"))} == before
    reliability.figure("kept", "ConfigMap (immutable), PVC; uids and content unchanged, also after teardown")


def test_a_data_holding_object_of_the_stack_is_recreated_only_with_spec_force(operator, kube, kfdef_namespace,
                                                                              tmp_path, reliability):
    """A PVC the stack created, whose immutable field changes: reported; re-created once spec.force is true"""
    ns = kfdef_namespace
    write_package(tmp_path, "v1", [pvc("scratch", ns, "slow")])
    write_package(tmp_path, "v2", [pvc("scratch", ns, "fast")])
    ref_id = f"{ns}_scratch__PersistentVolumeClaim"
    kube.apply(kfdef(tmp_path, "owner", ns, "v1"))
    wait_converged(kube, "owner", ns, {ref_id})
    created = uid(kube, "v1", "PersistentVolumeClaim", "scratch", ns)

    kube.apply(kfdef(tmp_path, "owner", ns, "v2"))
    message = wait_for(lambda: next(iter(failures(kube, "owner", ns).values()), None), timeout=90,
                       what="the PVC reported")
    assert "re-created only when the owner sets spec.force: true" in message, message
    assert uid(kube, "v1", "PersistentVolumeClaim", "scratch", ns) == created

    kube.apply(kfdef(tmp_path, "owner", ns, "v2", force=True))
    wait_converged(kube, "owner", ns, {ref_id})
    live = kube.get("v1", "PersistentVolumeClaim", "scratch", ns)
    assert live["metadata"]["uid"] != created and live["spec"]["storageClassName"] == "fast"
    reliability.figure("without spec.force", "reported, kept")
    reliability.figure("with spec.force", "re-created")


class RivalWebhook(AdmissionServer):
    """A validating webhook that, when the operator's create of the rival's name reaches admission, first creates
    the rival as the administrator (once), then admits the operator's request."""

    def __init__(self, kube: Kube, cert: Path, key: Path, rival: dict) -> None:
        self.raced = threading.Event()

        def allow(request: dict) -> bool:
            ours = (request.get("options") or {}).get("fieldManager") == FIELD_MANAGER
            if ours and request.get("operation") == "CREATE" and not request.get("dryRun") \
                    and request.get("name") == rival["metadata"]["name"] and not self.raced.is_set():
                self.raced.set()
                kube.apply(rival)  # stored before the operator's request is
            return True
        super().__init__(cert, key, allow)


def test_a_heal_never_takes_over_an_object_someone_else_created_meanwhile(operator, kube, kfdef_namespace, tmp_path,
                                                                          reliability):
    """An object created by someone else between the heal's check and its create: left alone, kept at teardown"""
    ns = kfdef_namespace
    write_package(tmp_path / "repo", "app", [configmap("shared", ns, {"owner": "stack"})])
    kube.apply(kfdef(tmp_path / "repo", "healer", ns, "app"))
    wait_converged(kube, "healer", ns, {f"{ns}_shared__ConfigMap"})
    cert, key = self_signed_cert(tmp_path)
    rival = configmap("shared", ns, {"owner": "someone else"})
    hook = RivalWebhook(kube, cert, key, rival)
    name = f"{ns}-rival"
    kube.apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": name}, "webhooks": [{
                    "name": "rival.reliability.kfdef.test", "admissionReviewVersions": ["v1"],
                    "sideEffects": "NoneOnDryRun", "failurePolicy": "Ignore", "timeoutSeconds": 10,
                    "clientConfig": {"url": hook.url, "caBundle": ca_bundle_b64(cert)},
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    # Only objects carrying the stack's label (the operator's): the rival has none.
                    "objectSelector": {"matchLabels": {INSTANCE_LABEL: instance_label("healer", ns)}},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": ["configmaps"]}]}]})
    try:
        probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "probe", "namespace": ns, "labels": {INSTANCE_LABEL: instance_label("healer", ns)}}}

        def in_force() -> bool:  # the API server picks a new webhook configuration up after a moment
            kube.resource("v1", "ConfigMap").create(body=probe, namespace=ns, dry_run="All")
            return any((review.get("request") or {}).get("name") == "probe" for review in hook.reviews)
        wait_for(in_force, timeout=30, what="the webhook in force")
        kube.delete("v1", "ConfigMap", "shared", ns)
        assert hook.raced.wait(30), "the operator never tried to re-create the ConfigMap"

        def outcome() -> tuple[str, str] | None:
            live = kube.get("v1", "ConfigMap", "shared", ns) or {"metadata": {}}
            if INSTANCE_LABEL in (live["metadata"].get("labels") or {}):
                return "taken over", json.dumps(live["data"])
            reported = next((m for o, m in failures(kube, "healer", ns).items() if "shared" in o), None)
            return ("left alone", reported) if reported else None
        verdict, detail = wait_for(outcome, timeout=30, what="the heal's outcome")
        assert verdict == "left alone", f"the heal took the rival over (its data now: {detail})"
        assert "created again by someone else" in detail, detail
        live = kube.get("v1", "ConfigMap", "shared", ns)
        assert live["data"] == {"owner": "someone else"}, "the heal overwrote the rival"
        assert INSTANCE_LABEL not in (live["metadata"].get("labels") or {}), "the heal stamped the rival as its own"
        kube.delete(KFDEF_API, "KfDef", "healer", ns)
        kube.wait_gone(KFDEF_API, "KfDef", "healer", ns, timeout=60)
        assert uid(kube, "v1", "ConfigMap", "shared", ns) == live["metadata"]["uid"], "teardown deleted the rival"
    finally:
        kube.delete("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", name)
        hook.close()
    reliability.figure("rival", "kept: content, no stamps, survives teardown")


def test_a_forged_stamp_naming_no_kfdef_does_not_veto_the_stack(operator, kube, kfdef_namespace, tmp_path,
                                                                reliability):
    """An object pre-created with the stamp of a KfDef that does not exist"""
    ns = kfdef_namespace
    forged = {"kfctl.kubeflow.io/kfdef-instance": f"ghost.{ns}"}
    kube.apply(annotated(configmap("network-policy", ns, {"allow": "everything"}), **forged))
    # A real KfDef's stamp still vetoes: that one is a conflict, not an adoption.
    write_package(tmp_path / "real", "app", [configmap("held", ns, {"by": "real"})])
    kube.apply(kfdef(tmp_path / "real", "real", ns, "app"))
    wait_ready(kube, "real", ns)
    write_package(tmp_path / "platform", "app", [configmap("network-policy", ns, {"allow": "nothing"}),
                                                 configmap("held", ns, {"by": "platform"})])
    kube.apply(kfdef(tmp_path / "platform", "platform", ns, "app"))

    def settled() -> dict | None:
        found = failures(kube, "platform", ns)
        applied = kube.get("v1", "ConfigMap", "network-policy", ns)["data"] == {"allow": "nothing"}
        return found if applied and found else None
    found = wait_for(settled, timeout=90, what="the forged object applied and the real conflict reported")
    assert list(found) == [f"ConfigMap/{ns}/held"] or all("held" in key for key in found), found
    assert "already managed by KfDef" in next(iter(found.values()))
    stamped = kube.get("v1", "ConfigMap", "network-policy", ns)["metadata"]["annotations"]
    assert stamped["kfctl.kubeflow.io/kfdef-instance"] == f"platform.{ns}"
    assert stamped.get("kfdef.apps.kubeflow.org/adopted") == "true"  # adopted: kept at teardown
    events = wait_for(lambda: [e for e in kube.core.list_namespaced_event(ns).items if e.reason == "AdoptedUnclaimed"],
                      timeout=30, what="the AdoptedUnclaimed Event (posted apart from the status)")
    assert events and "ghost" in events[0].message and "does not exist" in events[0].message, events
    assert kube.get("v1", "ConfigMap", "held", ns)["data"] == {"by": "real"}
    for name in ("platform", "real"):
        kube.delete(KFDEF_API, "KfDef", name, ns)
        kube.wait_gone(KFDEF_API, "KfDef", name, ns, timeout=60)
    assert kube.get("v1", "ConfigMap", "network-policy", ns) is not None, "an adopted object was deleted"
    reliability.figure("forged stamp", f"ghost.{ns} (no such KfDef): adopted with an AdoptedUnclaimed Event; a real "
                                       "KfDef's stamp still a conflict")
