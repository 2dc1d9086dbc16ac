"""Trees written for kfctl's kustomize v3.2 (Open Data Hub's odh-manifests and the forks built the same way) are
read as v3.2 read them in legacy and stacks mode (issue 24): unknown fields of transformer configurations are
dropped (v3.2 ignored them), as are kustomization fields v3.2 knew and v5 removed, each noted once with its
repository path; a kustomization field v3.2 did not know fails as it failed there; plain mode stays exactly
``kustomize build``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kfdef_operator.api.kfdef import parse_kfdef
from kfdef_operator.build.render import RenderError, render
from kfdef_operator.source.resolve import ResolvedSource

pytestmark = pytest.mark.kustomize

KUSTOMIZATION = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
commonLabels:
  opendatahub.io/component: "true"
resources:
- rolebinding.yaml
- deployment.yaml
configurations:
- params.yaml
inventory:
  type: ConfigMap
"""
# A transformer configuration as odh-manifests wrote them: fieldSpecs with apiGroup / apiVersion, which v3.2
# ignored and v5 refuses ("json: unknown field").
PARAMS = """\
commonLabels:
- path: spec/template/metadata/labels
  kind: Deployment
  apiGroup: apps
  create: true
nameReference:
- kind: ServiceAccount
  fieldSpecs:
  - path: subjects/name
    kind: RoleBinding
    apiVersion: rbac.authorization.k8s.io/v1
"""
OBJECTS = {
    "rolebinding.yaml": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                         "metadata": {"name": "odh"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                                  "kind": "Role", "name": "odh"},
                         "subjects": [{"kind": "ServiceAccount", "name": "odh"}]},
    "deployment.yaml": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "odh"},
                        "spec": {"selector": {"matchLabels": {"app": "odh"}},
                                 "template": {"metadata": {"labels": {"app": "odh"}},
                                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}},
}


def odh_repo(root: Path, package: Path) -> ResolvedSource:
    package.mkdir(parents=True)
    (package / "kustomization.yaml").write_text(KUSTOMIZATION)
    (package / "params.yaml").write_text(PARAMS)
    for name, obj in OBJECTS.items():
        (package / name).write_text(yaml.safe_dump(obj))
    (root / "common").mkdir(exist_ok=True)
    (root / "common" / "kustomization.yaml").write_text("resources: []\n")
    return ResolvedSource("manifests", str(root), root, "r1")


def kfdef(path: str, *, stacks: bool = False):
    apps = [{"name": "odh-common", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path}}}]
    if stacks:
        apps.append({"name": "kubeflow-apps", "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                              "path": "common"}}})
    return parse_kfdef({"metadata": {"name": "opendatahub", "namespace": "odh"},
                        "spec": {"repos": [{"name": "manifests", "uri": "/unused"}], "applications": apps}})


@pytest.mark.parametrize("mode", ["legacy", "stacks"])
def test_unknown_fields_are_dropped_as_v3_2_did_and_each_is_noted(mode, tmp_path):
    root = tmp_path / "odh-manifests"
    source = odh_repo(root, root / "odh-common" / "base")
    kf = kfdef("odh-common" if mode == "legacy" else "odh-common/base", stacks=mode == "stacks")
    [app, *_] = render(kf, {"manifests": source}, tmp_path / "work")
    assert app.mode == mode
    objects = {o["kind"]: o for o in app.objects}
    # The meaning v3.2 gave the configuration: the label reaches the pod template, the reference is kept.
    assert objects["Deployment"]["spec"]["template"]["metadata"]["labels"]["opendatahub.io/component"] == "true"
    assert objects["RoleBinding"]["subjects"][0]["name"] == "odh"
    prefix = "manifests:odh-common/base/"
    dropped = sorted(note.split(" dropped")[0] for note in app.warnings if "kustomize v3.2" in note)
    assert dropped == [f"{prefix}kustomization.yaml: inventory",
                       f"{prefix}params.yaml: commonLabels[0].apiGroup",
                       f"{prefix}params.yaml: nameReference[0].fieldSpecs[0].apiVersion"], app.warnings
    assert not any(str(tmp_path) in note for note in app.warnings)


def test_a_kustomization_field_v3_2_did_not_know_either_fails_naming_the_file(tmp_path):
    root = tmp_path / "odh-manifests"
    source = odh_repo(root, root / "odh-common" / "base")
    (root / "odh-common" / "base" / "kustomization.yaml").write_text(KUSTOMIZATION + "vaultSecretsGenerator: []\n")
    with pytest.raises(RenderError) as refused:
        render(kfdef("odh-common"), {"manifests": source}, tmp_path / "work")
    message = str(refused.value)
    assert 'Error: manifests:odh-common/base/kustomization.yaml: invalid Kustomization: json: unknown field ' \
           '"vaultSecretsGenerator"' in message, message


def test_plain_mode_stays_exactly_kustomize_build(tmp_path):
    root = tmp_path / "odh-manifests"
    source = odh_repo(root, root / "odh-common")
    with pytest.raises(RenderError, match='unknown field "inventory"') as refused:
        render(kfdef("odh-common"), {"manifests": source}, tmp_path / "work")
    assert str(tmp_path) not in str(refused.value)
    assert "Warning" not in str(refused.value)  # kustomize's deprecation notes never come before (or with) the error


@pytest.mark.parametrize("mode", ["legacy", "stacks"])
def test_a_namespace_field_spec_reaching_a_list_leaves_it_as_v3_2_did(mode, tmp_path):
    """odh-manifests' ``namespace: [{path: spec/targetNamespaces, kind: OperatorGroup}]``: v3.2 left the list as
    written, v5 refuses it ("namespace field specs must target scalar nodes")."""
    root = tmp_path / "odh-manifests"
    package = root / "odh-common" / "base"
    package.mkdir(parents=True)
    (package / "kustomization.yaml").write_text("namespace: opendatahub\nresources: [og.yaml]\n"
                                                "configurations: [params.yaml]\n")
    (package / "params.yaml").write_text("namespace:\n- path: spec/targetNamespaces\n  kind: OperatorGroup\n"
                                         "  apiGroup: operators.coreos.com\n  create: true\n")
    (package / "og.yaml").write_text(yaml.safe_dump({
        "apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup", "metadata": {"name": "odh"},
        "spec": {"targetNamespaces": ["opendatahub", "odh-apps"]}}))
    (root / "common").mkdir()
    (root / "common" / "kustomization.yaml").write_text("resources: []\n")
    source = ResolvedSource("manifests", str(root), root, "r1")
    kf = kfdef("odh-common" if mode == "legacy" else "odh-common/base", stacks=mode == "stacks")
    [app, *_] = render(kf, {"manifests": source}, tmp_path / "work")
    [group] = app.objects
    assert group["spec"]["targetNamespaces"] == ["opendatahub", "odh-apps"]
    # legacy: kfctl's generated kustomization sets the KfDef's namespace over the package's (reference 5.1)
    assert group["metadata"]["namespace"] == ("odh" if mode == "legacy" else "opendatahub")
    assert any("namespace fieldSpec spec/targetNamespaces of OperatorGroup dropped" in note and
               "manifests:odh-common/base/params.yaml" in note for note in app.warnings), app.warnings
