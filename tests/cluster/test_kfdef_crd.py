"""The KfDef CRD on the real kube-apiserver: Kubeflow-era KfDef files are accepted unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import KFDEF_API

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*(ROOT / "tests/fixtures/kfdefs").glob("*.yaml"), *(ROOT / "kfdefs").glob("*.yaml")])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_kfdef_file_is_accepted_unchanged(kube, kfdef_crd, namespace, path):
    kfdef = yaml.safe_load(path.read_text())
    kfdef["metadata"].setdefault("name", "supplied-by-the-user")  # kfctl-era files often have none
    kfdef["metadata"]["namespace"] = namespace
    created = kube.resource(KFDEF_API, "KfDef").create(body=kfdef, namespace=namespace, dry_run="All").to_dict()
    assert created["spec"] == kfdef["spec"], "the API server pruned or changed fields of the spec"


def test_v1beta1_is_served_and_allows_applications_without_names(kube, kfdef_crd, namespace):
    kfdef = {"apiVersion": "kfdef.apps.kubeflow.org/v1beta1", "kind": "KfDef",
             "metadata": {"name": "old", "namespace": namespace},
             "spec": {"applications": [{"kustomizeConfig": {"repoRef": {"name": "manifests", "path": "x"}}}],
                      "repos": [{"name": "manifests", "uri": "https://example.org/m.tar.gz"}]}}
    created = kube.resource("kfdef.apps.kubeflow.org/v1beta1", "KfDef").create(
        body=kfdef, namespace=namespace, dry_run="All").to_dict()
    assert created["spec"] == kfdef["spec"]
