"""Aggregated ClusterRoles: the rules kube-controller-manager writes, and the order they are deleted in (pure).

A ClusterRole with an ``aggregationRule`` gets its ``rules`` from
kube-controller-manager's aggregation controller: the union of the rules of
every ClusterRole its selectors match. Manifests ship such roles with
``rules: []``. Declaring that empty list would make the operator the owner of
``rules`` and reset them on every apply and heal, an endless fight in which
the role's users lose their permissions for a moment each round; so the
rules are never part of what the operator applies or compares.

The controller writes with server-side apply, which *creates* an object that
does not exist. Whenever any ClusterRole changes it re-computes every
aggregated role it still has in its cache: if an aggregated role is deleted
while a role it aggregates is deleted too, the controller can see the second
deletion first and put the first role back, holding nothing but rules and
owned by no one. Aggregated roles are therefore deleted one at a time, each
before the roles it aggregates, and before any other ClusterRole of the same
wave (:func:`deletion_order`). The controller's cache sees deletions in the
order the server made them, so when the roles an aggregated role draws from
go, it has forgotten that role already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kfdef_operator.api.types import JSON

RBAC_GROUP = "rbac.authorization.k8s.io"


def is_aggregated(obj: JSON) -> bool:
    """Whether ``obj`` is a ClusterRole whose rules the aggregation controller writes."""
    return (obj.get("kind") == "ClusterRole" and obj.get("apiVersion", "").startswith(RBAC_GROUP + "/")
            and bool(obj.get("aggregationRule")))


def without_controller_rules(obj: JSON) -> JSON:
    """``obj`` (modified in place and returned) without the ``rules`` of an aggregated ClusterRole."""
    if is_aggregated(obj):
        obj.pop("rules", None)
    return obj


def selector_matches(selector: JSON, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (``matchLabels`` and ``matchExpressions``) selects ``labels``.

    An empty selector selects everything, as the aggregation controller reads it.
    """
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def aggregates(role: JSON, other: JSON) -> bool:
    """Whether the aggregated ClusterRole ``role`` draws rules from ``other``."""
    labels = (other.get("metadata") or {}).get("labels") or {}
    return any(selector_matches(selector, labels)
               for selector in (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or [])


def deletion_order(roles: Iterable[JSON]) -> list[str]:
    """Names of the aggregated roles among ``roles``, each before every aggregated role it draws rules from.

    Roles that draw from each other (a cycle) keep their given order among themselves.
    """
    aggregated = {role["metadata"]["name"]: role for role in roles if is_aggregated(role)}
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        # Everything that draws from ``name`` is deleted before it.
        if name in ordered or name in visiting:
            return
        visiting.add(name)
        for other, role in aggregated.items():
            if other != name and aggregates(role, aggregated[name]):
                visit(other)
        visiting.discard(name)
        ordered.append(name)

    for name in aggregated:
        visit(name)
    return ordered
