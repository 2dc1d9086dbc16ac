"""Tenants act with their own identity: a KfDef can never do more than its owner may (issue 12, item 1), nor slow
another tenant's KfDefs down (issue 39, item 1).

This module starts its own control plane (as tests/cluster/test_deploy.py does): the operator here runs as the
token user ``kfdef-operator`` bound to deploy/'s ClusterRoles, the only operator on that plane. A tenant is the
token user ``tenant``, who may do nothing but write KfDefs in its namespace. Attacks run against the full
deploy/ RBAC (the operator itself may create anything), so what stops them is the identity the stack acts as,
not a narrower operator role; the multi-tenant component's narrower role is exercised by the trusted stack.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kfdef_dev.controlplane import OPERATOR_USER, TENANT_USER, ControlPlane
from kfdef_dev.manifests import tarball
from tests.cluster.conftest import CRD_FILE, KFDEF_API, wait_condition_reason
from tests.cluster.test_deploy import documents, edited_deploy, kubectl, kustomize_build
from tests.kube import Kube, wait_for
from tests.operator_process import OperatorProcess
from tests.reliability.support import TarballServer, condition, wait_ready
from tests.stacks import make_stack, write_package
from tests.unit.test_confinement import laughs

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
TENANT = "tenant-a"
RBAC = "rbac.authorization.k8s.io/v1"
DEFAULT_SA_ENV = {"KFDEF_DEFAULT_SERVICE_ACCOUNT": "default"}  # what include/multi-tenant's flag sets


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane() as started:
        yield started


@pytest.fixture(scope="module")
def admin(plane: ControlPlane) -> Iterator[Kube]:
    kube = Kube(plane.kubeconfig)
    kube.apply(yaml.safe_load(CRD_FILE.read_text()))
    kube.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", "kfdefs.kfdef.apps.kubeflow.org",
                        "Established")
    yield kube
    kube.close()


def install_operator_roles(plane: ControlPlane, admin: Kube, docs: list[dict]) -> list[dict]:
    """The ClusterRoles of a deploy/ build, applied and bound to the operator's token user as to its ServiceAccount."""
    roles = [d for d in docs if d["kind"] == "ClusterRole"]
    kubectl(plane, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(roles))
    for role in roles:
        name = role["metadata"]["name"]
        admin.apply({"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": f"{name}-test-user"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}]})
    return roles


@pytest.fixture
def deploy_roles(plane: ControlPlane, admin: Kube) -> list[dict]:
    """deploy/ as it is: the single-administrator install (the operator may create anything)."""
    return install_operator_roles(plane, admin, documents(kustomize_build(plane, ROOT / "deploy")))


@pytest.fixture
def multi_tenant(plane: ControlPlane, admin: Kube, tmp_path: Path) -> list[str]:
    """deploy/ with include/multi-tenant, added as docs/security.md says; returns the operator arguments it sets."""
    docs = edited_deploy(plane, tmp_path, "add", "component", "include/multi-tenant")
    install_operator_roles(plane, admin, docs)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return [a for a in args if a.startswith("--default-service-account")]


@pytest.fixture
def tenant(plane: ControlPlane, admin: Kube) -> Iterator[Path]:
    """Namespace tenant-a and the user ``tenant``, who may only read and write KfDefs there."""
    admin.create_namespace(TENANT)
    admin.apply({"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "kfdef-author", "namespace": TENANT},
                 "rules": [{"apiGroups": ["kfdef.apps.kubeflow.org"], "resources": ["kfdefs"],
                            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]})
    admin.apply({"apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "kfdef-author", "namespace": TENANT},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kfdef-author"},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT_USER}]})
    yield plane.kubeconfig_for(TENANT_USER)
    # The tests delete their KfDefs while their operator runs; after a failure, no operator removes finalizers.
    for item in admin.resource(KFDEF_API, "KfDef").get(namespace=TENANT).items:
        admin.resource(KFDEF_API, "KfDef").patch(name=item.metadata.name, namespace=TENANT,
                                                 body={"metadata": {"finalizers": None}},
                                                 content_type="application/merge-patch+json")
    admin.delete(RBAC, "ClusterRoleBinding", "tenant-a-is-cluster-admin")  # left by a failed attack test
    admin.delete_namespace(TENANT)
    wait_for(lambda: admin.get("v1", "Namespace", TENANT) is None, timeout=120, what=f"namespace {TENANT} gone")


def delete_kfdefs(admin: Kube, namespace: str = TENANT) -> None:
    """Delete every KfDef of ``namespace`` and wait until the operator has torn each down."""
    names = [item.metadata.name for item in admin.resource(KFDEF_API, "KfDef").get(namespace=namespace).items]
    for name in names:
        admin.delete(KFDEF_API, "KfDef", name, namespace)
    for name in names:
        admin.wait_gone(KFDEF_API, "KfDef", name, namespace, timeout=120)


def can_i(plane: ControlPlane, kubeconfig: Path, *question: str) -> str:
    return kubectl(plane, "auth", "can-i", *question, kubeconfig=kubeconfig, check=False).stdout.strip()


def rights(plane: ControlPlane, kubeconfig: Path) -> str:
    """Everything a user may do, in its namespace and cluster-wide (``kubectl auth can-i --list``)."""
    return "\n".join(kubectl(plane, "auth", "can-i", "--list", *scope, kubeconfig=kubeconfig).stdout
                     for scope in (("-n", TENANT), ("-n", "kube-system")))


def start_operator(plane: ControlPlane, tmp_path: Path, *args: str, env: dict[str, str] | None = None
                   ) -> OperatorProcess:
    process = OperatorProcess(plane.kubeconfig_for(OPERATOR_USER), tmp_path / "operator", extra_args=args, env=env)
    process.start()
    return process


def failures(admin: Kube, name: str) -> dict[str, str]:
    status = (admin.get(KFDEF_API, "KfDef", name, TENANT) or {}).get("status") or {}
    return {f["object"]: f["message"] for f in status.get("failures") or []}


ESCALATION = [
    {"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": "tenant-a-is-cluster-admin"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT_USER}]},
    {"apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "tenant-a-is-admin", "namespace": TENANT},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT_USER}]},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "innocent", "namespace": TENANT},
     "data": {"k": "v"}},
]


@pytest.mark.parametrize("scope", [(), ("--namespace", TENANT)], ids=["all namespaces", "--namespace tenant-a"])
def test_a_tenant_cannot_become_cluster_admin_through_a_kfdef(plane, admin, deploy_roles, tenant, tmp_path, scope,
                                                              reliability):
    """A tenant's KfDef rendering a ClusterRoleBinding to cluster-admin: refused, reported, nothing gained"""
    before = rights(plane, tenant)
    assert can_i(plane, tenant, "create", "kfdefs.kfdef.apps.kubeflow.org", "-n", TENANT) == "yes"
    assert can_i(plane, tenant, "create", "clusterrolebindings") == "no"
    write_package(tmp_path / "repo", "escalate", ESCALATION)
    kfdef = {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": "escalate", "namespace": TENANT},
             "spec": {"repos": [{"name": "manifests", "uri": str(tmp_path / "repo")}],
                      "applications": [{"name": "escalate",
                                        "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "escalate"}}}]}}
    process = start_operator(plane, tmp_path, *scope, env=DEFAULT_SA_ENV)
    try:
        kubectl(plane, "create", "-f", "-", stdin=yaml.safe_dump(kfdef), kubeconfig=tenant)

        def outcome() -> tuple[str, object] | None:
            created = [f"{o['kind']} {o['metadata']['name']}" for o in ESCALATION if admin.exists(
                o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))]
            if created:
                return "applied", created
            refused = failures(admin, "escalate")
            return ("refused", refused) if len(refused) == len(ESCALATION) else None
        verdict, refused = wait_for(outcome, timeout=90, what="the tenant's stack applied or refused")
        assert verdict == "refused", f"the operator applied the tenant's {refused}"
        obj = wait_condition_reason(admin, "escalate", TENANT, "Degraded", "True", "ApplyFailed")
        for obj_id, message in refused.items():
            if "ClusterRoleBinding" in obj_id and scope:  # a namespace-scoped operator refuses it before asking
                assert "outside this operator's scope" in message, message
                continue
            assert 'User "system:serviceaccount:tenant-a:default" cannot' in message, message
            assert "grant it to ServiceAccount tenant-a/default (the operator's --default-service-account)" in message
        assert len(refused) == 3, refused
        assert rights(plane, tenant) == before, "the tenant gained rights"
        for question in (("create", "clusterrolebindings"), ("*", "*"), ("get", "secrets", "-n", "kube-system"),
                         ("create", "rolebindings", "-n", TENANT)):
            assert can_i(plane, tenant, *question) == "no", question
        assert condition(obj, "Ready")["status"] == "False"
        kubectl(plane, "delete", "kfdef", "escalate", "-n", TENANT, "--wait=false", kubeconfig=tenant)
        admin.wait_gone(KFDEF_API, "KfDef", "escalate", TENANT, timeout=60)
    finally:
        process.stop()
    reliability.figure("refused", len(refused))
    reliability.figure("tenant's rights", "unchanged (kubectl auth can-i --list)")


@pytest.mark.parametrize("question, expected", [
    ("impersonate serviceaccounts -n tenant-a", "yes"),
    ("impersonate groups", "no"),
    ("impersonate users", "no"),
    ("watch secrets --all-namespaces", "yes"),
    ("patch kfdefs.kfdef.apps.kubeflow.org --subresource=status -n tenant-a", "yes"),
    ("create clusterroles", "no"),
    ("escalate clusterroles", "no"),
    ("bind clusterroles", "no"),
    ("patch deployments.apps -n kube-system", "no"),
    ("delete namespaces", "no"),
], ids=lambda value: value if " " in value else None)
def test_the_multi_tenant_operator_writes_nothing_of_a_stack_as_itself(plane, multi_tenant, question, expected):
    """include/multi-tenant: the operator reads stack content, impersonates ServiceAccounts, and writes no stack"""
    assert multi_tenant == ["--default-service-account=default"]
    answer = can_i(plane, plane.kubeconfig_for(OPERATOR_USER), *question.split())
    assert answer == expected, question


def test_a_trusted_kfdef_still_deploys_a_whole_cluster_wide_stack(plane, admin, multi_tenant, tmp_path, reliability):
    """A KfDef naming a ServiceAccount bound to cluster-admin: CRDs, ClusterRoles, namespaces applied, healed, gone"""
    admin.create_namespace("platform")
    admin.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer",
                                                                            "namespace": "platform"}})
    admin.apply({"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": "platform-deployer"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                 "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "platform"}]})
    stack = make_stack(tmp_path)
    kfdef = stack.kfdef("platform", "platform")
    kfdef["spec"]["serviceAccountName"] = "deployer"
    process = start_operator(plane, tmp_path, *multi_tenant)
    try:
        admin.apply(kfdef)
        wait_ready(admin, "platform", "platform", timeout=120)
        for api_version, kind, name, namespace in (
                ("v1", "Namespace", stack.namespace, None),
                ("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"widgets.{stack.group}", None),
                (RBAC, "ClusterRole", f"widgets-{stack.suffix}", None),
                (RBAC, "ClusterRoleBinding", f"widgets-{stack.suffix}", None),
                ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", f"widgets-{stack.suffix}", None),
                ("apps/v1", "Deployment", "operator", stack.namespace),
                (f"{stack.group}/v1", "Widget", "sample", stack.namespace)):
            assert admin.exists(api_version, kind, name, namespace), (kind, name)
        old = admin.get(RBAC, "ClusterRole", f"widgets-{stack.suffix}")["metadata"]["uid"]
        admin.delete(RBAC, "ClusterRole", f"widgets-{stack.suffix}")
        wait_for(lambda: ((admin.get(RBAC, "ClusterRole", f"widgets-{stack.suffix}") or {}).get("metadata", {})
                          .get("uid") not in (None, old)), timeout=30, what="the ClusterRole healed")
        admin.delete(KFDEF_API, "KfDef", "platform", "platform")
        admin.wait_gone(KFDEF_API, "KfDef", "platform", "platform", timeout=180)
        assert not admin.exists(RBAC, "ClusterRole", f"widgets-{stack.suffix}")
        assert not admin.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"widgets.{stack.group}")
        assert "forbidden" not in process.log_tail(10_000).lower()
    finally:
        process.stop()
        admin.delete(RBAC, "ClusterRoleBinding", "platform-deployer")
        admin.delete_namespace("platform")
    reliability.figure("operator's own stack rights", "get, list, watch (include/multi-tenant)")


def test_a_kfdef_acts_only_as_an_existing_service_account_of_its_own_namespace(plane, admin, deploy_roles, tenant,
                                                                               tmp_path, reliability):
    """Missing, foreign and the operator's ServiceAccount refused, saying what to do; one gone at teardown: kept"""
    write_package(tmp_path / "repo", "app", [ESCALATION[2]])
    base = {"repos": [{"name": "manifests", "uri": str(tmp_path / "repo")}],
            "applications": [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "app"}}}]}
    named = {"missing": "deployer", "elsewhere": "kube-system:admin", "borrowed": "kfdef-operator"}
    process = start_operator(plane, tmp_path)  # no default: only the KfDefs' own spec.serviceAccountName counts
    try:
        for name, account in named.items():
            kubectl(plane, "create", "-f", "-", kubeconfig=tenant, stdin=yaml.safe_dump(
                {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": name, "namespace": TENANT},
                 "spec": {**base, "serviceAccountName": account}}))
        missing = wait_condition_reason(admin, "missing", TENANT, "Degraded", "True", "ServiceAccountNotFound")
        assert "ServiceAccount tenant-a/deployer (spec.serviceAccountName), which does not exist" in \
            condition(missing, "Degraded")["message"]
        borrowed = wait_condition_reason(admin, "borrowed", TENANT, "Degraded", "True", "ServiceAccountNotFound")
        assert "ServiceAccount tenant-a/kfdef-operator" in condition(borrowed, "Degraded")["message"]
        elsewhere = wait_condition_reason(admin, "elsewhere", TENANT, "Degraded", "True", "InvalidSpec")
        assert "own namespace" in condition(elsewhere, "Degraded")["message"]
        assert not admin.exists("v1", "ConfigMap", "innocent", TENANT)

        # An administrator creates the ServiceAccount and lets it manage ConfigMaps: the KfDef recovers by itself.
        admin.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer",
                                                                                "namespace": TENANT}})
        admin.apply({"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "configmaps", "namespace": TENANT},
                     "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]})
        admin.apply({"apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "deployer", "namespace": TENANT},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps"},
                     "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": TENANT}]})
        wait_ready(admin, "missing", TENANT, timeout=120)
        assert admin.exists("v1", "ConfigMap", "innocent", TENANT)

        # The ServiceAccount goes before the KfDef (as when a namespace is deleted): nothing may be deleted as
        # anyone else, so the operator deletes nothing and lets the KfDef go (Flux does the same); what the stack
        # created in its namespace names the KfDef as owner, so Kubernetes' garbage collector takes it, as the
        # event says.
        admin.delete("v1", "ServiceAccount", "deployer", TENANT)
        delete_kfdefs(admin)
        def events(reason: str) -> list[str]:
            return [e.message for e in admin.core.list_namespaced_event(
                TENANT, field_selector="involvedObject.name=missing").items if e.reason == reason]

        orphaned = wait_for(lambda: events("Orphaned"), timeout=30, what="the Orphaned event")
        assert any("tenant-a/deployer" in m and "garbage collector" in m and "ConfigMap tenant-a/innocent" in m
                   for m in orphaned), orphaned
        assert not events("Deleted"), "deleted as another identity"
        wait_for(lambda: not admin.exists("v1", "ConfigMap", "innocent", TENANT), timeout=60,
                 what="the garbage collector deleting the KfDef's dependent")
    finally:
        process.stop()
    reliability.figure("refusals", "ServiceAccountNotFound (missing; the operator's name), InvalidSpec (elsewhere)")
    reliability.figure("ServiceAccount gone at teardown",
                       "nothing deleted by the operator; dependents left to the garbage collector, Orphaned event")


OTHER_TENANT = "tenant-b"
SLOW_KFDEFS = 4  # as many as the operator's work threads (--work-threads 4, the default)


def configmap_kfdef(name: str, namespace: str, uri: str, path: str = "app") -> dict:
    return {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": name, "namespace": namespace},
            "spec": {"repos": [{"name": "manifests", "uri": uri}],
                     "applications": [{"name": "app",
                                       "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path}}}]}}


def let_default_write_configmaps(admin: Kube, namespace: str) -> None:
    """The namespace's ServiceAccount ``default`` (what include/multi-tenant's KfDefs act as) manages ConfigMaps."""
    admin.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}})
    admin.apply({"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "configmaps", "namespace": namespace},
                 "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]})
    admin.apply({"apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "configmaps", "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps"},
                 "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]})


def test_one_tenants_slow_and_hostile_kfdefs_do_not_hold_up_another_tenant(plane, admin, multi_tenant, tenant,
                                                                          tmp_path, reliability):
    """Slow and hostile KfDefs in tenant-a: tenant-b's one ConfigMap is Ready in seconds; a change or deletion stops
    a fetch at once"""
    server = TarballServer()
    write_package(tmp_path / "repo", "app", [{"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": "small"}, "data": {"k": "v"}}])
    (tmp_path / "repo" / "bomb").mkdir()
    (tmp_path / "repo" / "bomb" / "kustomization.yaml").write_text(laughs(10))
    routes = [server.serve(f"/slow-{i}.tar.gz", tarball(tmp_path / "repo"), mode="trickle")
              for i in range(SLOW_KFDEFS)]
    server.serve("/fast.tar.gz", tarball(tmp_path / "repo"))
    admin.create_namespace(OTHER_TENANT)
    let_default_write_configmaps(admin, TENANT)
    let_default_write_configmaps(admin, OTHER_TENANT)
    process = start_operator(plane, tmp_path, *multi_tenant, "--work-threads", str(SLOW_KFDEFS),
                             env={"KFDEF_FETCH_TIMEOUT": "600s"})
    try:
        for i in range(SLOW_KFDEFS):
            kubectl(plane, "create", "-f", "-", kubeconfig=tenant, stdin=yaml.safe_dump(
                configmap_kfdef(f"slow-{i}", TENANT, server.url(f"/slow-{i}.tar.gz"))))
        for i in range(2):
            kubectl(plane, "create", "-f", "-", kubeconfig=tenant, stdin=yaml.safe_dump(
                configmap_kfdef(f"bomb-{i}", TENANT, str(tmp_path / "repo"), path="bomb")))
        wait_for(lambda: all(r.hits for r in routes), timeout=60, what="every slow fetch started")

        created = time.monotonic()
        admin.apply(configmap_kfdef("small", OTHER_TENANT, str(tmp_path / "repo")))
        wait_ready(admin, "small", OTHER_TENANT, timeout=30)
        small_ready = time.monotonic() - created
        assert admin.exists("v1", "ConfigMap", "small", OTHER_TENANT)
        assert condition(admin.get(KFDEF_API, "KfDef", "slow-1", TENANT), "Ready")["reason"] == "FetchingSources"

        # A new generation: the fetch of the old one stops, the new one is fetched at once; the thread it held
        # serves tenant-a's bombs too, refused at once.
        changed = time.monotonic()
        admin.apply(configmap_kfdef("slow-0", TENANT, server.url("/fast.tar.gz")))
        wait_ready(admin, "slow-0", TENANT, timeout=30)
        new_generation_ready = time.monotonic() - changed
        for i in range(2):
            bomb = wait_condition_reason(admin, f"bomb-{i}", TENANT, "Degraded", "True", "RenderFailed", timeout=30)
            assert "its aliases stand for more than 100000 nodes" in condition(bomb, "Degraded")["message"]
        # Deleted: the fetches stop and the KfDefs are gone, without waiting for their 600 s deadline.
        deleted = time.monotonic()
        delete_kfdefs(admin)
        gone_after = time.monotonic() - deleted
        assert gone_after < 30, f"the deleted KfDefs took {gone_after:.0f} s to go"
        delete_kfdefs(admin, OTHER_TENANT)
    finally:
        process.stop()
        server.close()
        admin.delete_namespace(OTHER_TENANT)
    reliability.figure("s from tenant-b's KfDef created to Ready", round(small_ready, 1))
    reliability.figure("s from a slow KfDef's new generation to Ready", round(new_generation_ready, 1))
    reliability.figure("s from deleting tenant-a's KfDefs to gone", round(gone_after, 1))
    reliability.note(f"{SLOW_KFDEFS} KfDefs trickling 1 byte/s (KFDEF_FETCH_TIMEOUT=600s) and 2 billion-laughs "
                     f"kustomizations in tenant-a, --work-threads {SLOW_KFDEFS}, include/multi-tenant")
