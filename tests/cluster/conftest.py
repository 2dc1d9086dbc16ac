"""Cluster-test fixtures: the KfDef CRD installed once, the operator running as a process."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from kfdef_dev.controlplane import ControlPlane
from tests.kube import Kube, wait_for
from tests.operator_process import OperatorProcess
from tests.stacks import Stack, make_stack

ROOT = Path(__file__).resolve().parents[2]
KFDEF_API = "kfdef.apps.kubeflow.org/v1"
CRD_FILE = ROOT / "crds" / "kfdef.apps.kubeflow.org_kfdefs.yaml"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """A control plane of the module's own, for tests that install or remove cluster-wide things (the session's
    operator would reconcile them too); a module may override it to pass flags."""
    with ControlPlane() as started:
        yield started


@pytest.fixture(scope="module")
def admin(plane: ControlPlane) -> Iterator[Kube]:
    """An admin client of the module's own control plane."""
    kube = Kube(plane.kubeconfig)
    yield kube
    kube.close()


def install_kfdef_crd(kube: Kube) -> None:
    """The KfDef CRD applied, once Established."""
    for doc in yaml.safe_load_all(CRD_FILE.read_text()):
        kube.apply(doc)
    kube.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", "kfdefs.kfdef.apps.kubeflow.org",
                        "Established")


@pytest.fixture(scope="session")
def kfdef_crd(kube: Kube) -> None:
    install_kfdef_crd(kube)


@pytest.fixture(scope="session")
def operator(control_plane, kfdef_crd, tmp_path_factory) -> Iterator[OperatorProcess]:
    """``kfdef-operator run`` watching all namespaces with the admin kubeconfig. Local sources: the tests' stacks
    (pytest's base directory) and the demo stack shipped in ``kfdefs/demo``."""
    process = OperatorProcess(control_plane.kubeconfig, tmp_path_factory.mktemp("operator"),
                              local_source_roots=(tmp_path_factory.getbasetemp(), ROOT / "kfdefs" / "demo"))
    process.start()
    yield process
    process.stop()


@pytest.fixture
def kfdef_namespace(kube: Kube) -> Iterator[str]:
    """A namespace for a test's KfDef; KfDefs left in it are deleted (and waited for) afterwards."""
    name = f"kf-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(name)
    yield name
    for item in kube.resource(KFDEF_API, "KfDef").get(namespace=name).items:
        kube.delete(KFDEF_API, "KfDef", item.metadata.name, name)
        kube.wait_gone(KFDEF_API, "KfDef", item.metadata.name, name, timeout=120)
    kube.delete_namespace(name)


@pytest.fixture
def new_stack(tmp_path: Path) -> Callable[..., Stack]:
    return lambda **kwargs: make_stack(tmp_path, **kwargs)


def kfdef_status(kube: Kube, name: str, namespace: str) -> dict:
    return (kube.get(KFDEF_API, "KfDef", name, namespace) or {}).get("status") or {}


def wait_ready(kube: Kube, name: str, namespace: str, timeout: float = 120) -> dict:
    return kube.wait_condition(KFDEF_API, "KfDef", name, "Ready", namespace=namespace, timeout=timeout)


def restart_writes(operator: OperatorProcess, kube: Kube) -> dict[str, float]:
    """Restart the operator, wait until it has reconciled every KfDef in the cluster once, and return the write
    requests it sent meanwhile (by the request counter's labels): none, when nothing changed."""
    operator.restart()
    kfdefs = len(kube.resource(KFDEF_API, "KfDef").get().items)
    wait_for(lambda: operator.metrics().get('kfdef_reconcile_duration_seconds_count{result="success"}', 0)
             >= kfdefs, timeout=60, what="resume reconciles done")
    return {key: value for key, value in operator.metrics().items() if key.startswith("kfdef_api_requests")
            and any(f'"{verb}"' in key for verb in ("POST", "PUT", "PATCH", "DELETE"))}


def wait_condition_reason(kube: Kube, name: str, namespace: str, type_: str, status: str, reason: str | None = None,
                          timeout: float = 120) -> dict:
    last: list[dict] = []

    def check():
        obj = kube.get(KFDEF_API, "KfDef", name, namespace)
        last[:] = (obj or {}).get("status", {}).get("conditions") or []
        cond = kube.condition(obj, type_)
        if cond and cond["status"] == status and (reason is None or cond.get("reason") == reason):
            return obj
        return None
    try:
        return wait_for(check, timeout=timeout, what=f"KfDef {namespace}/{name} {type_}={status} ({reason})")
    except AssertionError as error:  # say where it stood instead
        raise AssertionError(f"{error}; its last conditions: {last}") from None
