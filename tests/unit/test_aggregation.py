"""Aggregated ClusterRoles: never applied or compared with rules; deleted before the roles they draw from."""

from __future__ import annotations

import pytest

from kfdef_operator.ssa.aggregation import AGGREGATION_CONTROLLER, deletion_levels, is_echo, selector_matches
from kfdef_operator.ssa.drift import drifted
from kfdef_operator.ssa.normalize import normalize

RBAC = "rbac.authorization.k8s.io/v1"


def cluster_role(name: str, *, labels: dict | None = None, aggregates_label: str | None = None,
                 rules: list | None = None) -> dict:
    role: dict = {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": name}}
    if labels:
        role["metadata"]["labels"] = labels
    if aggregates_label:
        role["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {aggregates_label: "true"}}]}
    if rules is not None:
        role["rules"] = rules
    return role


READ_PODS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]


def test_an_aggregated_cluster_role_is_applied_without_rules():
    # As Kubeflow ships it: `rules: []`, which the aggregation controller fills in.
    rendered = cluster_role("kubeflow-edit", aggregates_label="aggregate-to-kubeflow-edit", rules=[])
    desired = normalize(rendered)
    assert "rules" not in desired
    assert desired["aggregationRule"] == rendered["aggregationRule"]
    assert rendered["rules"] == []  # the rendered object is left as it was


@pytest.mark.parametrize("obj", [
    cluster_role("plain", rules=READ_PODS),
    {"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "r", "namespace": "n"}, "rules": READ_PODS,
     "aggregationRule": {"clusterRoleSelectors": []}},  # a Role cannot aggregate: its rules are its own
])
def test_other_roles_keep_their_rules(obj):
    assert normalize(obj)["rules"] == READ_PODS


def test_rules_the_controller_filled_in_are_not_drift():
    desired = normalize(cluster_role("kubeflow-edit", aggregates_label="agg", rules=[]))
    live = {**cluster_role("kubeflow-edit", aggregates_label="agg", rules=READ_PODS),
            "metadata": {"name": "kubeflow-edit", "resourceVersion": "7"}}
    assert not drifted(desired, live)
    # Its aggregation rule is the operator's, though: a changed selector is drift.
    live["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {"other": "true"}}]}
    assert drifted(desired, live)


@pytest.mark.parametrize(("selector", "labels", "selected"), [
    ({}, {}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
])
def test_label_selectors(selector, labels, selected):
    assert selector_matches(selector, labels) is selected


def test_aggregated_roles_are_deleted_in_levels_each_before_the_aggregated_roles_it_draws_from():
    # Kubeflow's chain: kubeflow-admin draws from kubeflow-edit, which draws from kubeflow-view.
    roles = [
        cluster_role("kubeflow-view", labels={"to-edit": "true"}, aggregates_label="to-view"),
        cluster_role("notebooks-view", labels={"to-view": "true"}, rules=READ_PODS),
        cluster_role("kubeflow-edit", labels={"to-admin": "true"}, aggregates_label="to-edit"),
        cluster_role("kubeflow-admin", aggregates_label="to-admin"),
        cluster_role("katib-admin", labels={"to-admin": "true"}, aggregates_label="to-katib"),
        cluster_role("standalone", aggregates_label="to-nothing"),
    ]
    assert deletion_levels(roles) == [["kubeflow-admin", "standalone"], ["kubeflow-edit", "katib-admin"],
                                      ["kubeflow-view"]]


def test_roles_that_draw_from_each_other_are_each_deleted_once_in_levels_of_their_own():
    roles = [cluster_role("a", labels={"to-b": "true"}, aggregates_label="to-a"),
             cluster_role("b", labels={"to-a": "true"}, aggregates_label="to-b")]
    assert sorted(deletion_levels(roles)) == [["a"], ["b"]]


def managed_by(role: dict, *managers: str) -> dict:
    role["metadata"]["managedFields"] = [{"manager": manager, "operation": "Apply"} for manager in managers]
    return role


@pytest.mark.parametrize(("role", "echo"), [
    (managed_by(cluster_role("kubeflow-admin", rules=READ_PODS), AGGREGATION_CONTROLLER), True),
    # Still aggregated: the role itself, whoever wrote it last.
    (managed_by(cluster_role("kubeflow-admin", aggregates_label="a", rules=READ_PODS), AGGREGATION_CONTROLLER), False),
    # Somebody else's role at that name.
    (managed_by(cluster_role("kubeflow-admin", rules=READ_PODS), "kubectl"), False),
    (managed_by(cluster_role("kubeflow-admin", rules=READ_PODS), AGGREGATION_CONTROLLER, "kubectl"), False),
])
def test_an_echo_is_a_cluster_role_only_the_aggregation_controller_wrote(role, echo):
    assert is_echo(role) is echo
