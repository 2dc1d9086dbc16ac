"""Aggregated ClusterRoles on the real control plane: kube-controller-manager writes their rules, never the operator.

A stack shaped like Kubeflow's RBAC: ``admin`` draws from ``edit``, which draws from ``view``, each role also from
plain roles with rules, every aggregated role shipped with ``rules: []``; eight such chains, 96 ClusterRoles. Before
the fix the operator re-applied the empty rules whenever the aggregation controller filled them in (a PATCH, then a
dry-run and another PATCH, for ever), and a teardown left aggregated roles behind that the controller had
re-created.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.cluster.conftest import KFDEF_API, wait_ready
from tests.cluster.test_truthful_loop import one_app_kfdef, writes
from tests.kube import wait_for
from tests.stacks import write_package

pytestmark = pytest.mark.cluster

RBAC_API = "rbac.authorization.k8s.io/v1"
#: Only a window shows an absence: a loop's writes are never more than 32 s apart (the heal's fight backoff, pinned in
#: tests/unit/test_heal_backoff.py), so a minute at rest sees at least one of them.
IDLE_WINDOW_S = 60.0
#: Aggregated role -> (the label it draws from, the aggregated role it is part of).
CHAIN = {"admin": ("to-admin", None), "edit": ("to-edit", "admin"), "view": ("to-view", "edit")}
PARTS = 3
#: Copies of the chain: a teardown of a dozen roles rarely loses the race; Kubeflow's 90 lost it every time.
CHAINS = 8


def role_stack(suffix: str) -> tuple[list[dict], dict[str, list[dict]]]:
    """The stack's ClusterRoles, and for each aggregated role (by name) the rules it must end up with."""
    roles: list[dict] = []
    expected: dict[str, list[dict]] = {}
    for chain in range(CHAINS):
        label = f"c{chain}.agg-{suffix}.example.org"
        own: dict[str, list[dict]] = {}
        for name, (draws, part_of) in CHAIN.items():
            aggregated = {"apiVersion": RBAC_API, "kind": "ClusterRole",
                          "metadata": {"name": f"c{chain}-{name}-{suffix}"},
                          "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {f"{label}/{draws}": "true"}}]},
                          "rules": []}
            if part_of:
                aggregated["metadata"]["labels"] = {f"{label}/{CHAIN[part_of][0]}": "true"}
            roles.append(aggregated)
            own[name] = [{"apiGroups": [f"{name}{index}.{label}"], "resources": ["things"], "verbs": ["get"]}
                         for index in range(PARTS)]
            roles += [{"apiVersion": RBAC_API, "kind": "ClusterRole",
                       "metadata": {"name": f"c{chain}-{name}-part{index}-{suffix}",
                                    "labels": {f"{label}/{draws}": "true"}},
                       "rules": [rule]} for index, rule in enumerate(own[name])]
        for name in reversed(CHAIN):  # view, edit, admin: each holds its own parts and everything below it
            below = [child for child, (_, part_of) in CHAIN.items() if part_of == name]
            expected[f"c{chain}-{name}-{suffix}"] = own[name] + [
                rule for child in below for rule in expected[f"c{chain}-{child}-{suffix}"]]
    return roles, expected


def canonical(rules: list[dict] | None) -> list[tuple]:
    return sorted(tuple((k, tuple(v)) for k, v in sorted(rule.items()) if v) for rule in rules or [])


def rules_of(kube, name: str) -> list[tuple] | None:
    """The role's rules (comparable), None when it does not exist."""
    role = kube.get(RBAC_API, "ClusterRole", name)
    return None if role is None else canonical(role.get("rules"))


def wait_filled_in(kube, name: str, rules: list[dict]) -> None:
    wait_for(lambda: rules_of(kube, name) == canonical(rules), timeout=30,
             what=f"the aggregation controller to fill in {name}")


def wait_recreated(kube, name: str, old_uid: str) -> None:
    wait_for(lambda: (kube.get(RBAC_API, "ClusterRole", name) or {"metadata": {"uid": old_uid}})["metadata"]["uid"]
             != old_uid, timeout=10, what=f"{name} re-created")


@pytest.fixture
def roles(operator, kube, kfdef_namespace, tmp_path):
    suffix = uuid.uuid4().hex[:6]
    objects, expected = role_stack(suffix)
    repo = tmp_path / "repo"
    write_package(repo, "app", objects)
    kube.apply(one_app_kfdef("roles", kfdef_namespace, str(repo)))
    wait_ready(kube, "roles", kfdef_namespace)
    for name, rules in expected.items():
        wait_filled_in(kube, name, rules)
    return suffix, objects, expected


def test_the_operator_never_writes_aggregated_rules(roles, operator, kube):
    _, _, expected = roles
    names = list(expected)
    versions = {name: kube.get(RBAC_API, "ClusterRole", name)["metadata"]["resourceVersion"] for name in names}
    before = writes(operator)
    time.sleep(IDLE_WINDOW_S)
    assert writes(operator) - before == 0, "the operator wrote while the stack was at rest"
    # Nobody rewrote the aggregated roles either: their users never lost a permission.
    assert {name: kube.get(RBAC_API, "ClusterRole", name)["metadata"]["resourceVersion"] for name in names} == versions
    for name, rules in expected.items():
        assert rules_of(kube, name) == canonical(rules)
    managers = {field["manager"] for name in names
                for field in kube.get(RBAC_API, "ClusterRole", name)["metadata"]["managedFields"]
                if "f:rules" in (field.get("fieldsV1") or {})}
    assert managers == {"clusterrole-aggregation-controller"}


def test_a_deleted_aggregated_role_is_healed_as_fast_as_any_other(roles, operator, kube):
    suffix, _, expected = roles
    for role in ("edit", "admin", "edit"):  # more than once: heals of such a role are no fight
        name = f"c0-{role}-{suffix}"
        old = kube.get(RBAC_API, "ClusterRole", name)["metadata"]["uid"]
        started = time.monotonic()
        kube.delete(RBAC_API, "ClusterRole", name)
        wait_recreated(kube, name, old)
        healed = time.monotonic() - started
        assert healed < 2.0, f"{name} took {healed:.1f}s to come back"
        wait_filled_in(kube, name, expected[name])


def test_teardown_leaves_no_aggregated_role_behind(roles, kube, kfdef_namespace):
    _, objects, _ = roles
    kube.delete(KFDEF_API, "KfDef", "roles", kfdef_namespace)
    kube.wait_gone(KFDEF_API, "KfDef", "roles", kfdef_namespace, timeout=120)
    names = [obj["metadata"]["name"] for obj in objects]
    # The aggregation controller acts within milliseconds of a change; give it seconds.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [name for name in names if kube.exists(RBAC_API, "ClusterRole", name)]
        assert left == [], f"ClusterRoles left after the teardown: {left}"
        time.sleep(0.2)
