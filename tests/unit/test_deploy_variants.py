"""The kustomize installs, built: replicas and their election, shards that never overlap, namespaced RBAC.

Built with the pinned kustomize CLI (``make control-plane``). What these manifests do on a cluster is proven by
tests/cluster/test_deploy.py, tests/cluster/test_install_modes.py and tests/reliability/test_high_availability.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kfdef_operator.api.names import SHARD_LABEL
from kfdef_operator.controller.scope import lease_name
from tests.kustomize_cli import cli_build

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kustomize


def build(directory: str) -> list[dict]:
    return cli_build(ROOT / directory)


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def container(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def flag(deployment: dict, name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in container(deployment)["args"] if a.startswith(f"--{name}=")]
    assert len(values) <= 1, f"--{name} given twice: {values}"
    return values[0] if values else None


def env(deployment: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container(deployment).get("env", [])}


def selects(selector: str | None, labels: dict[str, str]) -> bool:
    """The label selector forms the shards use: none (everything), ``!key`` and ``key=value``."""
    if not selector:
        return True
    if selector.startswith("!"):
        return selector[1:] not in labels
    key, _, value = selector.partition("=")
    return labels.get(key) == value


def test_deploy_runs_two_electing_replicas_rolled_one_at_a_time_and_kept_by_a_budget() -> None:
    docs = build("deploy")
    [deployment] = of_kind(docs, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert "--enable-leader-election" in container(deployment)["args"]
    variables = env(deployment)
    assert variables["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert variables["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert variables["WATCH_NAMESPACE"]["value"] == ""  # all namespaces
    [budget] = of_kind(docs, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_lease_verbs_are_granted_in_the_operators_namespace_only() -> None:
    docs = build("deploy")
    lease_rules = [(d["kind"], d["metadata"].get("namespace"), rule) for d in docs
                   if d["kind"] in ("Role", "ClusterRole")
                   for rule in d["rules"] if "coordination.k8s.io" in rule["apiGroups"]]
    assert lease_rules == [("Role", "kfdef-operator-system", {"apiGroups": ["coordination.k8s.io"],
                                                             "resources": ["leases"],
                                                             "verbs": ["get", "create", "update", "watch"]})]


def test_three_shards_select_disjoint_kfdefs_each_on_its_own_lease() -> None:
    deployments = of_kind(build("deploy/shards"), "Deployment")
    assert len(deployments) == 3
    selectors = {d["metadata"]["name"]: flag(d, "watch-label-selector") for d in deployments}
    assert selectors == {"kfdef-operator": f"!{SHARD_LABEL}", "kfdef-operator-shard1": f"{SHARD_LABEL}=shard1",
                         "kfdef-operator-shard2": f"{SHARD_LABEL}=shard2"}
    for labels in ({}, {SHARD_LABEL: "shard1"}, {SHARD_LABEL: "shard2"}, {"team": "x", SHARD_LABEL: "shard1"}):
        serving = [name for name, selector in selectors.items() if selects(selector, labels)]
        assert len(serving) == 1, f"a KfDef labelled {labels} is served by {serving}"
    leases = {lease_name(flag(d, "shard"), flag(d, "watch-label-selector") or "") for d in deployments}
    assert len(leases) == 3
    pods = [frozenset(d["spec"]["selector"]["matchLabels"].items()) for d in deployments]
    for d in deployments:  # no Deployment's selector matches another's pods
        template = d["spec"]["template"]["metadata"]["labels"].items()
        assert sum(selector <= template for selector in pods) == 1, d["metadata"]["name"]


def test_namespaced_install_holds_no_cluster_permission_and_grants_deploys_rules_in_its_namespace() -> None:
    cluster_wide = build("deploy")
    docs = build("deploy/namespaced")
    assert not of_kind(docs, "ClusterRole") and not of_kind(docs, "ClusterRoleBinding")
    [role] = [d for d in of_kind(docs, "Role") if d["metadata"]["name"] == "kfdef-operator"]
    assert role["rules"] == [rule for d in of_kind(cluster_wide, "ClusterRole") for rule in d["rules"]]
    [binding] = [d for d in of_kind(docs, "RoleBinding") if d["metadata"]["name"] == "kfdef-operator"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kfdef-operator",
                                    "namespace": "kfdef-operator-system"}]
    [deployment] = of_kind(docs, "Deployment")
    assert env(deployment)["WATCH_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    access = build("deploy/namespaced/access")
    assert {d["kind"] for d in access} == {"Role", "RoleBinding"}
    assert all("namespace" not in d["metadata"] for d in access)  # for `kubectl apply -n TEAM_NAMESPACE`
