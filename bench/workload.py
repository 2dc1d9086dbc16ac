"""A generated manifest repo shaped like a Kubeflow install, for the benchmarks.

At ``scale=1`` the stack holds about 600 objects:

- 90 CustomResourceDefinitions, 4 of them larger than 256 KiB as JSON (client-side apply could not store them in
  its last-applied annotation);
- 250 other cluster-scoped objects: 5 Namespaces, ClusterRoles,
  ClusterRoleBindings and 10 webhook configurations that either fail open
  (``failurePolicy: Ignore``) or match nothing, because the simulated cluster
  cannot serve webhooks;
- 250 namespaced objects spread over the 5 namespaces: Deployments, Services,
  ServiceAccounts, ConfigMaps, Roles and RoleBindings;
- 10 custom resources of the generated CRDs.

``scale`` multiplies every count (the namespaces stay 5 from ``scale=1`` up).
Every name that must be unique in the cluster carries the workload's
``suffix``, so runs never collide and each run starts from fresh names.

The repo is written in kfctl v1.0 style: one application per component, each
``<component>/base/kustomization.yaml`` listing its files and naming its
namespace, and one
``common/namespaces`` application. :func:`write_tarball` packs it as a
``.tar.gz`` with one top-level folder, the way GitHub serves archives.
"""

from __future__ import annotations

import argparse
import json
import math
import tarfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kfdef_operator.api.types import JSON

_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
RUN_LABEL = "bench.kubeflow.org/run"
CUSTOM_RESOURCE_KEY = "(custom resources)"
KFDEF_API_VERSION = "kfdef.apps.kubeflow.org/v1"
LARGE_CRD_MIN_BYTES = 256 * 1024 + 1  # over the 256 KiB annotation limit of client-side apply
_NAMESPACE_STEMS = ("kubeflow", "istio-system", "knative-serving", "cert-manager", "auth")
_WORDS = ("replica", "template", "selector", "volume", "resource", "toleration", "affinity", "probe",
          "container", "port", "environment", "secret", "image", "policy", "metric", "schedule")


@dataclass(frozen=True)
class Shape:
    """How many objects of each sort a workload holds (``scale=1`` is about 600)."""

    crds: int = 90
    large_crds: int = 4
    cluster_roles: int = 115
    cluster_role_bindings: int = 115
    webhooks: int = 10
    namespaces: int = 5
    deployments: int = 40
    services: int = 40
    service_accounts: int = 40
    config_maps: int = 70
    roles: int = 30
    role_bindings: int = 30
    custom_resources: int = 10
    components: int = 10

    @classmethod
    def scaled(cls, scale: float) -> Shape:
        """Every count times ``scale`` (at least 1 of each; at most 5 namespaces, 10 components)."""
        base = cls()

        def times(n: int) -> int:
            return max(1, round(n * scale))

        return cls(crds=times(base.crds), large_crds=times(base.large_crds),
                   cluster_roles=times(base.cluster_roles), cluster_role_bindings=times(base.cluster_role_bindings),
                   webhooks=times(base.webhooks), namespaces=min(base.namespaces, times(base.namespaces)),
                   deployments=times(base.deployments), services=times(base.services),
                   service_accounts=times(base.service_accounts), config_maps=times(base.config_maps),
                   roles=times(base.roles), role_bindings=times(base.role_bindings),
                   custom_resources=times(base.custom_resources),
                   components=min(base.components, max(2, times(base.components))))

    @property
    def total(self) -> int:
        return (self.crds + self.cluster_roles + self.cluster_role_bindings + self.webhooks + self.namespaces
                + self.deployments + self.services + self.service_accounts + self.config_maps + self.roles
                + self.role_bindings + self.custom_resources)


@dataclass
class Workload:
    """A generated repo on disk and what it contains."""

    root: Path                      # the repo's top-level folder
    suffix: str
    shape: Shape
    namespaces: list[str]
    applications: list[JSON]        # KfDef spec.applications
    counts: dict[str, int] = field(default_factory=dict)                      # objects per kind
    deployments: list[tuple[str, str]] = field(default_factory=list)          # (namespace, name)
    custom_resources: list[tuple[str, str, str]] = field(default_factory=list)  # (CRD name, namespace, name)
    plurals: dict[tuple[str, str], str] = field(default_factory=dict)         # (group, kind) -> plural
    largest_crd_bytes: int = 0
    crds_over_256kib: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def kfdef(self, name: str, namespace: str, uri: str) -> JSON:
        """A KfDef deploying this workload from ``uri``."""
        return {"apiVersion": KFDEF_API_VERSION, "kind": "KfDef",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"version": "v1.0.2-bench", "applications": self.applications,
                         "repos": [{"name": "manifests", "uri": uri}]}}


def _description(seed: int, length: int) -> str:
    words = [_WORDS[(seed * 7 + i * 3) % len(_WORDS)] for i in range(length // 8 + 1)]
    return " ".join(words)[:length]


def _schema(seed: int, *, large: bool) -> JSON:
    """A structural OpenAPI schema; ``large`` ones exceed 256 KiB through described property trees."""
    fields, leaves, text = (56, 8, 520) if large else (6, 3, 60)
    spec_properties = {}
    for f in range(fields):
        leaf_properties = {
            f"{_WORDS[(f + leaf) % len(_WORDS)]}{leaf}": {
                "type": ("string", "integer", "boolean")[leaf % 3],
                "description": _description(seed + f * 31 + leaf, text)}
            for leaf in range(leaves)}
        spec_properties[f"field{f:03d}"] = {"type": "object", "description": _description(seed + f, text),
                                            "properties": leaf_properties}
    spec_properties["replicas"] = {"type": "integer", "minimum": 0}
    return {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": spec_properties},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}


def _labels(suffix: str, app: str) -> JSON:
    return {RUN_LABEL: suffix, "app.kubernetes.io/part-of": "kubeflow", "app.kubernetes.io/component": app}


class _Builder:
    """Accumulates the objects of each component while keeping names unique and counts exact."""

    def __init__(self, shape: Shape, suffix: str) -> None:
        self.shape = shape
        self.suffix = suffix
        self.namespaces = [f"{stem}-{suffix}" for stem in _NAMESPACE_STEMS[: shape.namespaces]]
        self.components = [f"component{c:02d}" for c in range(shape.components)]
        self.files: dict[str, dict[str, list[JSON]]] = {c: {} for c in self.components}
        self.crds: list[JSON] = []

    def add(self, index: int, filename: str, obj: JSON) -> None:
        component = self.components[index % len(self.components)]
        obj["metadata"].setdefault("labels", {}).update(_labels(self.suffix, component))
        self.files[component].setdefault(filename, []).append(obj)

    def namespace_of(self, index: int) -> str:
        """The namespace of the component object ``index`` goes to (each component lives in one namespace)."""
        return self.component_namespace(index % len(self.components))

    def component_namespace(self, component_index: int) -> str:
        return self.namespaces[component_index % len(self.namespaces)]

    def build(self) -> None:
        s = self.shape
        for i in range(s.crds):
            self.add(i, "crds.yaml", self.crd(i, large=i < s.large_crds))
        for i in range(s.cluster_roles):
            self.add(i, "cluster-roles.yaml", self.cluster_role(i))
        for i in range(s.cluster_role_bindings):
            self.add(i, "cluster-role-bindings.yaml", self.cluster_role_binding(i))
        for i in range(s.webhooks):
            self.add(i, "webhooks.yaml", self.webhook(i))
        for i in range(s.service_accounts):
            self.add(i, "service-accounts.yaml", self.namespaced("v1", "ServiceAccount", f"sa{i:03d}", i))
        for i in range(s.config_maps):
            cm = self.namespaced("v1", "ConfigMap", f"config{i:03d}", i)
            cm["data"] = {f"{_WORDS[k]}.conf": _description(i + k, 300) for k in range(4)}
            self.add(i, "config-maps.yaml", cm)
        for i in range(s.roles):
            role = self.namespaced("rbac.authorization.k8s.io/v1", "Role", f"role{i:03d}", i)
            role["rules"] = [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list"]}]
            self.add(i, "roles.yaml", role)
        for i in range(s.role_bindings):
            binding = self.namespaced("rbac.authorization.k8s.io/v1", "RoleBinding", f"role{i:03d}", i)
            binding["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"role{i:03d}"}
            binding["subjects"] = [{"kind": "ServiceAccount", "name": f"sa{i:03d}", "namespace": self.namespace_of(i)}]
            self.add(i, "role-bindings.yaml", binding)
        for i in range(s.services):
            service = self.namespaced("v1", "Service", f"app{i:03d}", i)
            service["spec"] = {"selector": {"app": f"app{i:03d}"},
                               "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
            self.add(i, "services.yaml", service)
        for i in range(s.deployments):
            self.add(i, "deployments.yaml", self.deployment(i))
        for i in range(s.custom_resources):
            crd = self.crds[i % len(self.crds)]
            spec = crd["spec"]
            cr = self.namespaced(f"{spec['group']}/v1", spec["names"]["kind"], f"sample{i:03d}", i)
            cr["spec"] = {"replicas": 1}
            self.add(i, "custom-resources.yaml", cr)

    def namespaced(self, api_version: str, kind: str, name: str, index: int) -> JSON:
        return {"apiVersion": api_version, "kind": kind,
                "metadata": {"name": name, "namespace": self.namespace_of(index)}}

    def crd(self, i: int, *, large: bool) -> JSON:
        kind = f"Bench{_WORDS[i % len(_WORDS)].capitalize()}{i:03d}"
        plural = kind.lower() + "s"
        group = f"c{i // 10}.{self.suffix}.bench.kubeflow.org"
        versions = [{"name": "v1", "served": True, "storage": True, "schema": _schema(i, large=large),
                     "subresources": {"status": {}}}]
        if i % 3 == 0:  # an older version still served, as many Kubeflow CRDs have
            versions.append({"name": "v1alpha1", "served": True, "storage": False, "schema": _schema(i, large=False)})
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": f"{plural}.{group}"},
               "spec": {"group": group, "scope": "Namespaced",
                        "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                        "versions": versions}}
        self.crds.append(crd)
        return crd

    def cluster_role(self, i: int) -> JSON:
        groups = sorted({crd["spec"]["group"] for crd in self.crds[i % len(self.crds):][:3]})
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": f"kubeflow-role{i:03d}-{self.suffix}"},
                "rules": [{"apiGroups": groups, "resources": ["*"], "verbs": ["get", "list", "watch"]},
                          {"apiGroups": ["", "apps"], "resources": ["pods", "deployments", "services"],
                           "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]}

    def cluster_role_binding(self, i: int) -> JSON:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": f"kubeflow-binding{i:03d}-{self.suffix}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": f"kubeflow-role{i % self.shape.cluster_roles:03d}-{self.suffix}"},
                "subjects": [{"kind": "ServiceAccount", "name": f"sa{i % self.shape.service_accounts:03d}",
                              "namespace": self.namespace_of(i % self.shape.service_accounts)}]}

    def webhook(self, i: int) -> JSON:
        """Even ones fail open on the stack's own custom resources; odd ones match no object at all."""
        kind = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")[i % 2]
        group = self.crds[i % len(self.crds)]["spec"]["group"]
        hook = {"name": f"hook{i:03d}.{self.suffix}.bench.kubeflow.org", "admissionReviewVersions": ["v1"],
                "sideEffects": "None", "failurePolicy": "Ignore", "timeoutSeconds": 1,
                "clientConfig": {"service": {"name": "app000", "namespace": self.namespaces[0], "port": 443}},
                "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                           "resources": ["*"]}]}
        if i % 2:
            hook["objectSelector"] = {"matchLabels": {"bench.kubeflow.org/never": "true"}}
        return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": f"kubeflow-webhook{i:03d}-{self.suffix}"}, "webhooks": [hook]}

    def deployment(self, i: int) -> JSON:
        name = f"app{i:03d}"
        obj = self.namespaced("apps/v1", "Deployment", name, i)
        container = {
            "name": "main", "image": f"gcr.io/kubeflow-images-public/{name}:v1.0.0",
            "args": ["--port=8080", f"--namespace={self.namespace_of(i)}", "--log-level=info"],
            "ports": [{"name": "http", "containerPort": 8080}],
            "env": [{"name": f"KF_{_WORDS[k].upper()}", "value": _description(i + k, 40)} for k in range(6)],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}}
        obj["spec"] = {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                       "template": {"metadata": {"labels": {"app": name}},
                                    "spec": {"serviceAccountName": f"sa{i % self.shape.service_accounts:03d}",
                                             "containers": [container]}}}
        return obj


def _dump(path: Path, documents: list[JSON]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.dump_all(documents, Dumper=_DUMPER, sort_keys=False, width=120))


def generate(parent: Path, *, scale: float = 1.0, suffix: str | None = None) -> Workload:
    """Write a workload repo under ``parent/manifests-<suffix>/`` and describe it."""
    shape = Shape.scaled(scale)
    # A letter first: kustomize reads YAML 1.2, where a value like 5962e0 is a number.
    suffix = suffix or "w" + uuid.uuid4().hex[:5]
    builder = _Builder(shape, suffix)
    builder.build()
    root = parent / f"manifests-{suffix}"
    _dump(root / "common" / "namespaces" / "base" / "namespaces.yaml",
          [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": _labels(suffix, "namespaces")}}
           for ns in builder.namespaces])
    _dump(root / "common" / "namespaces" / "base" / "kustomization.yaml",
          [{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": ["namespaces.yaml"]}])
    applications = [{"name": "namespaces",
                     "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "common/namespaces"}}}]
    workload = Workload(root, suffix, shape, builder.namespaces, applications)
    workload.counts["Namespace"] = len(builder.namespaces)
    for index, (component, files) in enumerate(builder.files.items()):
        base = root / component / "base"
        for filename, objects in files.items():
            _dump(base / filename, objects)
            for obj in objects:
                key = CUSTOM_RESOURCE_KEY if filename == "custom-resources.yaml" else obj["kind"]
                workload.counts[key] = workload.counts.get(key, 0) + 1
                meta = obj["metadata"]
                if obj["kind"] == "Deployment":
                    workload.deployments.append((meta["namespace"], meta["name"]))
        # As Kubeflow's packages do: the namespace in the kustomization (else kfctl uses the KfDef's).
        _dump(base / "kustomization.yaml", [{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                             "namespace": builder.component_namespace(index),
                                             "resources": sorted(files)}])
        # kfctl puts every application in the KfDef's namespace unless a ``namespace`` parameter says otherwise.
        applications.append({"name": component, "kustomizeConfig": {
            "repoRef": {"name": "manifests", "path": component},
            "parameters": [{"name": "namespace", "value": builder.component_namespace(index)}]}})
    crd_by_kind = {}
    for crd in builder.crds:
        spec = crd["spec"]
        workload.plurals[(spec["group"], spec["names"]["kind"])] = spec["names"]["plural"]
        crd_by_kind[(spec["group"], spec["names"]["kind"])] = crd["metadata"]["name"]
        size = len(json.dumps(crd))
        workload.largest_crd_bytes = max(workload.largest_crd_bytes, size)
        workload.crds_over_256kib += size >= LARGE_CRD_MIN_BYTES
    for files in builder.files.values():
        for obj in files.get("custom-resources.yaml", []):
            group = obj["apiVersion"].split("/")[0]
            workload.custom_resources.append((crd_by_kind[(group, obj["kind"])], obj["metadata"]["namespace"],
                                              obj["metadata"]["name"]))
    return workload


def write_tarball(workload: Workload, directory: Path) -> Path:
    """``<directory>/<suffix>.tar.gz`` holding the repo under its single top-level folder."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{workload.suffix}.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=1) as archive:
        archive.add(workload.root, arcname=workload.root.name)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description="Write a Kubeflow-shaped benchmark repo and its tarball.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every object count (default 1: ~600)")
    args = parser.parse_args()
    workload = generate(args.directory, scale=args.scale)
    tarball = write_tarball(workload, args.directory)
    large = math.ceil(workload.largest_crd_bytes / 1024)
    print(f"{workload.total} objects in {workload.root} ({tarball.name}); "
          f"{workload.crds_over_256kib} CRDs over 256 KiB, the largest {large} KiB")
    for kind, count in sorted(workload.counts.items()):
        print(f"  {count:5d} {kind}")


if __name__ == "__main__":
    main()
