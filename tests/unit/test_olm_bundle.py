"""The committed OLM bundle: fresh with respect to crds/ and deploy/, and valid for the operator framework.

Two tests need Go-built binaries (marked ``kustomize``): the pinned kustomize CLI (the generator builds deploy/)
and ``olm-validate`` (``$KFDEF_OLM_VALIDATE``, else the path ``tools/build-olm-validate.sh`` would build);
``make test`` provides both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kfdef_operator.api.kfdef import parse_kfdef
from tests.kustomize_cli import cli_path

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "olm-bundle"
CSV = BUNDLE / "manifests" / "kfdef-operator.clusterserviceversion.yaml"


def bundle_files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def olm_validate() -> Path:
    explicit = os.environ.get("KFDEF_OLM_VALIDATE")
    path = Path(explicit) if explicit else Path(subprocess.run(
        [ROOT / "tools" / "build-olm-validate.sh", "--path"],
        check=True, capture_output=True, text=True).stdout.strip())
    if not os.access(path, os.X_OK):
        pytest.fail(f"no olm-validate binary at {path}: run `make olm-validate` (needs Go and the module proxy)")
    return path


@pytest.mark.kustomize
def test_committed_bundle_matches_a_fresh_generation(tmp_path: Path) -> None:
    subprocess.run([sys.executable, ROOT / "tools" / "gen-olm-bundle.py", "--output", tmp_path,
                    "--kustomize", cli_path()], check=True)
    fresh, committed = bundle_files(tmp_path), bundle_files(BUNDLE)
    assert sorted(committed) == sorted(fresh), "run `make olm-bundle`: the bundle's file list is stale"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"run `make olm-bundle`: stale bundle files {stale}"


@pytest.mark.kustomize
def test_bundle_passes_operator_framework_validation() -> None:
    result = subprocess.run([olm_validate(), "-k8s-version", "1.36", BUNDLE], capture_output=True, text=True)
    print(result.stdout, result.stderr)  # warnings stay visible with -s / in failure reports
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("Error")]
    assert result.returncode == 0 and not errors, result.stdout + result.stderr


def test_alm_example_is_a_valid_kfdef_of_the_owned_crd() -> None:
    csv = yaml.safe_load(CSV.read_text())
    owned = csv["spec"]["customresourcedefinitions"]["owned"]
    for example in json.loads(csv["metadata"]["annotations"]["alm-examples"]):
        group, _, version = example["apiVersion"].partition("/")
        assert any(o["kind"] == example["kind"] and o["version"] == version and o["name"].endswith("." + group)
                   for o in owned)
        kfdef = parse_kfdef(example)
        # Served from the operator's own image (the Dockerfile copies the demo manifests there), not a laptop's path.
        assert all(repo.uri.startswith("file:///opt/kfdef-operator/samples/") for repo in kfdef.repos), kfdef.repos


def test_bundle_dockerfile_labels_match_the_annotations() -> None:
    annotations = yaml.safe_load((BUNDLE / "metadata" / "annotations.yaml").read_text())["annotations"]
    dockerfile = (BUNDLE / "bundle.Dockerfile").read_text()
    labels = dict(line[len("LABEL "):].split("=", 1) for line in dockerfile.splitlines() if line.startswith("LABEL "))
    assert labels == annotations
    assert "FROM scratch" in dockerfile


def test_every_install_mode_is_supported_with_rbac_olm_scopes_to_the_target_namespaces() -> None:
    csv = yaml.safe_load(CSV.read_text())
    assert {m["type"]: m["supported"] for m in csv["spec"]["installModes"]} == {
        "OwnNamespace": True, "SingleNamespace": True, "MultiNamespace": True, "AllNamespaces": True}
    install = csv["spec"]["install"]["spec"]
    # Only `permissions`: OLM grants them in the target namespaces (cluster-wide for AllNamespaces);
    # `clusterPermissions` would be cluster-wide in every mode.
    assert "clusterPermissions" not in install
    rules = install["permissions"][0]["rules"]
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "verbs": ["get", "create", "update", "watch"]} in rules
    [deployment] = install["deployments"]
    spec = deployment["spec"]
    assert spec["replicas"] == 2 and spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
    field_path = env["WATCH_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field_path == "metadata.annotations['olm.targetNamespaces']"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    budget = yaml.safe_load((BUNDLE / "manifests" / "kfdef-operator_policy_v1_poddisruptionbudget.yaml").read_text())
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
