"""Generated manifest repos and KfDefs for cluster tests.

Every stack gets a unique suffix, so its cluster-scoped objects (CRDs,
ClusterRoles, webhook configurations) never collide with another test's.
Repos are written in kfctl v1.0 style: one package per application with
``base/`` (and overlays where asked), ``params.env`` and ``bases:``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfdef_dev.manifests import write_package

JSON = dict[str, Any]


def deployment(name: str, namespace: str | None = None, replicas: int = 1,
               image: str = "example.invalid/app:1") -> JSON:
    meta: JSON = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": replicas, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "main", "image": image}]}}}}


def crd(group: str, kind: str, version: str = "v1") -> JSON:
    plural = kind.lower() + "s"
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                     "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


@dataclass
class Stack:
    """A generated stack: its repo on disk and the names of what it contains."""

    root: Path
    suffix: str
    namespace: str             # where its namespaced objects live
    group: str                 # API group of its CRD
    applications: list[JSON] = field(default_factory=list)

    def kfdef(self, name: str, namespace: str, *, uri: str | None = None,
              applications: list[JSON] | None = None) -> JSON:
        return {"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"applications": applications if applications is not None else self.applications,
                         "repos": [{"name": "manifests", "uri": uri or str(self.root)}]}}


def make_stack(tmp: Path, *, namespace: str | None = None, with_webhook: bool = True) -> Stack:
    """A small Kubeflow-like stack: its Namespace, a CRD and a custom resource, RBAC, a Deployment
    (``operator``) with its Service and ConfigMap, and a fail-open webhook configuration."""
    suffix = uuid.uuid4().hex[:6]
    namespace = namespace or f"stack-{suffix}"
    group = f"s{suffix}.example.org"
    root = tmp / f"repo-{suffix}"
    write_package(root, "common/namespace", [{"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": namespace}}])
    write_package(root, "crds", [crd(group, "Widget")])
    app_objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator", "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"widgets-{suffix}"},
         "rules": [{"apiGroups": [group], "resources": ["widgets"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"widgets-{suffix}"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"widgets-{suffix}"},
         "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}]},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "operator", "namespace": namespace},
         "spec": {"selector": {"app": "operator"}, "ports": [{"port": 443, "targetPort": 8443}]}},
        deployment("operator", namespace),
        {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "sample", "namespace": namespace},
         "spec": {"size": 1}},
    ]
    if with_webhook:
        app_objects.append({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": f"widgets-{suffix}"},
            "webhooks": [{"name": f"validate.{group}", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "failurePolicy": "Ignore", "timeoutSeconds": 2,
                          "clientConfig": {"service": {"name": "operator", "namespace": namespace, "port": 443}},
                          "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                                     "resources": ["widgets"]}]}]})
    write_package(root, "app", app_objects,
                  overlays={"application": {"commonLabels": {"app.kubernetes.io/part-of": "stack"}}},
                  params={"mode": "default"})
    applications = [
        {"name": "namespace", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "common/namespace"}}},
        {"name": "crds", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "crds"}}},
        {"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "app"},
                                            "overlays": ["application"],
                                            "parameters": [{"name": "mode", "value": "default"},
                                                           {"name": "namespace", "value": namespace}]}},
    ]
    return Stack(root, suffix, namespace, group, applications)
