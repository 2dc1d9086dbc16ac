"""Prune's data guard (issue 38): a Namespace or CRD a new render drops while it holds objects the stack did not
create is released and kept, and named in status.warnings; ``spec.force`` lets it go; ``kfdef-operator diff`` says
so beforehand.

The stack (tests/stacks.py) has a Namespace, a CRD with a Widget and an application in that namespace. A user keeps
a ConfigMap in the namespace and a Widget of their own. The KfDef is then edited to a stack of one unrelated
ConfigMap elsewhere, as when a new release drops those parts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import KFDEF_API, kfdef_status, wait_ready
from tests.commands import kfdef_operator
from tests.kube import wait_for
from tests.stacks import write_package

pytestmark = pytest.mark.cluster

CRD_API = "apiextensions.k8s.io/v1"
INSTANCE = "kfctl.kubeflow.io/kfdef-instance"


def users_data(kube, stack) -> None:
    """What a user keeps in the running stack: a ConfigMap in its namespace, a Widget of their own."""
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "notes", "namespace": stack.namespace},
                "data": {"keep": "me"}}, manager="a-user")
    kube.apply({"apiVersion": f"{stack.group}/v1", "kind": "Widget",
                "metadata": {"name": "mine", "namespace": stack.namespace}, "spec": {"size": 7}}, manager="a-user")


def next_release(stack, name: str, namespace: str, *, force: bool = False) -> dict:
    """The same KfDef given a stack that no longer has the namespace, the CRD or the application."""
    write_package(stack.root, "other", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}}])
    kfdef = stack.kfdef(name, namespace, applications=[
        {"name": "other", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "other"}}}])
    if force:
        kfdef["spec"]["force"] = True
    return kfdef


def settled(kube, name: str, namespace: str, generation: int) -> dict | None:
    status = kfdef_status(kube, name, namespace)
    reconciling = next((c for c in status.get("conditions") or [] if c["type"] == "Reconciling"), {})
    return status if status.get("observedGeneration") == generation and reconciling.get("status") == "False" \
        and "summary" in status else None


def test_a_namespace_and_a_crd_holding_a_users_objects_are_released_and_kept(operator, kube, kfdef_namespace,
                                                                            new_stack, control_plane,
                                                                            tmp_path: Path) -> None:
    stack = new_stack(with_webhook=False)
    kube.apply(stack.kfdef("guarded", kfdef_namespace))
    wait_ready(kube, "guarded", kfdef_namespace)
    users_data(kube, stack)
    crd = f"widgets.{stack.group}"

    edited = next_release(stack, "guarded", kfdef_namespace)
    path = tmp_path / "next.yaml"
    path.write_text(yaml.safe_dump(edited))
    preview = kfdef_operator("diff", str(path), kubeconfig=control_plane.kubeconfig)
    assert preview.returncode == 1, preview.stderr
    held = [line for line in preview.stdout.splitlines() if line.startswith("! ") and " held " in line]
    assert len(held) == 2, preview.stdout
    assert any(f"Namespace {stack.namespace} held" in line and f"ConfigMap {stack.namespace}/notes" in line
               for line in held), held
    assert any(f"{crd} held" in line and f"Widget {stack.namespace}/mine" in line for line in held), held
    assert "- Deployment.apps" in preview.stdout  # the application's objects are pruned

    kube.apply(edited)
    status = wait_for(lambda: settled(kube, "guarded", kfdef_namespace, 2), timeout=120, what="the edit applied")
    for api, kind, name in (("v1", "Namespace", stack.namespace), (CRD_API, "CustomResourceDefinition", crd)):
        live = kube.get(api, kind, name)
        assert live is not None and live["metadata"].get("deletionTimestamp") is None, name
        assert INSTANCE not in (live["metadata"].get("annotations") or {}), f"{name} still carries the stack's stamp"
    assert kube.get("v1", "ConfigMap", "notes", stack.namespace)["data"] == {"keep": "me"}
    assert kube.get(f"{stack.group}/v1", "Widget", "mine", stack.namespace)["spec"] == {"size": 7}
    # What the stack created in them is pruned as ever.
    assert not kube.exists(f"{stack.group}/v1", "Widget", "sample", stack.namespace)
    assert not kube.exists("apps/v1", "Deployment", "operator", stack.namespace)
    notes = [w for w in status.get("warnings") or [] if "no longer rendered, but holds" in w]
    assert len(notes) == 2, status.get("warnings")
    # The user's Widget is in the namespace too.
    held_namespace = f"Namespace {stack.namespace}: no longer rendered, but holds 2 objects the stack did not create ("
    assert any(note.startswith(held_namespace) and f"ConfigMap {stack.namespace}/notes" in note for note in notes), \
        notes
    assert any(f"(Widget {stack.namespace}/mine)" in note and "spec.force: true" in note for note in notes), notes
    inventory = yaml.safe_dump(status.get("inventory"))
    assert crd not in inventory and f"_{stack.namespace}_" not in inventory

    # An operator restart keeps the notes, and writes nothing.
    version = kube.get(KFDEF_API, "KfDef", "guarded", kfdef_namespace)["metadata"]["resourceVersion"]
    operator.restart()
    wait_for(lambda: operator.metrics().get('kfdef_reconcile_duration_seconds_count{result="success"}', 0) >= 1,
             timeout=60, what="the restarted operator's reconcile")
    assert kube.get(KFDEF_API, "KfDef", "guarded", kfdef_namespace)["metadata"]["resourceVersion"] == version

    kube.delete(CRD_API, "CustomResourceDefinition", crd)
    kube.delete("v1", "Namespace", stack.namespace)


def test_with_spec_force_they_go_with_what_they_hold(operator, kube, kfdef_namespace, new_stack) -> None:
    stack = new_stack(with_webhook=False)
    kube.apply(stack.kfdef("forced", kfdef_namespace))
    wait_ready(kube, "forced", kfdef_namespace)
    users_data(kube, stack)

    kube.apply(next_release(stack, "forced", kfdef_namespace, force=True))
    status = wait_for(lambda: settled(kube, "forced", kfdef_namespace, 2), timeout=120, what="the edit applied")
    assert not [w for w in status.get("warnings") or [] if "no longer rendered, but holds" in w]
    kube.wait_gone(CRD_API, "CustomResourceDefinition", f"widgets.{stack.group}", timeout=60)
    kube.wait_gone("v1", "Namespace", stack.namespace, timeout=120)
