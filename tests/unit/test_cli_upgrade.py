"""``kfdef-operator build --target-version``: offline upgrade of removed API versions in the rendered output."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kfdef_operator.cli import main as cli

LEGACY_STACK = Path(__file__).parent.parent / "fixtures" / "legacy-stack"
UNSERVED_IN_1_36 = [
    "CustomResourceDefinition gadgets.sfx000.legacy.example.org (apiextensions.k8s.io/v1beta1)",
    "ClusterRole gadgets-controller-sfx000 (rbac.authorization.k8s.io/v1beta1)",
    "ClusterRoleBinding gadgets-controller-sfx000 (rbac.authorization.k8s.io/v1beta1)",
    "Deployment kubeflow/gadgets-controller (extensions/v1beta1)",
    "Ingress kubeflow/gadgets (extensions/v1beta1)",
    "ValidatingWebhookConfiguration gadgets-validation-sfx000 (admissionregistration.k8s.io/v1beta1)",
]


@pytest.fixture
def build(tmp_path, capsys):
    """Runs ``kfdef-operator build KFDEF ARGS...`` with a private source cache: (exit code, stdout, stderr)."""
    def run(kfdef: Path, *args: str) -> tuple[int, str, str]:
        code = cli.main(["build", str(kfdef), "--cache-dir", str(tmp_path / "cache"), *args])
        out, err = capsys.readouterr()
        return code, out, err
    return run


def by_kind(objects: list[dict]) -> dict[str, dict]:
    found = {obj["kind"]: obj for obj in objects}
    assert len(found) == len(objects), "one object per kind expected in this fixture"
    return found


@pytest.mark.kustomize
def test_without_target_version_the_output_keeps_the_legacy_versions(build):
    code, out, err = build(LEGACY_STACK / "kfdef.yaml")
    assert code == 0, err
    objects = by_kind(list(yaml.safe_load_all(out)))
    assert objects["Deployment"]["apiVersion"] == "extensions/v1beta1"
    assert "selector" not in objects["Deployment"]["spec"]
    assert objects["CustomResourceDefinition"]["apiVersion"] == "apiextensions.k8s.io/v1beta1"
    assert "upgraded" not in err


@pytest.mark.kustomize
def test_target_version_upgrades_every_removed_api_version(build):
    code, out, err = build(LEGACY_STACK / "kfdef.yaml", "--target-version", "1.36")
    assert code == 0, err
    objects = by_kind(list(yaml.safe_load_all(out)))
    assert {kind: obj["apiVersion"] for kind, obj in objects.items()} == {
        "CustomResourceDefinition": "apiextensions.k8s.io/v1",
        "ClusterRole": "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
        "ServiceAccount": "v1", "ConfigMap": "v1", "Service": "v1",
        "Deployment": "apps/v1",
        "Ingress": "networking.k8s.io/v1",
        "ValidatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
    }

    deployment = objects["Deployment"]["spec"]
    assert deployment["selector"] == {"matchLabels": {"app": "gadgets-controller"}}
    assert deployment["template"]["metadata"]["labels"] == {"app": "gadgets-controller"}

    crd = objects["CustomResourceDefinition"]["spec"]
    assert "validation" not in crd and "version" not in crd and "additionalPrinterColumns" not in crd
    (version,) = crd["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert [c["jsonPath"] for c in version["additionalPrinterColumns"]] == [".spec.size", ".metadata.creationTimestamp"]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["type"] == "object"
    assert schema["properties"]["spec"]["properties"]["color"]["enum"] == ["red", "green", "blue"]

    (path,) = objects["Ingress"]["spec"]["rules"][0]["http"]["paths"]
    assert path["backend"] == {"service": {"name": "gadgets-controller", "port": {"number": 80}}}
    assert path["pathType"] == "ImplementationSpecific"

    (webhook,) = objects["ValidatingWebhookConfiguration"]["webhooks"]
    assert (webhook["failurePolicy"], webhook["sideEffects"], webhook["admissionReviewVersions"]) == (
        "Ignore", "None", ["v1beta1"])


@pytest.mark.kustomize
def test_summary_reports_upgraded_counts_and_kinds(build):
    code, _, err = build(LEGACY_STACK / "kfdef.yaml", "--target-version", "v1.36.0")
    assert code == 0, err
    assert ("upgraded 6 objects (ClusterRole 1, ClusterRoleBinding 1, CustomResourceDefinition 1, Deployment 1, "
            "Ingress 1, ValidatingWebhookConfiguration 1)") in err
    assert "Deployment extensions/v1beta1 -> apps/v1 (1)" in err
    assert "sideEffects Unknown is not accepted by v1" in err  # notes name what could not be kept exactly
    assert "warning:" not in err


@pytest.mark.kustomize
def test_an_older_target_upgrades_only_what_it_no_longer_serves(build):
    code, out, err = build(LEGACY_STACK / "kfdef.yaml", "--target-version", "1.21")
    assert code == 0, err
    versions = {obj["kind"]: obj["apiVersion"] for obj in yaml.safe_load_all(out)}
    assert versions["Deployment"] == "apps/v1"  # extensions/v1beta1 Deployments went in 1.16
    assert versions["CustomResourceDefinition"] == "apiextensions.k8s.io/v1beta1"  # served until 1.22
    assert versions["Ingress"] == "extensions/v1beta1"
    assert "upgraded 1 objects (Deployment 1)" in err


@pytest.mark.kustomize
def test_policy_off_fails_with_one_line_listing_the_unserved_objects(build):
    code, out, err = build(LEGACY_STACK / "kfdef.yaml", "--target-version", "1.36", "--api-upgrade", "off")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("error: 6 objects use API versions")
    for described in UNSERVED_IN_1_36:
        assert described in err
    assert "Service kubeflow/gadgets-controller" not in err


@pytest.mark.kustomize
def test_policy_off_passes_when_everything_is_served(build):
    code, out, err = build(LEGACY_STACK / "kfdef.yaml", "--target-version", "1.15", "--api-upgrade", "off")
    assert code == 0, err
    assert len(list(yaml.safe_load_all(out))) == 9


@pytest.mark.parametrize("version", ["2.0", "latest", "1"])
def test_bad_target_version_is_bad_input(build, version):
    code, out, err = build(LEGACY_STACK / "kfdef.yaml", "--target-version", version)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("error: --target-version: not a Kubernetes 1.x release")


def test_bad_policy_is_a_usage_error(build):
    code, _, err = build(LEGACY_STACK / "kfdef.yaml", "--target-version", "1.36", "--api-upgrade", "maybe")
    assert code == 2 and err.startswith("error: argument --api-upgrade: invalid choice")


def _stack_with_extras(tmp_path: Path) -> Path:
    """The legacy stack plus an application whose objects are one served, one convertible, one refused."""
    repo = tmp_path / "repo"
    shutil.copytree(LEGACY_STACK, repo)
    base = repo / "extras" / "base"
    base.mkdir(parents=True)
    extras = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extras"}, "data": {"a": "1"}},
        {"apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy", "metadata": {"name": "restricted-sfx000"},
         "spec": {"privileged": False, "seLinux": {"rule": "RunAsAny"}, "runAsUser": {"rule": "RunAsAny"},
                  "supplementalGroups": {"rule": "RunAsAny"}, "fsGroup": {"rule": "RunAsAny"}}},
        {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "gadgets"},
         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "gadgets-controller"}}}},
    ]
    (base / "objects.yaml").write_text(yaml.safe_dump_all(extras))
    (base / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["objects.yaml"]}))
    kfdef = yaml.safe_load((repo / "kfdef.yaml").read_text())
    kfdef["spec"]["applications"].append(
        {"name": "extras", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "extras"}}})
    (repo / "kfdef.yaml").write_text(yaml.safe_dump(kfdef))
    return repo / "kfdef.yaml"


@pytest.mark.kustomize
def test_unconvertible_objects_are_left_out_with_a_warning_per_application_file(build, tmp_path):
    out_dir = tmp_path / "out"
    code, out, err = build(_stack_with_extras(tmp_path), "--target-version", "1.36", "-o", str(out_dir))
    assert code == 0, err
    assert out == ""
    files = sorted(p.name for p in out_dir.iterdir())
    assert files == ["1-gadgets.yaml", "2-extras.yaml"]
    gadgets = list(yaml.safe_load_all((out_dir / files[0]).read_text()))
    extras = list(yaml.safe_load_all((out_dir / files[1]).read_text()))
    assert len(gadgets) == 9 and {o["kind"] for o in gadgets} >= {"CustomResourceDefinition", "Deployment"}
    assert [(o["kind"], o["apiVersion"]) for o in extras] == [("ConfigMap", "v1"),
                                                             ("PodDisruptionBudget", "policy/v1")]
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "PodSecurityPolicy restricted-sfx000 (policy/v1beta1)" in warnings[0]
    assert "without a successor" in warnings[0]
    assert "upgraded 7 objects" in err and "1 objects of unserved API versions not convertible" in err
