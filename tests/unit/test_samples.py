"""The sample KfDefs in kfdefs/ are valid: they parse and fit the CRD's schema unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kfdef_operator.api.kfdef import parse_kfdef
from tests.unit.test_model import CRD, schema_problems

KFDEFS = Path(__file__).parents[2] / "kfdefs"
SAMPLES = sorted([*KFDEFS.glob("*.yaml"), KFDEFS / "demo" / "kfdef.yaml", KFDEFS / "demo" / "in-cluster.yaml"])


def test_there_are_samples_for_the_demo_and_each_kubeflow_era():
    names = {p.name for p in SAMPLES}
    assert {"kfdef.yaml", "kubeflow-v1.0.2-k8s-istio.yaml", "kubeflow-v1.2.0-stacks.yaml",
            "kubeflow-v1.11.0-kustomize.yaml"} <= names


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_parses_and_fits_the_crd_schema(path):
    obj = yaml.safe_load(path.read_text())
    kfdef = parse_kfdef(obj)
    assert kfdef.name and kfdef.namespace and kfdef.applications
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema_problems(obj, schema) == []


def test_stacks_sample_uses_stacks_rendering_and_the_legacy_one_does_not():
    by_name = {p.name: parse_kfdef(yaml.safe_load(p.read_text())) for p in SAMPLES}
    assert by_name["kubeflow-v1.2.0-stacks.yaml"].uses_stacks
    assert not by_name["kubeflow-v1.0.2-k8s-istio.yaml"].uses_stacks


def test_the_in_cluster_demo_is_the_demo_served_from_the_image():
    local, in_cluster = (yaml.safe_load((KFDEFS / "demo" / name).read_text())
                         for name in ("kfdef.yaml", "in-cluster.yaml"))
    assert [r["uri"] for r in local["spec"]["repos"]] == ["manifests"]  # next to the file: build, diff, make demo
    assert [r["uri"] for r in in_cluster["spec"]["repos"]] == ["file:///opt/kfdef-operator/samples/demo/manifests"]
    for kfdef in (local, in_cluster):
        del kfdef["spec"]["repos"]
    assert local == in_cluster
