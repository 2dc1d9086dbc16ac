"""deploy/ on a real control plane: it applies, its RBAC suffices and promises no more than documented.

This module starts its own control plane: the session one may run the admin
operator (the ``operator`` fixture, all namespaces), which would reconcile the
KfDefs here too. On this plane the only operator is the one running under the
deploy/ ClusterRoles' identity, so the stack it deploys proves those roles
suffice; likewise the namespaced install (deploy/namespaced) runs under a user
holding nothing but the Roles it grants.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kfdef_dev.controlplane import OPERATOR_USER, ControlPlane
from kfdef_operator.api.names import LEASE_NAME
from tests.cluster.conftest import KFDEF_API, wait_ready
from tests.commands import kubectl as run_kubectl
from tests.kube import Kube, wait_for
from tests.operator_process import OperatorProcess
from tests.stacks import deployment, write_package

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "kfdef-operator-system"
NAMESPACED_USER = "namespaced-operator"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    # The quota controller computes a new quota's usage of a custom resource only after it has
    # discovered the CRD (every 30 s) and then at its next full resync (5 min by default).
    with ControlPlane(controller_manager_flags=("--resource-quota-sync-period=5s",),
                      users=(NAMESPACED_USER,)) as started:
        yield started


def kustomize_build(plane: ControlPlane, directory: Path) -> str:
    return subprocess.run([plane.bin_dir / "kustomize", "build", directory], check=True, capture_output=True,
                          text=True).stdout


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None, kubeconfig: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    return run_kubectl(plane.bin_dir, kubeconfig or plane.kubeconfig, *args, stdin=stdin, check=check)


def documents(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="module")
def deployed(plane: ControlPlane, admin: Kube) -> list[dict]:
    """deploy/ installed the documented way, after a server-side dry-run of all of it.

    A dry-run creates nothing, so namespaced objects can only be dry-run once
    their Namespace exists: the Namespace is dry-run and applied first.
    """
    manifest = kustomize_build(plane, ROOT / "deploy")
    namespaces = yaml.safe_dump_all([d for d in documents(manifest) if d["kind"] == "Namespace"])
    kubectl(plane, "apply", "--server-side", "--dry-run=server", "-f", "-", stdin=namespaces)
    kubectl(plane, "apply", "--server-side", "-f", "-", stdin=namespaces)
    kubectl(plane, "apply", "--server-side", "--dry-run=server", "-f", "-", stdin=manifest)
    kubectl(plane, "apply", "--server-side", "-f", "-", stdin=manifest)
    admin.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", "kfdefs.kfdef.apps.kubeflow.org",
                         "Established")
    return documents(manifest)


def test_deploy_applies_and_its_pod_passes_restricted_pod_security(deployed: list[dict], admin: Kube) -> None:
    kinds = {d["kind"] for d in deployed}
    assert {"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
            "Deployment", "Service", "ConfigMap"} <= kinds
    for doc in deployed:
        meta = doc["metadata"]
        assert admin.exists(doc["apiVersion"], doc["kind"], meta["name"], meta.get("namespace")), meta["name"]
    # The namespace enforces the restricted Pod Security Standard: an Available Deployment means the
    # pod was admitted (kwok then plays the kubelet).
    admin.wait_condition("apps/v1", "Deployment", "kfdef-operator", "Available", namespace=NAMESPACE, timeout=90)


def edited_deploy(plane: ControlPlane, tmp_path: Path, *edit: str) -> list[dict]:
    """Build a copy of deploy/ after ``kustomize edit <edit...>`` in it, as the docs tell users to."""
    for directory in ("deploy", "crds"):  # the same layout: deploy/ refers to ../crds
        shutil.copytree(ROOT / directory, tmp_path / directory)
    subprocess.run([plane.bin_dir / "kustomize", "edit", *edit], cwd=tmp_path / "deploy", check=True,
                   capture_output=True)
    return documents(kustomize_build(plane, tmp_path / "deploy"))


def test_edit_set_namespace_moves_every_namespaced_object(plane: ControlPlane, admin: Kube, deployed,
                                                           tmp_path: Path) -> None:
    docs = edited_deploy(plane, tmp_path, "set", "namespace", "kf-ops")
    namespaced = [d for d in docs if d["kind"] not in ("Namespace", "CustomResourceDefinition", "ClusterRole",
                                                      "ClusterRoleBinding")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"kf-ops"}
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == ["kf-ops"]
    subjects = [s for d in docs if d["kind"] == "ClusterRoleBinding" for s in d["subjects"]]
    assert subjects and {s["namespace"] for s in subjects} == {"kf-ops"}
    kubectl(plane, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
    admin.wait_condition("apps/v1", "Deployment", "kfdef-operator", "Available", namespace="kf-ops", timeout=90)


@pytest.fixture(scope="module")
def operator_user(plane: ControlPlane, admin: Kube, deployed: list[dict]) -> Path:
    """The group-less token user ``kfdef-operator`` bound to every ClusterRole of deploy/, as its ServiceAccount is."""
    for role in (d for d in deployed if d["kind"] == "ClusterRole"):
        name = role["metadata"]["name"]
        admin.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": f"{name}-test-user"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}]})
    return plane.kubeconfig_for(OPERATOR_USER)


# docs/deployment.md#rbac promises exactly this table: `kubectl auth can-i` arguments and the answer.
CAN_I = [
    ("patch kfdefs.kfdef.apps.kubeflow.org --subresource=status", "yes"),
    ("watch kfdefs.kfdef.apps.kubeflow.org --all-namespaces", "yes"),
    ("create events -n default", "yes"),
    ("create customresourcedefinitions.apiextensions.k8s.io", "yes"),
    ("delete namespaces", "yes"),
    ("create validatingwebhookconfigurations.admissionregistration.k8s.io", "yes"),
    ("create clusterroles", "yes"),
    ("escalate clusterroles", "yes"),
    ("bind clusterroles", "yes"),
    ("patch deployments.apps -n kube-system", "yes"),
    ("watch secrets --all-namespaces", "yes"),
    ("impersonate serviceaccounts -n team-a", "yes"),
    ("impersonate users", "no"),
    ("impersonate groups", "no"),
    ("deletecollection pods -n default", "no"),
    ("approve signers.certificates.k8s.io", "no"),
    ("escalate deployments.apps", "no"),
    ("get /logs", "no"),
    ("* *", "no"),
]


@pytest.mark.parametrize("question, expected", CAN_I, ids=[row[0] for row in CAN_I])
def test_operator_identity_can_and_cannot(plane: ControlPlane, operator_user: Path, question: str,
                                          expected: str) -> None:
    result = kubectl(plane, "auth", "can-i", *question.split(), kubeconfig=operator_user, check=False)
    assert result.stdout.strip() == expected, result.stderr


def test_operator_under_deploy_rbac_deploys_heals_and_tears_down_a_stack(
        plane: ControlPlane, admin: Kube, operator_user: Path, new_stack, tmp_path: Path) -> None:
    admin.create_namespace("kfdefs")
    stack = new_stack()
    # What Kubeflow stacks do and only `escalate`/`bind` allow: a role granting verbs the operator
    # lacks (impersonating users, via "*") and a binding to cluster-admin.
    admin_role = f"stack-admin-{stack.suffix}"
    write_package(stack.root, "admin-rbac", [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": admin_role},
         "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": admin_role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
         "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": stack.namespace}]}])
    applications = [*stack.applications,
                    {"name": "admin-rbac", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "admin-rbac"}}}]
    # All namespaces, as deploy/ runs it: listing and watching cluster-wide is part of what the roles must grant.
    process = OperatorProcess(operator_user, tmp_path / "operator")
    process.start()
    try:
        admin.apply(stack.kfdef("rbac", "kfdefs", applications=applications))
        wait_ready(admin, "rbac", "kfdefs")
        assert admin.exists("rbac.authorization.k8s.io/v1", "ClusterRole", admin_role)
        assert admin.exists("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", admin_role)
        assert admin.exists("apps/v1", "Deployment", "operator", stack.namespace)

        admin.delete("apps/v1", "Deployment", "operator", stack.namespace)
        wait_for(lambda: admin.exists("apps/v1", "Deployment", "operator", stack.namespace), what="the heal")

        # Right after the heal the new Deployment is not Available yet, so Ready is False for a moment:
        # the gauge must come back to 1 once kwok has run the new pod.
        ready_gauge = 'kfdef_condition{name="rbac",namespace="kfdefs",type="Ready"}'
        metrics = wait_for(lambda: (m := process.metrics()).get(ready_gauge) == 1.0 and m, timeout=60,
                           what="Ready gauge back at 1")
        assert any(key.startswith("kfdef_reconcile_duration_seconds_count") for key in metrics), metrics

        admin.delete(KFDEF_API, "KfDef", "rbac", "kfdefs")
        admin.wait_gone(KFDEF_API, "KfDef", "rbac", "kfdefs", timeout=120)
        assert not admin.exists("rbac.authorization.k8s.io/v1", "ClusterRole", admin_role)
        assert "forbidden" not in process.log_tail(10_000).lower()
    finally:
        process.stop()


def test_quota_component_allows_one_kfdef_in_the_operator_namespace(plane: ControlPlane, admin: Kube, deployed,
                                                                     tmp_path: Path) -> None:
    docs = edited_deploy(plane, tmp_path, "add", "component", "include/quota")
    quotas = [d for d in docs if d["kind"] == "ResourceQuota"]
    assert [(q["metadata"]["namespace"], q["spec"]["hard"]) for q in quotas] == [
        (NAMESPACE, {"count/kfdefs.kfdef.apps.kubeflow.org": "1"})]
    kubectl(plane, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
    # Quota admission refuses KfDefs until the quota controller has counted them (see `plane`).
    counted = "count/kfdefs.kfdef.apps.kubeflow.org"
    wait_for(lambda: counted in ((admin.get("v1", "ResourceQuota", "kfdef-singleton", NAMESPACE) or {})
                                 .get("status", {}).get("used") or {}), what="the quota's usage", timeout=90)

    def create(name: str) -> subprocess.CompletedProcess:
        kfdef = {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": name, "namespace": NAMESPACE},
                 "spec": {"applications": [], "repos": []}}
        return kubectl(plane, "create", "-f", "-", stdin=yaml.safe_dump(kfdef), check=False)

    try:
        assert create("one").returncode == 0
        second = create("two")
        assert second.returncode != 0 and "exceeded quota" in second.stderr, second.stderr
    finally:
        admin.delete("v1", "ResourceQuota", "kfdef-singleton", NAMESPACE)
        admin.delete(KFDEF_API, "KfDef", "one", NAMESPACE)


def grant_namespaced_access(plane: ControlPlane, namespace: str) -> None:
    """deploy/namespaced/access applied in ``namespace`` as documented, bound to the test's token user instead of
    the ServiceAccount (which a process outside the cluster cannot use)."""
    for doc in documents(kustomize_build(plane, ROOT / "deploy" / "namespaced" / "access")):
        doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "RoleBinding":
            doc["subjects"] = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": NAMESPACED_USER}]
        kubectl(plane, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(doc))


NAMESPACED_CAN_I = [
    ("create deployments.apps -n team-a", "yes"),
    ("patch kfdefs.kfdef.apps.kubeflow.org --subresource=status -n team-b", "yes"),
    ("update leases.coordination.k8s.io -n team-a", "yes"),
    ("create deployments.apps -n elsewhere", "no"),
    ("list kfdefs.kfdef.apps.kubeflow.org --all-namespaces", "no"),
    ("create clusterroles", "no"),
    ("create customresourcedefinitions.apiextensions.k8s.io", "no"),
    ("create namespaces", "no"),
]


def test_namespaced_install_serves_its_namespaces_with_their_roles_only(plane: ControlPlane, admin: Kube,
                                                                       deployed, tmp_path: Path) -> None:
    """MultiNamespace: WATCH_NAMESPACE=team-a,team-b and deploy/namespaced/access in both, nothing cluster-wide.

    The operator (leader election on, its Lease in team-a) deploys and heals a namespaced stack, refuses a
    stack's cluster-scoped object in the KfDef's status, and never touches a KfDef of another namespace.
    """
    for namespace in ("team-a", "team-b", "elsewhere"):
        admin.create_namespace(namespace)
    for namespace in ("team-a", "team-b"):
        grant_namespaced_access(plane, namespace)
    user = plane.kubeconfig_for(NAMESPACED_USER)
    for question, expected in NAMESPACED_CAN_I:
        answer = kubectl(plane, "auth", "can-i", *question.split(), kubeconfig=user, check=False).stdout.strip()
        assert answer == expected, question

    repo = tmp_path / "repo"
    write_package(repo, "app", [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app"}},
                                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
                                 "data": {"mode": "on"}},
                                deployment("app")])
    write_package(repo, "cluster", [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                     "metadata": {"name": "team-b-reader"}, "rules": []},
                                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}])

    def kfdef(name: str, namespace: str, path: str) -> dict:
        return {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": name, "namespace": namespace},
                "spec": {"applications": [{"name": path, "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                                          "path": path}}}],
                         "repos": [{"name": "manifests", "uri": str(repo)}]}}

    admin.apply(kfdef("ignored", "elsewhere", "app"))  # first: by the time the others are done, it was seen
    process = OperatorProcess(user, tmp_path / "operator", env={"WATCH_NAMESPACE": "team-a,team-b"},
                              extra_args=("--enable-leader-election", "--leader-election-namespace", "team-a"))
    process.start()
    try:
        admin.apply(kfdef("apps", "team-a", "app"))
        admin.apply(kfdef("cluster", "team-b", "cluster"))
        wait_ready(admin, "apps", "team-a")
        admin.delete("apps/v1", "Deployment", "app", "team-a")
        wait_for(lambda: admin.exists("apps/v1", "Deployment", "app", "team-a"), what="the heal")

        def refused() -> dict | None:
            status = (admin.get(KFDEF_API, "KfDef", "cluster", "team-b") or {}).get("status") or {}
            return status if status.get("failures") and (status.get("summary") or {}).get("applied") == 1 else None
        status = wait_for(refused, timeout=120, what="the cluster-scoped object refused")
        assert [f["object"] for f in status["failures"]] == ["ClusterRole.rbac.authorization.k8s.io team-b-reader"]
        assert "outside this operator's scope" in status["failures"][0]["message"]
        assert admin.exists("v1", "ConfigMap", "settings", "team-b")
        assert not admin.exists("rbac.authorization.k8s.io/v1", "ClusterRole", "team-b-reader")
        assert not (admin.get(KFDEF_API, "KfDef", "ignored", "elsewhere") or {}).get("status")
        assert not admin.exists("apps/v1", "Deployment", "app", "elsewhere")
        lease = admin.get("coordination.k8s.io/v1", "Lease", LEASE_NAME, "team-a")
        assert lease["spec"]["holderIdentity"]
        assert "forbidden" not in process.log_tail(10_000).lower(), process.log_tail(40)

        for name, namespace in (("apps", "team-a"), ("cluster", "team-b")):
            admin.delete(KFDEF_API, "KfDef", name, namespace)
            admin.wait_gone(KFDEF_API, "KfDef", name, namespace, timeout=120)
    finally:
        process.stop()
        admin.delete(KFDEF_API, "KfDef", "ignored", "elsewhere")
