"""A distribution's kfctl-era tree, as Open Data Hub shipped them (issue 24), deployed by the operator.

Two repositories, one application each (the distribution's own manifests and its fork of Kubeflow's), legacy mode:
a transformer configuration with fieldSpecs that kustomize v3.2 ignored and v5 refuses (``apiGroup``,
``apiVersion``), a kustomization with a field v5 no longer knows, a Deployment whose pod template still carries
``initializers``, and kinds only some clusters serve (OpenShift's Route, OLM's OperatorGroup and Subscription).
On a cluster without them each such object fails alone, naming its API group and what provides it, and the rest
lands; once the OLM CRDs exist those objects apply, heal and have health rules.
"""

from __future__ import annotations

import time

import pytest
import yaml

from kfdef_operator.api.names import REQUESTED_AT_ANNOTATION
from tests.cluster.conftest import KFDEF_API, kfdef_status
from tests.kube import wait_for
from tests.stacks import crd
from tests.unit.test_kustomize_v3 import PARAMS  # odh-manifests' transformer configuration

pytestmark = pytest.mark.cluster

OLM = "operators.coreos.com"


def _write(path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))


OLM_KINDS = (("OperatorGroup", "v1"), ("Subscription", "v1alpha1"), ("ClusterServiceVersion", "v1alpha1"))


def _distribution(root, namespace: str) -> None:
    """odh-manifests/odh-common (its own repo) and kubeflow/tf-job-operator (the fork)."""
    base = root / "odh-manifests" / "odh-common" / "base"
    _write(base / "kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                                        "commonLabels:\n  opendatahub.io/component: 'true'\n"
                                        "resources: [objects.yaml]\nconfigurations: [params.yaml]\n"
                                        "inventory:\n  type: ConfigMap\n")
    _write(base / "params.yaml", PARAMS)
    objects = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "odh-settings"}, "data": {"a": "1"}},
        {"apiVersion": "route.openshift.io/v1", "kind": "Route", "metadata": {"name": "dashboard"},
         "spec": {"to": {"kind": "Service", "name": "dashboard"}}},
        {"apiVersion": f"{OLM}/v1", "kind": "OperatorGroup", "metadata": {"name": "odh"},
         "spec": {"targetNamespaces": [namespace]}},
        {"apiVersion": f"{OLM}/v1alpha1", "kind": "Subscription", "metadata": {"name": "seldon"},
         "spec": {"channel": "stable", "name": "seldon-operator", "source": "community-operators",
                  "sourceNamespace": "openshift-marketplace"}},
    ]
    _write(base / "objects.yaml", "---\n".join(yaml.safe_dump(o) for o in objects))
    fork = root / "kubeflow" / "tf-training" / "tf-job-operator" / "base"
    _write(fork / "kustomization.yaml", {"resources": ["deployment.yaml"]})
    _write(fork / "deployment.yaml", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "tf-job-operator"},
        "spec": {"selector": {"matchLabels": {"name": "tf-job-operator"}},
                 "template": {"metadata": {"labels": {"name": "tf-job-operator"}, "initializers": {"pending": []}},
                              "spec": {"containers": [{"name": "tf-job-operator", "image": "tf-operator:v1"}]}}}})


def _failures(kube, namespace: str) -> dict[str, str]:
    return {f["object"]: f["message"] for f in kfdef_status(kube, "opendatahub", namespace).get("failures") or []}


def test_a_distribution_tree_lands_except_the_kinds_the_cluster_does_not_serve(operator, kube, kfdef_namespace,
                                                                               tmp_path):
    ns = kfdef_namespace
    _distribution(tmp_path, ns)
    kube.apply({"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": "opendatahub", "namespace": ns},
                "spec": {"repos": [{"name": "odh", "uri": str(tmp_path / "odh-manifests")},
                                   {"name": "kf", "uri": str(tmp_path / "kubeflow")}],
                         "applications": [
                             {"name": "odh-common", "kustomizeConfig": {"repoRef": {"name": "odh",
                                                                                    "path": "odh-common"}}},
                             {"name": "tf-job-operator", "kustomizeConfig": {
                                 "repoRef": {"name": "kf", "path": "tf-training/tf-job-operator"}}}]}})
    failed = wait_for(lambda: (lambda f: f if len(f) == 3 else None)(_failures(kube, ns)), timeout=90,
                      what="the three kinds this cluster does not serve reported")
    by_kind = {key.split(" ")[0].split(".")[0]: message for key, message in failed.items()}
    assert "route.openshift.io" in by_kind["Route"] and "OpenShift" in by_kind["Route"], by_kind
    for kind in ("OperatorGroup", "Subscription"):
        assert OLM in by_kind[kind] and "Operator Lifecycle Manager" in by_kind[kind], by_kind
    # The rest landed: the distribution's ConfigMap, and the fork's Deployment without its initializers.
    assert kube.get("v1", "ConfigMap", "odh-settings", ns)["metadata"]["labels"]["opendatahub.io/component"] == "true"
    deployment = kube.get("apps/v1", "Deployment", "tf-job-operator", ns)
    assert deployment is not None and "initializers" not in deployment["spec"]["template"]["metadata"]
    assert deployment["spec"]["template"]["metadata"]["labels"].get("opendatahub.io/component") is None
    status = kfdef_status(kube, "opendatahub", ns)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and "3 of 5 objects not applied" in ready["message"], ready
    warnings = "\n".join(status.get("warnings") or [])
    for field in ("odh:odh-common/base/kustomization.yaml: inventory",
                  "odh:odh-common/base/params.yaml: commonLabels[0].apiGroup",
                  "odh:odh-common/base/params.yaml: nameReference[0].fieldSpecs[0].apiVersion"):
        assert field in warnings, warnings
    assert any("initializers dropped" in note for note in status["upgrades"]["notes"]), status["upgrades"]

    # The cluster gains OLM's CRDs: those objects apply at the next retry (the retries back off, so the test asks for
    # one at once, as a person would with `kubectl annotate`), have a health rule and heal.
    for kind, version in OLM_KINDS:
        kube.apply(crd(OLM, kind, version))
    try:
        kube.apply({"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {
            "name": "opendatahub", "namespace": ns, "annotations": {REQUESTED_AT_ANNOTATION: str(time.time())}}},
            manager="person")
        wait_for(lambda: (list(_failures(kube, ns)) == [f"Route.route.openshift.io {ns}/dashboard"]
                          and kube.exists(f"{OLM}/v1alpha1", "Subscription", "seldon", ns)
                          and kube.exists(f"{OLM}/v1", "OperatorGroup", "odh", ns)) or None,
                 timeout=120, what="the OLM objects applied in the KfDef's namespace, only the Route failing")
        ready = next(c for c in kfdef_status(kube, "opendatahub", ns)["conditions"] if c["type"] == "Ready")
        assert ready["message"].startswith("1 of 5 objects not applied: Route"), ready
        kube.delete(f"{OLM}/v1alpha1", "Subscription", "seldon", ns)
        wait_for(lambda: kube.exists(f"{OLM}/v1alpha1", "Subscription", "seldon", ns), timeout=30,
                 what="the deleted Subscription healed")
    finally:
        kube.delete(KFDEF_API, "KfDef", "opendatahub", ns)
        kube.wait_gone(KFDEF_API, "KfDef", "opendatahub", ns, timeout=90)
        for kind, _ in OLM_KINDS:
            kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"{kind.lower()}s.{OLM}")
