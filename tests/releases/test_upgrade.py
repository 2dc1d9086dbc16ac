"""Day 2 on the real releases: a running Kubeflow v1.2.0 moved to v1.11.0 by editing its KfDef (issue 38).

On a control plane of this module's own (with an audit log), the operator deploys Kubeflow v1.2.0 from its release
archive (the kfctl_k8s_istio KfDef, stacks mode), with what a kwok-run cluster cannot serve left out
(``kfdef_dev/unservable.py``), until it is Ready. A user then keeps data in it: a namespace of their own with objects
in it, custom resources of CRDs both releases define (a Notebook, a cert-manager Certificate, stored at versions
v1.11.0 no longer has or no longer stores in), a TFJob (a kind v1.11.0 no longer defines) and a ConfigMap in
``kubeflow``. Then the same KfDef is given v1.11.0's spec (its ``example/``, plain mode), as a platform engineer
moves a stack to the next release. Once it settles:

- every object v1.11.0 renders is applied, but what this cluster cannot serve (named);
- nothing the stack created for v1.2.0 that v1.11.0 lacks is left, but what the data guard keeps (a CRD still
  holding the user's objects, named in ``status.warnings``);
- every object of the user's is still there, readable at the new release's versions;
- a no-op restart of the operator writes nothing.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from kfdef_dev.controlplane import ControlPlane
from kfdef_dev.releases import ARCHIVES, v1_11_0_profile_repair
from kfdef_dev.unservable import Excluded, write_wrappers
from kfdef_operator.upgrade.convert import served_for_release, upgrade_objects
from tests.cluster.conftest import KFDEF_API, install_kfdef_crd
from tests.kube import Kube, wait_for
from tests.operator_process import OperatorProcess
from tests.releases.conftest import Rendered
from tests.releases.test_on_cluster import (
    NAME,
    NAMESPACE,
    RELEASES,
    AuditLog,
    as_user_deploys,
    failures_of,
    operators_write,
    simulated_storage,
)

pytestmark = pytest.mark.cluster

JSON = dict[str, Any]
Identity = tuple[str, str, str, str]  # group, kind, namespace, name
USER_NAMESPACE = "team-a"
SETTLE_TIMEOUT_S = 900.0


def identity(obj: JSON) -> Identity:
    return (obj["apiVersion"].rpartition("/")[0], obj["kind"], obj["metadata"].get("namespace") or "",
            obj["metadata"]["name"])


#: What the user keeps in the running stack: (apiVersion as written, kind, namespace, name, the rest).
USER_DATA: list[JSON] = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": USER_NAMESPACE}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "notes", "namespace": USER_NAMESPACE},
     "data": {"experiment": "42"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "my-settings", "namespace": "kubeflow"},
     "data": {"theme": "dark"}},
    # kubeflow.org notebooks: stored in v1beta1 by v1.2.0, in v1 by v1.11.0 (v1beta1 still served).
    {"apiVersion": "kubeflow.org/v1beta1", "kind": "Notebook", "metadata": {"name": "analysis",
                                                                            "namespace": USER_NAMESPACE},
     "spec": {"template": {"spec": {"containers": [{"name": "analysis", "image": "jupyter/base-notebook"}]}}}},
    # cert-manager.io: v1alpha2 in v1.2.0, only v1 in v1.11.0: its stored objects must be migrated first.
    {"apiVersion": "cert-manager.io/v1alpha2", "kind": "Certificate",
     "metadata": {"name": "analysis-tls", "namespace": USER_NAMESPACE},
     "spec": {"secretName": "analysis-tls", "dnsNames": ["analysis.example.com"],
              "issuerRef": {"name": "kubeflow-self-signing-issuer", "kind": "ClusterIssuer"}}},
    # tfjobs.kubeflow.org: v1.11.0 has no such CRD (its trainer replaced it).
    {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "mnist", "namespace": USER_NAMESPACE},
     "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [
         {"name": "tensorflow", "image": "kubeflow/tf-mnist-with-summaries:latest"}]}}}}}},
]


#: The versions the user's objects are read at once the new release runs: it serves cert-manager.io at v1 alone.
READ_AT = {"cert-manager.io/v1alpha2": "cert-manager.io/v1"}


@dataclass
class Upgrade:
    plane: ControlPlane
    kube: Kube
    operator: OperatorProcess
    audit: AuditLog
    old: list[JSON]                       # v1.2.0 as applied (what kwok cannot serve left out)
    new: list[JSON]                       # v1.11.0 as applied
    excluded: list[Excluded]              # what this cluster cannot serve, of v1.11.0
    figures: JSON = field(default_factory=dict)

    def status(self) -> JSON:
        return (self.kube.get(KFDEF_API, "KfDef", NAME, NAMESPACE) or {}).get("status") or {}

    def condition(self, type_: str) -> JSON:
        return next((c for c in self.status().get("conditions") or [] if c["type"] == type_), {})


def applied_set(name: str, rendered: Rendered, excluded: list[Excluded]) -> list[JSON]:
    """The objects of a release as the operator applies them on this cluster: upgraded to the API versions 1.36
    serves, without what it cannot serve, nor the release's own defects (repaired by the wrappers)."""
    left_out = {(e.kind, e.name) for e in excluded}
    defects = RELEASES[name].known_defects
    return [obj for obj in upgrade_objects(rendered.objects, served_for_release("1.36")).objects
            if (obj["kind"], obj["metadata"]["name"]) not in left_out
            and f"{obj['kind']}.{obj['apiVersion'].rpartition('/')[0]} {obj['metadata']['name']}" not in defects]


def exists(kube: Kube, obj: JSON) -> bool:
    """Whether the object is on the cluster (not when its kind is no longer served); one rendered without a namespace
    is in the KfDef's, if namespaced."""
    namespace = obj["metadata"].get("namespace")
    try:
        namespaced = kube.resource(obj["apiVersion"], obj["kind"]).namespaced
    except ResourceNotFoundError:
        return False
    return kube.exists(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                       namespace or (NAMESPACE if namespaced else None))


def wrapped(name: str, rendered: Rendered, trees, tmp: Path) -> tuple[JSON, list[Excluded]]:
    """The release's KfDef pointing at a copy of its tree with wrappers leaving out what kwok cannot serve."""
    release = RELEASES[name]
    tree = tmp / f"tree-{name}" / "manifests"
    shutil.copytree(trees[name].local_path, tree)
    repairs = {"kubeflow": v1_11_0_profile_repair(tree)} if release.known_defects else {}
    return write_wrappers(as_user_deploys(release, ARCHIVES[name]), tree,
                          {app.name: app.objects for app in rendered.applications}, repairs)


def reconciled(upgrade: Upgrade, generation: int) -> JSON | None:
    """The status once ``generation``'s apply is done (Reconciling False), else None."""
    status = upgrade.status()
    reconciling = next((c for c in status.get("conditions") or [] if c["type"] == "Reconciling"), {})
    if status.get("observedGeneration") == generation and reconciling.get("status") == "False" and \
            "summary" in status:
        return status
    return None


def settled(upgrade: Upgrade, generation: int) -> JSON | None:
    """The status once ``generation``'s apply is done and the stack Ready, else None."""
    status = reconciled(upgrade, generation)
    return status if status is not None and upgrade.condition("Ready").get("status") == "True" else None


@pytest.fixture(scope="module")
def upgrade(release_trees, v1_2_0, v1_11_0, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upgrade]:
    tmp = tmp_path_factory.mktemp("upgrade")
    old_rendered: Rendered = v1_2_0[RELEASES["v1.2.0"].key]
    new_rendered: Rendered = v1_11_0[RELEASES["v1.11.0"].key]
    old_kfdef, old_excluded = wrapped("v1.2.0", old_rendered, release_trees, tmp)
    new_kfdef, new_excluded = wrapped("v1.11.0", new_rendered, release_trees, tmp)
    with ControlPlane(audit=True) as plane:
        kube = Kube(plane.kubeconfig)
        # Local sources: the trees with their wrappers, in the test's temporary directory.
        operator = OperatorProcess(plane.kubeconfig, tmp / "operator",
                                   local_source_roots=(tmp_path_factory.getbasetemp(),))
        try:
            install_kfdef_crd(kube)
            kube.create_namespace(NAMESPACE)
            simulated_storage(kube)
            operator.start()
            upgrade = Upgrade(plane, kube, operator, AuditLog(plane), applied_set("v1.2.0", old_rendered, old_excluded),
                              applied_set("v1.11.0", new_rendered, new_excluded), new_excluded)
            started = time.monotonic()
            kube.apply(old_kfdef)
            wait_for(lambda: settled(upgrade, 1), timeout=SETTLE_TIMEOUT_S, what="v1.2.0 Ready")
            upgrade.figures["v1.2.0 ready s"] = round(time.monotonic() - started, 1)
            for obj in USER_DATA:
                kube.apply(obj, manager="a-user")
            started = time.monotonic()
            kube.apply(new_kfdef)
            first = wait_for(lambda: reconciled(upgrade, 2), timeout=SETTLE_TIMEOUT_S, what="v1.11.0 applied")
            upgrade.figures["upgrade s (first apply done)"] = round(time.monotonic() - started, 1)
            upgrade.figures["failures after the first apply"] = failures_of(first)
            try:
                wait_for(lambda: settled(upgrade, 2), timeout=SETTLE_TIMEOUT_S, what="v1.11.0 Ready")
            except AssertionError as error:
                status = upgrade.status()
                raise AssertionError(f"{error}; conditions {status.get('conditions')}; failures "
                                     f"{failures_of(status)}; warnings {status.get('warnings')}; "
                                     f"figures {upgrade.figures}") from None
            upgrade.figures["upgrade s (to Ready)"] = round(time.monotonic() - started, 1)
            print(f"upgrade figures: {upgrade.figures}")
            yield upgrade
        finally:
            operator.stop()
            kube.close()


def test_every_object_of_the_new_release_is_applied(upgrade: Upgrade) -> None:
    status = upgrade.status()
    summary = status["summary"]
    assert failures_of(status) == {}
    # The release's defects, repaired by the wrappers, are applied under their repaired names.
    repaired = len(RELEASES["v1.11.0"].known_defects)
    assert summary["total"] == summary["applied"] == summary["ready"] == len({identity(o) for o in upgrade.new}) + \
        repaired
    assert [identity(o) for o in upgrade.new if not exists(upgrade.kube, o)] == []


def test_nothing_the_old_release_created_and_the_new_one_lacks_is_left_but_what_holds_user_data(
        upgrade: Upgrade) -> None:
    new = {identity(o) for o in upgrade.new}
    dropped = [o for o in upgrade.old if identity(o) not in new]
    left = [identity(o) for o in dropped if exists(upgrade.kube, o)]
    held = [("apiextensions.k8s.io", "CustomResourceDefinition", "", "tfjobs.kubeflow.org")]
    assert left == held
    warnings = upgrade.status().get("warnings") or []
    assert any("tfjobs.kubeflow.org" in w and "1 " in w for w in warnings), warnings


def test_every_object_of_the_users_is_still_there(upgrade: Upgrade) -> None:
    for obj in USER_DATA:
        meta = obj["metadata"]
        api_version = READ_AT.get(obj["apiVersion"], obj["apiVersion"])
        live = upgrade.kube.get(api_version, obj["kind"], meta["name"], meta.get("namespace"))
        assert live is not None, identity(obj)
        assert live.get("data") == obj.get("data"), identity(obj)
        # What the user wrote, as they wrote it (the server may have added defaults).
        assert {key: value for key, value in (live.get("spec") or {}).items() if key in obj.get("spec", {})} == \
            ({} if obj["kind"] == "Namespace" else obj.get("spec", {})), identity(obj)
    # Stored at the new versions: the old ones could go from the CRDs.
    certificates = upgrade.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                    "certificates.cert-manager.io")
    assert certificates["status"]["storedVersions"] == ["v1"]
    assert upgrade.kube.get("cert-manager.io/v1", "Certificate", "analysis-tls", USER_NAMESPACE)["spec"][
        "secretName"] == "analysis-tls"


def test_a_no_op_restart_writes_nothing(upgrade: Upgrade) -> None:
    upgrade.operator.stop()
    upgrade.audit.skip_to_end()
    upgrade.operator.start()
    wait_for(lambda: upgrade.operator.metrics().get('kfdef_reconcile_duration_seconds_count{result="success"}'),
             timeout=300, what="the restarted operator's first reconcile")
    events = upgrade.audit.span(10)
    assert [f"{e['verb']} {e['requestURI']}" for e in events if operators_write(e)] == []
