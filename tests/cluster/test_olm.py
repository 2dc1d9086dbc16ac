"""The OperatorHub path, run for real: OLM v0.46.0 installs, upgrades and removes the operator.

On a control plane of this module's own (with an audit log), OLM's two controllers run as processes
(kfdef_dev/olm.py) and read the operator's catalog, made from ``olm-bundle/`` by ``tools/gen-olm-catalog.py``
and served by ``kfdef-olm-registry``. The README's OLM section is what runs: ``deploy/olm``'s CatalogSource
(with ``spec.address`` instead of a catalog image, since no image can be pulled here) and Subscription.

kwok only pretends to run pods, so the operator pods OLM's Deployment gets are run by tests/olm_pods.py as the
kubelet would: the container's args and environment, the identity of the ServiceAccount OLM created, nothing more.

The tests run in file order, as a user's day would go: every bundle manifest dry-run; the three namespaced install
modes side by side; AllNamespaces, where the demo stack is deployed and healed; the upgrade to the next release
through the channel; the uninstall OLM documents and the install again; the stack's teardown.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kfdef_dev.controlplane import ControlPlane
from kfdef_dev.olm import OPERATORS_NAMESPACE, CatalogServer, Olm, find_olm_dir
from kfdef_operator.api.names import LEASE_NAME
from tests.cluster.conftest import KFDEF_API, wait_ready
from tests.commands import ROOT, kfdef_operator, kubectl
from tests.kube import Kube, wait_for
from tests.kustomize_cli import cli_path
from tests.olm_pods import DeploymentPods

pytestmark = pytest.mark.cluster

BUNDLE = ROOT / "olm-bundle"
SAMPLE = ROOT / "kfdefs" / "demo" / "in-cluster.yaml"
OLM_API = "operators.coreos.com/v1alpha1"
PACKAGE = "kfdef-operator"
DEPLOYMENT = "kfdef-operator"
CRD = "kfdefs.kfdef.apps.kubeflow.org"
#: The lease the operator's replicas elect a leader on, and how long a dead leader holds it (the CLI's default).
LEASE_DURATION_S = 15.0
CSV_TIMEOUT_S = 90.0


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """With an audit log, and OLM's CRDs known to the garbage collector from the start (as on a cluster where OLM
    was installed before): OLM's Deployments are owned by ClusterServiceVersions."""
    with ControlPlane(audit=True, crds=(find_olm_dir() / "crds",)) as started:
        yield started


@pytest.fixture(scope="module")
def olm(plane: ControlPlane) -> Iterator[Olm]:
    running = Olm(plane)
    running.start()
    yield running
    running.stop()


def csv_name(version: str) -> str:
    return f"{PACKAGE}.v{version}"


def make_catalog(output: Path, *bundles: Path) -> Path:
    subprocess.run([sys.executable, ROOT / "tools" / "gen-olm-catalog.py", "--output", output, *bundles],
                   check=True, capture_output=True)
    return output


def deploy_olm(plane: ControlPlane) -> dict[str, dict]:
    """``kustomize build deploy/olm``, by kind."""
    done = subprocess.run([cli_path(), "build", ROOT / "deploy" / "olm"], capture_output=True, text=True, check=True)
    return {doc["kind"]: doc for doc in yaml.safe_load_all(done.stdout)}


@pytest.fixture(scope="module")
def catalog(plane: ControlPlane, admin: Kube, olm: Olm, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[CatalogServer]:
    """The catalog of the committed bundle (0.1.0), served on loopback, and the README's CatalogSource naming it."""
    server = CatalogServer(olm.olm_dir, tmp_path_factory.mktemp("registry"))
    server.publish(make_catalog(tmp_path_factory.mktemp("catalog-0.1.0"), BUNDLE))
    source = deploy_olm(plane)["CatalogSource"]
    for served_from_an_image in ("image", "grpcPodConfig", "updateStrategy"):
        del source["spec"][served_from_an_image]
    source["spec"]["address"] = server.address
    admin.apply(source)
    wait_for(lambda: ((admin.get(OLM_API, "CatalogSource", source["metadata"]["name"], "olm") or {}).get("status")
                      or {}).get("connectionState", {}).get("lastObservedState") == "READY",
             timeout=60, what="the CatalogSource to be READY")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def next_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle of release 0.2.0, upgrading 0.1.0, made from this same tree."""
    output = tmp_path_factory.mktemp("bundle-0.2.0")
    subprocess.run([sys.executable, ROOT / "tools" / "gen-olm-bundle.py", "--output", output, "--kustomize",
                    cli_path(), "--version", "0.2.0", "--replaces", "0.1.0"], check=True, capture_output=True)
    return output


def subscription(namespace: str, source: str = "kfdef-operator-catalog") -> dict:
    """The README's Subscription, in ``namespace``."""
    return {"apiVersion": OLM_API, "kind": "Subscription", "metadata": {"name": PACKAGE, "namespace": namespace},
            "spec": {"name": PACKAGE, "channel": "alpha", "source": source, "sourceNamespace": "olm",
                     "installPlanApproval": "Automatic"}}


def operator_group(namespace: str, targets: list[str]) -> dict:
    return {"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
            "metadata": {"name": "kfdef-operator", "namespace": namespace}, "spec": {"targetNamespaces": targets}}


def installed(admin: Kube, namespace: str, name: str, last: dict) -> dict | None:
    """The CSV ``name`` if it has Succeeded and the Subscription is done installing it; what the CSV, the
    Subscription and its InstallPlan say, in ``last``."""
    last["csv"] = admin.get(OLM_API, "ClusterServiceVersion", name, namespace) or {}
    last["subscription"] = (admin.get(OLM_API, "Subscription", PACKAGE, namespace) or {}).get("status") or {}
    plan = (last["subscription"].get("installPlanRef") or {}).get("name")
    last["plan"] = ((admin.get(OLM_API, "InstallPlan", plan, namespace) if plan else None) or {}).get("status")
    done = last["subscription"].get("installedCSV") == name and last["subscription"].get("state") == \
        "AtLatestKnown" and (last["plan"] or {}).get("phase") == "Complete" and \
        (last["csv"].get("status") or {}).get("phase") == "Succeeded"
    return last["csv"] if done else None


def wait_installed(admin: Kube, namespace: str, name: str, olm: Olm) -> dict:
    """The CSV ``name`` once it has Succeeded and the Subscription is done installing it (its InstallPlan
    complete: until then, catalog-operator may create the CSV again); on a timeout, what they said last."""
    last: dict = {}
    try:
        return wait_for(lambda: installed(admin, namespace, name, last), timeout=CSV_TIMEOUT_S,
                        what=f"CSV {namespace}/{name} installed")
    except AssertionError as error:
        raise AssertionError(f"{error}; the CSV's status: {last['csv'].get('status')}; the Subscription's: "
                             f"{last['subscription']}; its InstallPlan's: {last.get('plan')}\n{olm.log_tails()}"
                             ) from None


def can_i(plane: ControlPlane, namespace: str, service_account: str, verb: str, resource: str, where: str) -> bool:
    """kubectl auth can-i, as the ServiceAccount."""
    scope = ["--all-namespaces"] if where == "*" else ["-n", where]
    done = kubectl(plane.bin_dir, plane.kubeconfig, "auth", "can-i", verb, resource, *scope,
                   f"--as=system:serviceaccount:{namespace}:{service_account}", check=False)
    return done.stdout.strip() == "yes"


# --- the audit log: what the operator wrote -----------------------------------------------------------------------

@dataclass(frozen=True)
class Write:
    resource: str
    subresource: str
    namespace: str
    name: str
    verb: str
    code: int
    at: str  # when kube-apiserver received it


def operator_writes(plane: ControlPlane, install_namespace: str, since: float) -> list[Write]:
    """Every write the operator's ServiceAccount sent since ``since`` (its own identity or impersonating a stack's),
    its Lease and dry runs aside."""
    user = f"system:serviceaccount:{install_namespace}:{DEPLOYMENT}"
    found = []
    for event in plane.audit_events():
        ref = event.get("objectRef") or {}
        at = datetime.datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
        if (at < since or event["user"]["username"] != user or event["verb"] in ("get", "list", "watch")
                or ref.get("resource") == "leases" or "dryRun=" in event.get("requestURI", "")):
            continue
        found.append(Write(ref.get("resource", ""), ref.get("subresource", ""), ref.get("namespace", ""),
                           ref.get("name", ""), event["verb"], int((event.get("responseStatus") or {}).get("code", 0)),
                           event["requestReceivedTimestamp"]))
    return found


def stack_writes(writes: list[Write]) -> list[Write]:
    """The writes to a stack's objects: not to KfDefs, Events or the operator's Lease."""
    return [w for w in writes if w.resource not in ("kfdefs", "events")]


def leader(admin: Kube, namespace: str) -> str:
    """The pod holding the operator's Lease ('' when none does)."""
    spec = (admin.get("coordination.k8s.io/v1", "Lease", LEASE_NAME, namespace) or {}).get("spec") or {}
    return (spec.get("holderIdentity") or "").rsplit("_", 1)[0]


def settled(pods: DeploymentPods, admin: Kube, namespace: str, kfdefs: int) -> bool:
    """The leader runs here and has reconciled every KfDef at least once since it started."""
    process = pods.running.get(leader(admin, namespace))
    done = process.process.metrics().get('kfdef_reconcile_duration_seconds_count{result="success"}', 0) if process \
        else 0
    return done >= kfdefs


# --- 1. the bundle is what the CSV schema accepts ------------------------------------------------------------------

def test_every_bundle_manifest_passes_a_server_side_dry_run_with_olm_crds(plane: ControlPlane, olm: Olm) -> None:
    for path in sorted((BUNDLE / "manifests").glob("*.yaml")):
        manifest = yaml.safe_load(path.read_text())
        manifest["metadata"].pop("namespace", None)  # the CSV's placeholder: OLM installs into its own namespace
        done = kubectl(plane.bin_dir, plane.kubeconfig, "apply", "--server-side", "--dry-run=server",
                       "-n", OPERATORS_NAMESPACE, "-f", "-", stdin=json.dumps(manifest), check=False)
        assert done.returncode == 0, f"{path.name}: {done.stderr}"


# --- 2. the namespaced install modes -------------------------------------------------------------------------------

#: Each namespaced mode: the namespace it is installed in, and the namespaces its OperatorGroup targets.
NAMESPACED_MODES = {
    "OwnNamespace": ("own", ["own"]),
    "SingleNamespace": ("single", ["single-target"]),
    "MultiNamespace": ("multi", ["multi-a", "multi-b"]),
}


@pytest.fixture(scope="module")
def namespaced_installs(plane: ControlPlane, admin: Kube, olm: Olm, catalog: CatalogServer) -> dict[str, dict]:
    """OwnNamespace, SingleNamespace and MultiNamespace installed side by side (their target namespaces do not
    meet): an OperatorGroup and the README's Subscription in each install namespace. Their CSVs by mode."""
    for install, targets in NAMESPACED_MODES.values():
        for namespace in {install, *targets}:
            admin.create_namespace(namespace)
        admin.apply(operator_group(install, targets))
        admin.apply(subscription(install))
    return {mode: wait_installed(admin, install, csv_name("0.1.0"), olm)
            for mode, (install, _) in NAMESPACED_MODES.items()}


@pytest.mark.parametrize("mode", NAMESPACED_MODES)
def test_a_namespaced_install_mode_gets_its_deployment_and_rbac_in_its_namespaces_only(
        plane: ControlPlane, admin: Kube, namespaced_installs: dict[str, dict], mode: str) -> None:
    install, targets = NAMESPACED_MODES[mode]
    deployment = admin.wait_condition("apps/v1", "Deployment", DEPLOYMENT, "Available", namespace=install)
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"]["olm.targetNamespaces"] == ",".join(targets)
    env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
    assert env["WATCH_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['olm.targetNamespaces']"
    assert template["spec"]["serviceAccountName"] == DEPLOYMENT
    assert admin.exists("v1", "ServiceAccount", DEPLOYMENT, install)
    for namespace in targets:  # OLM grants the CSV's permissions in every target namespace...
        assert can_i(plane, install, DEPLOYMENT, "patch", "kfdefs.kfdef.apps.kubeflow.org/status", namespace)
        assert can_i(plane, install, DEPLOYMENT, "impersonate", "serviceaccounts", namespace)
    assert can_i(plane, install, DEPLOYMENT, "update", "leases.coordination.k8s.io", install)  # ...its own Lease
    # ...and nothing elsewhere, nor cluster-wide.
    assert not can_i(plane, install, DEPLOYMENT, "get", "kfdefs.kfdef.apps.kubeflow.org", "default")
    assert not can_i(plane, install, DEPLOYMENT, "list", "kfdefs.kfdef.apps.kubeflow.org", "*")


def tenant_service_account(plane: ControlPlane, namespace: str, name: str, cluster_role: str, *,
                           cluster_wide: bool) -> None:
    """What docs/security.md has an administrator run for a stack's ServiceAccount."""
    run = lambda *args: kubectl(plane.bin_dir, plane.kubeconfig, *args)  # noqa: E731
    run("-n", namespace, "create", "serviceaccount", name)
    if cluster_wide:
        run("create", "clusterrolebinding", name, f"--clusterrole={cluster_role}",
            f"--serviceaccount={namespace}:{name}")
    else:
        run("-n", namespace, "create", "rolebinding", name, f"--clusterrole={cluster_role}",
            f"--serviceaccount={namespace}:{name}")


def demo_kfdef(namespace: str, service_account: str) -> dict:
    """The bundle's example (kfdefs/demo/in-cluster.yaml) in ``namespace``, applied as ``service_account``."""
    kfdef = yaml.safe_load(SAMPLE.read_text())
    kfdef["metadata"]["namespace"] = namespace
    kfdef["spec"]["serviceAccountName"] = service_account
    return kfdef


def test_run_as_olm_runs_it_in_a_single_namespace_the_operator_names_what_its_scope_refuses(
        plane: ControlPlane, admin: Kube, namespaced_installs: dict[str, dict], tmp_path: Path) -> None:
    install, (target,) = NAMESPACED_MODES["SingleNamespace"]
    tenant_service_account(plane, target, "kfdef-deployer", "admin", cluster_wide=False)
    with DeploymentPods(plane, admin, install, DEPLOYMENT, tmp_path) as pods:
        admin.apply(demo_kfdef(target, "kfdef-deployer"))

        def refusals() -> dict | None:
            status = (admin.get(KFDEF_API, "KfDef", "demo", target) or {}).get("status") or {}
            return status if (status.get("summary") or {}).get("failed") and \
                admin.exists("apps/v1", "Deployment", "tf-job-operator", target) else None
        status = wait_for(refusals, timeout=90, what="the demo's namespaced objects applied, the others refused")
        out_of_scope = {f["object"] for f in status["failures"] if "outside this operator's scope" in f["message"]}
        assert {"Namespace kubeflow", "CustomResourceDefinition.apiextensions.k8s.io tfjobs.kubeflow.org",
                "ClusterRole.rbac.authorization.k8s.io tf-job-operator"} <= out_of_scope, status["failures"]
        assert not admin.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", "tfjobs.kubeflow.org")
        assert len(pods.running) == 2 and not pods.errors
        process = next(iter(pods.running.values())).process
        assert "forbidden" not in process.log_tail(10_000).lower()

        admin.delete(KFDEF_API, "KfDef", "demo", target)
        admin.wait_gone(KFDEF_API, "KfDef", "demo", target, timeout=60)
    assert not admin.exists("apps/v1", "Deployment", "tf-job-operator", target)


def uninstall(plane: ControlPlane, namespace: str) -> None:
    """What OLM's documentation says, as the README writes it: the Subscription's current CSV and InstallPlans
    read, the Subscription deleted, then that CSV by name, then its InstallPlans waited on until the garbage
    collector has removed them (a Subscription created again before that can be handed one of them by
    catalog-operator, and stalls with InstallPlanMissing once it is collected)."""
    csv = kubectl(plane.bin_dir, plane.kubeconfig, "-n", namespace, "get", "subscription", PACKAGE, "-o",
                  "jsonpath={.status.currentCSV}").stdout.strip()
    assert csv.startswith(f"{PACKAGE}.v"), csv
    plans = kubectl(plane.bin_dir, plane.kubeconfig, "-n", namespace, "get", "installplan", "-o",
                    "jsonpath={range .items[?(@.metadata.ownerReferences[0].name==\"" + PACKAGE + "\")]}"
                    "installplan/{.metadata.name} {end}").stdout.split()
    assert plans, "the Subscription's InstallPlans not found"
    kubectl(plane.bin_dir, plane.kubeconfig, "-n", namespace, "delete", "subscription", PACKAGE)
    done = kubectl(plane.bin_dir, plane.kubeconfig, "-n", namespace, "delete", "csv", csv)
    assert "deleted" in done.stdout, done.stdout
    kubectl(plane.bin_dir, plane.kubeconfig, "-n", namespace, "wait", "--for=delete", *plans, "--timeout=2m")


def test_the_namespaced_installs_uninstall_as_olm_documents(plane: ControlPlane, admin: Kube,
                                                            namespaced_installs: dict[str, dict]) -> None:
    for install, _ in NAMESPACED_MODES.values():
        uninstall(plane, install)
    for install, _ in NAMESPACED_MODES.values():
        admin.wait_gone("apps/v1", "Deployment", DEPLOYMENT, install, timeout=60)
        admin.delete("operators.coreos.com/v1", "OperatorGroup", "kfdef-operator", install)
    assert admin.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD)  # the CRD stays


# --- 3. AllNamespaces: the demo deployed, healed, upgraded, uninstalled, installed again, torn down ----------------

@dataclass
class Installed:
    pods: DeploymentPods
    csv: dict


@pytest.fixture(scope="module")
def all_namespaces(plane: ControlPlane, admin: Kube, olm: Olm, catalog: CatalogServer,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """The README's Subscription in ``operators`` (whose OperatorGroup targets all namespaces), and the pods of
    the Deployment OLM makes run as the kubelet would run them."""
    for namespace, _ in NAMESPACED_MODES.values():  # after the namespaced installs, if they ran
        wait_for(lambda: not admin.exists("operators.coreos.com/v1", "OperatorGroup", "kfdef-operator", namespace),
                 what="the namespaced OperatorGroups gone")
    admin.apply(deploy_olm(plane)["Subscription"])
    csv = wait_installed(admin, OPERATORS_NAMESPACE, csv_name("0.1.0"), olm)
    with DeploymentPods(plane, admin, OPERATORS_NAMESPACE, DEPLOYMENT, tmp_path_factory.mktemp("pods")) as pods:
        yield Installed(pods, csv)


@pytest.fixture(scope="module")
def demo(plane: ControlPlane, admin: Kube, all_namespaces: Installed) -> dict:
    """The demo stack in ``kubeflow``, applied as a ServiceAccount bound to cluster-admin (docs/security.md)."""
    admin.create_namespace("kubeflow")
    tenant_service_account(plane, "kubeflow", "kubeflow-deployer", "cluster-admin", cluster_wide=True)
    admin.apply(demo_kfdef("kubeflow", "kubeflow-deployer"))
    return wait_ready(admin, "demo", "kubeflow", timeout=120)


def test_all_namespaces_mode_grants_the_csv_permissions_cluster_wide(plane: ControlPlane, admin: Kube,
                                                                     all_namespaces: Installed) -> None:
    deployment = admin.wait_condition("apps/v1", "Deployment", DEPLOYMENT, "Available", namespace=OPERATORS_NAMESPACE)
    assert deployment["spec"]["template"]["metadata"]["annotations"]["olm.targetNamespaces"] == ""
    for verb, resource in (("list", "kfdefs.kfdef.apps.kubeflow.org"), ("patch", "kfdefs.kfdef.apps.kubeflow.org"),
                           ("impersonate", "serviceaccounts"), ("watch", "deployments.apps")):
        assert can_i(plane, OPERATORS_NAMESPACE, DEPLOYMENT, verb, resource, "*"), (verb, resource)
    # The multi-tenant bundle: the operator writes no stack content as itself.
    assert not can_i(plane, OPERATORS_NAMESPACE, DEPLOYMENT, "create", "deployments.apps", "*")
    assert not can_i(plane, OPERATORS_NAMESPACE, DEPLOYMENT, "impersonate", "users", "*")


def test_the_bundle_example_passes_a_dry_run_against_the_kfdef_crd(plane: ControlPlane,
                                                                   all_namespaces: Installed) -> None:
    examples = json.loads(all_namespaces.csv["metadata"]["annotations"]["alm-examples"])
    assert examples
    for example in examples:
        example["metadata"].pop("namespace", None)  # the CRD's schema is the question, not the namespace
        done = kubectl(plane.bin_dir, plane.kubeconfig, "create", "--dry-run=server", "-n", "default", "-f", "-",
                       stdin=json.dumps(example), check=False)
        assert done.returncode == 0, done.stderr


def test_run_as_olm_runs_it_the_operator_deploys_and_heals_the_demo(admin: Kube, all_namespaces: Installed,
                                                                    demo: dict) -> None:
    assert demo["status"]["summary"]["ready"] == demo["status"]["summary"]["total"] == 10
    assert len(all_namespaces.pods.running) == 2 and not all_namespaces.pods.errors
    before = admin.get("apps/v1", "Deployment", "tf-job-operator", "kubeflow")
    admin.delete("apps/v1", "Deployment", "tf-job-operator", "kubeflow")
    wait_for(lambda: (admin.get("apps/v1", "Deployment", "tf-job-operator", "kubeflow") or {}).get(
        "metadata", {}).get("uid") not in (None, before["metadata"]["uid"]), timeout=30, what="the heal")
    for process in all_namespaces.pods.running.values():
        assert "forbidden" not in process.process.log_tail(10_000).lower(), process.process.log_tail(40)


def test_an_upgrade_through_the_channel_takes_over_with_no_write_and_no_healing_gap_past_the_lease(
        plane: ControlPlane, admin: Kube, olm: Olm, catalog: CatalogServer, next_release: Path,
        all_namespaces: Installed, demo: dict, tmp_path: Path) -> None:
    pods = all_namespaces.pods
    wait_for(lambda: settled(pods, admin, OPERATORS_NAMESPACE, 1), what="the 0.1.0 leader settled")
    old_pods, old_leader = set(pods.running), leader(admin, OPERATORS_NAMESPACE)
    since = time.time()
    catalog.publish(make_catalog(tmp_path / "catalog", BUNDLE, next_release))  # the release reaches the catalog

    # The worst moment for a heal: the leader is gone. A Deployment of the stack deleted then must come back
    # within the lease's duration.
    wait_for(lambda: ("stopped", old_leader) in pods.history, timeout=CSV_TIMEOUT_S, what="the old leader stopped")
    gone = admin.get("apps/v1", "Deployment", "tf-job-operator", "kubeflow")
    deleted_at = time.monotonic()
    admin.delete("apps/v1", "Deployment", "tf-job-operator", "kubeflow")
    wait_for(lambda: (admin.get("apps/v1", "Deployment", "tf-job-operator", "kubeflow") or {}).get(
        "metadata", {}).get("uid") not in (None, gone["metadata"]["uid"]), timeout=LEASE_DURATION_S + 30,
        what="the heal during the handover", max_delay=0.05)
    gap = time.monotonic() - deleted_at
    print(f"heal while the 0.1.0 leader was gone: {gap:.2f} s")  # the figure, for the issue's note (-s)
    assert gap < LEASE_DURATION_S, f"a heal during the upgrade took {gap:.1f} s, more than the lease"

    new = wait_installed(admin, OPERATORS_NAMESPACE, csv_name("0.2.0"), olm)
    assert new["spec"]["replaces"] == csv_name("0.1.0")
    admin.wait_gone(OLM_API, "ClusterServiceVersion", csv_name("0.1.0"), OPERATORS_NAMESPACE, timeout=60)
    image = admin.get("apps/v1", "Deployment", DEPLOYMENT, OPERATORS_NAMESPACE)["spec"]["template"]["spec"][
        "containers"][0]["image"]
    assert image.endswith(":0.2.0")
    wait_for(lambda: not old_pods & set(pods.running) and len(pods.running) == 2, timeout=60,
             what="only the 0.2.0 pods running")
    wait_for(lambda: settled(pods, admin, OPERATORS_NAMESPACE, 1), timeout=60, what="the 0.2.0 leader settled")
    # Nothing of the stack written but the one object deleted on purpose, which was created once.
    writes = stack_writes(operator_writes(plane, OPERATORS_NAMESPACE, since))
    others = [w for w in writes if (w.resource, w.namespace, w.name) != ("deployments", "kubeflow", "tf-job-operator")]
    assert others == [], others


def stalled(subscription_status: dict) -> str | None:
    """What keeps a Subscription created again from installing, if OLM's caches let the previous one's work in
    (seen in about half the runs, loaded or not): a CSV installed once more for the deleted Subscription, which the
    new one cannot adopt ("... exists and is not referenced by a subscription"), or the previous one's
    InstallPlan handed to the new one and then collected (InstallPlanMissing)."""
    for condition in subscription_status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "ResolutionFailed" and \
                "exists and is not referenced by a subscription" in condition.get("message", ""):
            return condition["message"]
        if condition.get("type") == "InstallPlanMissing":
            return f"InstallPlanMissing: {condition.get('reason')}"
    return None


def subscribe_again(plane: ControlPlane, admin: Kube, olm: Olm, subscription: dict, csv: str) -> list[str]:
    """``subscription`` created again after an uninstall, until its CSV ``csv`` is installed; what stalled it.

    A stalled Subscription (:func:`stalled`) is deleted with the CSV it is stuck on and created again, as OLM's
    troubleshooting guide and the README say: twice at most."""
    namespace = subscription["metadata"]["namespace"]
    stalls: list[str] = []
    for _ in range(3):
        admin.apply(subscription)
        last: dict = {}

        def installed_or_stalled() -> str | None:
            if installed(admin, namespace, csv, last):
                return "installed"
            return stalled(last["subscription"])
        try:
            outcome = wait_for(installed_or_stalled, timeout=CSV_TIMEOUT_S, what=f"CSV {namespace}/{csv} installed")
        except AssertionError:
            break  # wait_installed says what OLM said last
        if outcome == "installed" or len(stalls) == 2:
            break
        stalls.append(outcome)
        kubectl(plane.bin_dir, plane.kubeconfig, "-n", namespace, "delete", "subscription", PACKAGE)
        kubectl(plane.bin_dir, plane.kubeconfig, "-n", namespace, "delete", "csv", csv, "--ignore-not-found")
    wait_installed(admin, namespace, csv, olm)
    return stalls


def test_uninstall_as_olm_documents_leaves_the_stacks_and_the_crd_and_installing_again_writes_nothing(
        plane: ControlPlane, admin: Kube, olm: Olm, all_namespaces: Installed, demo: dict) -> None:
    pods = all_namespaces.pods
    # The stack as the upgrade left it, once its leader has said so: the Deployment healed during the upgrade
    # available and the KfDef Ready for it (the status refresh that follows is the leader's last write).
    admin.wait_condition("apps/v1", "Deployment", "tf-job-operator", "Available", namespace="kubeflow")
    before = admin.wait_condition(KFDEF_API, "KfDef", "demo", "Ready", namespace="kubeflow")
    ready_since = datetime.datetime.fromisoformat(admin.condition(before, "Ready")["lastTransitionTime"])
    wait_for(lambda: any(e.reason == "Ready" and (e.last_timestamp or e.event_time) >= ready_since
                         for e in admin.core.list_namespaced_event(
                             "kubeflow", field_selector="involvedObject.name=demo").items),
             timeout=30, what="the Ready Event posted after the status patch")
    since = time.time()
    uninstall(plane, OPERATORS_NAMESPACE)
    admin.wait_gone("apps/v1", "Deployment", DEPLOYMENT, OPERATORS_NAMESPACE, timeout=60)
    wait_for(lambda: not pods.running, timeout=60, what="the operator's pods gone")
    after = admin.get(KFDEF_API, "KfDef", "demo", "kubeflow")
    assert after["metadata"].get("deletionTimestamp") is None and after["metadata"]["finalizers"] == \
        before["metadata"]["finalizers"]
    assert admin.exists("apps/v1", "Deployment", "tf-job-operator", "kubeflow")
    assert admin.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", "tfjobs.kubeflow.org")
    assert admin.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD)

    stalls = subscribe_again(plane, admin, olm, deploy_olm(plane)["Subscription"], csv_name("0.2.0"))  # its head
    print(f"the Subscription created again stalled {len(stalls)} time(s) in OLM: {stalls}")  # for the issue's note
    wait_for(lambda: settled(pods, admin, OPERATORS_NAMESPACE, 1), timeout=90, what="the reinstalled leader settled")
    writes = operator_writes(plane, OPERATORS_NAMESPACE, since)
    now = admin.get(KFDEF_API, "KfDef", "demo", "kubeflow")
    assert writes == [], f"{writes}; the KfDef's status before: {before['status']}; now: {now['status']}"
    assert now["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]


def test_the_readme_removes_the_stacks_then_the_operator_then_the_crd(plane: ControlPlane, admin: Kube,
                                                                      all_namespaces: Installed, demo: dict) -> None:
    done = kfdef_operator("uninstall", "--yes", kubeconfig=plane.kubeconfig, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "managed by OLM: left to OLM" in done.stdout, done.stdout
    assert not admin.exists(KFDEF_API, "KfDef", "demo", "kubeflow")
    assert not admin.exists("apps/v1", "Deployment", "tf-job-operator", "kubeflow")  # torn down by the operator
    assert not admin.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", "tfjobs.kubeflow.org")
    assert admin.exists("apps/v1", "Deployment", DEPLOYMENT, OPERATORS_NAMESPACE)  # the operator: OLM's to remove

    uninstall(plane, OPERATORS_NAMESPACE)
    admin.wait_gone("apps/v1", "Deployment", DEPLOYMENT, OPERATORS_NAMESPACE, timeout=60)
    wait_for(lambda: not all_namespaces.pods.running, timeout=60, what="the operator's pods gone")
    # OLM deletes the ServiceAccount as the pods shut down: whatever that cuts short is said as what it is.
    for log in all_namespaces.pods.work_dir.glob("*/operator.log"):
        assert "a bug in kfdef-operator" not in log.read_text(), log
    kubectl(plane.bin_dir, plane.kubeconfig, "delete", "crd", CRD)
    admin.wait_gone("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD, timeout=60)
