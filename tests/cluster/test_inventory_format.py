"""The inventory follows the KfDef CRD installed (against the real kube-apiserver).

A CRD older than the string format of ``status.inventory`` prunes it from every write, as any unknown field: the
operator must write the first format there, or an upgrade of the operator before its CRD would leave each KfDef
without an inventory and teardown with nothing to delete. Once the CRD of its release is installed (and the
operator restarted), the inventory moves to the strings; teardown works from either.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from kfdef_operator.runtime.inventory import read as read_inventory
from tests.cluster.conftest import CRD_FILE, KFDEF_API, kfdef_status, wait_ready
from tests.cluster.test_reconciler import stack_objects
from tests.kube import wait_for
from tests.operator_process import OperatorProcess
from tests.stacks import make_stack

pytestmark = pytest.mark.cluster

CRD_NAME = "kfdefs.kfdef.apps.kubeflow.org"


def _installed(admin, crd: dict) -> None:
    """The KfDef CRD applied (the same field manager each time: fields left out are removed), then served."""
    admin.apply(crd)
    admin.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD_NAME, "Established")


def first_format_crd() -> dict:
    """The KfDef CRD as it was before the string format: its inventory knows ``entries`` only."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    for version in crd["spec"]["versions"]:
        inventory = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["inventory"]
        inventory["properties"] = {"entries": inventory["properties"]["entries"]}
    return crd


def _prunes_strings(admin, namespace: str) -> bool:
    """Whether kube-apiserver prunes the string format now (a schema change takes effect a little later)."""
    name = "probe"
    if admin.get(KFDEF_API, "KfDef", name, namespace) is None:
        admin.apply({"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": name, "namespace": namespace},
                     "spec": {"applications": []}})
    written = admin.resource(KFDEF_API, "KfDef").status.patch(
        body={"status": {"inventory": {"applications": [], "entries": []}}}, name=name, namespace=namespace,
        content_type="application/merge-patch+json").to_dict()
    return "applications" not in written["status"]["inventory"]


def test_an_older_crd_gets_the_first_format_then_the_strings_once_upgraded_and_teardown_works(plane, admin,
                                                                                              tmp_path) -> None:
    namespace = "kfdefs"
    admin.create_namespace(namespace)
    _installed(admin, first_format_crd())
    wait_for(lambda: _prunes_strings(admin, namespace), timeout=30, what="the older CRD in force")
    admin.delete(KFDEF_API, "KfDef", "probe", namespace)
    stack = make_stack(tmp_path)
    operator = OperatorProcess(plane.kubeconfig, tmp_path / "operator", local_source_roots=(tmp_path,))
    operator.start()
    try:
        admin.apply(stack.kfdef("stack", namespace))
        status = wait_ready(admin, "stack", namespace)["status"]
        assert set(status["inventory"]) == {"entries"}, "the older CRD keeps the first format only"
        held = {held.ref.id for held in read_inventory(status)}
        assert len(held) == len(stack_objects(stack)) == 10
        assert "older than this operator" in operator.log_tail(400)

        _installed(admin, yaml.safe_load(CRD_FILE.read_text()))
        wait_for(lambda: not _prunes_strings(admin, namespace), timeout=30, what="the CRD of this release in force")
        admin.delete(KFDEF_API, "KfDef", "probe", namespace)
        operator.stop()
        operator.start()

        def moved() -> dict | None:
            inventory = copy.deepcopy(kfdef_status(admin, "stack", namespace).get("inventory") or {})
            return inventory if "applications" in inventory and "entries" not in inventory else None

        wait_for(moved, timeout=60, what="the inventory in the string format")
        assert {held.ref.id for held in read_inventory(kfdef_status(admin, "stack", namespace))} == held

        admin.delete(KFDEF_API, "KfDef", "stack", namespace)
        admin.wait_gone(KFDEF_API, "KfDef", "stack", namespace, timeout=120)
        left = [(kind, name) for api_version, kind, name, object_namespace in stack_objects(stack)
                if admin.get(api_version, kind, name, object_namespace) is not None and kind != "Namespace"]
        assert left == [], f"teardown left {left}"
    finally:
        operator.stop()
