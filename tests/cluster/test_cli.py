"""The command line against the real control plane, typed as a user types it: ``kfdef-operator diff``, ``run``
with credentials the server refuses, ``build`` as strict as kube-apiserver, and a KfDef's status read with
``kubectl get`` and ``kubectl describe``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kfdef_dev.controlplane import OPERATOR_USER
from tests.cluster.conftest import KFDEF_API, wait_ready
from tests.commands import kfdef_operator, kubectl
from tests.kube import wait_for
from tests.stacks import deployment, write_package

pytestmark = pytest.mark.cluster


def write(path: Path, obj: dict) -> Path:
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return path


def replicas(stack, count: int) -> None:
    """Edit the stack's repo on disk: the Deployment ``operator`` with ``count`` replicas."""
    (file,) = (stack.root / "app" / "base").glob("*-deployment.yaml")
    file.write_text(yaml.safe_dump(deployment("operator", stack.namespace, replicas=count), sort_keys=False))


def test_diff_shows_creations_then_nothing_then_field_changes_and_prunes(operator, control_plane, kube,
                                                                         kfdef_namespace, new_stack, tmp_path):
    stack = new_stack(with_webhook=False)
    # Rendered into the KfDef's namespace: kfctl's legacy rendering gives it the KfDef's.
    write_package(stack.root, "extra", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra"}}])
    extra = {"name": "extra", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "extra"}}}
    obj = stack.kfdef("diffed", kfdef_namespace, applications=[*stack.applications, extra])
    path = write(tmp_path / "kfdef.yaml", obj)

    # kfdef-operator diff kfdef.yaml, before the KfDef exists: everything would be created.
    done = kfdef_operator("diff", str(path), kubeconfig=control_plane.kubeconfig)
    assert done.returncode == 1, done.stderr
    assert f"+ Namespace {stack.namespace} created\n" in done.stdout
    assert (f"+ Deployment.apps {stack.namespace}/operator created: not checked by the API server: its namespace is "
            "created by this set\n") in done.stdout
    assert f"+ Widget.{stack.group} {stack.namespace}/sample created: not checked by the API server" in done.stdout
    assert f"KfDef {kfdef_namespace}/diffed does not exist" in done.stderr and "differences found" in done.stderr

    kube.apply(obj)
    wait_ready(kube, "diffed", kfdef_namespace)
    done = kfdef_operator("diff", str(path), kubeconfig=control_plane.kubeconfig)
    assert (done.returncode, done.stdout) == (0, ""), done.stdout + done.stderr
    assert "no differences" in done.stderr

    # The file changes: one more replica, the extra application dropped.
    replicas(stack, 2)
    write(path, stack.kfdef("diffed", kfdef_namespace))
    done = kfdef_operator("diff", str(path), kubeconfig=control_plane.kubeconfig)
    assert done.returncode == 1, done.stderr
    assert (f"~ Deployment.apps {stack.namespace}/operator configured\n"
            "    spec.replicas: 1 -> 2\n") in done.stdout
    assert f"- ConfigMap {kfdef_namespace}/extra pruned (deleted: no longer rendered)" in done.stdout
    assert done.stdout.count("\n~ ") + done.stdout.startswith("~ ") == 1, done.stdout  # nothing else changes
    # Nothing was written: the diff only dry-ran.
    assert kube.get("apps/v1", "Deployment", "operator", stack.namespace)["spec"]["replicas"] == 1
    assert kube.exists("v1", "ConfigMap", "extra", kfdef_namespace)


def test_diff_shows_conflicts_adoptions_and_drift_as_the_operator_sees_them(operator, control_plane, kube,
                                                                            kfdef_namespace, new_stack, tmp_path):
    stack = new_stack(with_webhook=False)
    kube.apply(stack.kfdef("owner", kfdef_namespace))
    wait_ready(kube, "owner", kfdef_namespace)

    # Another KfDef rendering the same stack: every object is the first one's.
    other = write(tmp_path / "other.yaml", stack.kfdef("other", kfdef_namespace))
    done = kfdef_operator("diff", str(other), kubeconfig=control_plane.kubeconfig)
    assert done.returncode == 1
    assert (f"! Deployment.apps {stack.namespace}/operator conflict: already managed by KfDef "
            f"{kfdef_namespace}/owner; not applied") in done.stdout

    # An object that exists without an owner is adopted; the diff shows the stamps the operator would add.
    kubectl(control_plane.bin_dir, control_plane.kubeconfig, "create", "configmap", "loose", "-n", kfdef_namespace)
    write_package(stack.root, "loose", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "loose"}}])
    loose = {"name": "loose", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "loose"}}}
    owner_file = write(tmp_path / "owner.yaml", stack.kfdef("owner", kfdef_namespace,
                                                            applications=[*stack.applications, loose]))
    done = kfdef_operator("diff", str(owner_file), kubeconfig=control_plane.kubeconfig)
    assert done.returncode == 1
    assert f"~ ConfigMap {kfdef_namespace}/loose adopted" in done.stdout
    stamp = f'metadata.labels: (absent) -> {{"kfdef.apps.kubeflow.org/instance": "{kfdef_namespace}.owner"}}'
    assert stamp in done.stdout
    assert '"kfdef.apps.kubeflow.org/adopted": "true"' in done.stdout

    # Drift: with the KfDef suspended nothing heals it, and the diff says the operator would re-assert it.
    kube.apply({"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {
        "name": "owner", "namespace": kfdef_namespace, "annotations": {"kfdef.apps.kubeflow.org/suspend": "true"}}},
        manager="suspender")
    wait_for(lambda: (kube.condition(kube.get(KFDEF_API, "KfDef", "owner", kfdef_namespace), "Reconciling") or {})
             .get("reason") == "Suspended", what="the KfDef suspended")
    kubectl(control_plane.bin_dir, control_plane.kubeconfig, "scale", "deployment", "operator", "-n", stack.namespace,
            "--replicas=3")
    done = kfdef_operator("diff", str(write(tmp_path / "owner.yaml", stack.kfdef("owner", kfdef_namespace))),
                          kubeconfig=control_plane.kubeconfig)
    assert done.returncode == 1
    assert (f"~ Deployment.apps {stack.namespace}/operator configured (drifted from what the operator applied: it "
            "re-asserts these fields)\n    spec.replicas: 3 -> 1\n") in done.stdout


def test_diff_of_an_invalid_file_or_an_unreachable_cluster_is_one_line(control_plane, tmp_path):
    bad = write(tmp_path / "bad.yaml", {"apiVersion": KFDEF_API, "kind": "KfDef",
                                        "metadata": {"name": "x", "namespace": "y"}, "spec": {"aplications": []}})
    done = kfdef_operator("diff", str(bad), kubeconfig=control_plane.kubeconfig)
    assert done.returncode == 2 and 'unknown field "spec.aplications"' in done.stderr
    good = Path(__file__).parents[2] / "kfdefs" / "demo" / "kfdef.yaml"
    done = kfdef_operator("diff", str(good), kubeconfig=tmp_path / "missing")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "does not exist" in done.stderr


def test_run_with_credentials_the_server_refuses_exits_with_one_line(control_plane, kfdef_crd, tmp_path):
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": "not-a-valid-token"}
    wrong = write(tmp_path / "wrong-token.kubeconfig", config)
    done = kfdef_operator("run", "--kubeconfig", str(wrong), "--server-address", "", timeout=90)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "refused the credentials" in done.stderr and "401" in done.stderr

    # A valid identity without the operator's ClusterRole: it may not list KfDefs.
    unbound = control_plane.kubeconfig_for(OPERATOR_USER)
    done = kfdef_operator("run", "--kubeconfig", str(unbound), "--server-address", "", timeout=90)
    assert done.returncode == 1, done.stderr
    assert "not allowed to list KfDefs" in done.stderr and "kfdef-operator" in done.stderr


CASES_THE_SERVER_REFUSES = {
    "a typo": {"aplications": []},
    "a misspelt overlays": {"applications": [{"name": "a", "kustomizeConfig": {
        "repoRef": {"name": "m", "path": "p"}, "overlay": ["x"]}}], "repos": [{"name": "m", "uri": "/m"}]},
    "an unknown repo field and a number for a string": {
        "applications": [], "repos": [{"name": "m", "uri": 3, "branch": "main"}]},
    "no applications": {"repos": []},
    "a bad interval": {"applications": [], "interval": "ten minutes"},
}


@pytest.mark.parametrize("case", sorted(CASES_THE_SERVER_REFUSES))
def test_build_refuses_what_the_api_server_refuses_naming_the_same_fields(control_plane, kfdef_crd, namespace, case,
                                                                          tmp_path):
    obj = {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": "strict", "namespace": namespace},
           "spec": CASES_THE_SERVER_REFUSES[case]}
    path = write(tmp_path / "kfdef.yaml", obj)
    server = kubectl(control_plane.bin_dir, control_plane.kubeconfig, "create", "--dry-run=server", "-f", str(path),
                     check=False)
    built = kfdef_operator("build", str(path), "-o", "/dev/null")
    assert server.returncode != 0 and built.returncode == 2, (server.stderr, built.stderr)
    # kubectl reports unknown fields first (strict decoding), the schema's checks only once there are none.
    refused = set(re.findall(r'unknown field "([^"]+)"', server.stderr)) or set(
        re.findall(r"(spec[\w.\[\]]*): (?:Invalid|Required|Unsupported)", server.stderr))
    assert refused and all(field in built.stderr for field in refused), (server.stderr, built.stderr)


def test_a_failing_kfdef_reads_well_in_kubectl(operator, control_plane, kube, kfdef_namespace, tmp_path):
    obj = {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": "broken", "namespace": kfdef_namespace},
           "spec": {"applications": [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "m", "path": "app"}}}],
                    "repos": [{"name": "m", "uri": str(tmp_path / "no-such-repo")}]}}
    kube.apply(obj)

    def retried_twice():
        events = kube.core.list_namespaced_event(kfdef_namespace, field_selector="involvedObject.name=broken").items
        return [e for e in events if e.reason == "SourceFailed" and (e.count or 0) >= 2]
    (event,) = wait_for(retried_twice, timeout=90, what="the SourceFailed Event counted twice")  # aggregated
    assert event.last_timestamp > event.first_timestamp

    get = kubectl(control_plane.bin_dir, control_plane.kubeconfig, "get", "kfdef", "-n", kfdef_namespace).stdout
    header, row = get.splitlines()
    assert header.split() == ["NAME", "READY", "STATUS", "APPLIED", "TOTAL", "AGE"]
    assert row.split()[:3] == ["broken", "False", "SourceFailed"] and len(row) < 80, get
    wide = kubectl(control_plane.bin_dir, control_plane.kubeconfig, "get", "kfdef", "-n", kfdef_namespace,
                   "-o", "wide").stdout
    assert wide.splitlines()[0].split()[-2:] == ["DEGRADED", "MESSAGE"]
    assert "SourceFailed" in wide and "no-such-repo" in wide and wide.rstrip().endswith("Retrying with backoff.")
    described = kubectl(control_plane.bin_dir, control_plane.kubeconfig, "describe", "kfdef", "broken", "-n",
                        kfdef_namespace).stdout
    assert re.search(r"Warning\s+SourceFailed\s+\S+ \(x\d+ over \S+\)", described), described
    assert str(tmp_path / "no-such-repo") in described


def test_diff_as_the_stacks_service_account_shows_what_rbac_would_refuse_it(control_plane, kube, kfdef_crd,
                                                                             kfdef_namespace, new_stack, tmp_path):
    kube.core.create_namespaced_service_account(kfdef_namespace, {"metadata": {"name": "deployer"}})
    stack = new_stack(with_webhook=False)
    obj = stack.kfdef("scoped", kfdef_namespace)
    obj["spec"]["serviceAccountName"] = "deployer"  # bound to nothing: it may create nothing
    path = write(tmp_path / "kfdef.yaml", obj)
    done = kfdef_operator("diff", str(path), kubeconfig=control_plane.kubeconfig)
    assert done.returncode == 1 and f"+ Namespace {stack.namespace} created\n" in done.stdout, done.stderr
    done = kfdef_operator("diff", str(path), "--as-service-account", kubeconfig=control_plane.kubeconfig)
    assert done.returncode == 1, done.stderr
    assert f"dry runs sent as system:serviceaccount:{kfdef_namespace}:deployer" in done.stderr
    assert re.search(rf"! Namespace {stack.namespace} would fail: .*403 Forbidden: .*deployer\" cannot", done.stdout), \
        done.stdout
