"""``kfdef-operator uninstall`` when no operator runs, on a control plane of its own: it refuses to strand the
KfDefs on their finalizer, and ``--orphan`` removes them and the CRD while every stack's object stays.

(The whole documented uninstall, with the operator running, is in test_install.py.)
"""

from __future__ import annotations

import pytest

from kfdef_dev.controlplane import ControlPlane
from tests.cluster.conftest import CRD_FILE, KFDEF_API, wait_ready
from tests.commands import kfdef_operator, kubectl
from tests.kube import Kube
from tests.operator_process import OperatorProcess
from tests.stacks import write_package

pytestmark = pytest.mark.cluster

FINALIZER = "kfdef-finalizer.kfdef.apps.kubeflow.org"


def test_without_an_operator_uninstall_refuses_and_orphan_keeps_every_object(plane: ControlPlane, admin: Kube,
                                                                             new_stack, tmp_path) -> None:
    kubectl(plane.bin_dir, plane.kubeconfig, "apply", "--server-side", "-f", str(CRD_FILE))
    admin.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", "kfdefs.kfdef.apps.kubeflow.org",
                         "Established")
    admin.create_namespace("team")
    stack = new_stack(with_webhook=False)
    # An object in the KfDef's own namespace gets an ownerReference to it: the garbage collector would delete it
    # with the KfDef unless the deletion orphans it.
    write_package(stack.root, "local", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local"}}])
    local = {"name": "local", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "local"}}}
    process = OperatorProcess(plane.kubeconfig, tmp_path / "operator")
    process.start()
    try:
        admin.apply(stack.kfdef("kept", "team", applications=[*stack.applications, local]))
        wait_ready(admin, "kept", "team")
    finally:
        process.stop()  # the operator is gone; the KfDef still holds its finalizer
    owned = admin.get("v1", "ConfigMap", "local", "team")
    assert [ref["name"] for ref in owned["metadata"]["ownerReferences"]] == ["kept"]

    done = kfdef_operator("uninstall", "--yes", kubeconfig=plane.kubeconfig)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no kfdef-operator pod is running" in done.stderr and "--orphan" in done.stderr
    kfdef = admin.get(KFDEF_API, "KfDef", "kept", "team")
    assert not kfdef["metadata"].get("deletionTimestamp") and FINALIZER in kfdef["metadata"]["finalizers"]

    done = kfdef_operator("uninstall", "--orphan", "--yes", kubeconfig=plane.kubeconfig, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "orphaned KfDef team/kept" in done.stdout and done.stdout.rstrip().endswith("uninstalled")
    assert not admin.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", "kfdefs.kfdef.apps.kubeflow.org")
    assert admin.exists("apps/v1", "Deployment", "operator", stack.namespace)
    assert admin.exists("v1", "Namespace", stack.namespace)
    kept = admin.get("v1", "ConfigMap", "local", "team")
    assert kept is not None and not kept["metadata"].get("ownerReferences"), kept["metadata"]
