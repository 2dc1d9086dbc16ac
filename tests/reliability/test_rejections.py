"""Objects the API server rejects are reported one by one; the rest of the stack lands.

Rejections: an invalid field (a Service port out of range) and three fail-closed validating webhooks that this test
installs, each scoped to the stack's namespace and to ConfigMaps with one label value: one that answers "denied"
(a real HTTPS webhook on 127.0.0.1), one whose Service has a (kwok) pod behind an address nothing can reach in the
loopback-only network, and one whose Service does not exist (the backend is down).
"""

from __future__ import annotations

import pytest

from tests.cluster.conftest import kfdef_status
from tests.kube import wait_for
from tests.reliability.support import AdmissionServer, ca_bundle_b64, condition, self_signed_cert
from tests.stacks import Stack, deployment, write_package

pytestmark = pytest.mark.cluster

WEBHOOK_API = "admissionregistration.k8s.io/v1"
LABEL = "reliability.kfdef.test/webhook"
# ConfigMap name -> (label value selecting a webhook, words its failure message must contain)
REJECTED_CONFIGMAPS = {
    "denied": ("deny", AdmissionServer.MESSAGE),
    "unreachable": ("unreachable", "failed calling webhook"),
    "backend-down": ("down", "failed calling webhook"),
}


def _configmap(name: str, namespace: str, label: str | None = None) -> dict:
    meta = {"name": name, "namespace": namespace, **({"labels": {LABEL: label}} if label else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"key": name}}


def _webhook(name: str, namespace: str, label: str, client_config: dict) -> dict:
    return {"apiVersion": WEBHOOK_API, "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": [{
                "name": f"{label}.reliability.kfdef.test", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": "Fail", "timeoutSeconds": 3, "clientConfig": client_config,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "objectSelector": {"matchLabels": {LABEL: label}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                           "resources": ["configmaps"]}]}]}


def test_rejected_objects_are_reported_per_object_and_the_rest_lands(operator, kube, kfdef_namespace, tmp_path,
                                                                     reliability):
    """An invalid field, a denying webhook, an unreachable webhook and a webhook whose service is down"""
    ns = f"{kfdef_namespace}-stack"
    kube.create_namespace(ns)
    # The unreachable webhook's backend: a Service with a Running (kwok) pod behind it.
    kube.apply(deployment("hook-backend", ns))
    kube.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hook-backend", "namespace": ns},
                "spec": {"selector": {"app": "hook-backend"}, "ports": [{"port": 443, "targetPort": 8443}]}})
    cert, key = self_signed_cert(tmp_path)
    admission = AdmissionServer(cert, key)
    webhooks = {
        "deny": {"url": admission.url, "caBundle": ca_bundle_b64(cert)},
        "unreachable": {"service": {"name": "hook-backend", "namespace": ns, "port": 443},
                        "caBundle": ca_bundle_b64(cert)},
        "down": {"service": {"name": "no-such-backend", "namespace": ns, "port": 443}},
    }
    names = [f"{ns}-{label}" for label in webhooks]
    try:
        for label, client_config in webhooks.items():
            kube.apply(_webhook(f"{ns}-{label}", ns, label, client_config))
        root = tmp_path / "repo"
        objects = [_configmap("plain-1", ns), _configmap("plain-2", ns),
                   {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad-port", "namespace": ns},
                    "spec": {"ports": [{"port": 70000}]}},
                   deployment("app", ns)]
        objects += [_configmap(name, ns, label) for name, (label, _) in REJECTED_CONFIGMAPS.items()]
        write_package(root, "app", objects)
        stack = Stack(root, "", ns, "", [{"name": "app", "kustomizeConfig": {
            "repoRef": {"name": "manifests", "path": "app"}, "parameters": [{"name": "namespace", "value": ns}]}}])
        kube.apply(stack.kfdef("rejections", kfdef_namespace))

        seen: dict = {}

        def reported():
            seen.update(kfdef_status(kube, "rejections", kfdef_namespace))
            return seen if len(seen.get("failures") or []) == 4 else None
        try:
            status = wait_for(reported, timeout=60, what="four failures reported")
        except AssertionError as error:
            raise AssertionError(f"{error}; status: {seen}") from None
        failures = {f["object"]: f["message"] for f in status["failures"]}
        bad_port = failures[f"Service {ns}/bad-port"]
        assert "spec.ports[0].port" in bad_port and "70000" in bad_port
        for name, (_, words) in REJECTED_CONFIGMAPS.items():
            assert words in failures[f"ConfigMap {ns}/{name}"], failures
        summary = status["summary"]
        assert summary["total"] == len(objects) and summary["failed"] == 4
        assert summary["applied"] == summary["total"] - summary["failed"]
        degraded = condition(kube.get("kfdef.apps.kubeflow.org/v1", "KfDef", "rejections", kfdef_namespace), "Degraded")
        assert degraded["status"] == "True" and degraded["reason"] == "ApplyFailed"
        for kind, name in (("ConfigMap", "plain-1"), ("ConfigMap", "plain-2")):
            assert kube.exists("v1", kind, name, ns)
        assert kube.exists("apps/v1", "Deployment", "app", ns)
        assert admission.reviews, "the denying webhook was never called"

        # The webhooks go away: the next retry (backoff) lands the ConfigMaps; the invalid Service stays reported.
        for name in names:
            kube.delete(WEBHOOK_API, "ValidatingWebhookConfiguration", name)

        def only_the_service_left():
            status = kfdef_status(kube, "rejections", kfdef_namespace)
            return [f["object"] for f in status.get("failures") or []] == [f"Service {ns}/bad-port"]
        wait_for(only_the_service_left, timeout=60, what="the ConfigMaps applied on retry")
        for name in REJECTED_CONFIGMAPS:
            assert kube.exists("v1", "ConfigMap", name, ns)
    finally:
        for name in names:
            kube.delete(WEBHOOK_API, "ValidatingWebhookConfiguration", name)
        admission.close()
        kube.delete("kfdef.apps.kubeflow.org/v1", "KfDef", "rejections", kfdef_namespace)
        kube.wait_gone("kfdef.apps.kubeflow.org/v1", "KfDef", "rejections", kfdef_namespace, timeout=120)
        kube.delete_namespace(ns)
    for name in REJECTED_CONFIGMAPS:
        reliability.scenario(f"rejected: webhook {name}").figures = {
            "reported": failures[f"ConfigMap {ns}/{name}"][:260].replace(ns, "<ns>")}
    reliability.scenario("rejected: invalid field (Service port 70000)").figures = {
        "objects": summary["total"], "landed": summary["applied"], "reported failed": summary["failed"]}
