"""The README's path to a real cluster, on a control plane of its own, as a user types it.

``make deploy IMG=...`` installs deploy/ with the image named; the operator deploys
``kfdefs/demo/in-cluster.yaml`` without the internet, from the manifests its image carries; ``kfdef-operator
diff`` finds nothing to change; ``kfdef-operator uninstall`` removes the KfDef (its stack torn down by the
operator), the operator and the CRD, and ``kfdef-operator run`` then says the CRD is missing.

kwok plays the kubelet, so the Deployment's pod is Ready but runs nothing: the operator itself runs as a
process (``kfdef-operator run``), in a mount namespace where the demo manifests are where the Dockerfile copies
them, with the environment the Dockerfile sets.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kfdef_dev.controlplane import ControlPlane
from tests.cluster.conftest import KFDEF_API, wait_ready
from tests.commands import ROOT, kfdef_operator, kubectl
from tests.image import as_in_the_image, image_layout
from tests.kube import Kube, wait_for
from tests.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster

IMG = "registry.example:5000/team/kfdef-operator:v9"
SAMPLE = ROOT / "kfdefs" / "demo" / "in-cluster.yaml"


@pytest.fixture(scope="module")
def deployed(plane: ControlPlane, admin: Kube) -> dict:
    """make deploy IMG=... against this cluster: deploy/ with the image set, nothing in the checkout edited."""
    before = subprocess.run(["git", "status", "--porcelain", "deploy"], cwd=ROOT, capture_output=True, text=True)
    done = subprocess.run(["make", "--no-print-directory", "deploy", f"IMG={IMG}",
                           f"KUBECTL={plane.bin_dir / 'kubectl'} --kubeconfig {plane.kubeconfig}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    after = subprocess.run(["git", "status", "--porcelain", "deploy"], cwd=ROOT, capture_output=True, text=True)
    assert after.stdout == before.stdout
    admin.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", "kfdefs.kfdef.apps.kubeflow.org",
                         "Established")
    return admin.wait_condition("apps/v1", "Deployment", "kfdef-operator", "Available",
                                namespace="kfdef-operator-system", timeout=90)


def pod_environment(admin: Kube, deployed: dict) -> dict[str, str]:
    """The operator container's environment as the kubelet builds it: the image's ENV, then the Deployment's
    envFrom ConfigMaps (deploy/common/operator.env), whose values win even when empty."""
    _, _, env = image_layout()
    container = deployed["spec"]["template"]["spec"]["containers"][0]
    for source in container.get("envFrom") or []:
        config_map = admin.get("v1", "ConfigMap", source["configMapRef"]["name"], "kfdef-operator-system")
        env.update(config_map.get("data") or {})
    return env


@pytest.fixture(scope="module")
def operator(plane: ControlPlane, admin: Kube, deployed: dict, tmp_path_factory) -> Iterator[OperatorProcess]:
    roots = pod_environment(admin, deployed)["KFDEF_LOCAL_SOURCE_ROOTS"]
    process = OperatorProcess(plane.kubeconfig, tmp_path_factory.mktemp("operator"), wrapper=as_in_the_image(),
                              local_source_roots=tuple(Path(root) for root in roots.split(":") if root))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def demo(plane: ControlPlane, admin: Kube, operator: OperatorProcess) -> dict:
    """kubectl create namespace kubeflow; kubectl create -f kfdefs/demo/in-cluster.yaml"""
    kubectl(plane.bin_dir, plane.kubeconfig, "create", "namespace", "kubeflow")
    kubectl(plane.bin_dir, plane.kubeconfig, "create", "-f", str(SAMPLE))
    return wait_ready(admin, "demo", "kubeflow", timeout=120)


def test_make_deploy_uses_the_image_it_is_given(deployed: dict) -> None:
    assert [c["image"] for c in deployed["spec"]["template"]["spec"]["containers"]] == [IMG]


def test_the_in_cluster_sample_deploys_from_the_image_without_the_internet(plane: ControlPlane, admin: Kube,
                                                                          deployed: dict, demo: dict,
                                                                          operator: OperatorProcess) -> None:
    uri = yaml.safe_load(SAMPLE.read_text())["spec"]["repos"][0]["uri"]
    _, destination, _ = image_layout()
    roots = pod_environment(admin, deployed)["KFDEF_LOCAL_SOURCE_ROOTS"].split(":")
    assert uri == f"file://{destination}" and any(destination.startswith(root + "/") for root in roots)
    assert demo["status"]["summary"]["ready"] == demo["status"]["summary"]["total"] == 10
    table = kubectl(plane.bin_dir, plane.kubeconfig, "get", "kfdef", "-n", "kubeflow").stdout
    assert table.splitlines()[1].split()[:5] == ["demo", "True", "Ready", "10", "10"], table
    # Started right after the CRD was installed, the operator logged no error (kopf's retries of the API
    # server's 429 "storage is (re)initializing" are not errors).
    assert " ERROR " not in operator.log_path.read_text(), operator.log_tail()
    # The same stack from the checkout: nothing to change.
    done = kfdef_operator("diff", "kfdefs/demo/kfdef.yaml", kubeconfig=plane.kubeconfig)
    assert done.returncode == 0 and "no differences" in done.stderr, done.stdout + done.stderr


def test_uninstall_removes_the_stacks_then_the_operator_then_the_crd(plane: ControlPlane, admin: Kube,
                                                                    demo: dict) -> None:
    done = kfdef_operator("uninstall", "--dry-run", kubeconfig=plane.kubeconfig)
    assert done.returncode == 0, done.stderr
    assert "1. delete 1 KfDef(s) (kubeflow/demo)" in done.stdout and "dry run: nothing was changed" in done.stdout
    assert "Deployment kfdef-operator-system/kfdef-operator" in done.stdout
    done = kfdef_operator("uninstall", kubeconfig=plane.kubeconfig)  # no terminal to confirm on
    assert done.returncode == 2 and "pass --yes to confirm" in done.stderr
    assert admin.exists(KFDEF_API, "KfDef", "demo", "kubeflow")

    done = kfdef_operator("uninstall", "--yes", kubeconfig=plane.kubeconfig, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("uninstalled")
    steps = [line for line in done.stdout.splitlines() if line.startswith(("all 1 KfDef", "deleted Deployment",
                                                                            "deleted CustomResourceDefinition"))]
    assert [s.split()[0:2] for s in steps] == [["all", "1"], ["deleted", "Deployment"],
                                               ["deleted", "CustomResourceDefinition"]], done.stdout
    assert not admin.exists("apps/v1", "Deployment", "tf-job-operator", "kubeflow")  # the stack, torn down
    assert not admin.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", "tfjobs.kubeflow.org")
    for kind, name in (("ClusterRole", "kfdef-operator"), ("ClusterRoleBinding", "kfdef-operator-stacks")):
        assert not admin.exists("rbac.authorization.k8s.io/v1", kind, name)
    assert not admin.exists("v1", "Namespace", "kfdef-operator-system")
    assert not admin.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", "kfdefs.kfdef.apps.kubeflow.org")

    done = kfdef_operator("run", "--server-address", "", kubeconfig=plane.kubeconfig, timeout=90)
    assert done.returncode == 1 and "is not served" in done.stderr and "install the CRD" in done.stderr, done.stderr
    wait_for(lambda: kfdef_operator("uninstall", "--yes", kubeconfig=plane.kubeconfig).stdout.endswith(
        "nothing to uninstall\n"), what="uninstall to find nothing left", timeout=30)
