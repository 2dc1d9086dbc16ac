"""The local control plane is real: each test exercises a behaviour only real components have."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from kfdef_dev import controlplane
from kfdef_dev.controlplane import ControlPlane, network_is_loopback_only
from tests.kube import wait_for

pytestmark = pytest.mark.cluster


def test_runs_in_loopback_only_network_namespace(control_plane):
    assert network_is_loopback_only()
    assert control_plane.server.startswith("https://127.0.0.1:")


def test_a_port_taken_before_its_component_binds_it_is_exchanged_for_another(monkeypatch):
    """free_port only knows that a port was free when it looked: CI saw a parallel worker's control plane bind the
    one chosen for kube-apiserver first ("bind: address already in use"). The start tries again with fresh ports."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", controlplane.free_port()))
    taken.listen()
    port = taken.getsockname()[1]
    chosen: list[int] = []
    real_free_port = controlplane.free_port

    def free_port_whose_third_pick_is_taken() -> int:  # the third port is kube-apiserver's
        chosen.append(port if len(chosen) == 2 else real_free_port())
        return chosen[-1]

    monkeypatch.setattr(controlplane, "free_port", free_port_whose_third_pick_is_taken)
    with taken, ControlPlane() as plane:
        assert plane.ports["apiserver"] != port and len(chosen) == 12
        assert "address already in use" in (plane.dir / "logs" / "kube-apiserver.log").read_text()
        assert plane.request("GET", "/version")["gitVersion"] == "v1.36.4"
        assert all(process.running() for process in plane._processes.values())


def test_version_is_stamped(control_plane):
    version = control_plane.request("GET", "/version")
    assert version["gitVersion"] == "v1.36.4"
    assert version["minor"] == "36"


def crd_manifest(group: str, plural: str = "widgets", kind: str = "Widget") -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


def test_crd_becomes_established_and_serves_custom_resources(kube, namespace):
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    kube.apply(crd_manifest(group))
    kube.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"widgets.{group}", "Established")
    kube.dynamic.resources.invalidate_cache()
    created = kube.apply({"apiVersion": f"{group}/v1", "kind": "Widget",
                          "metadata": {"name": "w1", "namespace": namespace}, "spec": {"size": 3}})
    assert created["spec"]["size"] == 3


def test_server_side_apply_field_managers_and_conflicts(kube, namespace):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": namespace},
          "data": {"key": "first"}}
    applied = kube.apply(cm, manager="first-manager", force=False)
    managers = {entry["manager"] for entry in applied["metadata"]["managedFields"]}
    assert managers == {"first-manager"}

    with pytest.raises(ApiException) as conflict:
        kube.apply({**cm, "data": {"key": "second"}}, manager="second-manager", force=False)
    assert conflict.value.status == 409
    assert "first-manager" in conflict.value.body

    forced = kube.apply({**cm, "data": {"key": "second"}}, manager="second-manager", force=True)
    assert forced["data"]["key"] == "second"


def test_garbage_collector_deletes_dependents(kube, namespace):
    owner = kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": namespace}})
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "dependent", "namespace": namespace,
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                             "uid": owner["metadata"]["uid"]}],
    }})
    kube.delete("v1", "ConfigMap", "owner", namespace)
    kube.wait_gone("v1", "ConfigMap", "dependent", namespace, timeout=60)


def test_deployment_becomes_available_on_kwok_node(kube, namespace):
    kube.apply({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": namespace},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "example.invalid/web:1"}]}}},
    })
    deployment = kube.wait_condition("apps/v1", "Deployment", "web", "Available", namespace=namespace, timeout=90)
    assert deployment["status"]["readyReplicas"] == 2


def test_watch_sees_deleted_event(kube, namespace):
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched", "namespace": namespace}})
    events: list[str] = []
    listed = threading.Event()

    def watch_configmap() -> None:
        w = watch.Watch()
        for event in w.stream(kube.core.list_namespaced_config_map, namespace, timeout_seconds=30):
            if event["object"].metadata.name != "watched":
                continue
            events.append(event["type"])
            listed.set()  # the initial ADDED arrived: the watch is established
            if event["type"] == "DELETED":
                w.stop()

    thread = threading.Thread(target=watch_configmap, daemon=True)
    thread.start()
    assert listed.wait(30)
    kube.delete("v1", "ConfigMap", "watched", namespace)
    thread.join(30)
    assert events == ["ADDED", "DELETED"]


def test_namespace_deletion_finishes(kube):
    name = f"gone-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(name)
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inside", "namespace": name}})
    kube.delete_namespace(name)
    kube.wait_gone("v1", "Namespace", name, timeout=60)


def test_webhook_to_a_service_fails_fast_without_leaving_loopback(kube, namespace):
    """kube-apiserver dials the Service's ClusterIP; in the loopback-only namespace that fails at once."""
    kube.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hook", "namespace": namespace},
                "spec": {"selector": {"app": "hook"}, "ports": [{"port": 443, "targetPort": 8443}]}})
    kube.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hook", "namespace": namespace,
                                                                 "labels": {"app": "hook"}},
                "spec": {"containers": [{"name": "hook", "image": "example.invalid/hook:1"}]}})
    wait_for(lambda: (kube.get("v1", "Pod", "hook", namespace) or {}).get("status", {}).get("phase") == "Running",
             what="kwok pod Running")
    webhook_name = f"deny-{namespace}"
    kube.apply({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": webhook_name},
        "webhooks": [{
            "name": "deny.kfdef.test", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 10,
            "clientConfig": {"service": {"name": "hook", "namespace": namespace, "port": 443}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["configmaps"]}],
        }],
    })
    try:
        def rejected() -> str | None:
            try:
                kube.apply({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": f"c-{uuid.uuid4().hex[:6]}", "namespace": namespace}})
            except ApiException as error:
                return error.body
            return None  # the webhook configuration is not active yet

        started = time.monotonic()
        body = wait_for(rejected, timeout=30, what="webhook rejection")
        assert "failed calling webhook" in body
        assert "network is unreachable" in body or "connect:" in body
        assert time.monotonic() - started < 10
    finally:
        kube.delete("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", webhook_name)


def test_apiserver_restart_keeps_data_and_components(control_plane, kube, namespace):
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "survivor", "namespace": namespace}})
    old_pid = control_plane.pid("kube-apiserver")
    control_plane.restart_apiserver()
    assert control_plane.pid("kube-apiserver") != old_pid
    assert wait_for(lambda: kube.exists("v1", "ConfigMap", "survivor", namespace), what="configmap after restart")
    # The controller-manager reconnected: a new namespace gets its default ServiceAccount.
    name = f"after-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(name)
    wait_for(lambda: kube.exists("v1", "ServiceAccount", "default", name), timeout=60,
             what="default ServiceAccount after apiserver restart")
    kube.delete_namespace(name)
